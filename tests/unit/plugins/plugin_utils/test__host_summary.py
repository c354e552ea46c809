# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import (
    containers_seen,
    executable_name,
    gpu_rows,
    host_summary,
    left_behind,
    left_on_gpu,
    left_reasons_on_gpu,
    protected_holders,
    short_title,
    stuck_on_gpu,
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
         'memory_used_mib_after': 0, 'released': [10], 'released_names': ['? (10)'],
         'protected': ['nvidia-persistenced'], 'left': [], 'left_reasons': [], 'stuck': False},
        {'index': 1, 'uuid': 'GPU-b', 'memory_total_mib': 81920, 'memory_used_mib_before': 300,
         'memory_used_mib_after': 300, 'released': [11], 'released_names': ['? (11)'],
         'protected': ['nvidia-persistenced', 'Xorg'], 'left': [], 'left_reasons': [], 'stuck': False},
    ]


def test_gpu_rows_without_a_proof_have_no_after():
    first = [{'index': 3, 'uuid': 'GPU-c', 'memory_total_mib': 1, 'memory_used_mib': 1}]
    assert gpu_rows(first)[0]['memory_used_mib_after'] is None


FIRST_LOOK = {
    'free': False, 'nvml_available': True,
    'gpus': [{'index': 0, 'uuid': 'GPU-a', 'memory_total_mib': 81920, 'memory_used_mib': 40000}],
    'holders': [{'pid': 2, 'gpus': [0], 'protected': True, 'is_self': False, 'exe': '/usr/bin/nvidia-persistenced'}],
}
RELEASE = {
    'released': [{'pid': 10, 'gpus': [0], 'gpu_memory_mib': {'0': 40000}, 'title': 'w', 'systemd_unit': 'vllm.service'}],
    'protected': [{'pid': 2, 'gpus': [0], 'protected': True, 'is_self': False, 'exe': '/usr/bin/nvidia-persistenced'},
                  {'pid': 3, 'gpus': [0], 'protected': True, 'is_self': True, 'exe': '/usr/bin/python3'}],
    'survivors': [], 'supervisors': [], 'sources': [{'kind': 'systemd', 'unit': 'vllm.service'}],
    'filter_warnings': ['no user named bob'],
}
PROOF = {'free': True, 'settle_seconds_observed': 2.01, 'gpus': [{'index': 0, 'memory_used_mib': 0}]}


def run(**more):
    values = {'host': 'gpu07', 'check_mode': False, 'max_used_mib': 64, 'first_look': FIRST_LOOK,
              'free_at_start': False, 'release': RELEASE, 'proof': PROOF, 'stopped_units': ['vllm.service'],
              'stopped_containers': [], 'reset_gpus': [], 'reset_errors': [], 'error': '',
              'stages': {'preflight': 0.5, 'release': 0.7, 'prove': 2.2}, 'start': 1000.0, 'now': 1003.456}
    values.update(more)
    return values


def test_host_summary_of_a_busy_host():
    assert host_summary(run()) == {
        'host': 'gpu07', 'check_mode': False, 'max_used_mib': 64, 'nvml_available': True,
        'gpus': [{'index': 0, 'uuid': 'GPU-a', 'memory_total_mib': 81920, 'memory_used_mib_before': 40000,
                  'memory_used_mib_after': 0, 'released': [10], 'released_names': ['w (10)'],
                  'protected': ['nvidia-persistenced'], 'left': [], 'left_reasons': [], 'stuck': False}],
        'protected_names': ['nvidia-persistenced'], 'unit_warnings': [],
        'released': RELEASE['released'], 'protected': [RELEASE['protected'][0]], 'survivors': [], 'supervisors': [],
        'sources': RELEASE['sources'], 'containers': [], 'settle_seconds': 2.01, 'filter_warnings': ['no user named bob'],
        'stopped_units': ['vllm.service'], 'stopped_containers': [],
        'left_behind': {'vllm.service': [{'pid': 10, 'title': 'w'}]}, 'kept_units': [], 'kept_pids': [],
        'keep_why_not': [], 'reset_gpus': [], 'reset_errors': [], 'free': True, 'error': '', 'stage_seconds': {'preflight': 0.5, 'release': 0.7, 'prove': 2.2},
        'total_seconds': 3.46,
        'results': {'first_look': FIRST_LOOK, 'release': RELEASE, 'proof': PROOF},
    }


def test_host_summary_in_check_mode_has_no_verdict():
    # Check mode: the prove stage registered a skipped result, which holds no verdict.
    summary = host_summary(run(check_mode=True, proof={'skipped': True, 'changed': False}))
    assert summary['free'] is None
    assert summary['settle_seconds'] is None
    assert summary['gpus'][0]['memory_used_mib_after'] is None


def test_host_summary_of_a_free_host_is_the_first_looks():
    first = dict(FIRST_LOOK, free=True, gpus=[dict(FIRST_LOOK['gpus'][0], memory_used_mib=0)])
    summary = host_summary(run(first_look=first, free_at_start=True, release={}, proof={}, stopped_units=[],
                               stages={}))
    assert summary['free'] is True
    assert summary['protected'] == FIRST_LOOK['holders']
    assert summary['gpus'][0]['memory_used_mib_after'] == 0
    assert summary['stage_seconds'] == {'preflight': 3.46}
    assert summary['released'] == [] and summary['left_behind'] == {}


