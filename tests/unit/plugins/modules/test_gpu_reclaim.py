# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest


from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import module_harness as _discovery
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import reclaim as _reclaim_flow
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import escalation as _escalation
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import identity as _identity
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import prober as _prober
from ansible_collections.gpuops.reclaim.plugins.modules import gpu_reclaim


@pytest.fixture
def run_module(module_runner):
    return module_runner(gpu_reclaim)


@pytest.fixture
def two_gpus(monkeypatch, fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(2, used_mib=0))
    monkeypatch.setattr(_nvml, 'pynvml', fake)
    return fake


@pytest.fixture(autouse=True)
def fake_dev_discovery(monkeypatch, fake_dev, point_discovery):
    """Every test looks at stand-in device nodes only, never at the host's."""
    point_discovery(gpu_reclaim)
    # The release's own /proc scan for holders that appear while it waits, too.
    monkeypatch.setattr(_prober, 'DEV_DIR', fake_dev)
    return fake_dev


@pytest.fixture
def signals(monkeypatch):
    """Record every signal the module asks for (they are still delivered)."""
    sent = []
    real = _identity.signal_process

    def spy(ref, signum, log=None, describe=''):
        outcome = real(ref, signum, log=log, describe=describe)
        sent.append((ref.pid, _identity.signal_name(signum), outcome))
        return outcome

    monkeypatch.setattr(_escalation, 'signal_process', spy)
    return sent


@pytest.mark.parametrize('args, message', [
    ({'gpus': ['7']}, "gpus[0]: no GPU matches '7'; GPUs on this host: 0 (GPU-"),
    ({'ladder': []}, 'ladder: must be a non-empty list of steps; got: []'),
    ({'ladder': [{'signal': 'SIGTERM'}, {'signal': 'SIGFOO'}]}, "ladder[1].signal: unknown signal 'SIGFOO'"),
    ({'ladder': [{'signal': 'SIGKILL', 'wait': -3}]},
     'ladder[0].wait: must be a number of seconds from 0 to 3600; got: -3'),
    ({'grace_seconds': -1}, 'grace_seconds: must be a number of seconds from 0 to 3600; got: -1.0'),
    ({'kill_seconds': 3601}, 'kill_seconds: must be a number of seconds from 0 to 3600; got: 3601.0'),
    ({'poll_interval': 0}, 'poll_interval: must be a number of seconds from 0.005 to 5; got: 0.0'),
    ({'match': '(VLLM'}, "match: invalid regular expression '(VLLM'"),
    ({'users': ['']}, "users[0]: must not be empty; got: ''"),
    ({'kinds': ['monitor']}, 'value of kinds must be one or more of: compute, client. Got no match for: monitor'),
    ({'on_shared_holder': 'ask'}, 'value of on_shared_holder must be one of: release, fail, got: ask'),
    ({'nvml_timeout': 0}, 'nvml_timeout must be greater than 0 and at most 600 seconds; got: 0.0'),
    # Ansible's float type would read true as one second.
    ({'grace_seconds': True}, 'grace_seconds: must be a number of seconds, not a boolean; got: True'),
    ({'kill_seconds': False}, 'kill_seconds: must be a number of seconds, not a boolean; got: False'),
    ({'poll_interval': True}, 'poll_interval: must be a number of seconds, not a boolean; got: True'),
    ({'nvml_timeout': True}, 'nvml_timeout: must be a number of seconds, not a boolean; got: True'),
    ({'grace_seconds': 'ten'}, "grace_seconds: must be a number of seconds; got: 'ten'"),
    ({'grace_seconds': 'nan'}, "grace_seconds: must be a finite number of seconds; got: 'nan'"),
    ({'kinds': []}, 'kinds: must name at least one of compute, client; got: []'),
])
def test_bad_input_fails_before_anything_is_signalled(run_module, two_gpus, signals, args, message):
    result = run_module(args)
    assert result['failed']
    assert result['msg'].startswith(message), result['msg']
    assert signals == []


