# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The guardian, for real: a stand-in module process freezes a process this
test started, then dies in each way a module can die; the frozen process must
run again within a second."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import guardian as _guardian
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.escalation import Escalation
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import parse_ladder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope, plan_release

MODULE = r'''
import signal, sys, time
import psutil
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.guardian import FreezeLedger
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.identity import ProcessRef, signal_process

def send(ref, signum):
    return signal_process(ref, signum)

pid, end = int(sys.argv[1]), sys.argv[2]
ledger = FreezeLedger()
ref = ProcessRef(pid, psutil.Process(pid).create_time())
assert ledger.signal(ref, signal.SIGSTOP, send) == "sent"
sys.stdout.write("%d\n" % ledger.process.pid)
sys.stdout.flush()
if end == "raise":
    raise RuntimeError("the module failed")
if end == "done":
    assert ledger.signal(ref, signal.SIGCONT, send) == "sent"
    ledger.close()
    sys.exit(0)
time.sleep(60)
'''


def state(pid):
    try:
        with open('/proc/%d/stat' % pid) as handle:
            return handle.read().rpartition(')')[2].split()[0]
    except OSError:
        return None


def wait_for(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def sleeper():
    """A process of this test's own, to be frozen; killed afterwards."""
    child = subprocess.Popen(['sleep', '60'])
    assert wait_for(lambda: state(child.pid) == 'S', 2.0)
    yield child
    child.kill()
    child.wait()


def start_module(target, end, prefix=()):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    module = subprocess.Popen(list(prefix) + [sys.executable, '-c', MODULE, str(target.pid), end],
                              stdout=subprocess.PIPE, env=env, start_new_session=True)
    guardian = int(module.stdout.readline())
    if end != 'done':
        assert wait_for(lambda: state(target.pid) == 'T', 1.0)
    return module, guardian


def kill_by_signal(module, signum):
    module.send_signal(signum)


def kill_group(module, signum):
    # As Ansible's async_wrapper does on timeout: the whole process group.
    os.killpg(module.pid, signum)


@pytest.mark.parametrize('how', ['SIGKILL', 'SIGTERM', 'killpg'])
def test_the_module_killed_mid_freeze_leaves_nothing_stopped(sleeper, how):
    module, guardian = start_module(sleeper, 'wait')
    if how == 'killpg':
        kill_group(module, signal.SIGKILL)
    else:
        kill_by_signal(module, getattr(signal, how))
    module.wait()
    died = time.monotonic()
    assert wait_for(lambda: state(sleeper.pid) == 'S', 1.0)
    assert time.monotonic() - died < 1.0
    assert wait_for(lambda: state(guardian) in (None, 'Z'), 2.0)
    module.stdout.close()


def test_an_exception_in_the_module_leaves_nothing_stopped(sleeper):
    module, guardian = start_module(sleeper, 'raise')
    assert module.wait() == 1
    assert wait_for(lambda: state(sleeper.pid) == 'S', 1.0)
    module.stdout.close()


def test_the_module_killed_at_its_deadline_leaves_nothing_stopped(sleeper):
    module, guardian = start_module(sleeper, 'wait', prefix=['timeout', '--signal=KILL', '1'])
    started = time.monotonic()
    module.wait()
    assert time.monotonic() - started < 2.0
    assert wait_for(lambda: state(sleeper.pid) == 'S', 1.0)
    module.stdout.close()


def test_a_normal_end_dismisses_the_guardian(sleeper):
    module, guardian = start_module(sleeper, 'done')
    assert module.wait() == 0
    # Just continued, the sleeper may still be running on its way back to sleep: never stopped.
    assert state(sleeper.pid) != 'T'
    assert wait_for(lambda: state(sleeper.pid) == 'S', 1.0)
    assert wait_for(lambda: state(guardian) in (None, 'Z'), 2.0)
    module.stdout.close()


def test_the_guardian_thaws_only_the_same_process_still_stopped(sleeper):
    """A recorded PID whose process is not stopped, or whose start time differs, is left alone."""
    other = subprocess.Popen(['sleep', '60'])
    assert wait_for(lambda: state(other.pid) == 'S', 2.0)
    try:
        os.kill(other.pid, signal.SIGSTOP)
        assert wait_for(lambda: state(other.pid) == 'T', 1.0)
        guardian = subprocess.Popen([sys.executable, '-c', _guardian.GUARDIAN_CODE, _guardian.GUARDIAN_NAME, str(os.getpid())],
                                    stdin=subprocess.PIPE, start_new_session=True)
        start = _guardian.start_time(other.pid)
        # Recorded with another start time (a reused PID), and a running process recorded as stopped.
        records = (other.pid, start + 1, sleeper.pid, _guardian.start_time(sleeper.pid))
        guardian.stdin.write(b'stop %d %d\nstop %d %d\n' % records)
        guardian.stdin.close()  # the pipe ends without "done": as if this process had died
        assert guardian.wait(timeout=5) == 0
        assert state(other.pid) == 'T' and state(sleeper.pid) == 'S'
    finally:
        other.kill()
        other.wait()


def test_the_ledger_sends_only_stop_and_continue():
    ledger = _guardian.FreezeLedger(guardian=False)
    with pytest.raises(ValueError, match='SIGSTOP and SIGCONT only'):
        ledger.signal(None, signal.SIGKILL, lambda ref, signum: 'sent')


class StandIn:
    """Signals that only record, and a process that does nothing."""

    def __init__(self):
        self.sent = []

    def signaller(self, ref, signum, describe=''):
        self.sent.append((ref.pid, signal.Signals(signum).name))
        return 'sent'

    def status(self, ref):
        return 'sleeping'

    def ignored_signals(self, pid):
        return set()

    def descendants(self, pid):
        return []

    def wchan(self, pid):
        return None


def test_an_exception_in_the_loop_thaws_what_it_froze(monkeypatch):
    record = {'pid': 4242, 'ppid': 1, 'uid': 0, 'user': 'root', 'name': 'python3', 'title': 'worker',
              'exe': '/usr/bin/python3', 'create_time': 1000.0, 'state': 'sleeping', 'gpus': [0],
              'gpu_memory_mib': {'0': 1000}, 'memory_mib': 1000, 'kind': 'compute', 'protected': False,
              'is_self': False, 'systemd_unit': None, 'container': None}
    world = StandIn()
    plan = plan_release([record], build_scope([0]))
    escalation = Escalation(plan, parse_ladder([{'action': 'freeze'}, {'signal': 'SIGKILL', 'wait': 5}]),
                            prober=world, signaller=world.signaller, poll_interval=0.01)

    def failing_kill(target, signum):
        raise RuntimeError('the kill step failed')
    # Between the freeze and the kill, something fails.
    monkeypatch.setattr(escalation.trees, 'kill', failing_kill)
    with pytest.raises(RuntimeError, match='the kill step failed'):
        escalation.run()
    assert world.sent == [(4242, 'SIGSTOP'), (4242, 'SIGCONT')]
    assert escalation.ledger.frozen == {}


def test_under_a_pids_limit_the_freeze_still_happens_and_says_it_has_no_guardian(run_under_pids_limit, sleeper):
    setup = ('import signal, psutil\n'
             'from ansible_collections.gpuops.reclaim.plugins.module_utils._release.guardian import FreezeLedger\n'
             'from ansible_collections.gpuops.reclaim.plugins.module_utils._release.identity import ProcessRef, '
             'signal_process\n')
    code = r'''
ledger = FreezeLedger()
ref = ProcessRef(%d, psutil.Process(%d).create_time())
send = lambda ref, signum: signal_process(ref, signum)
stopped = ledger.signal(ref, signal.SIGSTOP, send)
state = open("/proc/%d/stat").read().rpartition(")")[2].split()[0]
thawed = ledger.signal(ref, signal.SIGCONT, send)
ledger.close()
print(json.dumps({"stopped": stopped, "state": state, "thawed": thawed, "warning": ledger.warning,
                  "guardian": ledger.process is not None}))
''' % (sleeper.pid, sleeper.pid, sleeper.pid)
    result = run_under_pids_limit(setup, code)
    assert result['stopped'] == 'sent' and result['thawed'] == 'sent' and result['guardian'] is False
    assert result['warning'].startswith('no guardian could be started to thaw frozen processes if this module dies')
    assert wait_for(lambda: state(sleeper.pid) == 'S', 1.0)
