# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Holders that appear during the release (``_release.newcomers``), through the loop."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys
import time

import psutil
import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import newcomers as _newcomers
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import plan as _plan
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import prober as _prober
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import proctree as _proctree
from ansible_collections.gpuops.reclaim.plugins.module_utils._proof import verdict as _proof
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import protection as _protection
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import report as _report
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.escalation import Escalation
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import parse_ladder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope, plan_release
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import (
    alive,
    holder,
    process,
    real_holder,
    run,
    simulate_fork_then_exit,
    wait_for,
    World,
)

# No test scans the host's device nodes.
pytestmark = pytest.mark.usefixtures('private_dev')


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
    # Appeared between discovery and the release, in the target's session.
    world.add(holder(55, create_time=555.0, session=10), parent=1)
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

    def names_as_facts(record):
        # The simulated world has no /proc to read the facts from: its names are taken as facts.
        return _protection.protection(record['pid'], os.path.basename(record.get('exe') or '') or None)
    plan, result = run(world, [target], scope=build_scope([0, 1], match='^VLLM::'), grace=3, kill=5,
                       protection=names_as_facts)
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
        # Something unseen in the target's session starts a new holder of GPU 0 at every poll (a fork bomb).
        pid = 1000 + len(spawned)
        spawned.append(pid)
        world.add(holder(pid, create_time=float(pid), session=10), parent=1)
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
    world.events.append((2.9, lambda: world.add(holder(55, create_time=555.0, session=10), parent=1,
                                                unkillable=True)))
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


FORK_THEN_EXIT = r'''
import os, signal, sys, time
claims, generations = sys.argv[1], int(sys.argv[2])
handles = [os.open(path, os.O_RDONLY) for path in sys.argv[3:]]
state = {'generation': 0}


def claim(pid, after=0):
    with open(os.path.join(claims, str(pid)), 'w') as handle:
        handle.write('20480 %d\n' % after)


def on_term(signum, frame):
    if state['generation'] < generations:
        # The new holder gets the memory, as a forked child keeps its parent's context, but it shows (in the
        # stand-in NVML, then by the device nodes) only once its parent is gone and it is reparented, however
        # late a busy machine runs either: the parent lets go of the nodes first, claims for the child what
        # shows once the parent is gone (the memory never reads free in between), then exits.
        for handle in handles:
            os.close(handle)
        parent = os.getpid()
        child = os.fork()
        if child == 0:
            state['generation'] += 1
            while os.getppid() == parent:
                time.sleep(0.001)
            handles[:] = [os.open(path, os.O_RDONLY) for path in sys.argv[3:]]
            return
        claim(child, after=parent)
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
claim(os.getpid())
sys.stdout.write('ready\n')
sys.stdout.flush()
while True:
    time.sleep(0.01)
'''


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def claimed(claims):
    """PIDs with a claim that are alive and not zombies, and whose claim waits for no PID that still is: what
    the stand-in NVML lists."""
    pids = []
    for name in os.listdir(claims):
        with open(os.path.join(claims, name)) as handle:
            fields = handle.read().split()
        after = int(fields[1]) if len(fields) > 1 else 0
        if _alive(int(name)) and not (after and _alive(after)):
            pids.append(int(name))
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
    """Start a holder of GPU 0 that forks on SIGTERM; every generation is killed afterwards.

    The holder leads a session of its own, as a service's worker does: its children keep that session after
    it exits, and the session reads the same in whatever PID namespace the tests run.
    """
    claims = str(tmp_path / 'claims')
    os.mkdir(claims)
    started = []

    def start(generations=3):
        proc = subprocess.Popen([sys.executable, '-c', FORK_THEN_EXIT, claims, str(generations),
                                 os.path.join(fake_dev, 'nvidia0'), os.path.join(fake_dev, 'nvidia-uvm')],
                                stdout=subprocess.PIPE, start_new_session=True)
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
        assert session.poll([0])[0] == {'memory_used_mib': 20480, 'pids': set([parent.pid]),
                                        'processes': {parent.pid: {'memory_mib': 20480, 'types': {'compute'}}}}
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


# -- adopt only what belongs to the release (security) ---------------------------------

UNIT = {'systemd_unit': 'vllm.service', 'unit_manager': 'system'}
CONTAINER = {'runtime': 'docker', 'id': 'ab' * 32}


