# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.wait_plan import FilterModule, wait_plan

# The role's defaults.
DEFAULTS = {'grace_seconds': 10, 'kill_seconds': 10, 'lock_timeout': 60, 'nvml_timeout': 5, 'assert_timeout': 30,
            'settle_seconds': 2, 'stop_units': False}
SYNC = {'async': 0, 'retries': 0, 'seconds': 0.0}


def test_the_defaults_wait_long_enough_for_jobs():
    assert wait_plan(DEFAULTS) == {
        # Bounded by the host lock, both windows and four NVML deadlines, plus 30 s; a try is 4.5 s.
        'release': {'async': 130, 'retries': 30, 'seconds': 20.0},
        'prove': {'async': 72, 'retries': 17, 'seconds': 32.0},
        'stop_units': SYNC,
    }


def test_a_unit_stop_is_a_job_bounded_by_systemd():
    assert wait_plan(dict(DEFAULTS, stop_units=True))['stop_units'] == {'async': 630, 'retries': 141, 'seconds': 90.0}


@pytest.mark.parametrize('values, expected', [
    # Waits shorter than 5 s in all are plain tasks: nothing extra to show, nothing extra to run.
    (dict(DEFAULTS, grace_seconds=2, kill_seconds=2.9, assert_timeout=2, settle_seconds=2.9),
     {'release': SYNC, 'prove': SYNC}),
    # 5 s or more is a job. The host lock and NVML's deadlines only bound it.
    (dict(DEFAULTS, grace_seconds=2, kill_seconds=3, assert_timeout=4.9, settle_seconds=0, lock_timeout=600),
     {'release': {'async': 655, 'retries': 147, 'seconds': 5.0}, 'prove': SYNC}),
    # Extra variables are strings.
    (dict(DEFAULTS, grace_seconds='1', kill_seconds='1', assert_timeout='0', settle_seconds='0'),
     {'release': SYNC, 'prove': SYNC}),
])
def test_short_waits_are_plain_tasks(values, expected):
    plan = wait_plan(values)
    assert dict((stage, plan[stage]) for stage in expected) == expected


def test_check_mode_has_no_job():
    # Ansible refuses async with check mode.
    assert wait_plan(dict(DEFAULTS, stop_units=True), True) == {'release': SYNC, 'prove': SYNC, 'stop_units': SYNC}


@pytest.mark.parametrize('values, message', [
    (dict(DEFAULTS, grace_seconds=-1), "wait_plan: grace_seconds must be a number of seconds, 0 or more; got: -1"),
    (dict(DEFAULTS, settle_seconds='soon'),
     "wait_plan: settle_seconds must be a number of seconds, 0 or more; got: 'soon'"),
    (dict(DEFAULTS, kill_seconds=True), "wait_plan: kill_seconds must be a number of seconds, 0 or more; got: True"),
    (dict((k, v) for k, v in DEFAULTS.items() if k != 'lock_timeout'),
     "wait_plan: lock_timeout must be a number of seconds, 0 or more; got: None"),
    (dict(DEFAULTS, nvml_timeout=float('inf')),
     "wait_plan: nvml_timeout must be a number of seconds, 0 or more; got: inf"),
])
def test_bad_seconds_are_named(values, message):
    with pytest.raises(TypeError) as failure:
        wait_plan(values)
    assert str(failure.value) == message


def test_the_input_must_be_a_mapping():
    with pytest.raises(TypeError, match=r'^wait_plan: values must be a module result \(a mapping\); got: list$'):
        wait_plan([10])


def test_registered():
    assert FilterModule().filters() == {'wait_plan': wait_plan}
