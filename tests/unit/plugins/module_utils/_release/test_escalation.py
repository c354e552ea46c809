# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The release loop (``_release.escalation``) against a simulated world and real child processes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import plan as _plan
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import report as _report
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.escalation import Escalation
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.keepers import KEEPER_HELD_BACK, KEEPER_ROUND_SLACK
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import parse_ladder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope, plan_release
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import (
    add_parent,
    holder,
    POLITE,
    process,
    real_holder,
    real_run,
    run,
    sigterm_ignored,
    stopped_pids,
    STUBBORN,
    wait_for,
    World,
)

# No test scans the host's device nodes.
pytestmark = pytest.mark.usefixtures('private_dev')


def test_polite_holders_released_within_their_grace():
    world = World(term_delay=0.2)
    holders = [world.add(holder(1)), world.add(holder(2, gpus=[1]))]
    plan, result = run(world, holders)
    assert [s[2] for s in world.sent] == ['SIGTERM', 'SIGTERM']
    assert result['changed'] is True
    assert [e['pid'] for e in result['released']] == [1, 2]
    assert all(e['last_signal'] == 'SIGTERM' for e in result['released'])
    assert result['survivors'] == [] and result['stuck_gpus'] == []
    assert 0.2 <= result['elapsed_seconds'] <= 0.2 + 0.05
    assert result['released'][0]['seconds_to_release'] <= 0.25
    assert result['steps'][0]['name'] == 'SIGTERM' and result['steps'][0]['pids'] == [1, 2]


def test_sigterm_ignoring_holder_skips_grace_and_adds_no_time():
    polite = World(term_delay=0.2)
    holders = [polite.add(holder(1)), polite.add(holder(2))]
    dummy, baseline = run(polite, holders)

    world = World(term_delay=0.2)
    holders = [world.add(holder(1)), world.add(holder(2)),
               world.add(holder(3, sigterm_ignored=True), ignores_term=True)]
    dummy, result = run(world, holders)
    assert result['elapsed_seconds'] <= baseline['elapsed_seconds'] + 0.3
    # The stubborn one is frozen and killed at once, the others get SIGTERM.
    assert (0.0, 3, 'SIGSTOP') in world.sent and (0.0, 3, 'SIGKILL') in world.sent
    assert (0.0, 3, 'SIGTERM') not in world.sent
    stubborn = [e for e in result['released'] if e['pid'] == 3][0]
    assert stubborn['last_signal'] == 'SIGKILL'
    assert stubborn['skipped_steps'] == [{'signal': 'SIGTERM', 'reason': 'ignores SIGTERM', 'case': 'sigterm-ignored'}]
    assert stubborn['seconds_to_release'] <= 0.1


def test_stopped_holder_skips_grace():
    world = World()
    holders = [world.add(holder(1, state='stopped'))]
    dummy, result = run(world, holders)
    assert [s[2] for s in world.sent] == ['SIGSTOP', 'SIGKILL']
    assert result['released'][0]['skipped_steps'][0]['reason'] == 'stopped'


def test_survivor_in_disk_sleep_fails_within_the_deadline():
    world = World()
    holders = [world.add(holder(1), ignores_term=True, unkillable=True)]
    dummy, result = run(world, holders, grace=2, kill=1)
    assert result['released'] == []
    survivor = result['survivors'][0]
    assert survivor['state'] == 'disk-sleep' and survivor['wchan'] == 'uvm_spin_loop'
    assert survivor['last_signal'] == 'SIGKILL'
    # No grace spent: SIGTERM is ignored, so freeze + SIGKILL at once, then the kill wait.
    assert 1.0 <= result['elapsed_seconds'] <= 1.05
    lines = _report.failure_lines(result, [{'index': 0, 'uuid': 'GPU-0'}])
    assert lines == ['pid 1 (VLLM::Worker_TP1) on GPU 0 survived SIGKILL: state disk-sleep, wchan uvm_spin_loop; '
                     'next step: a GPU reset (gpu_reclaim_allow_reset in the role, or nvidia-smi --gpu-reset -i 0) '
                     'or a reboot']


