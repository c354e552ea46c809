# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Source parents frozen first, killed or thawed last (``_release.source_parents``), through the loop."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

import psutil
import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import (
    add_parent,
    alive,
    holder,
    process,
    real_holder,
    real_run,
    RESPAWNER,
    run,
    stopped_pids,
    wait_for,
    World,
)

# No test scans the host's device nodes.
pytestmark = pytest.mark.usefixtures('private_dev')


def test_supervisor_frozen_first_and_killed_at_the_end():
    world = World()
    world.procs[100] = {'record': {}, 'exit_at': None, 'exited': False, 'state': 'sleeping',
                        'ignores_term': False, 'unkillable': False, 'forks_on_term': None, 'ppid': 1,
                        'create_time': 600.0}
    holders = [world.add(holder(1, ppid=100)), world.add(holder(2, ppid=100, gpus=[1]))]
    processes = {100: process(100, [1, 2], create_time=600.0)}
    plan, result = run(world, holders, processes=processes)
    assert world.sent[0] == (0.0, 100, 'SIGSTOP')
    assert world.sent[-1][1:] == (100, 'SIGKILL')
    assert result['supervisors'][0]['outcome'] == 'frozen and killed'
    assert result['steps'][0] == {'name': 'freeze supervisors', 'signal': 'SIGSTOP', 'pids': [100],
                                  'started_at': 0.0, 'seconds': 0.0, 'skipped': []}


def test_real_respawning_supervisor_is_frozen_and_killed(spawned):
    supervisor = spawned(RESPAWNER)
    worker = wait_for(lambda: psutil.Process(supervisor.pid).children())[0]
    holders = [real_holder(worker.pid)]
    plan, result, lines = real_run(holders)
    assert [s['pid'] for s in plan.supervisors] == [supervisor.pid]
    assert result['supervisors'][0]['outcome'] == 'frozen and killed'
    assert supervisor.wait(2) == -signal.SIGKILL
    assert [e['pid'] for e in result['released']] == [worker.pid]
    wait_for(lambda: not alive(worker.pid))


def test_parent_with_other_children_is_frozen_first_and_thawed_at_the_end():
    world = World()
    add_parent(world, 100)
    holders = [world.add(holder(11, ppid=100))]
    processes = {100: process(100, [11, 99], create_time=600.0)}
    plan, result = run(world, holders, processes=processes)
    assert plan.supervisors == [] and [p['action'] for p in plan.parents] == ['thaw']
    assert world.sent[0] == (0.0, 100, 'SIGSTOP')
    assert world.sent[-1][1:] == (100, 'SIGCONT')
    assert result['supervisors'] == []
    assert [(p['pid'], p['outcome']) for p in result['parents']] == [(100, 'frozen, then thawed')]
    assert stopped_pids(world) == []


def test_shell_loop_parent_is_a_respawner_frozen_and_killed():
    world = World()
    add_parent(world, 100)
    holders = [world.add(holder(11, ppid=100))]
    processes = {100: process(100, [11], name='bash', title='bash -c while true; do w; done', create_time=600.0)}
    dummy, result = run(world, holders, processes=processes)
    assert world.sent[0] == (0.0, 100, 'SIGSTOP') and world.sent[-1][1:] == (100, 'SIGKILL')
    assert result['parents'][0]['outcome'] == 'frozen and killed'


def test_interactive_shell_is_thawed_never_killed():
    world = World()
    add_parent(world, 100)
    holders = [world.add(holder(11, ppid=100))]
    processes = {100: process(100, [11], name='bash', title='-bash', tty='/dev/pts/0', create_time=600.0)}
    dummy, result = run(world, holders, processes=processes)
    assert [s[2] for s in world.sent if s[1] == 100] == ['SIGSTOP', 'SIGCONT']
    assert result['parents'][0]['outcome'] == 'frozen, then thawed'
    assert stopped_pids(world) == []


def test_parent_outside_the_filters_is_never_signalled():
    world = World()
    add_parent(world, 100)
    holders = [world.add(holder(11, ppid=100, title='python3 worker.py'))]
    processes = {100: process(100, [11], name='bash', title='bash -c while true; do python3 worker.py; done',
                              create_time=600.0)}
    dummy, result = run(world, holders, scope=build_scope([0, 1], match='^python3'), processes=processes)
    assert [s for s in world.sent if s[1] == 100] == []
    assert result['parents'][0]['outcome'] == 'left alone'
    assert 'title does not match' in result['parents'][0]['reason']


def test_a_thawed_parent_that_respawns_during_the_release_is_killed():
    world = World(term_delay=0.1)
    add_parent(world, 100)
    holders = [world.add(holder(11, ppid=100))]

    def respawn():
        world.add(holder(77, ppid=100, create_time=900.0), parent=100)
    world.events.append((0.05, respawn))
    processes = {100: process(100, [11, 99], create_time=600.0)}
    dummy, result = run(world, holders, processes=processes)
    parent = result['parents'][0]
    assert parent['reason'] == 'started a new holder during the release: a respawner'
    assert parent['outcome'] == 'frozen and killed'
    assert 77 in [e['pid'] for e in result['released']]
    world.sleep(0.1)  # the SIGKILL just sent takes effect
    assert stopped_pids(world) == []
