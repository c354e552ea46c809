# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import (
    executable_name,
    gpu_rows,
    left_behind,
    protected_holders,
)

CONTAINER = '0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'


def test_left_behind_finds_each_stopped_units_processes_in_every_list():
    release = {
        'released': [{'pid': 4001, 'title': 'VLLM::Worker_TP0', 'systemd_unit': 'vllm.service'},
                     {'pid': 4100, 'title': 'python train.py', 'systemd_unit': None}],
        'survivors': [{'pid': 4002, 'title': 'VLLM::Worker_TP1', 'systemd_unit': 'vllm.service'}],
        'protected': [{'pid': 900, 'title': 'dcgm-exporter', 'systemd_unit': 'dcgm-exporter.service'}],
        'skipped_holders': [{'pid': 5001, 'title': 'server', 'container': {'id': CONTAINER, 'name': 'tgi'}}],
    }
    assert left_behind(release, ['vllm.service', 'other.service'], [CONTAINER]) == {
        'vllm.service': [{'pid': 4001, 'title': 'VLLM::Worker_TP0'}, {'pid': 4002, 'title': 'VLLM::Worker_TP1'}],
        'other.service': [],
        'container 0123456789ab': [{'pid': 5001, 'title': 'server'}],
    }


def test_left_behind_without_a_release_lists_each_stopped_unit_empty():
    assert left_behind({}, ['vllm.service']) == {'vllm.service': []}
    assert left_behind({'msg': 'failed', 'failed': True, 'released': None}, [], []) == {}


def test_protected_holders_prefer_the_release_and_leave_out_the_modules_own():
    own = {'pid': 1, 'protected': True, 'is_self': True}
    daemon = {'pid': 2, 'protected': True, 'is_self': False}
    first = [own, daemon, {'pid': 3, 'protected': False}]
    assert protected_holders({}, first) == [daemon]
    assert protected_holders({'protected': [own]}, first) == []
    assert protected_holders({'protected': None}, first) == []


@pytest.mark.parametrize('holder, expected', [
    ({'exe': '/usr/bin/nvidia-persistenced', 'title': 'nvidia-persistenced --verbose', 'name': 'nvidia-persiste'},
     'nvidia-persistenced'),
    ({'exe': None, 'title': '/usr/bin/dcgm-exporter --collectors x', 'name': 'dcgm-exporter'}, 'dcgm-exporter'),
    ({'exe': '', 'title': '', 'name': 'Xorg'}, 'Xorg'),
    ({'title': None}, ''),
])
def test_executable_name(holder, expected):
    assert executable_name(holder) == expected


def test_gpu_rows_attribute_memory_and_protection_per_gpu():
    first = [{'index': 0, 'uuid': 'GPU-a', 'memory_total_mib': 81920, 'memory_used_mib': 40000},
             {'index': 1, 'uuid': 'GPU-b', 'memory_total_mib': 81920, 'memory_used_mib': 300}]
    proof = [{'index': 0, 'memory_used_mib': 0}, {'index': 1, 'memory_used_mib': 300}]
    released = [
        # A CUDA process opens every visible GPU's device node, but holds memory on one.
        {'pid': 10, 'gpus': [0, 1], 'gpu_memory_mib': {'0': 40000, '1': 0}},
        # Without per-GPU memory, it counts on every GPU it held.
        {'pid': 11, 'gpus': [1], 'gpu_memory_mib': {}},
    ]
    protected = [{'pid': 2, 'gpus': [0, 1], 'exe': '/usr/bin/nvidia-persistenced'},
                 {'pid': 3, 'gpus': [1], 'exe': '/usr/bin/nvidia-persistenced'},
                 {'pid': 4, 'gpus': [1], 'exe': None, 'title': 'Xorg :0', 'name': 'Xorg'}]
    assert gpu_rows(first, proof, released, protected) == [
        {'index': 0, 'uuid': 'GPU-a', 'memory_total_mib': 81920, 'memory_used_mib_before': 40000,
         'memory_used_mib_after': 0, 'released': [10], 'protected': ['nvidia-persistenced']},
        {'index': 1, 'uuid': 'GPU-b', 'memory_total_mib': 81920, 'memory_used_mib_before': 300,
         'memory_used_mib_after': 300, 'released': [11], 'protected': ['nvidia-persistenced', 'Xorg']},
    ]


def test_gpu_rows_without_a_proof_have_no_after():
    first = [{'index': 3, 'uuid': 'GPU-c', 'memory_total_mib': 1, 'memory_used_mib': 1}]
    assert gpu_rows(first)[0]['memory_used_mib_after'] is None
