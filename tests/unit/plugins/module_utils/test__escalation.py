# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal
import subprocess
import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils import (
    _newcomers,
    _plan,
    _prober,
    _proctree,
    _report,
)
from ansible_collections.gpuops.reclaim.plugins.module_utils._escalation import Escalation
from ansible_collections.gpuops.reclaim.plugins.module_utils._ladder import parse_ladder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import build_scope, plan_release
from ansible_collections.gpuops.reclaim.plugins.module_utils._identity import ProcessRef


@pytest.fixture(autouse=True)
def private_dev(monkeypatch, fake_dev):
    """No test scans the host's device nodes: holders outside the tests are never adopted."""
    monkeypatch.setattr(_prober, 'DEV_DIR', fake_dev)
    return fake_dev


def holder(pid, gpus=(0,), **extra):
    record = {
        'pid': pid, 'ppid': 1, 'user': 'root', 'uid': 0, 'name': 'python3',
        'title': 'VLLM::Worker_TP%d' % pid, 'exe': '/usr/bin/python3', 'create_time': 1000.0 + pid,
        'state': 'sleeping', 'wchan': None, 'gpus': list(gpus),
        'gpu_uuids': ['GPU-%d' % i for i in gpus],
        'gpu_memory_mib': dict((str(i), 1000) for i in gpus), 'memory_mib': 1000 * len(gpus),
        'nvml_types': ['compute'], 'device_paths': [], 'kind': 'compute', 'systemd_unit': None,
        'container': None, 'protected': False, 'protected_reason': None, 'is_self': False,
        'sigterm_ignored': False, 'orphaned': True,
    }
    record.update(extra)
    return record


def process(pid, children, **extra):
    entry = {'pid': pid, 'ppid': 1, 'name': 'python3', 'title': 'python3 supervisor.py', 'user': 'root',
             'uid': 0, 'create_time': 500.0 + pid, 'systemd_unit': None, 'container': None,
             'children': list(children)}
    entry.update(extra)
    return entry


# -- the loop, against a simulated world ---------------------------------------