def test_seconds_given_as_text_are_numbers(run_module, two_gpus, signals):
    result = run_module({'grace_seconds': '2.5', 'kill_seconds': 3, 'poll_interval': '0.1', 'nvml_timeout': '5'})
    assert 'failed' not in result, result['msg']


def test_a_bool_for_seconds_signals_nothing(run_module, no_library, fake_dev_discovery, spawn_holder, signals):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    result = run_module({'grace_seconds': True})
    assert result['failed'] and 'grace_seconds' in result['msg']
    assert signals == [] and alive(holder)


def test_filters_that_name_nothing_here_are_warned_about(run_module, no_library, fake_dev_discovery, spawn_holder,
                                                         signals):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    result = run_module({'users': ['nosuchuser-gpuops', 'root', '4242'], 'containers': ['0fabcdef0123']})
    assert 'failed' not in result, result['msg']
    assert result['filter_warnings'] == [
        'users: nosuchuser-gpuops is not a user on this host; no holder can match it',
        'containers: 0fabcdef0123 matches no container that a process on this host runs in; no holder can match it',
    ]
    assert result['released'] == [] and signals == [] and alive(holder)


def test_filters_that_name_something_are_not_warned_about(run_module, no_library, signals):
    result = run_module({'users': ['root']})
    assert result['filter_warnings'] == []


def test_missing_psutil_is_reported(run_module, monkeypatch):
    monkeypatch.setattr(_discovery, 'HAS_PSUTIL', False)
    result = run_module({})
    assert result['failed'] and 'Failed to import the required Python library (psutil)' in result['msg']


def test_require_nvml_fails_without_the_library(run_module, no_library, signals):
    result = run_module({'require_nvml': True})
    assert result['failed'] and result['msg'].startswith('NVML cannot be used and require_nvml is true')
    assert signals == []


def test_nothing_to_do_is_not_changed(run_module, two_gpus, signals):
    result = run_module({})
    assert result['changed'] is False and 'failed' not in result
    assert result['released'] == [] and result['survivors'] == [] and result['steps'] == []
    assert [g['index'] for g in result['gpus']] == [0, 1]
    assert result['gpus'][0]['memory_used_mib_before'] == result['gpus'][0]['memory_used_mib_after'] == 0
    assert signals == []


def alive(proc):
    return proc.poll() is None


def test_check_mode_then_real_run_then_idempotent(run_module, no_library, fake_dev_discovery, spawn_holder, signals):
    polite = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'),
                           os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    stubborn = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia1'),
                             os.path.join(fake_dev_discovery, 'nvidia-uvm')], ignore_sigterm=True)
    monitor = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0')], comm='nv-hostengine')
    elsewhere = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia3'),
                              os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    args = {'gpus': ['0', '1'], 'grace_seconds': 5, '_ansible_diff': True}

    checked = run_module(dict(args, _ansible_check_mode=True))
    assert checked['changed'] is True and signals == []
    assert sorted(e['pid'] for e in checked['released']) == sorted([polite.pid, stubborn.pid])
    assert all(e['outcome'] == 'planned' for e in checked['released'])
    assert alive(polite) and alive(stubborn)

    started = time.monotonic()
    real = run_module(args)
    assert time.monotonic() - started < 3, 'the stubborn holder must not cost the grace period'
    assert real['changed'] is True and 'failed' not in real, real['msg']
    assert sorted(e['pid'] for e in real['released']) == sorted(e['pid'] for e in checked['released'])
    by_pid = dict((e['pid'], e) for e in real['released'])
    assert by_pid[polite.pid]['last_signal'] == 'SIGTERM'
    assert by_pid[stubborn.pid]['last_signal'] == 'SIGKILL'
    assert by_pid[stubborn.pid]['skipped_steps'] == [
        {'signal': 'SIGTERM', 'reason': 'ignores SIGTERM', 'case': 'sigterm-ignored'}]
    assert polite.wait(2) == -signal.SIGTERM and stubborn.wait(2) == -signal.SIGKILL
    assert alive(monitor) and alive(elsewhere)
    assert set(pid for pid, dummy, dummy2 in signals) == set([polite.pid, stubborn.pid])
    # A true top-level 'skipped' would make Ansible show the task as skipped.
    assert 'skipped' not in real
    reasons = dict((e['pid'], e['reason']) for e in real['skipped_holders'] + real['protected'])
    assert reasons[monitor.pid] in ('kind client not selected', 'default protected executable nv-hostengine')
    assert reasons[elsewhere.pid] == 'out of scope'
    assert [line.split(' ')[1] for line in real['diff']['after']['holders']] == [str(monitor.pid)]
    assert real['msg'].startswith('released 2 holders of GPU 0, 1 in ')

    again = run_module(args)
    assert again['changed'] is False and again['released'] == []


