# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.role_plan import (
    FilterModule, role_plan, role_settings, role_summary)


def state(**more):
    variables = {'stop_units': [], 'max_used_mib': 64}
    result = {'host': 'gpu07', 'check_mode': False, 'variables': variables,
              'settings': role_settings(variables, ['all'], []), 'results': {'release': None}}
    result.update(more)
    return result


def test_the_filters_are_registered():
    assert sorted(FilterModule().filters()) == ['role_plan', 'role_settings', 'role_summary']


def test_a_plan_and_a_summary_from_the_state():
    assert role_plan(state())['look_files'] == ['release', 'summary_keep']
    summary = role_summary(state(), '10.0', 12.5)
    assert summary['host'] == 'gpu07' and summary['total_seconds'] == 2.5 and summary['error'] == ''


@pytest.mark.parametrize('call, message', [
    (lambda: role_plan(['x']), 'role_plan: the state must be a module result (a mapping); got: list'),
    (lambda: role_plan({'host': 'h'}), 'role_plan: the state lacks check_mode, variables, settings, results'),
    (lambda: role_plan(state(results={'release': 'x'})), 'role_plan: results.release must be a module result'),
    (lambda: role_settings(['x']), 'role_settings: the variables must be a module result'),
    (lambda: role_settings({}, 'all'), 'role_settings: run_tags must be a list of tags'),
    (lambda: role_summary(state(), 'soon', 1), 'role_summary: could not convert string to float'),
])
def test_bad_input_names_the_filter(call, message):
    with pytest.raises(TypeError) as caught:
        call()
    assert str(caught.value).startswith(message)
