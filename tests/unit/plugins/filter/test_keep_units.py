# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.keep_units import FilterModule, keep_units

RUNNING = 'Id=llama.service\nActiveState=active\nSubState=running\nMainPID=100\n'


def _look(holders, gpus=None):
    if gpus is None:
        gpus = [{'index': 0, 'free': False, 'memory_used_mib': 40960,
                 'holder_pids': [holder['pid'] for holder in holders]}]
    return {'nvml_available': True, 'gpus': gpus, 'holders': holders}


SERVER = {'pid': 100, 'title': 'llama-server', 'systemd_unit': 'llama.service', 'orphaned': True}
WORKER = {'pid': 101, 'title': 'llama-worker', 'systemd_unit': 'llama.service', 'orphaned': False}


def test_a_healthy_server_alone_on_its_gpus_is_kept():
    assert keep_units(_look([SERVER, WORKER]), RUNNING, ['llama.service']) == {
        'kept': ['llama.service'], 'pids': [100, 101], 'why_not': []}


@pytest.mark.parametrize('show, why', [
    ('', 'llama.service is not loaded'),
    ('Id=llama.service\nActiveState=inactive\nSubState=dead\nMainPID=0\n',
     'llama.service is inactive (dead), not running'),
    ('Id=llama.service\nActiveState=activating\nSubState=start\nMainPID=100\n',
     'llama.service is activating (start), not running'),
    ('Id=llama.service\nActiveState=active\nSubState=running\nMainPID=0\n',
     'llama.service is active (running), not running'),
])
def test_a_unit_that_is_not_running_is_not_kept(show, why):
    assert keep_units(_look([SERVER]), show, ['llama.service']) == {'kept': [], 'pids': [], 'why_not': [why]}


def test_a_unit_that_holds_no_gpu_is_not_kept():
    other = {'pid': 7, 'title': 'python3 train.py', 'systemd_unit': None, 'orphaned': False}
    decision = keep_units(_look([other]), RUNNING, ['llama.service'])
    assert decision['kept'] == []
    assert decision['why_not'] == ['llama.service holds none of the selected GPUs']


def test_orphans_of_an_earlier_run_in_the_unit_keep_nothing():
    orphan = {'pid': 90, 'title': 'VLLM::Worker_TP0', 'systemd_unit': 'llama.service', 'orphaned': True}
    decision = keep_units(_look([SERVER, orphan]), RUNNING, ['llama.service'])
    assert decision['kept'] == []
    assert decision['why_not'] == [
        'llama.service has orphaned GPU holders, left by an earlier run of it: pid 90 (VLLM::Worker_TP0)']


def test_anything_else_on_the_gpus_keeps_nothing():
    stray = {'pid': 55, 'title': 'VLLM::Worker_TP1', 'systemd_unit': 'vllm-sim.service', 'orphaned': True}
    gpus = [{'index': 0, 'free': False, 'memory_used_mib': 1, 'holder_pids': [100]},
            {'index': 1, 'free': False, 'memory_used_mib': 1, 'holder_pids': [55]},
            {'index': 2, 'free': False, 'memory_used_mib': 900, 'holder_pids': []},
            {'index': 3, 'free': True, 'memory_used_mib': 0, 'holder_pids': []}]
    decision = keep_units(_look([SERVER, stray], gpus), RUNNING, ['llama.service'])
    assert decision == {'kept': [], 'pids': [], 'why_not': [
        'GPU 1: held by pid 55 (VLLM::Worker_TP1), outside llama.service',
        'GPU 2: 900 MiB used with no holder']}


def test_without_nvml_nothing_is_kept():
    look = dict(_look([SERVER]), nvml_available=False)
    assert keep_units(look, RUNNING, ['llama.service'])['kept'] == []


def test_two_units_share_the_gpus():
    show = RUNNING + '\nId=embed.service\nActiveState=active\nSubState=running\nMainPID=200\n'
    embed = {'pid': 200, 'title': 'embed', 'systemd_unit': 'embed.service', 'orphaned': True}
    decision = keep_units(_look([SERVER, embed]), show, ['llama.service', 'embed.service', 'ghost.service'])
    assert decision == {'kept': ['llama.service', 'embed.service'], 'pids': [100, 200],
                        'why_not': ['ghost.service is not loaded']}


@pytest.mark.parametrize('args, message', [
    (({}, ['x'], []), 'keep_units expects the text systemctl show printed; got: list'),
    (([], '', []), 'keep_units: first_look must be a module result (a mapping); got: list'),
    (({}, '', 'llama.service'), "keep_units: units must be a list of unit names; got: 'llama.service'"),
])
def test_bad_input_names_the_argument(args, message):
    with pytest.raises(TypeError) as error:
        keep_units(*args)
    assert str(error.value) == message


def test_registered():
    assert FilterModule().filters() == {'keep_units': keep_units}
