# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal
import subprocess
import sys
import time

import psutil
import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import identity as _identity
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.identity import (
    ProcessRef,
    signal_process,
)

# A child that ignores SIGTERM, so that a delivered SIGTERM leaves it alive.
IGNORES_TERM = (
    'import signal, time\n'
    'signal.signal(signal.SIGTERM, signal.SIG_IGN)\n'
    'while True:\n'
    '    time.sleep(0.05)\n'
)


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, '-c', IGNORES_TERM])
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def ref_of(proc):
    return ProcessRef(proc.pid, psutil.Process(proc.pid).create_time())


def wait_exit(proc, timeout=5.0):
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


@pytest.fixture(params=[True, False], ids=['pidfd', 'kill'])
def pidfd_mode(request, monkeypatch):
    if request.param and not _identity._HAS_PIDFD:
        pytest.skip('no pidfd on this system')
    monkeypatch.setattr(_identity, '_HAS_PIDFD', request.param)
    return request.param


def test_sent_reaches_the_discovered_process(child, pidfd_mode):
    lines = []
    outcome = signal_process(ref_of(child), signal.SIGKILL, log=lines.append, describe='(worker) on GPU 5')
    assert outcome == 'sent'
    assert wait_exit(child)
    assert child.returncode == -signal.SIGKILL
    assert lines == ['sent SIGKILL to pid %d (worker) on GPU 5' % child.pid]


@pytest.mark.parametrize('offset', [1.0, -1.0, 0.02])
def test_reused_pid_is_never_signalled(child, pidfd_mode, offset):
    ref = ref_of(child)
    wrong = ProcessRef(ref.pid, ref.create_time + offset)
    lines = []
    assert signal_process(wrong, signal.SIGKILL, log=lines.append) == 'reused'
    time.sleep(0.1)
    assert child.poll() is None, 'the child must not have been signalled'
    assert 'another process' in lines[0]


def test_rounded_create_time_is_the_same_process(child):
    ref = ref_of(child)
    rounded = ProcessRef(ref.pid, round(ref.create_time, 3))
    assert signal_process(rounded, signal.SIGTERM) == 'sent'
    assert child.poll() is None  # it ignores SIGTERM


def test_zombie_is_not_signalled(child, pidfd_mode):
    ref = ref_of(child)
    child.kill()
    deadline = time.time() + 5
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.01)
    assert signal_process(ref, signal.SIGKILL) == 'zombie'


def test_gone(child, pidfd_mode):
    ref = ref_of(child)
    child.kill()
    child.wait()
    assert signal_process(ref, signal.SIGKILL) in ('gone', 'reused')


@pytest.mark.parametrize('use_pidfd', [True, False])
def test_denied(child, monkeypatch, use_pidfd):
    if use_pidfd and not _identity._HAS_PIDFD:
        pytest.skip('no pidfd on this system')
    monkeypatch.setattr(_identity, '_HAS_PIDFD', use_pidfd)

    def refuse(*args):
        raise PermissionError(1, 'Operation not permitted')

    monkeypatch.setattr(_identity.signal, 'pidfd_send_signal', refuse, raising=False)
    monkeypatch.setattr(_identity.os, 'kill', refuse)
    lines = []
    assert signal_process(ref_of(child), signal.SIGKILL, log=lines.append) == 'denied'
    assert lines[0].endswith('permission denied')
    assert child.poll() is None


def test_identity_checked_after_pidfd_is_open(child, monkeypatch):
    """The pidfd is opened first, the identity checked second."""
    if not _identity._HAS_PIDFD:
        pytest.skip('no pidfd on this system')
    order = []
    real_open = _identity.os.pidfd_open
    real_check = _identity.check_identity

    def spy_open(pid):
        order.append('open')
        return real_open(pid)

    def spy_check(ref):
        order.append('check')
        return real_check(ref)

    monkeypatch.setattr(_identity.os, 'pidfd_open', spy_open)
    monkeypatch.setattr(_identity, 'check_identity', spy_check)
    assert signal_process(ref_of(child), signal.SIGTERM) == 'sent'
    assert order == ['open', 'check']


def test_from_record_and_signal_name():
    assert ProcessRef.from_record({'pid': '12', 'create_time': 5}) == ProcessRef(12, 5.0)
    assert _identity.signal_name(signal.SIGKILL) == 'SIGKILL'
    assert _identity.signal_name(250) == 'signal 250'


def test_identity_status_is_the_live_status_or_what_became_of_it(child):
    ref = ref_of(child)
    assert _identity.identity_status(ref) in ('running', 'sleeping')
    assert _identity.check_identity(ref) is None
    assert _identity.identity_status(ProcessRef(child.pid, ref.create_time + 10)) == 'reused'
    child.kill()
    deadline = time.time() + 5
    while _identity.identity_status(ref) != 'zombie' and time.time() < deadline:
        time.sleep(0.01)
    assert _identity.check_identity(ref) == 'zombie'
    child.wait()
    assert _identity.identity_status(ref) == 'gone' and _identity.check_identity(ref) == 'gone'