def test_full_ladder_timing_for_a_polite_but_slow_holder():
    world = World(term_delay=100)
    holders = [world.add(holder(1))]
    dummy, result = run(world, holders, grace=2, kill=1)
    assert [s[2] for s in world.sent] == ['SIGTERM', 'SIGSTOP', 'SIGKILL']
    assert world.sent[1][0] == pytest.approx(2.0, abs=0.001)
    assert 2.05 <= result['elapsed_seconds'] <= 2.1
    assert [s['name'] for s in result['steps']] == ['SIGTERM', 'freeze', 'SIGKILL']
    assert result['steps'][0]['seconds'] == pytest.approx(2.0, abs=0.001)


def test_stuck_context_fails_naming_the_gpu():
    world = World(stuck_memory={1: 20480})
    holders = [world.add(holder(1, gpus=[1]))]
    dummy, result = run(world, holders, grace=1, kill=1)
    assert [e['pid'] for e in result['released']] == [1]
    assert result['stuck_gpus'] == [{'index': 1, 'memory_used_mib': 20480, 'reason': '20480 MiB used'}]
    # bounded by what the ladder grants: the rest of the grace and the kill wait
    assert result['elapsed_seconds'] <= 2.0 + 0.05
    lines = _report.failure_lines(result, [{'index': 1, 'uuid': 'GPU-abc'}])
    assert lines == ['GPU 1 (GPU-abc) still has 20480 MiB used after every targeted holder is gone '
                     '(stuck context); next step: a GPU reset (gpu_reclaim_allow_reset in the role, or '
                     'nvidia-smi --gpu-reset -i 1) or a reboot']


def test_slow_release_waits_for_memory_not_for_the_process():
    world = World(term_delay=0.1, stuck_memory={0: 5000})
    holders = [world.add(holder(1))]
    world.events.append((1.5, lambda: world.stuck_memory.pop(0)))
    dummy, result = run(world, holders)
    assert result['stuck_gpus'] == []
    assert 1.5 <= result['elapsed_seconds'] <= 1.55
    assert result['memory_after'] == {0: 0, 1: 0}


def test_memory_of_holders_left_alone_is_the_baseline():
    world = World()
    protected = world.add(holder(9, name='nv-hostengine', protected=True, gpu_memory_mib={'0': 300}))
    holders = [world.add(holder(1)), protected]
    dummy, result = run(world, holders)
    assert result['stuck_gpus'] == [] and result['elapsed_seconds'] < 0.3
    assert 9 not in [s[1] for s in world.sent]


def test_reused_and_gone_pids_are_released_without_a_signal():
    world = World()
    holders = [holder(1), holder(2)]
    world.add(dict(holders[1], create_time=5.0))  # pid 2 now belongs to a newcomer
    dummy, result = run(world, holders)
    assert world.sent == []
    assert result['changed'] is False
    assert sorted(e['pid'] for e in result['released']) == [1, 2]


def test_denied_is_a_survivor_with_the_reason():
    world = World()
    holders = [world.add(holder(1))]
    world.procs[1]['denied'] = True
    dummy, result = run(world, holders)
    assert result['survivors'][0]['reason'] == 'permission denied'
    assert _report.failure_lines(result)[0].startswith('pid 1 (VLLM::Worker_TP1) on GPU 0: permission denied')


def test_nvml_failure_falls_back_to_proc():
    world = World()
    holders = [world.add(holder(1))]

    def broken(indices, timeout=None):
        raise RuntimeError('NVML call poll did not return within 5 seconds')

    world.poll = broken
    dummy, result = run(world, holders)
    assert result['released'][0]['pid'] == 1
    assert result['nvml_used'] is False
    assert 'NVML polling stopped' in result['warnings'][0]


def test_nothing_to_do_sends_nothing():
    world = World()
    dummy, result = run(world, [])
    assert world.sent == [] and result['changed'] is False
    assert result['elapsed_seconds'] == 0.0