# Each case: the target's record, then the newcomer's (it appears on the target's GPU, reparented to PID 1 unless
# it has a parent), and whether it is adopted.
@pytest.mark.parametrize('target_fields, newcomer_fields, parent, adopted', [
    # What a fork keeps: the session, the unit, the container.
    ({}, {'session': 10}, 1, True),
    (UNIT, dict(UNIT), 1, True),
    ({'container': CONTAINER}, {'container': dict(CONTAINER)}, 1, True),
    # A child of the target's tree, of the target, or of a source parent (below).
    ({}, {}, 10, True),
    # Security: a deploy started during the release by someone else: the same GPU, nothing else in common.
    ({}, {}, 1, False),
    ({}, {'session': 1}, 1, False),       # PID 1's session gathers what init started: proves nothing
    ({'session': 1}, {'session': 1}, 1, False),
    (UNIT, dict(UNIT, uid=1000, user='alice'), 1, False),  # the same unit name as another user (cron.service)
    (UNIT, dict(UNIT, unit_manager='user'), 1, False),     # a user's own unit of that name
    ({'container': CONTAINER}, {'container': {'runtime': 'docker', 'id': 'cd' * 32}}, 1, False),
])
def test_a_newcomer_is_adopted_only_when_it_belongs_to_the_release(target_fields, newcomer_fields, parent, adopted):
    world = World(term_delay=0.3)
    target = world.add(holder(10, **target_fields))
    world.events.append((0.05, lambda: world.add(holder(55, create_time=555.0, **newcomer_fields), parent=parent)))
    plan, result = run(world, [target], grace=3, kill=5)
    signalled = 55 in [sent[1] for sent in world.sent]
    released = [entry['pid'] for entry in result['released'] + result['survivors']]
    assert signalled is adopted and (55 in released) is adopted
    if not adopted:
        assert [(entry['pid'], entry['reason']) for entry in plan.skipped] == [
            (55, 'appeared during the release; ' + _newcomers.UNRELATED)]
        assert any('pid 55 (VLLM::Worker_TP55) appeared during the release and was left alone: belongs to nothing '
                   'released' in warning for warning in result['warnings'])
        # Its memory is its own: the release does not wait for it, and says the GPU is not stuck.
        assert result['stuck_gpus'] == [] and result['elapsed_seconds'] <= 0.4


def test_a_newcomer_that_descends_from_a_source_parent_is_adopted():
    world = World(term_delay=0.3)
    supervisor = world.add(process(5, [10], title='python3 supervisor.py', create_time=505.0))
    target = world.add(holder(10, ppid=5), parent=5)
    world.events.append((0.05, lambda: world.add(holder(55, create_time=555.0), parent=5)))
    plan, result = run(world, [target], grace=3, kill=5, processes={5: supervisor})
    assert 55 in [entry['pid'] for entry in result['released'] + result['survivors']]


# Security: the deploy started during a release is left alone, and the proof that follows names it.
def test_a_deploy_started_during_a_release_is_left_alone_and_the_proof_names_it():
    world = World(term_delay=0.3)
    target = world.add(holder(10, gpu_memory_mib={'0': 40960}, memory_mib=40960))
    deploy = holder(77, create_time=577.0, title='vllm serve new-model', session=77, uid=1001, user='deployer',
                    gpu_memory_mib={'0': 30720}, memory_mib=30720)
    world.events.append((0.1, lambda: world.add(deploy, parent=1)))
    plan, result = run(world, [target], grace=3, kill=5)
    assert 77 not in [sent[1] for sent in world.sent]
    assert [entry['pid'] for entry in result['released']] == [10]
    left = [entry for entry in plan.skipped if entry['pid'] == 77]
    assert left and left[0]['reason'] == 'appeared during the release; ' + _newcomers.UNRELATED
    # gpu_assert_free after the release, given what it left alone (as the role passes skipped_holders).
    gpu = {'index': 0, 'uuid': 'GPU-0', 'memory_used_mib': 30720, 'memory_total_mib': 143771,
           'holder_pids': [77]}
    verdict = _proof.evaluate([gpu], [dict(deploy, kind='compute', visible=True)],
                              left_alone=_proof.check_left_alone(plan.skipped))
    assert verdict['free'] is False and verdict['nothing_in_flight'] is True
    assert 'pid 77 vllm serve new-model' in verdict['lines'][0]
    assert ('Next step for pid 77: the release left it alone (appeared during the release; belongs to nothing '
            'released' in '\n'.join(verdict['lines']))


UNRELATED_DEPLOY = r'''
import os, sys, time
handles = [os.open(path, os.O_RDONLY) for path in sys.argv[2:]]
with open(os.path.join(sys.argv[1], str(os.getpid())), 'w') as handle:
    handle.write('20480\n')
sys.stdout.write('ready\n')
sys.stdout.flush()
time.sleep(60)
'''


def test_a_real_process_in_a_session_of_its_own_is_left_alone(fork_then_exit, fake_dev, fake_nvml_factory):
    parent, claims = fork_then_exit(generations=0)
    # The test's own deploy, started after discovery in a session of its own (setsid), holding GPU 0.
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(1))
    fake.processes = ClaimedProcesses(claims)
    fake.gpus[0] = ClaimedGpu(fake.gpus[0], claims)
    session = _nvml.NvmlSession(timeout=5, nvml_module=fake)
    holders = [real_holder(parent.pid)]
    deploy = subprocess.Popen([sys.executable, '-c', UNRELATED_DEPLOY, claims, os.path.join(fake_dev, 'nvidia0')],
                              stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert deploy.stdout.readline() == b'ready\n'
        result, lines, dummy = fork_run(holders, nvml=session)
        assert deploy.poll() is None, 'the deploy was not signalled'
        assert [entry['pid'] for entry in result['released']] == [parent.pid]
        assert any('pid %d' % deploy.pid in warning and 'belongs to nothing released' in warning
                   for warning in result['warnings'])
    finally:
        session.close()
        deploy.kill()
        deploy.wait()
        deploy.stdout.close()


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
