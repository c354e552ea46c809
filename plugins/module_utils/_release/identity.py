# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Signalling exactly the process that was discovered.

A PID is only a number: between discovery and the signal the process may
exit and the kernel may hand its PID to something else. Each signal therefore
goes through ``signal_process``, which

1. opens a pidfd for the PID where the kernel and Python have it
   (``os.pidfd_open``, Linux 5.3, Python 3.9),
2. then checks that the process behind the PID still has the ``create_time``
   seen at discovery and is not a zombie,
3. then signals through the pidfd.

A pidfd refers to one process for its whole life, so once the check passed
on the process the pidfd points to, the signal cannot reach a newcomer that
took over the PID. Without pidfd the check is done right before ``os.kill``,
which leaves only a window of microseconds.

Outcomes (strings, stable for results and tests):

- ``sent``: the signal was delivered;
- ``gone``: no process has the PID any more;
- ``reused``: the PID belongs to another process now; it was not signalled;
- ``denied``: the kernel refused (EPERM), e.g. another user's process;
- ``zombie``: the process has exited and waits for its parent to reap it;
  its resources (GPU memory included) are already released. A process whose
  thread-group leader alone has exited is no zombie: it lives in its other
  threads, and is named by their state.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import signal
from collections import namedtuple

from .._host.procfs import STATE_NAMES, live_thread_state

try:
    import psutil
    HAS_PSUTIL = True
except ImportError:  # pragma: no cover - reported by the modules
    psutil = None
    HAS_PSUTIL = False

SENT = 'sent'
GONE = 'gone'
REUSED = 'reused'
DENIED = 'denied'
ZOMBIE = 'zombie'

OUTCOMES = (SENT, GONE, REUSED, DENIED, ZOMBIE)

# psutil derives create_time from the boot time and the start time in clock
# ticks (10 ms). Records may round it, so allow a little less than one tick.
CREATE_TIME_TOLERANCE = 0.005

_HAS_PIDFD = hasattr(os, 'pidfd_open') and hasattr(signal, 'pidfd_send_signal')


class ProcessRef(namedtuple('ProcessRef', ['pid', 'create_time'])):
    """A process as discovered: its PID and psutil's ``create_time``."""

    __slots__ = ()

    @classmethod
    def from_record(cls, record):
        return cls(int(record['pid']), float(record['create_time']))


def signal_name(signum):
    """``15`` -> ``'SIGTERM'``; unknown numbers are returned as ``'signal N'``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return 'signal %d' % signum


def same_process(ref, create_time):
    return abs(float(create_time) - float(ref.create_time)) <= CREATE_TIME_TOLERANCE


def identity_status(ref):
    """psutil's status of the live process that is still ``ref``, or an outcome.

    The outcome is one of ``gone``, ``reused``, ``zombie`` (or ``denied``
    when psutil may not read the process at all).
    """
    try:
        proc = psutil.Process(ref.pid)
        create_time = proc.create_time()
        if not same_process(ref, create_time):
            return REUSED
        status = proc.status()
    except psutil.ZombieProcess:
        return _zombie_or_live_thread(ref.pid)
    except psutil.NoSuchProcess:
        return GONE
    except psutil.AccessDenied:
        return DENIED
    return _zombie_or_live_thread(ref.pid) if status == psutil.STATUS_ZOMBIE else status


def process_status(pid):
    """psutil's status of ``pid``, ``gone`` when it cannot be read, and never ``zombie`` for a process
    whose leader alone has exited (named by a live thread's state)."""
    try:
        status = psutil.Process(pid).status()
    except psutil.ZombieProcess:
        return _zombie_or_live_thread(pid)
    except Exception:  # pylint: disable=broad-except
        return 'gone'
    return _zombie_or_live_thread(pid) if status == psutil.STATUS_ZOMBIE else status


def _zombie_or_live_thread(pid):
    """``zombie``, unless only the leader has exited: a live thread keeps the
    process (and what it holds) alive, so it is named by that thread's state."""
    state = live_thread_state(pid)
    return ZOMBIE if state is None else STATE_NAMES.get(state, state)


def check_identity(ref):
    """Return ``None`` if ``ref`` is alive and still itself, else an outcome (see ``identity_status``)."""
    status = identity_status(ref)
    return status if status in OUTCOMES else None


def _open_pidfd(pid):
    """Return a pidfd, ``None`` where pidfds are unavailable, or an outcome string."""
    if not _HAS_PIDFD:
        return None
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return GONE
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL, errno.EPERM):
            # Old kernel, seccomp filter or similar: fall back to kill().
            return None
        raise


def _deliver(ref, signum):
    pidfd = _open_pidfd(ref.pid)
    if isinstance(pidfd, str):
        return pidfd
    try:
        outcome = check_identity(ref)
        if outcome is not None:
            return outcome
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(ref.pid, signum)
        except ProcessLookupError:
            return GONE
        except PermissionError:
            return DENIED
        return SENT
    finally:
        if pidfd is not None:
            os.close(pidfd)


def signal_process(ref, signum, log=None, describe=''):
    """Send ``signum`` to the process ``ref`` if, and only if, it is still that process.

    ``log`` is a callable taking one line of text (the module passes
    ``module.log`` so that every signal reaches syslog or the journal).
    ``describe`` is appended to the PID in that line, for example
    ``'(VLLM::Worker_TP5) on GPU 5'``. Returns one of ``OUTCOMES``.
    """
    outcome = _deliver(ref, signum)
    if log is not None:
        what = 'pid %d%s' % (ref.pid, (' ' + describe) if describe else '')
        name = signal_name(signum)
        if outcome == SENT:
            log('sent %s to %s' % (name, what))
        else:
            reasons = {
                GONE: 'it has exited',
                REUSED: 'the pid now belongs to another process',
                DENIED: 'permission denied',
                ZOMBIE: 'it has already exited (zombie)',
            }
            log('did not send %s to %s: %s' % (name, what, reasons[outcome]))
    return outcome