class World:
    """Processes, GPUs, a clock and a signaller that obey simple rules."""

    def __init__(self, term_delay=0.2, kill_delay=0.05, stuck_memory=None):
        self.now = 0.0
        self.term_delay = term_delay
        self.kill_delay = kill_delay
        self.procs = {}
        self.sent = []
        self.stuck_memory = dict(stuck_memory or {})
        self.polls = 0
        self.scans = 0
        self.events = []  # (time, callable)

    def add(self, record, ignores_term=False, unkillable=False, forks_on_term=None, zombie_on_exit=True,
            parent=None):
        self.procs[record['pid']] = {
            'record': record, 'exit_at': None, 'exited': False, 'state': record.get('state', 'sleeping'),
            'ignores_term': ignores_term, 'unkillable': unkillable, 'forks_on_term': forks_on_term,
            'ppid': parent if parent is not None else record.get('ppid', 1),
            'create_time': record['create_time'],
        }
        return record

    # clock
    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds > 0
        self.now += seconds
        self._tick()

    def _tick(self):
        for pid, proc in self.procs.items():
            if not proc['exited'] and proc['exit_at'] is not None and self.now >= proc['exit_at']:
                proc['exited'] = True
                proc['state'] = 'zombie'
        for when, action in list(self.events):
            if self.now >= when:
                self.events.remove((when, action))
                action()

    # signaller
    def signaller(self, ref, signum, describe=''):
        proc = self.procs.get(ref.pid)
        if proc is None or abs(proc['create_time'] - ref.create_time) > 0.001:
            return 'reused' if proc else 'gone'
        if proc['exited']:
            return 'zombie'
        if proc.get('denied'):
            return 'denied'
        self.sent.append((round(self.now, 3), ref.pid, signal.Signals(signum).name))
        if signum == signal.SIGSTOP:
            proc['state'] = 'stopped'
        elif signum == signal.SIGCONT:
            proc['state'] = 'sleeping'
        elif signum == signal.SIGKILL:
            if proc['unkillable']:
                proc['state'] = 'disk-sleep'
            elif proc['exit_at'] is None or proc['exit_at'] > self.now + self.kill_delay:
                proc['exit_at'] = self.now + self.kill_delay
        elif signum == signal.SIGTERM and proc['state'] != 'stopped' and not proc['ignores_term']:
            if proc['forks_on_term']:
                proc['forks_on_term']()
            if proc['exit_at'] is None:
                proc['exit_at'] = self.now + self.term_delay
        return 'sent'

    # prober
    def status(self, ref):
        proc = self.procs.get(ref.pid)
        if proc is None:
            return 'gone'
        if abs(proc['create_time'] - ref.create_time) > 0.001:
            return 'reused'
        return 'zombie' if proc['exited'] else proc['state']

    def wchan(self, pid):
        return 'uvm_spin_loop' if self.procs[pid]['unkillable'] else 'do_wait'

    def ignored_signals(self, pid):
        return set([signal.SIGTERM]) if self.procs[pid]['ignores_term'] else set()

    def descendants(self, pid):
        found, frontier, seen = [], [pid], set([pid])
        while frontier:
            parent = frontier.pop()
            for child, proc in self.procs.items():
                if proc['ppid'] == parent and not proc['exited'] and child not in seen:
                    seen.add(child)
                    found.append(ProcessRef(child, proc['create_time']))
                    frontier.append(child)
        return found

    def ancestors(self, pid):
        chain = []
        current = self.procs[pid]['ppid']
        while current in self.procs and current not in chain and current != pid:
            chain.append(current)
            current = self.procs[current]['ppid']
        return chain

    def describe(self, pid):
        proc = self.procs.get(pid)
        if proc is None or proc['exited']:
            return None
        return dict(proc['record'], ppid=proc['ppid'], create_time=proc['create_time'], state=proc['state'])

    # the /proc scan used without NVML
    def device_holders(self):
        self.scans += 1
        return dict((pid, {'minors': set(proc['record'].get('gpus') or []), 'uvm': True})
                    for pid, proc in self.procs.items() if not proc['exited'] and proc['record'].get('gpus'))

    # nvml
    def poll(self, indices, timeout=None):
        self.polls += 1
        result = {}
        for index in indices:
            used = self.stuck_memory.get(index, 0)
            pids = set()
            for pid, proc in self.procs.items():
                if proc['exited']:
                    continue
                mib = (proc['record'].get('gpu_memory_mib') or {}).get(str(index))
                if mib:
                    used += mib
                    pids.add(pid)
            result[index] = {'memory_used_mib': used, 'pids': pids}
        return result


def run(world, holders, scope=None, ladder=None, processes=None, nvml=True, grace=10, kill=10, poll=0.02,
        **kwargs):
    scope = scope or build_scope([0, 1])
    plan = plan_release(holders, scope, processes=processes)
    escalation = Escalation(
        plan, parse_ladder(ladder, grace, kill), nvml=world if nvml else None, prober=world,
        signaller=world.signaller, clock=world.clock, sleep=world.sleep, poll_interval=poll,
        known_pids=[h['pid'] for h in holders], baseline_mib=_plan.baseline_memory(holders, plan), **kwargs)
    return plan, escalation.run()


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


def test_new_holder_forked_by_a_target_is_adopted():
    world = World(term_delay=0.3)
    target = world.add(holder(1))

    def fork():
        world.add(holder(55, gpus=[0], create_time=77.0), parent=1, ignores_term=True)

    world.procs[1]['forks_on_term'] = fork
    dummy, result = run(world, [target])
    assert 55 in [e['pid'] for e in result['released']]
    assert (55, 'SIGKILL') in [s[1:] for s in world.sent]
    assert result['stuck_gpus'] == []


def simulate_fork_then_exit(world, parent, child_pid, gpus=(0,)):
    """On SIGTERM ``parent`` starts ``child_pid`` holding ``gpus`` and exits; the child is reparented to PID 1."""
    def fork():
        world.add(holder(child_pid, gpus=gpus, create_time=500.0 + child_pid), parent=1)
        world.procs[parent]['exit_at'] = world.now
    world.procs[parent]['forks_on_term'] = fork


