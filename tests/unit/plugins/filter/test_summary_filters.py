# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter import left_behind as left_behind_filter
from ansible_collections.gpuops.reclaim.plugins.filter import protected_holders as protected_holders_filter
from ansible_collections.gpuops.reclaim.plugins.filter import summary_gpus as summary_gpus_filter
from ansible_collections.gpuops.reclaim.plugins.filter.left_behind import left_behind as left_behind_of
from ansible_collections.gpuops.reclaim.plugins.filter.protected_holders import protected_holders as protected_holders_of
from ansible_collections.gpuops.reclaim.plugins.filter.summary_gpus import summary_gpus


def test_summary_gpus_takes_none_for_a_missing_list():
    first = [{'index': 0, 'uuid': 'GPU-a', 'memory_total_mib': 10, 'memory_used_mib': 5}]
    assert summary_gpus(first, None, None, None) == [
        {'index': 0, 'uuid': 'GPU-a', 'memory_total_mib': 10, 'memory_used_mib_before': 5,
         'memory_used_mib_after': None, 'released': [], 'protected': []}]


def test_left_behind_and_protected_holders_read_a_release():
    release = {'released': [{'pid': 7, 'title': 'w', 'systemd_unit': 'vllm.service'}],
               'protected': [{'pid': 2, 'protected': True, 'is_self': False}]}
    assert left_behind_of(release, ['vllm.service']) == {'vllm.service': [{'pid': 7, 'title': 'w'}]}
    assert protected_holders_of(release, []) == release['protected']
    assert protected_holders_of(None, [{'pid': 3, 'protected': True}]) == [{'pid': 3, 'protected': True}]


@pytest.mark.parametrize('call, message', [
    (lambda: summary_gpus('gpus'), "summary_gpus: the first look's gpus must be a list of records; got: 'gpus'"),
    (lambda: summary_gpus([], [1]), 'summary_gpus: proof_gpus must be a list of records; got: [1]'),
    (lambda: left_behind_of([], []), 'left_behind: the release must be a module result (a mapping); got: list'),
    (lambda: left_behind_of({}, 'vllm.service'),
     "left_behind: stopped_units must be a list of unit names; got: 'vllm.service'"),
    (lambda: protected_holders_of({}, {}), 'protected_holders: first_holders must be a list of records; got: {}'),
])
def test_bad_input_names_the_filter_and_the_argument(call, message):
    with pytest.raises(TypeError) as error:
        call()
    assert str(error.value) == message


def test_registered():
    assert summary_gpus_filter.FilterModule().filters() == {'summary_gpus': summary_gpus}
    assert left_behind_filter.FilterModule().filters() == {'left_behind': left_behind_of}
    assert protected_holders_filter.FilterModule().filters() == {'protected_holders': protected_holders_of}
