# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A target's process tree frozen and killed with it (``_release.trees``), through the loop."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal

import psutil
import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import newcomers as _newcomers
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import prober as _prober
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import proctree as _proctree
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.escalation import Escalation
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.identity import ProcessRef
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import parse_ladder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope, plan_release
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import (
    alive,
    FORKER,
    holder,
    real_holder,
    real_run,
    run,
    wait_for,
    World,
)

# No test scans the host's device nodes.
pytestmark = pytest.mark.usefixtures('private_dev')


def test_tree_frozen_until_no_new_descendant_then_killed():
    world = World(term_delay=100)
    target = world.add(holder(1))
    world.add(holder(7, gpus=[]), parent=1)
    grandchild = holder(8, gpus=[])
    original = world.descendants
    calls = []

    def forking_descendants(pid):
        calls.append(pid)
        found = original(pid)
        if len(calls) == 1:  # a grandchild forked before its parent was frozen
            world.add(dict(grandchild), parent=7)
        return found

    world.descendants = forking_descendants
    dummy, result = run(world, [target], grace=0.5, kill=1)
    stops = [s[1] for s in world.sent if s[2] == 'SIGSTOP']
    kills = [s[1] for s in world.sent if s[2] == 'SIGKILL']
    assert stops == [1, 7, 8] and kills == [1, 7, 8]
    assert result['released'][0]['descendants_killed'] == [7, 8]
    assert len(calls) == 3


def test_real_forker_tree_is_frozen_and_killed(spawned):
    forker = spawned(FORKER)
    wait_for(lambda: len(psutil.Process(forker.pid).children()) >= 2)
    holders = [real_holder(forker.pid, sigterm_ignored=True)]
    plan, result, lines = real_run(holders)
    released = result['released'][0]
    assert released['last_signal'] == 'SIGKILL'
    assert len(released['descendants_killed']) >= 2
    assert forker.wait(2) == -signal.SIGKILL
    for pid in released['descendants_killed']:
        wait_for(lambda: not alive(pid))
    assert not [line for line in lines if 'pid %d ' % os.getpid() in line]


STARTS_A_CLIENT = (
    'import signal, subprocess, time\n'
    'signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
    'subprocess.Popen(["sleep", "60"])\n'
    'while True:\n'
    '    time.sleep(0.01)\n'
)


def test_real_protected_descendant_survives_its_parents_tree_kill(spawned):
    holder_proc = spawned(STARTS_A_CLIENT)
    client = wait_for(lambda: psutil.Process(holder_proc.pid).children())[0]
    try:
        holders = [real_holder(holder_proc.pid, sigterm_ignored=True)]
        scope = build_scope([0], own_pids=_proctree.self_and_ancestors())
        plan = plan_release(holders, scope, processes=_prober.parent_processes(holders))
        lines = []

        def protection(record):
            name = os.path.basename(record.get('exe') or '') or record.get('name')
            return (name == 'sleep', 'user protected executable sleep' if name == 'sleep' else None)

        result = Escalation(plan, parse_ladder(None, 5, 5), nvml=None, log=lines.append, poll_interval=0.02,
                            known_pids=[holder_proc.pid], protection=protection).run()
        assert holder_proc.wait(2) == -signal.SIGKILL
        assert result['released'][0]['descendants_killed'] == []
        assert alive(client.pid) and psutil.Process(client.pid).status() != psutil.STATUS_STOPPED
        assert not [line for line in lines if 'pid %d ' % client.pid in line]
    finally:
        client.kill()


# -- stopping a large tree is bounded by the run's deadline --------------------

class GrowingTree(World):
    """A target whose tree gains 50 descendants at every look, and signals that take 10 ms each."""

    def __init__(self):
        World.__init__(self, term_delay=100)
        self.next_pid = 1000

    def descendants(self, pid):
        refs = []
        for dummy in range(50):
            self.next_pid += 1
            self.procs[self.next_pid] = {
                'record': {}, 'exit_at': None, 'exited': False, 'state': 'sleeping', 'ignores_term': False,
                'unkillable': False, 'forks_on_term': None, 'ppid': pid, 'create_time': float(self.next_pid)}
            refs.append(ProcessRef(self.next_pid, float(self.next_pid)))
        return refs

    def describe(self, pid):
        return None

    def signaller(self, ref, signum, describe=''):
        self.now += 0.01
        self._tick()
        return World.signaller(self, ref, signum, describe)


def test_freezing_a_tree_that_keeps_growing_stops_at_the_deadline():
    world = GrowingTree()
    target = world.add(holder(1), ignores_term=True)
    dummy, result = run(world, [target], grace=1, kill=1)
    # The freeze ends at the run's deadline (grace, kill and the adoption slack), where the
    # unbounded one took 20 rounds of 50 descendants, 10 s; then what was frozen is killed.
    deadline = 1 + 1 + _newcomers.ADOPTION_SLACK_SECONDS
    [killed_at] = [when for when, pid, name in world.sent if (pid, name) == (1, 'SIGKILL')]
    assert deadline <= killed_at <= deadline + 0.05
    frozen = [pid for when, pid, name in world.sent if name == 'SIGSTOP' and pid != 1]
    assert sorted(frozen) == sorted(pid for when, pid, name in world.sent if name == 'SIGKILL' and pid != 1)
    assert len(frozen) < 1000
    assert any('its process tree was still growing when the release reached its deadline' in warning
               for warning in result['warnings'])
    assert [entry['pid'] for entry in result['released']] == [1]