def test_fork_then_exit_child_is_adopted_without_grace():
    world = World(term_delay=0.3)
    target = world.add(holder(10, gpus=[0]))
    polite = world.add(holder(11, gpus=[1]))
    simulate_fork_then_exit(world, 10, 55)
    dummy, result = run(world, [target, polite], grace=3, kill=5)
    assert world.procs[55]['ppid'] == 1  # its ancestry is lost
    by_pid = dict((e['pid'], e) for e in result['released'])
    assert sorted(by_pid) == [10, 11, 55]
    assert by_pid[55]['adopted'] is True and by_pid[10]['adopted'] is False
    # No grace for the newcomer: its origin was already sent SIGTERM.
    assert [s[2] for s in world.sent if s[1] == 55] == ['SIGSTOP', 'SIGKILL']
    assert by_pid[55]['last_signal'] == 'SIGKILL'
    assert by_pid[55]['skipped_steps'] == [
        {'signal': 'SIGTERM', 'reason': 'appeared during the release, after pid 10 was signalled',
         'case': 'appeared-after-signal'}]
    assert result['steps'][0]['skipped'] == [
        {'pid': 55, 'reason': 'appeared during the release, after pid 10 was signalled'}]
    assert result['survivors'] == [] and result['stuck_gpus'] == []
    # The polite holder's 0.3 s bound the run, not a grace period of the newcomer.
    assert result['elapsed_seconds'] <= 0.3 + 0.05


def test_fork_then_exit_chain_is_cut_at_the_first_generation():
    world = World(term_delay=0.3)
    target = world.add(holder(10))
    simulate_fork_then_exit(world, 10, 55)
    # The child would fork again on SIGTERM, but gets none.
    world.events.append((0.0, lambda: simulate_fork_then_exit(world, 55, 56)))
    dummy, result = run(world, [target], grace=3, kill=5)
    assert [e['pid'] for e in result['released']] == [10, 55]
    assert 56 not in world.procs


def test_newcomer_before_any_signal_gets_the_whole_ladder():
    world = World(term_delay=0.2)
    target = world.add(holder(10))
    world.add(holder(55, create_time=555.0), parent=1)  # appeared between discovery and the release
    dummy, result = run(world, [target], grace=3, kill=5)
    assert (0.0, 55, 'SIGTERM') in world.sent and 'SIGKILL' not in [s[2] for s in world.sent]
    entry = [e for e in result['released'] if e['pid'] == 55][0]
    assert entry['adopted'] is True and entry['last_signal'] == 'SIGTERM' and entry['skipped_steps'] == []


def test_newcomers_out_of_scope_or_protected_are_left_alone():
    world = World(term_delay=0.3)
    target = world.add(holder(10))
    other = holder(56, title='python train.py', create_time=556.0, gpu_memory_mib={'0': 4000})
    monitor = holder(57, name='nv-hostengine', exe='/usr/bin/nv-hostengine', create_time=557.0,
                     gpu_memory_mib={'0': 300})

    def fork():
        world.add(other, parent=1)
        world.add(monitor, parent=1)
    world.procs[10]['forks_on_term'] = fork
    plan, result = run(world, [target], scope=build_scope([0, 1], match='^VLLM::'), grace=3, kill=5)
    assert set(s[1] for s in world.sent) == set([10])
    assert [e['pid'] for e in result['released']] == [10]
    assert [(e['pid'], e['reason']) for e in plan.skipped] == [
        (56, 'appeared during the release; title does not match')]
    assert [(e['pid'], e['reason']) for e in plan.protected] == [
        (57, 'appeared during the release; default protected executable nv-hostengine')]
    # Their memory is theirs, not a stuck context; and nobody waited for it.
    assert result['stuck_gpus'] == [] and result['elapsed_seconds'] <= 0.35
    assert any('pid 56 (python train.py) appeared during the release and was left alone' in w
               for w in result['warnings'])


