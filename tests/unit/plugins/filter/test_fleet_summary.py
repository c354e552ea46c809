# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.fleet_summary import FilterModule, fleet_summary


def test_the_filter_is_registered():
    assert FilterModule().filters() == {'fleet_summary': fleet_summary}


def test_reads_each_host_s_fact_and_leaves_out_hosts_that_never_ran_the_role(summaries):
    hostvars = {
        'orphans': {'gpu_reclaim_summary': summaries.ORPHANS, 'ansible_host': 'a'},
        'stuck': {'gpu_reclaim_summary': summaries.STUCK},
        'gpu09': {'gpu_reclaim_summary': {}},
        'elsewhere': {'ansible_host': 'b'},
    }
    fleet = fleet_summary(hostvars)
    assert [outcome['host'] for outcome in fleet['hosts']] == ['gpu09', 'orphans', 'stuck']
    assert fleet['free'] == ['orphans']
    assert [failed['host'] for failed in fleet['failed']] == ['gpu09', 'stuck']


@pytest.mark.parametrize('value, message', [
    ([], 'fleet_summary expects a mapping of host names to their variables (hostvars); got: list'),
    ({'gpu01': 'x'}, 'fleet_summary: the variables of host gpu01 are not a mapping; got: str'),
])
def test_bad_input(value, message):
    with pytest.raises(TypeError) as caught:
        fleet_summary(value)
    assert str(caught.value) == message
