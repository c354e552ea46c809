# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.stages_to_run import FilterModule, stages_to_run

BUSY = {'free_at_start': False, 'release_done': True}


@pytest.mark.parametrize('state, run_tags, skip_tags, expected', [
    # A busy host whose first look was the release: only the proof is left.
    (BUSY, ['all'], [], ['prove']),
    (dict(BUSY, release_done=False, stop_units=['vllm.service']), ['all'], [], ['stop_units', 'release', 'prove']),
    (dict(BUSY, release_done=False, stop_containers=['c'], harden_units=['v.service'], allow_reset=True), ['all'],
     [], ['harden', 'stop_containers', 'release', 'reset', 'prove']),
    # Free from the start: nothing, unless something is stopped first.
    ({'free_at_start': True}, ['all'], [], []),
    ({'free_at_start': True, 'stop_units': ['v.service']}, ['all'], [], ['stop_units', 'prove']),
    ({'free_at_start': True, 'allow_reset': True}, ['all'], [], []),
    # Check mode proves nothing.
    (dict(BUSY, check_mode=True), ['all'], [], []),
    # A failed preflight runs nothing.
    (dict(BUSY, error='no root'), ['all'], [], []),
    # Tags.
    (dict(BUSY, release_done=False, stop_units=['v.service']), ['gpu_reclaim_release'], [], ['release']),
    (dict(BUSY, release_done=False, stop_units=['v.service']), ['all'], ['gpu_reclaim_prove'],
     ['stop_units', 'release']),
    (dict(BUSY, release_done=False), ['tagged'], [], ['release', 'prove']),
    (dict(BUSY, release_done=False), ['all'], ['tagged'], []),
    (BUSY, None, None, ['prove']),
    # A stage that runs as an async job is followed by the task that awaits it; one that does not run, by nothing.
    (dict(BUSY, release_done=False, stop_units=['v.service'],
          waits={'stop_units': {'async': 630}}), ['all'], [],
     ['stop_units', 'stop_units_wait', 'release', 'prove']),
    (dict(BUSY, stop_units=['v.service'], waits={'stop_units': {'async': 630}}), ['all'], ['gpu_reclaim_stop_units'],
     ['prove']),
])
def test_stages(state, run_tags, skip_tags, expected):
    assert stages_to_run(state, run_tags, skip_tags) == expected


def test_bad_input_names_the_argument():
    with pytest.raises(TypeError) as error:
        stages_to_run([], ['all'])
    assert str(error.value) == 'stages_to_run: state must be a module result (a mapping); got: list'


def test_registered():
    assert FilterModule().filters() == {'stages_to_run': stages_to_run}
