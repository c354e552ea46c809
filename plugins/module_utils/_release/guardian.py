# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Nothing the module freezes outlives it.

The release freezes (SIGSTOP) supervisors and process trees so that nothing
forks or respawns while it kills. If the module dies in between (SIGKILL from
an operator or the OOM killer, SIGTERM, Ansible's ``async_wrapper`` killing
the job's process group on timeout), nothing in the module runs again to
thaw them, and they would stay stopped for good.

Every SIGSTOP and SIGCONT therefore goes through ``FreezeLedger.signal``:

* before the first SIGSTOP it starts a **guardian**, a small Python process
  in a session of its own (so a signal to the module's process group does
  not reach it), whose standard input is a pipe from the module;
* before each SIGSTOP it writes the process's PID and start time (field 22
  of ``/proc/PID/stat``) to that pipe; after a SIGCONT, or a SIGSTOP that was
  not delivered, it writes that the process needs no thaw any more;
* at a normal end, ``close`` writes ``done`` and the guardian exits.

The guardian waits for the pipe to reach its end, or for the module to exit
(a pidfd, where the kernel has one). If that happens before ``done``, the
module died: the guardian sends SIGCONT to every recorded process that is
still the same process (same start time) and still stopped, then exits. A
PID that now belongs to another process, or a process that is not stopped,
is left alone.

The guardian's code is a string run with ``python -c`` (its first argument
is ``gpuops-reclaim-guardian``, the second the module's PID): it needs nothing
from the collection, whose files the module's temporary folder may lose when
the module dies.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess
import sys

SENT = 'sent'
# The guardian's first argument, so that an operator can tell it in ps.
GUARDIAN_NAME = 'gpuops-reclaim-guardian'

GUARDIAN_CODE = r'''
import os, select, signal, sys

def identity(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rpartition(")")[2].split()
    except (OSError, ValueError):
        return None, None
    return int(fields[19]), fields[0]

def thaw(pid, start):
    try:
        pidfd = os.pidfd_open(pid)
    except AttributeError:
        pidfd = None
    except OSError:
        return
    try:
        now, state = identity(pid)
        if now != start or state != "T":
            return
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGCONT)
        else:
            os.kill(pid, signal.SIGCONT)
    except OSError:
        pass
    finally:
        if pidfd is not None:
            os.close(pidfd)

def main(watched):
    try:
        module = os.pidfd_open(watched)
    except (AttributeError, OSError):
        module = None
    frozen, pending = {}, b""
    open_pipe = True
    while open_pipe:
        waiting = [0] + ([module] if module is not None else [])
        ready = select.select(waiting, [], [])[0]
        if 0 not in ready:
            # The module exited; whatever it wrote is in the pipe already.
            ready = select.select([0], [], [], 0)[0]
            if 0 not in ready:
                break
        chunk = os.read(0, 65536)
        if not chunk:
            break
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            words = line.split()
            if words[:1] == [b"stop"]:
                frozen[int(words[1])] = int(words[2])
            elif words[:1] == [b"thawed"]:
                frozen.pop(int(words[1]), None)
            elif words[:1] == [b"done"]:
                return 0
    for pid, start in sorted(frozen.items()):
        thaw(pid, start)
    return 0

sys.exit(main(int(sys.argv[2])))
'''


def start_time(pid, proc_root='/proc'):
    """Field 22 of ``/proc/PID/stat`` (clock ticks since boot), or None when unreadable."""
    try:
        with open('%s/%d/stat' % (proc_root, pid)) as handle:
            return int(handle.read().rpartition(')')[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


class FreezeLedger:
    """Every process this run stopped and has not thawed yet, kept by a guardian as well.

    ``signal(ref, signum, send)`` is the one way to send SIGSTOP or SIGCONT:
    ``send(ref, signum)`` delivers it and returns an ``_release.identity`` outcome.
    With ``guardian=False`` (unit tests with stand-in processes) the ledger
    only keeps its own list.
    """

    def __init__(self, guardian=True, python=None, watched_pid=None):
        self.use_guardian = guardian
        self.python = python or sys.executable
        self.watched_pid = os.getpid() if watched_pid is None else watched_pid
        self.frozen = {}
        self.process = None
        self.warning = None

    def _start(self):
        if self.process is not None or not self.use_guardian:
            return
        try:
            with open(os.devnull, 'r+b') as devnull:
                # The guardian outlives each call: a child that reads its orders on a pipe
                # for the module's whole run, which run_command (run, wait, return) cannot be.
                self.process = subprocess.Popen(  # pylint: disable=ansible-bad-function
                    [self.python, '-c', GUARDIAN_CODE, GUARDIAN_NAME, str(self.watched_pid)],
                    stdin=subprocess.PIPE, stdout=devnull, stderr=devnull, close_fds=True,
                    start_new_session=True)
        except OSError as exc:
            # A fork bomb is what the freeze is for: freeze without a guardian
            # rather than not at all, and say so.
            self.use_guardian = False
            self.warning = ('no guardian could be started to thaw frozen processes if this module dies (%s); '
                            'they are thawed or killed by the module itself' % exc)

    def _tell(self, line):
        if self.process is None:
            return
        try:
            self.process.stdin.write(line.encode('ascii') + b'\n')
            self.process.stdin.flush()
        except (OSError, ValueError) as exc:
            self.warning = 'the guardian that thaws frozen processes if this module dies stopped (%s)' % exc

    def signal(self, ref, signum, send):
        """Send SIGSTOP or SIGCONT to ``ref`` through ``send``, recording it first."""
        if signum == signal.SIGSTOP:
            self._start()
            start = start_time(ref.pid) if self.use_guardian else 0
            if start is None:
                return send(ref, signum)  # it is gone; send says so
            self.frozen[ref.pid] = ref
            self._tell('stop %d %d' % (ref.pid, start))
            outcome = send(ref, signum)
            if outcome != SENT:
                self.frozen.pop(ref.pid, None)
                self._tell('thawed %d' % ref.pid)
            return outcome
        if signum == signal.SIGCONT:
            outcome = send(ref, signum)
            self.frozen.pop(ref.pid, None)
            self._tell('thawed %d' % ref.pid)
            return outcome
        raise ValueError('the ledger sends SIGSTOP and SIGCONT only; got %r' % (signum,))

    def killed(self, ref):
        """``ref`` was sent SIGKILL: it needs no thaw from this run any more."""
        if self.frozen.pop(ref.pid, None) is not None:
            self._tell('thawed %d' % ref.pid)

    def close(self):
        """A normal end: the guardian exits without touching anything."""
        if self.process is None:
            return
        self._tell('done')
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
