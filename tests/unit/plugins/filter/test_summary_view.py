# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.summary_view import FilterModule, fleet_lines, summary_view


def test_the_filters_are_registered():
    assert sorted(FilterModule().filters()) == ['fleet_lines', 'summary_view']


def test_the_view_of_a_summary(summaries):
    view = summary_view(summaries.FREE, 'yaml')
    assert view['passed'] and view['message'].startswith('free: 2 GPU(s), released 0, survivors 0, free in 0.8 s\n')
    assert summary_view(None) == {'passed': True, 'error': '', 'message': []}


def test_the_fleet_lines_of_no_host():
    assert fleet_lines({'hosts': [], 'host_count': 0, 'gpus': 0, 'gpus_freed': 0, 'memory_reclaimed_mib': 0,
                        'released': 0})[0].startswith('fleet: 0 host(s), 0 free, 0 failed;')


@pytest.mark.parametrize('call, message', [
    (lambda: summary_view('x'), 'summary_view: the summary must be a module result (a mapping); got: str'),
    (lambda: fleet_lines([]), 'fleet_lines: the fleet summary must be a module result (a mapping); got: list'),
])
def test_bad_input_names_the_filter(call, message):
    with pytest.raises(TypeError) as caught:
        call()
    assert str(caught.value).startswith(message)
