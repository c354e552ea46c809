# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The release loop's test harness: a simulated world (processes, NVML, clock and signals in one object),
holder records, and real child processes that only the tests start and signal.

Shared by the tests of ``_release.escalation`` and of its parts (``_release.source_parents``, ``_release.trees``, ``_release.newcomers``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import time

import psutil

from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import plan as _plan
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import prober as _prober
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import proctree as _proctree
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.escalation import Escalation
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.identity import ProcessRef
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import parse_ladder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope, plan_release


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
        # Each simulated holder leads a session and process group of its own unless told otherwise.
        'session': pid, 'pgrp': pid, 'unit_manager': None,
    }
    record.update(extra)
    return record


def process(pid, children, **extra):
    entry = {'pid': pid, 'ppid': 1, 'name': 'python3', 'title': 'python3 supervisor.py', 'user': 'root',
             'uid': 0, 'create_time': 500.0 + pid, 'systemd_unit': None, 'container': None,
             'children': list(children)}
    entry.update(extra)
    return entry


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

    def newcomer(self, pid, gpus, nvml_entries=None, own_pids=()):
        """The simulated process's record as a newcomer's: on ``gpus``, a compute process (the world's processes
        all hold nvidia-uvm), ``visible`` as ``self.visible(pid)`` says when a test sets it and NVML listed it."""
        record = self.describe(pid)
        if record is None:
            return None
        record.update(gpus=list(gpus), kind='compute', adopted=True, gpu_memory_mib={}, memory_mib=0,
                      is_self=pid in own_pids)
        visible = getattr(self, 'visible', None)
        if nvml_entries is not None and visible is not None:
            record['visible'] = visible(pid)
        return record

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


def simulate_fork_then_exit(world, parent, child_pid, gpus=(0,)):
    """On SIGTERM ``parent`` starts ``child_pid`` holding ``gpus`` and exits; the child is reparented to PID 1.

    The child keeps what a fork keeps: its parent's session, process group, unit, container and user.
    """
    def fork():
        kept = dict((key, world.procs[parent]['record'].get(key))
                    for key in ('session', 'pgrp', 'systemd_unit', 'unit_manager', 'container', 'uid', 'user'))
        world.add(holder(child_pid, gpus=gpus, create_time=500.0 + child_pid, **kept), parent=1)
        world.procs[parent]['exit_at'] = world.now
    world.procs[parent]['forks_on_term'] = fork


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


def kill_tree(proc):
    """Kill a process this test started and its children (a respawner's worker), the parent first so that none is
    respawned, then reap it."""
    if proc.poll() is None:
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
                  uid=proc.uids().real, name=proc.name(), title=' '.join(proc.cmdline())[:40],
                  session=os.getsid(pid), pgrp=os.getpgid(pid), **extra)


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


def add_parent(world, pid, create_time=600.0):
    world.procs[pid] = {'record': {}, 'exit_at': None, 'exited': False, 'state': 'sleeping',
                        'ignores_term': False, 'unkillable': False, 'forks_on_term': None, 'ppid': 1,
                        'create_time': create_time}


def stopped_pids(world):
    return sorted(pid for pid, proc in world.procs.items() if proc['state'] == 'stopped' and not proc['exited'])


class TableRunner:
    """Answers the commands a case expects, in that order; any other command fails the test."""

    def __init__(self, expected):
        self.expected = list(expected)
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        assert self.expected, 'unexpected command %s' % argv
        want, answer = self.expected.pop(0)
        assert list(argv) == want
        return answer