def test_protection_callable_decides_for_newcomers():
    world = World(term_delay=0.3)
    target = world.add(holder(10))
    simulate_fork_then_exit(world, 10, 55)
    seen = []

    def protection(record):
        seen.append(record['pid'])
        return True, 'user protected executable python3'
    plan, result = run(world, [target], grace=3, kill=5, protection=protection)
    assert seen == [55] and 55 not in [s[1] for s in world.sent]
    assert plan.protected[0]['reason'] == 'appeared during the release; user protected executable python3'


def test_newcomer_that_nvml_lists_but_holds_no_node_here_is_left_alone():
    world = World(term_delay=0.3)
    target = world.add(holder(10))
    simulate_fork_then_exit(world, 10, 55)
    # Seen from another PID namespace, pid 55 here holds no NVIDIA device node.
    world.visible = lambda pid: pid != 55
    plan, result = run(world, [target], grace=3, kill=5)
    assert 55 not in [s[1] for s in world.sent]
    assert [(e['pid'], e['reason']) for e in plan.skipped] == [
        (55, 'appeared during the release; listed by NVML but not visible as a GPU holder here (another PID '
             'namespace?)')]


def test_newcomer_on_a_gpu_no_target_holds_is_ignored():
    world = World(term_delay=0.3)
    target = world.add(holder(10, gpus=[0]))
    simulate_fork_then_exit(world, 10, 55, gpus=[1])  # GPU 1 is selected but held by no target
    dummy, result = run(world, [target], grace=3, kill=5)
    assert [e['pid'] for e in result['released']] == [10]
    assert 55 not in [s[1] for s in world.sent]


def test_newcomers_are_bounded_and_the_deadline_holds():
    world = World(term_delay=0.1)
    target = world.add(holder(10))
    spawned = []
    real_sleep = world.sleep

    def sleep(seconds):
        # Something unseen starts a new holder of GPU 0 at every poll (a fork bomb).
        pid = 1000 + len(spawned)
        spawned.append(pid)
        world.add(holder(pid, create_time=float(pid)), parent=1)
        real_sleep(seconds)
    world.sleep = sleep
    dummy, result = run(world, [target], grace=1, kill=1, max_newcomers=5)
    adopted = [e for e in result['released'] + result['survivors'] if e['adopted'] and e['last_signal']]
    assert len(adopted) == 5
    unexamined = [e for e in result['survivors'] if e['last_signal'] is None]
    assert unexamined and all(e['adopted'] for e in unexamined)
    assert unexamined[0]['reason'] == ('appeared during the release after 5 others had been examined (the '
                                       'limit); not signalled')
    assert len(set(s[1] for s in world.sent)) == 6
    # grace + kill + the adoption slack, plus one poll at most
    assert result['elapsed_seconds'] <= 1 + 1 + _newcomers.ADOPTION_SLACK_SECONDS + 0.02 + 1e-6
    lines = _report.failure_lines(result)
    assert lines[0].startswith('pid %d on GPU 0 appeared during the release after 5 others' % unexamined[0]['pid'])
    assert lines[0].endswith('next step: find what keeps starting holders (a supervisor or a service), stop it, '
                             'and run again')


def test_late_unkillable_newcomer_ends_within_the_deadline():
    world = World(term_delay=100, kill_delay=0.95)  # the target dies at 2.95, after SIGKILL at 2
    target = world.add(holder(10))
    world.events.append((2.9, lambda: world.add(holder(55, create_time=555.0), parent=1, unkillable=True)))
    dummy, result = run(world, [target], grace=2, kill=1)
    survivor = [e for e in result['survivors'] if e['pid'] == 55][0]
    assert survivor['adopted'] is True and survivor['state'] == 'disk-sleep'
    assert survivor['last_signal'] == 'SIGKILL'
    # Its kill wait is cut at grace + kill + slack, not 1 s after it appeared.
    assert 2 + 1 + _newcomers.ADOPTION_SLACK_SECONDS <= result['elapsed_seconds'] <= 2 + 1 + _newcomers.ADOPTION_SLACK_SECONDS + 0.02