def _prediction(result):
    """What a run says it does (or would do): the parts check mode must predict."""
    return {
        'changed': result['changed'],
        'released': sorted((e['pid'], tuple(e['descendants_killed'])) for e in result['released']),
        'supervisors': sorted(e['pid'] for e in result['supervisors']),
        'protected': sorted(e['pid'] for e in result['protected']),
        'skipped_holders': sorted(e['pid'] for e in result['skipped_holders']),
        'diff': result['diff'],
    }


def test_check_mode_predicts_the_real_run_descendants_included(run_module, no_library, fake_dev_discovery,
                                                               spawn_holder, signals):
    stubborn = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'),
                             os.path.join(fake_dev_discovery, 'nvidia-uvm')], ignore_sigterm=True, forks=2)
    tree = psutil.Process(stubborn.pid).children()
    assert len(tree) == 2
    args = {'gpus': ['0'], 'grace_seconds': 5, '_ansible_diff': True}

    checked = run_module(dict(args, _ansible_check_mode=True))
    assert signals == [] and all(child.is_running() for child in tree)
    real = run_module(args)
    assert 'failed' not in real, real['msg']

    assert _prediction(checked) == _prediction(real)
    assert checked['released'][0]['descendants_killed'] == sorted(child.pid for child in tree)
    assert checked['diff']['before']['descendants'] == [
        'pid %d, descendant of pid %d' % (child.pid, stubborn.pid) for child in sorted(tree, key=lambda c: c.pid)]
    assert 'with 2 descendants' in checked['msg'] and 'with 2 descendants' in real['msg']
    assert stubborn.wait(2) == -signal.SIGKILL
    psutil.wait_procs(tree, timeout=2)
    assert not any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in tree)


def test_shared_holder_refused_before_any_signal(run_module, no_library, fake_dev_discovery, spawn_holder, signals):
    shared = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia2'),
                           os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    result = run_module({'gpus': ['0'], 'on_shared_holder': 'fail'})
    assert result['failed'] and signals == [] and alive(shared)
    assert result['msg'].startswith('on_shared_holder is fail and pid %d (' % shared.pid)
    assert result['msg'].endswith('also holds GPU 2 outside the selected GPUs 0; nothing was signalled')


def test_filters_leave_other_holders_alone(run_module, no_library, fake_dev_discovery, spawn_holder, signals):
    spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    result = run_module({'match': '^no-such-title$', '_ansible_check_mode': True})
    assert result['changed'] is False and result['released'] == []
    assert result['skipped_holders'][0]['reason'] == 'title does not match'


@pytest.fixture
def stuck_gpu0(monkeypatch, fake_nvml_factory):
    """GPU 0 keeps 20 GiB used whatever happens to its holders."""
    gpus = fake_nvml_factory.h200_gpus(2, used_mib=0)
    gpus[0]['used_mib'] = 20480
    fake = fake_nvml_factory(gpus)
    monkeypatch.setattr(_nvml, 'pynvml', fake)
    return fake


