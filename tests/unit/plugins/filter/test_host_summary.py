# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter import host_summary as host_summary_filter
from ansible_collections.gpuops.reclaim.plugins.filter import left_behind as left_behind_filter
from ansible_collections.gpuops.reclaim.plugins.filter.host_summary import host_summary
from ansible_collections.gpuops.reclaim.plugins.filter.left_behind import left_behind


def test_a_free_host_from_the_first_look_alone():
    first = {'free': True, 'nvml_available': True, 'holders': [],
             'gpus': [{'index': 0, 'uuid': 'GPU-a', 'memory_total_mib': 10, 'memory_used_mib': 0}]}
    summary = host_summary({'host': 'gpu07', 'check_mode': False, 'max_used_mib': '64', 'first_look': first,
                            'free_at_start': True, 'release': None, 'proof': None, 'start': '100.0', 'now': 100.5})
    assert summary['free'] is True
    assert summary['max_used_mib'] == 64
    assert summary['stage_seconds'] == {'preflight': 0.5}
    assert summary['gpus'][0]['memory_used_mib_after'] == 0


def test_left_behind_reads_a_release():
    release = {'released': [{'pid': 7, 'title': 'w', 'systemd_unit': 'vllm.service'}]}
    assert left_behind(release, ['vllm.service']) == {'vllm.service': [{'pid': 7, 'title': 'w'}]}
    assert left_behind(None) == {}


@pytest.mark.parametrize('call, message', [
    (lambda: host_summary([]), 'host_summary: the run must be a module result (a mapping); got: list'),
    (lambda: host_summary({'host': 'a'}), 'host_summary: the run lacks start, now'),
    (lambda: host_summary({'host': 'a', 'start': 1, 'now': 2, 'release': 'x'}),
     'host_summary: release must be a module result (a mapping); got: str'),
    (lambda: host_summary({'host': 'a', 'start': 'soon', 'now': 2}),
     "host_summary: could not convert string to float: 'soon'"),
    (lambda: left_behind([], []), 'left_behind: the release must be a module result (a mapping); got: list'),
    (lambda: left_behind({}, 'vllm.service'),
     "left_behind: stopped_units must be a list of unit names; got: 'vllm.service'"),
])
def test_bad_input_names_the_filter_and_the_argument(call, message):
    with pytest.raises(TypeError) as error:
        call()
    assert str(error.value) == message


def test_registered():
    assert host_summary_filter.FilterModule().filters() == {'host_summary': host_summary}
    assert left_behind_filter.FilterModule().filters() == {'left_behind': left_behind}