def test_without_nvml_newcomers_come_from_the_proc_scan():
    world = World(term_delay=0.3)
    target = world.add(holder(10, gpus=[0]))
    polite = world.add(holder(11, gpus=[1]))
    simulate_fork_then_exit(world, 10, 55)
    dummy, result = run(world, [target, polite], nvml=False, grace=3, kill=5, poll=0.01)
    by_pid = dict((e['pid'], e) for e in result['released'])
    assert sorted(by_pid) == [10, 11, 55] and by_pid[55]['adopted'] is True
    assert [s[2] for s in world.sent if s[1] == 55] == ['SIGSTOP', 'SIGKILL']
    assert world.polls == 0 and world.scans >= 2


def test_without_nvml_a_scan_follows_the_last_exit():
    world = World(term_delay=0.0)
    target = world.add(holder(10))
    simulate_fork_then_exit(world, 10, 55)
    dummy, result = run(world, [target], nvml=False, grace=3, kill=5, poll=0.01)
    # The parent was the only target: its exit alone would have ended the run.
    assert [e['pid'] for e in result['released']] == [10, 55]


def test_without_nvml_proc_scans_are_spaced_by_their_cost():
    world = World(term_delay=2.0)
    target = world.add(holder(10))
    scan = world.device_holders

    def slow_scan():
        world.now += 0.05  # a host with many processes
        return scan()
    world.device_holders = slow_scan
    dummy, result = run(world, [target], nvml=False, grace=3, kill=5, poll=0.01)
    assert [e['pid'] for e in result['released']] == [10]
    # Every 0.05 / PROC_SCAN_SHARE = 0.25 s at most, plus the last look after the exit; not every 10 ms.
    assert 2.0 / 0.3 <= world.scans <= 2.1 / 0.25 + 2


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


# -- the loop against real child processes (signals only what the test starts) --

import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import psutil  # noqa: E402

POLITE = 'import time\nwhile True:\n    time.sleep(0.01)\n'
STUBBORN = 'import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)\n'
RESPAWNER = (
    'import subprocess, sys, time\n'
    'worker = subprocess.Popen([sys.executable, "-c", %r])\n'
    'while True:\n'
    '    if worker.poll() is not None:\n'
    '        worker = subprocess.Popen([sys.executable, "-c", %r])\n'
    '    time.sleep(0.01)\n'
) % (POLITE, POLITE)
FORKER = (
    'import os, signal, subprocess, sys, time\n'
    'signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
    'children = []\n'
    'while True:\n'
    '    children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))\n'
    '    time.sleep(0.02)\n'
)


@pytest.fixture
def spawned():
    procs = []

    def spawn(code):
        proc = subprocess.Popen([sys.executable, '-c', code])
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            # Its children too (a respawner's worker), after it so that none is respawned.
            try:
                children = psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                children = []
            proc.kill()
            for child in children:
                try:
                    child.kill()
                except psutil.NoSuchProcess:
                    pass
        proc.wait()


def real_holder(pid, **extra):
    proc = psutil.Process(pid)
    return holder(pid, ppid=proc.ppid(), create_time=proc.create_time(), user=proc.username(),
                  uid=proc.uids().real, name=proc.name(), title=' '.join(proc.cmdline())[:40], **extra)


def sigterm_ignored(pid):
    """Whether SIGTERM (bit 14 of SigIgn in /proc/PID/status) is ignored by pid."""
    with open('/proc/%d/status' % pid) as handle:
        for line in handle:
            if line.startswith('SigIgn:'):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def wait_for(predicate, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.01)
    raise AssertionError('condition not met in %s s' % timeout)


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def real_run(holders, **kwargs):
    scope = build_scope([0], own_pids=_proctree.self_and_ancestors())
    plan = plan_release(holders, scope, processes=_prober.parent_processes(holders))
    lines = []
    escalation = Escalation(plan, parse_ladder(None, kwargs.get('grace', 5), kwargs.get('kill', 5)),
                            nvml=None, log=lines.append, poll_interval=0.02,
                            known_pids=[h['pid'] for h in holders])
    return plan, escalation.run(), lines


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