@pytest.mark.parametrize('fail_on_survivors', [True, False])
def test_stuck_context_is_reported_within_the_ladder(run_module, stuck_gpu0, fake_dev_discovery, spawn_holder, signals,
                                                     fail_on_survivors):
    child = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    started = time.monotonic()
    # NVML lists no process here, so the holder counts as a client: select clients too.
    result = run_module({'gpus': ['0'], 'grace_seconds': 0.3, 'kill_seconds': 0.3,
                         'kinds': ['compute', 'client'], 'fail_on_survivors': fail_on_survivors})
    assert time.monotonic() - started < 2
    assert child.wait(2) == -signal.SIGTERM
    assert result['changed'] is True
    assert result['stuck_gpus'] == [{'index': 0, 'memory_used_mib': 20480, 'reason': '20480 MiB used'}]
    assert result['gpus'] == [{'index': 0, 'uuid': 'GPU-00000000-0000-4000-8000-000000000000',
                               'memory_used_mib_before': 20480, 'memory_used_mib_after': 20480}]
    lines = result['msg'].split('\n')
    assert lines[1] == ('GPU 0 (GPU-00000000-0000-4000-8000-000000000000) still has 20480 MiB used after every '
                        'targeted holder is gone (stuck context); next step: a GPU reset (gpu_reclaim_allow_reset '
                        'in the role, or nvidia-smi --gpu-reset -i 0) or a reboot')
    assert bool(result.get('failed')) is fail_on_survivors


FORK_THEN_EXIT = r'''
import os, signal, sys, time
pids = sys.argv[1]
handles = [os.open(path, os.O_RDONLY) for path in sys.argv[2:]]


def on_term(signum, frame):
    if os.fork() == 0:
        # The new holder keeps the device nodes; its parent exits, so it is reparented.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with open(os.path.join(pids, str(os.getpid())), 'w'):
            pass
        return
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
sys.stdout.write('ready\n')
sys.stdout.flush()
while True:
    time.sleep(0.01)
'''