def test_polls_are_spaced_by_the_poll_interval():
    world = World(term_delay=1.0)
    holders = [world.add(holder(1))]
    run(world, holders, poll=0.05)
    assert 20 <= world.polls <= 23


def test_real_stubborn_among_polite_adds_no_grace(spawned):
    polite = [spawned(POLITE) for dummy in range(2)]
    stubborn = spawned(STUBBORN)
    wait_for(lambda: sigterm_ignored(stubborn.pid))  # its handler is installed
    holders = [real_holder(p.pid) for p in polite]
    holders.append(real_holder(stubborn.pid, sigterm_ignored=True))
    # A grace far longer than the run may take on a loaded machine (or in a
    # container): had the stubborn holder been given it, the run would last 30 s.
    plan, result, lines = real_run(holders, grace=30)
    assert plan.supervisors == []  # the test runner is an ancestor, never a supervisor
    assert result['survivors'] == []
    assert result['elapsed_seconds'] < 10.0
    assert stubborn.wait(2) == -signal.SIGKILL
    assert all(p.wait(2) == -signal.SIGTERM for p in polite)
    assert 'sent SIGKILL to pid %d' % stubborn.pid in '\n'.join(lines)


def test_namespace_init_without_handler_skips_the_grace():
    world = World(term_delay=0.2)
    holders = [world.add(holder(11))]
    world.grace_case = lambda pid, signum: (
        ('namespace-init-without-handler', 'init of its own PID namespace') if signum == signal.SIGTERM else None)
    dummy, result = run(world, holders, grace=10)
    assert [s[2] for s in world.sent] == ['SIGSTOP', 'SIGKILL']
    assert result['released'][0]['skipped_steps'] == [
        {'signal': 'SIGTERM', 'reason': 'init of its own PID namespace', 'case': 'namespace-init-without-handler'}]
    assert result['elapsed_seconds'] < 0.5


class Boom(Exception):
    pass


def frozen_world():
    """A supervisor, a thawed parent and a stubborn holder whose tree gets frozen."""
    world = World(term_delay=100)
    add_parent(world, 100)
    add_parent(world, 200, create_time=700.0)
    holders = [world.add(holder(11, ppid=100)), world.add(holder(12, ppid=200, gpus=[1]))]
    world.add(holder(17, gpus=[]), parent=12)
    processes = {100: process(100, [11], create_time=600.0), 200: process(200, [12, 99], create_time=700.0)}
    return world, holders, processes


def test_every_freeze_is_undone_after_a_normal_run():
    world, holders, processes = frozen_world()
    dummy, result = run(world, holders, processes=processes, grace=0.1, kill=1)
    assert stopped_pids(world) == []
    assert result['survivors'] == []


def test_every_freeze_is_undone_when_the_deadline_leaves_survivors():
    world, holders, processes = frozen_world()
    world.procs[12]['unkillable'] = True
    world.procs[12]['ignores_term'] = True
    dummy, result = run(world, holders, processes=processes, grace=0.1, kill=0.2)
    assert [e['pid'] for e in result['survivors']] == [12]
    # the survivor was sent SIGKILL (it is stuck in the kernel); everything else frozen was thawed or killed
    assert [pid for pid in stopped_pids(world) if pid != 12] == []
    assert world.sent[-1][1:] in ((200, 'SIGCONT'), (100, 'SIGKILL'))