def test_real_respawning_supervisor_is_frozen_and_killed(spawned):
    supervisor = spawned(RESPAWNER)
    worker = wait_for(lambda: psutil.Process(supervisor.pid).children())[0]
    holders = [real_holder(worker.pid)]
    plan, result, lines = real_run(holders)
    assert [s['pid'] for s in plan.supervisors] == [supervisor.pid]
    assert result['supervisors'][0]['outcome'] == 'frozen and killed'
    assert supervisor.wait(2) == -signal.SIGKILL
    assert [e['pid'] for e in result['released']] == [worker.pid]
    time.sleep(0.1)
    assert not alive(worker.pid)


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


# -- a real holder that answers SIGTERM by forking a new holder and exiting ---------

from ansible_collections.gpuops.reclaim.plugins.module_utils import _nvml  # noqa: E402

FORK_THEN_EXIT = r'''
import os, signal, sys, time
claims, generations = sys.argv[1], int(sys.argv[2])
handles = [os.open(path, os.O_RDONLY) for path in sys.argv[3:]]
state = {'generation': 0}


def claim():
    with open(os.path.join(claims, str(os.getpid())), 'w') as handle:
        handle.write('20480\n')


def on_term(signum, frame):
    if state['generation'] < generations and os.fork() == 0:
        # The new holder: same open device nodes, its own claim, ppid soon 1.
        state['generation'] += 1
        claim()
        return
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
claim()
sys.stdout.write('ready\n')
sys.stdout.flush()
while True:
    time.sleep(0.01)
'''


def claimed(claims):
    """PIDs with a claim that are alive and not zombies: what the stand-in NVML lists."""
    pids = []
    for name in os.listdir(claims):
        try:
            if psutil.Process(int(name)).status() != psutil.STATUS_ZOMBIE:
                pids.append(int(name))
        except psutil.NoSuchProcess:
            continue
    return sorted(pids)


class ClaimedProcesses:
    """``FakeNvml.processes`` read live: GPU 0's compute list is the claimed PIDs."""

    def __init__(self, claims):
        self.claims = claims

    def get(self, key, default=None):
        if key == (0, 'compute'):
            return [(pid, 20480) for pid in claimed(self.claims)]
        return default if default is not None else []


class ClaimedGpu(dict):
    """A FakeNvml GPU whose used memory is that of its live claims."""

    def __init__(self, gpu, claims):
        dict.__init__(self, gpu)
        self.claims = claims

    def get(self, key, default=None):
        if key == 'used_mib':
            return 20480 * len(claimed(self.claims))
        return dict.get(self, key, default)


@pytest.fixture
def fork_then_exit(tmp_path, fake_dev):
    """Start a holder of GPU 0 that forks on SIGTERM; every generation is killed afterwards."""
    claims = str(tmp_path / 'claims')
    os.mkdir(claims)
    started = []

    def start(generations=3):
        proc = subprocess.Popen([sys.executable, '-c', FORK_THEN_EXIT, claims, str(generations),
                                 os.path.join(fake_dev, 'nvidia0'), os.path.join(fake_dev, 'nvidia-uvm')],
                                stdout=subprocess.PIPE)
        started.append(proc)
        assert proc.stdout.readline() == b'ready\n'
        return proc, claims

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
    for name in os.listdir(claims):  # the generations this test started, by their claims
        try:
            child = psutil.Process(int(name))
            if claims in ' '.join(child.cmdline()):
                child.kill()
        except psutil.Error:
            continue


def fork_run(holders, nvml=None):
    scope = build_scope([0], own_pids=_proctree.self_and_ancestors())
    plan = plan_release(holders, scope, processes=_prober.parent_processes(holders))
    lines = []
    escalation = Escalation(plan, parse_ladder(None, 5, 5), nvml=nvml, log=lines.append, poll_interval=0.02,
                            known_pids=[h['pid'] for h in holders], baseline_mib=_plan.baseline_memory(holders, plan))
    started = time.monotonic()
    result = escalation.run()
    return result, lines, time.monotonic() - started