@pytest.fixture
def fork_then_exit_holder(tmp_path, fake_dev_discovery):
    """A holder of GPU 0 that answers SIGTERM by forking a new holder and exiting; both are killed afterwards.

    It leads a session of its own, which its child keeps: that is what adopts the child once it is reparented.
    """
    pids = str(tmp_path / 'pids')
    os.mkdir(pids)
    proc = subprocess.Popen([sys.executable, '-c', FORK_THEN_EXIT, pids,
                             os.path.join(fake_dev_discovery, 'nvidia0'),
                             os.path.join(fake_dev_discovery, 'nvidia-uvm')], stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout.readline() == b'ready\n'
    yield proc, pids
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    proc.stdout.close()
    for name in os.listdir(pids):
        try:
            child = psutil.Process(int(name))
            if pids in ' '.join(child.cmdline()):
                child.kill()
        except psutil.Error:
            continue


def test_holder_forked_on_sigterm_is_adopted(run_module, no_library, fork_then_exit_holder, spawn_holder,
                                             fake_dev_discovery, signals):
    parent, pids = fork_then_exit_holder
    monitor = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0')], comm='nv-hostengine')
    started = time.monotonic()
    result = run_module({'gpus': ['0'], 'grace_seconds': 5, 'kill_seconds': 5})
    assert time.monotonic() - started < 3, 'no grace for the new holder'
    assert 'failed' not in result, result['msg']
    assert parent.wait(2) == 0
    child = int(os.listdir(pids)[0])
    by_pid = dict((e['pid'], e) for e in result['released'])
    assert sorted(by_pid) == sorted([parent.pid, child])
    assert by_pid[child]['adopted'] is True and by_pid[parent.pid]['adopted'] is False
    assert by_pid[child]['last_signal'] == 'SIGKILL'
    assert (child, 'SIGTERM', 'sent') not in signals and (child, 'SIGKILL', 'sent') in signals
    assert monitor.poll() is None
    assert result['msg'].startswith('released 2 holders of GPU 0 in ')


def test_only_if_busy_on_free_gpus_does_nothing(run_module, two_gpus, signals):
    result = run_module({'only_if_busy': True})
    assert result['free_at_start'] is True and result['changed'] is False
    assert result['before']['free'] is True and [g['index'] for g in result['before']['gpus']] == [0, 1]
    assert result['msg'] == 'nothing to release: 2 GPUs free (0, 1) at the start'
    assert result['uid'] == os.geteuid() and signals == []


def test_only_if_busy_leaves_allowed_holders_of_free_gpus_alone(run_module, two_gpus, fake_dev_discovery,
                                                                spawn_holder, signals, monkeypatch,
                                                                fake_nvml_factory):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'),
                           os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    two_gpus.gpus[0]['used_mib'] = 4096
    two_gpus.processes[(0, 'compute')] = [(holder.pid, 4096)]
    args = {'gpus': ['0'], 'only_if_busy': True, 'allow': [str(holder.pid)]}
    result = run_module(args)
    assert result['free_at_start'] is True and result['released'] == [] and result['changed'] is False
    assert result['before']['gpus'][0]['allowed_pids'] == [holder.pid]
    assert signals == [] and alive(holder)
    # Not allowed, the same holder makes GPU 0 busy: it is planned for release.
    busy = run_module({'gpus': ['0'], 'only_if_busy': True, '_ansible_check_mode': True})
    assert busy['free_at_start'] is False and busy['changed'] is True
    assert busy['before']['gpus'][0]['holder_pids'] == [holder.pid]
    assert busy['before']['msg'].startswith('GPU 0 (GPU-0000\u2026) busy: 4096 MiB used; holders: pid %d ' % holder.pid)
    assert [e['pid'] for e in busy['released']] == [holder.pid]
    # Free by /proc alone proves nothing: without NVML the release goes on, and releases it.
    without = fake_nvml_factory(())
    without.init_error = without.NVMLError_LibraryNotFound()
    monkeypatch.setattr(_nvml, 'pynvml', without)
    released = run_module(dict(args, grace_seconds=5))
    assert released['nvml_available'] is False and released['before']['free'] is True
    assert released['before']['nvml_available'] is False and result['before']['nvml_available'] is True
    assert released['free_at_start'] is False and [e['pid'] for e in released['released']] == [holder.pid]
    assert holder.wait(2) == -signal.SIGTERM and signals and signals[0][0] == holder.pid


def test_without_only_if_busy_there_is_no_before(run_module, two_gpus, signals):
    result = run_module({})
    assert result['free_at_start'] is None and 'before' not in result


def test_require_root_fails_before_anything_without_root(run_module, no_library, fake_dev_discovery, spawn_holder,
                                                         signals, monkeypatch):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'),
                           os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    result = run_module({'require_root': True, 'only_if_busy': True})
    assert result['failed'] and result['uid'] == 1000
    assert result['msg'] == 'require_root: the module runs as uid 1000, not root; nothing was looked at or signalled'
    assert signals == [] and alive(holder)


def test_uid_comes_with_a_failure_too(run_module, monkeypatch, two_gpus):
    monkeypatch.setattr(_discovery, 'HAS_PSUTIL', False)
    assert run_module({})['uid'] == os.geteuid()
    monkeypatch.setattr(_discovery, 'HAS_PSUTIL', True)
    bad = run_module({'only_if_busy': True, 'max_used_mib': -5})
    assert bad['failed'] and bad['msg'] == 'max_used_mib: must be 0 or more; got: -5' and bad['uid'] == os.geteuid()


# Security: every bad input of the table fails the module while a real holder it could signal runs.
@pytest.mark.parametrize('args, message', [
    ({'ladder': [{'signal': 'SIGKILL'}, {'signal': 'SIGTERM'}]}, 'ladder[1]: comes after the SIGKILL of ladder[0]'),
    ({'max_used_mib': 64}, 'max_used_mib: only judges the GPUs with only_if_busy: true'),
    ({'protect': ['[']}, "protect[0]: the glob '[' opens a '[' at 0 that is never closed"),
    ({'protect': ['python3'], 'unprotect': ['python3']}, "protect[0] and unprotect[0] both name 'python3'"),
    ({'allow': ['']}, "allow[0]: must not be empty; got: ''"),
    ({'protect_units': ['']}, "protect_units[0]: must not be empty; got: ''"),
    ({'gpus': ['']}, "gpus[0]: must not be empty; got: ''"),
    ({'unprotect': ['*']}, "unprotect: ['*'] removes the protection of every default protected executable"),
])
def test_bad_input_signals_no_holder(run_module, no_library, fake_dev_discovery, spawn_holder, signals, args,
                                     message):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    result = run_module(args)
    assert result['failed'] and result['msg'].startswith(message), result['msg']
    assert signals == [] and alive(holder)


def test_unprotect_all_confirmed_lets_a_wildcard_through(run_module, two_gpus, signals):
    result = run_module({'unprotect': ['*'], 'unprotect_all_confirmed': True})
    assert 'failed' not in result, result['msg']


_LOCK_HOLDER = ('import fcntl, os, sys, time\n'
                'handle = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n'
                'fcntl.flock(handle, fcntl.LOCK_EX)\n'
                'os.write(handle, b"%d\\n" % os.getpid())\n'
                'print("ready", flush=True)\n'
                'time.sleep(float(sys.argv[2]))\n')


@pytest.fixture
def other_run(host_lock_path):
    """Another run of the release on this host: a real process holding the host lock for some seconds."""
    children = []

    def start(seconds):
        child = subprocess.Popen([sys.executable, '-c', _LOCK_HOLDER, host_lock_path, str(seconds)],
                                 stdout=subprocess.PIPE)
        children.append(child)
        assert child.stdout.readline() == b'ready\n'
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()


# Security: one run at a time per host.
@pytest.mark.skipif(os.geteuid() != 0, reason='only root takes the host lock')
def test_a_run_that_cannot_take_the_host_lock_fails_naming_the_other_run(run_module, no_library, fake_dev_discovery,
                                                                         spawn_holder, signals, other_run):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    first = other_run(30)
    result = run_module({'lock_timeout': 0.3})
    assert result['failed'] and result['lock_holder_pid'] == first.pid
    assert result['msg'].startswith('lock_timeout: another run (PID %d) has held the host lock' % first.pid)
    assert signals == [] and alive(holder)


@pytest.mark.skipif(os.geteuid() != 0, reason='only root takes the host lock')
def test_a_second_run_waits_for_the_host_lock_then_releases(run_module, no_library, fake_dev_discovery, spawn_holder,
                                                            signals, other_run):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    # Held long enough that a busy machine cannot start the module's own wait only after the other run is over.
    other_run(1.5)
    result = run_module({'lock_timeout': 10, 'grace_seconds': 2})
    assert 'failed' not in result, result['msg']
    assert result['lock_waited_seconds'] >= 0.3
    assert [entry['pid'] for entry in result['released']] == [holder.pid]


def test_check_mode_takes_no_host_lock(run_module, two_gpus, signals, other_run):
    other_run(30)
    result = run_module({'lock_timeout': 0, '_ansible_check_mode': True})
    assert 'failed' not in result and result['lock_waited_seconds'] == 0.0


@pytest.mark.parametrize('value, message', [
    (-1, 'lock_timeout: must be a number of seconds from 0 to 3600; got: -1.0'),
    (True, 'lock_timeout: must be a number of seconds, not a boolean; got: True'),
])
def test_a_bad_lock_timeout_fails_first(run_module, two_gpus, signals, value, message):
    result = run_module({'lock_timeout': value})
    assert result['failed'] and result['msg'] == message


def releasing(fake):
    """The fake NVML gives a GPU's memory back once the processes that hold it are gone, as the driver does."""
    enter = fake._enter

    def holds(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _enter(name):
        for key, entries in list(fake.processes.items()):
            fake.processes[key] = [(pid, mib) for pid, mib in entries if holds(pid)]
        for index, gpu in enumerate(fake.gpus):
            gpu['used_mib'] = sum(mib or 0 for (where, dummy), entries in fake.processes.items() if where == index
                                  for dummy2, mib in entries)
        enter(name)

    fake._enter = _enter
    return fake


def test_prove_proves_the_released_gpus_free_in_the_same_task(run_module, two_gpus, fake_dev_discovery,
                                                              spawn_holder, signals):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'),
                           os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    two_gpus.processes[(0, 'compute')] = [(holder.pid, 4096)]
    releasing(two_gpus)
    args = {'gpus': ['0'], 'grace_seconds': 5, 'prove': True, 'settle_seconds': 0.3, 'proof_timeout_seconds': 5,
            'only_if_busy': True}
    checked = run_module(dict(args, _ansible_check_mode=True))
    # Check mode releases nothing, so nothing is proven.
    assert checked['proof'] is None and checked['free_at_start'] is False and alive(holder) and signals == []
    result = run_module(args)
    assert 'failed' not in result, result['msg']
    assert [e['pid'] for e in result['released']] == [holder.pid] and holder.wait(2) == -signal.SIGTERM
    proof = result['proof']
    assert proof['free'] is True and proof['holders'] == [] and proof['settle_seconds_observed'] >= 0.3
    assert proof['nvml_available'] is True and [gpu['index'] for gpu in proof['gpus']] == [0]
    assert result['msg'].splitlines()[-1] == 'Proven free: %s' % proof['msg']
    # The release's own seconds leave the proof out.
    assert result['elapsed_seconds'] < proof['settle_seconds_observed'] + 2
    # Free now: the first look is the proof, and nothing is done.
    again = run_module(args)
    assert again['changed'] is False and again['free_at_start'] is True and again['proof'] is None


def test_prove_without_nvml_proves_nothing_and_keeps_the_release(run_module, no_library, fake_dev_discovery,
                                                                 spawn_holder, signals):
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'),
                           os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    result = run_module({'gpus': ['0'], 'grace_seconds': 5, 'prove': True, 'proof_timeout_seconds': 5})
    # Released from /proc, but only NVML's memory figures prove a GPU free.
    assert [e['pid'] for e in result['released']] == [holder.pid] and holder.wait(2) == -signal.SIGTERM
    assert result['failed'] is True and result['proof']['free'] is False
    assert result['proof']['msg'].startswith('Cannot prove the GPUs free: NVML could not be used for the release')
    assert result['msg'].splitlines()[-1] == 'Not proven free: %s' % result['proof']['msg']


def test_a_proof_that_cannot_run_keeps_the_release(run_module, two_gpus, fake_dev_discovery, spawn_holder,
                                                   signals, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError('the look went wrong')

    monkeypatch.setattr(_reclaim_flow, 'wait_free', broken)
    holder = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'),
                           os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    two_gpus.processes[(0, 'compute')] = [(holder.pid, 4096)]
    releasing(two_gpus)
    result = run_module({'gpus': ['0'], 'grace_seconds': 5, 'prove': True})
    assert [e['pid'] for e in result['released']] == [holder.pid] and holder.wait(2) == -signal.SIGTERM
    assert result['failed'] is True and result['proof']['free'] is False
    assert result['proof']['msg'] == 'the proof could not run: the look went wrong'


def test_prove_fails_at_once_on_a_holder_the_release_left_alone(run_module, two_gpus, fake_dev_discovery,
                                                                spawn_holder, signals):
    mine = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    other = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0'), os.path.join(fake_dev_discovery, 'nvidia-uvm')],
                         comm='other-job')
    two_gpus.processes[(0, 'compute')] = [(mine.pid, 4096), (other.pid, 2048)]
    releasing(two_gpus)
    started = time.monotonic()
    result = run_module({'gpus': ['0'], 'grace_seconds': 5, 'match': '^%s$' % re_title(mine), 'prove': True,
                         'proof_timeout_seconds': 30})
    assert time.monotonic() - started < 10, 'what was left alone on purpose is not waited for'
    assert result['failed'] is True and [e['pid'] for e in result['released']] == [mine.pid]
    assert result['proof']['free'] is False and [h['pid'] for h in result['proof']['holders']] == [other.pid]
    assert 'Not proven free: ' in result['msg'] and 'title does not match' in result['proof']['msg']
    assert alive(other) and set(pid for pid, dummy, dummy2 in signals) == set([mine.pid])


def test_prove_on_gpus_free_at_the_start_is_that_look(run_module, two_gpus, signals):
    result = run_module({'only_if_busy': True, 'prove': True, 'settle_seconds': 1})
    assert result['free_at_start'] is True and result['proof'] is None and 'failed' not in result
    assert signals == []


def re_title(proc):
    return re.escape(' '.join(psutil.Process(proc.pid).cmdline()))