@pytest.mark.parametrize('failing', ['signal', 'observe', 'sleep', 'on_frozen', 'interrupt'])
def test_every_freeze_is_undone_when_the_run_fails(failing):
    world, holders, processes = frozen_world()
    plan = plan_release(holders, build_scope([0, 1]), processes=processes)
    real_signaller, real_status, real_sleep = world.signaller, world.status, world.sleep
    state = {'frozen_seen': False}

    def signaller(ref, signum, describe=''):
        outcome = real_signaller(ref, signum, describe)
        if signum == signal.SIGSTOP and ref.pid == 17:
            state['frozen_seen'] = True
        if failing == 'signal' and signum == signal.SIGKILL:
            raise Boom('signalling failed')
        return outcome

    def status(ref):
        if failing == 'observe' and world.now > 0.15:
            raise Boom('/proc failed')
        return real_status(ref)

    def sleep(seconds):
        real_sleep(seconds)
        if failing == 'sleep' and world.now > 0.15:
            raise Boom('interrupted while waiting')
        if failing == 'interrupt' and world.now > 0.15:
            raise KeyboardInterrupt()

    def on_frozen():
        if failing == 'on_frozen':
            raise Boom('a unit stop failed')

    world.status = status
    escalation = Escalation(
        plan, parse_ladder(None, 0.1, 1), nvml=world, prober=world, signaller=signaller, clock=world.clock,
        sleep=sleep, poll_interval=0.02, known_pids=[h['pid'] for h in holders],
        baseline_mib=_plan.baseline_memory(holders, plan), on_frozen=on_frozen)
    with pytest.raises((Boom, KeyboardInterrupt)):
        escalation.run()
    assert [s for s in world.sent if s[2] == 'SIGSTOP'], 'something was frozen before the failure'
    assert stopped_pids(world) == []
    assert escalation.ledger.frozen == {}


# --- keepers of a context whose creator is gone, in rounds ----------------------------

class ContextWorld(World):
    """NVML lists the exited creator 41 with its memory on GPU 0 while any of ``keepers`` lives."""

    def __init__(self, keepers, **kwargs):
        World.__init__(self, **kwargs)
        self.keepers = set(keepers)

    def poll(self, indices, timeout=None):
        result = World.poll(self, indices, timeout)
        if any(not self.procs[pid]['exited'] for pid in self.keepers):
            result[0]['pids'].add(41)
            result[0]['memory_used_mib'] += 6144
        return result


def _kept(pid, rank, kind='compute'):
    evidence = {1: ['mapped'], 3: ['received'], 4: ['client']}[rank]
    return holder(pid, gpus=(0,), kind=kind, nvml_types=[], gpu_memory_mib={}, memory_mib=0,
                  keeps=[{'gpu': 0, 'creator_pids': [41], 'memory_mib': 6144, 'evidence': evidence, 'rank': rank}])


def test_a_weaker_keeper_is_spared_when_the_stronger_one_frees_the_context():
    strong, client = _kept(50, 1), _kept(52, 4, kind='client')
    world = ContextWorld([50])
    for record in (strong, client):
        world.add(record)
    plan, result = run(world, [strong, client], scope=build_scope([0], kinds=['compute', 'client']))
    assert [entry['pid'] for entry in result['released']] == [50]
    assert [pid for dummy, pid, dummy2 in world.sent] == [50]
    assert [(entry['pid'], entry['reason']) for entry in result['spared']] == [(52, KEEPER_HELD_BACK)]


def test_the_weaker_keepers_go_next_when_the_context_stays():
    strong, receiver = _kept(50, 1), _kept(51, 3)
    world = ContextWorld([51])  # the strong candidate did not keep it: the receiver does
    for record in (strong, receiver):
        world.add(record)
    plan, result = run(world, [strong, receiver], scope=build_scope([0]))
    assert [r['pid'] for r in plan.targets] == [50] and [r['pid'] for r in plan.deferred] == [51]
    assert sorted(entry['pid'] for entry in result['released']) == [50, 51]
    sent_to = [pid for dummy, pid, dummy2 in world.sent]
    assert sent_to.index(51) > sent_to.index(50)
    first_51 = [when for when, pid, dummy in world.sent if pid == 51][0]
    first_50 = [when for when, pid, dummy in world.sent if pid == 50][0]
    assert first_51 - first_50 >= KEEPER_ROUND_SLACK
    assert any('released its weaker keepers too: pid 51' in warning for warning in result['warnings'])
    assert result['spared'] == [] and result['survivors'] == []


