# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.wait_plan import FilterModule, wait_plan

SYNC = {'async': 0, 'retries': 0, 'seconds': 0.0}


def test_a_unit_stop_is_a_job_bounded_by_systemd():
    # 600 s of systemd's stop timeouts at the most, plus 30 s; a try of await_job is 4.5 s.
    assert wait_plan({'stop_units': True}) == {'stop_units': {'async': 630, 'retries': 141, 'seconds': 90.0}}


def test_no_unit_to_stop_is_no_job():
    assert wait_plan({'stop_units': False}) == {'stop_units': SYNC}


def test_check_mode_has_no_job():
    # Ansible refuses async with check mode, and nothing is stopped.
    assert wait_plan({'stop_units': True}, True) == {'stop_units': SYNC}


@pytest.mark.parametrize('values, message', [
    ({}, 'wait_plan: stop_units must be true or false; got: None'),
    ({'stop_units': 'yes'}, "wait_plan: stop_units must be true or false; got: 'yes'"),
    ({'stop_units': 1}, 'wait_plan: stop_units must be true or false; got: 1'),
])
def test_bad_input_is_named(values, message):
    with pytest.raises(TypeError) as failure:
        wait_plan(values)
    assert str(failure.value) == message


def test_the_input_must_be_a_mapping():
    with pytest.raises(TypeError, match=r'^wait_plan: values must be a module result \(a mapping\); got: list$'):
        wait_plan([10])


def test_registered():
    assert FilterModule().filters() == {'wait_plan': wait_plan}