def test_host_summary_of_a_host_still_busy_without_a_proof():
    summary = host_summary(run(release={}, proof={}, stopped_units=[], error='a stage failed'))
    assert summary['free'] is None
    assert summary['error'] == 'a stage failed'


def test_host_summary_of_units_kept_running_proves_nothing():
    kept = {'kept': ['llama.service'], 'pids': [100, 101], 'why_not': ['ghost.service is not loaded']}
    summary = host_summary(run(free_at_start=True, release={}, proof={}, stopped_units=[], kept=kept, stages={}))
    assert summary['free'] is None
    assert (summary['kept_units'], summary['kept_pids'], summary['keep_why_not']) == (
        ['llama.service'], [100, 101], ['ghost.service is not loaded'])


@pytest.mark.parametrize('title, expected', [
    ('/opt/torch/.venv/bin/python3 -u /srv/train.py --lr 3', 'train.py'),
    ('python3.11 -m vllm.entrypoints', 'vllm.entrypoints'),
    ('VLLM::Worker_TP0', 'VLLM::Worker_TP0'),
    ('/usr/bin/nvidia-persistenced --verbose', 'nvidia-persistenced'),
    ('', '?'),
])
def test_short_titles_name_the_program_not_the_interpreter(title, expected):
    assert short_title({'title': title}) == expected


def test_left_says_what_stayed_and_why():
    release = {'survivors': [{'pid': 5, 'state': 'disk-sleep', 'wchan': 'uvm_spin_loop'}],
               'skipped_holders': [{'pid': 6, 'reason': 'out of scope'}], 'protected': [{'pid': 7}]}
    holders = [{'pid': 5, 'title': 'VLLM::Worker_TP0'}, {'pid': 6, 'title': 'python train.py'},
               {'pid': 7, 'title': 'Xorg'}, {'pid': 8, 'title': 'srv'}, {'pid': 9, 'title': 'w'}]
    gpu = {'index': 0, 'free': False, 'holder_pids': [5, 6, 7, 8, 9]}
    assert left_on_gpu(gpu, holders, release, kept_pids=[8]) == [
        'VLLM::Worker_TP0 (5): unkillable (state D, uvm_spin_loop): reset or reboot',
        'train.py (6): out of scope', 'Xorg (7): protected', 'srv (8): kept running',
        'w (9): came back after the release']
    assert left_on_gpu({'free': False, 'memory_used_mib': 900, 'holder_pids': []}, []) == [
        '900 MiB with no holder: reset (gpu_reclaim_allow_reset) or reboot']
    assert left_on_gpu({'free': True}, holders) == []
    # The same, one word per holder, for the metrics' label values.
    assert left_reasons_on_gpu(gpu, release, kept_pids=[8]) == [
        'unkillable', 'skipped', 'protected', 'kept', 'came_back']
    release['survivors'][0]['state'] = 'stopped'
    assert left_reasons_on_gpu(gpu, release)[0] == 'survived'
    assert left_reasons_on_gpu(gpu) == ['not_released'] * 5
    assert left_reasons_on_gpu({'free': True, 'holder_pids': [5]}, release) == []


def test_a_gpu_busy_with_no_holder_is_stuck():
    assert stuck_on_gpu({'free': False, 'memory_used_mib': 900, 'holder_pids': []})
    assert not stuck_on_gpu({'free': False, 'memory_used_mib': 900, 'holder_pids': [5]})
    assert not stuck_on_gpu({'free': True, 'holder_pids': []})
    assert not stuck_on_gpu(None)


def test_a_stop_stage_that_ran_nothing_has_no_seconds():
    from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import stage_seconds
    assert stage_seconds({'stop_results': [{}, {'skipped': True}]}) == {}
    assert stage_seconds({'stop_results': [{'delta': '0:00:01.500000'}, {}]}) == {'stop_units': 1.5}


C = 'cd' * 32


def test_containers_seen_lists_each_container_once_as_its_runtime_confirmed_it():
    unconfirmed = {'runtime': 'podman', 'id': C, 'confirmed': False, 'reason': 'podman knows no container'}
    confirmed = {'runtime': 'podman', 'id': C, 'name': 'vllm', 'image': 'localhost/vllm:latest', 'confirmed': True,
                 'restart_policy': 'always', 'systemd_unit': None, 'reason': None}
    release = {'released': [{'pid': 5, 'container': confirmed}],
               'sources': [{'kind': 'container', 'container': confirmed},
                           {'kind': 'pod', 'container': {'runtime': 'kubepods', 'id': 'u', 'pod_uid': 'u'}}]}
    assert containers_seen([{'pid': 5, 'container': unconfirmed}, {'pid': 6, 'container': None}], release) == [
        dict(confirmed)]
    assert containers_seen([{'pid': 5, 'container': unconfirmed}]) == [
        {'runtime': 'podman', 'id': C, 'name': None, 'image': None, 'confirmed': False, 'restart_policy': None,
         'systemd_unit': None, 'reason': 'podman knows no container'}]
    assert containers_seen() == []