# Security: when the controller goes away the loop stops escalating, and what it froze is thawed.
def test_a_stop_asked_mid_grace_sends_nothing_more_and_thaws_what_was_frozen():
    world, holders, processes = frozen_world()
    asked = []

    def should_stop():
        asked.append(world.now)
        return 'the controller went away' if world.now >= 0.1 else None

    dummy, result = run(world, holders, processes=processes, grace=5, kill=5, should_stop=should_stop)
    sent = [s[2] for s in world.sent]
    assert 'SIGTERM' in sent and 'SIGKILL' not in sent
    assert stopped_pids(world) == []
    assert result['elapsed_seconds'] < 0.5
    assert ('escalation stopped: the controller went away; nothing more was signalled, and what was frozen was '
            'thawed') in result['warnings']
    assert len(asked) > 2


def test_a_stop_asked_before_the_first_step_signals_no_holder_and_stops_no_source():
    world, holders, processes = frozen_world()
    stopped_sources = []
    dummy, result = run(world, holders, processes=processes, should_stop=lambda: 'the controller went away',
                        on_frozen=lambda: stopped_sources.append(True))
    assert stopped_sources == []
    # The supervisors frozen first are thawed; no holder got any signal.
    assert all(s[1] in (100, 200) and s[2] in ('SIGSTOP', 'SIGCONT') for s in world.sent)
    assert stopped_pids(world) == [] and result['released'] == []


class LeftBehindWorld(World):
    """NVML lists ``creator`` on GPU 0 while it or any of ``keepers`` lives, as a context a child keeps."""

    def __init__(self, creator, keepers, **kwargs):
        World.__init__(self, **kwargs)
        self.creator, self.keepers = creator, set(keepers)

    def poll(self, indices, timeout=None):
        result = World.poll(self, indices, timeout)
        if any(not self.procs[pid]['exited'] for pid in self.keepers) and self.creator not in result[0]['pids']:
            result[0]['pids'].add(self.creator)
            result[0]['memory_used_mib'] += 1000
        return result


def test_a_forked_child_that_keeps_its_exited_parents_context_is_found_and_released():
    parent = holder(50, gpus=(0,))
    child = holder(51, gpus=(0,), kind='client', nvml_types=[], gpu_memory_mib={}, memory_mib=0)
    bystander = holder(60, gpus=(1,), kind='client', nvml_types=[], gpu_memory_mib={}, memory_mib=0)
    world = LeftBehindWorld(50, [51])
    world.add(parent)
    world.add(child, parent=50)
    world.add(bystander)
    plan, result = run(world, [parent], scope=build_scope([0]))
    released = dict((entry['pid'], entry) for entry in result['released'])
    assert sorted(released) == [50, 51]
    assert released[51]['adopted'] and not released[50]['adopted']
    sent_to = [pid for dummy, pid, dummy2 in world.sent]
    assert 60 not in sent_to and sent_to.index(51) > sent_to.index(50)
    assert released[51]['keeps'][0]['creator_pids'] == [50]
    assert 'descendant' in released[51]['keeps'][0]['evidence']
    assert result['survivors'] == [] and result['stuck_gpus'] == []


def test_a_keeper_found_after_its_creator_exited_is_judged_by_the_scope():
    parent = holder(50, gpus=(0,))
    other_user = holder(52, gpus=(0,), kind='client', nvml_types=[], gpu_memory_mib={}, memory_mib=0,
                        user='researcher', uid=1001)
    world = LeftBehindWorld(50, [52])
    world.add(parent)
    world.add(other_user, parent=50)
    plan, result = run(world, [parent], scope=build_scope([0], users=['root']))
    assert [entry['pid'] for entry in result['released']] == [50]
    assert [pid for dummy, pid, dummy2 in world.sent] == [50]
    assert [(e['pid'], e['reason']) for e in result['spared']] == [
        (52, 'keeps the context of exited pid 50; user not selected')]