def check_fork_then_exit(parent, claims, result, lines, seconds):
    assert parent.wait(2) == 0  # it exited by itself, after forking
    generations = [int(name) for name in os.listdir(claims) if int(name) != parent.pid]
    assert len(generations) == 1, 'the new holder gets no SIGTERM, so it never forks again'
    child = generations[0]
    by_pid = dict((e['pid'], e) for e in result['released'])
    assert sorted(by_pid) == sorted([parent.pid, child]), result
    assert by_pid[parent.pid]['last_signal'] == 'SIGTERM' and by_pid[parent.pid]['adopted'] is False
    assert by_pid[child]['adopted'] is True
    assert by_pid[child]['ppid'] != parent.pid  # reparented: its ancestry is lost
    assert by_pid[child]['last_signal'] == 'SIGKILL'
    assert [step['signal'] for step in by_pid[child]['skipped_steps']] == ['SIGTERM']
    assert result['survivors'] == [] and result['stuck_gpus'] == []
    assert seconds < 1.0, 'no grace spent on the new holder'
    wait_for(lambda: not alive(child))
    assert [line for line in lines if line.startswith('pid %d (' % child) and 'during the release' in line]
    assert 'sent SIGKILL to pid %d' % child in '\n'.join(lines)


def test_real_fork_then_exit_child_is_adopted_through_nvml(fork_then_exit, fake_nvml_factory):
    parent, claims = fork_then_exit()
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(1))
    fake.processes = ClaimedProcesses(claims)
    fake.gpus[0] = ClaimedGpu(fake.gpus[0], claims)
    session = _nvml.NvmlSession(timeout=5, nvml_module=fake)
    try:
        assert session.poll([0])[0] == {'memory_used_mib': 20480, 'pids': set([parent.pid])}
        result, lines, seconds = fork_run([real_holder(parent.pid)], nvml=session)
    finally:
        session.close()
    assert result['nvml_used'] is True and result['memory_after'] == {0: 0}
    check_fork_then_exit(parent, claims, result, lines, seconds)


def test_real_fork_then_exit_child_is_adopted_through_the_proc_scan(fork_then_exit):
    parent, claims = fork_then_exit()
    result, lines, seconds = fork_run([real_holder(parent.pid)], nvml=None)
    assert result['nvml_used'] is False
    check_fork_then_exit(parent, claims, result, lines, seconds)


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


# -- a newcomer's PID reused between the listing and its description ---------

def test_a_newcomer_started_after_the_listing_is_a_reused_pid_and_left_alone():
    world = World(term_delay=0.3)
    target = world.add(holder(1))

    def fork():
        world.add(holder(55, gpus=[0], create_time=77.0), parent=1, ignores_term=True)

    world.procs[1]['forks_on_term'] = fork
    # NVML listed PID 55; by the time it is described, another process has it.
    world.listing_mark = lambda: 1000.0
    world.born_after = lambda pid, mark: pid == 55
    dummy, result = run(world, [target])
    assert 55 not in [entry['pid'] for entry in result['released'] + result['survivors']]
    assert (55, 'SIGKILL') not in [sent[1:] for sent in world.sent]
    assert any('pid 55 was listed as a new holder, but the process now behind it started after the listing'
               in warning for warning in result['warnings'])


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


# -- sources: parents frozen first; nothing frozen outlives the run -------------

def add_parent(world, pid, create_time=600.0):
    world.procs[pid] = {'record': {}, 'exit_at': None, 'exited': False, 'state': 'sleeping',
                        'ignores_term': False, 'unkillable': False, 'forks_on_term': None, 'ppid': 1,
                        'create_time': create_time}


def stopped_pids(world):
    return sorted(pid for pid, proc in world.procs.items() if proc['state'] == 'stopped' and not proc['exited'])


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
