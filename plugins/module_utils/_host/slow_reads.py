# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Reads of another process's /proc files that can block, under one deadline.

The kernel takes the target's mmap lock to read ``/proc/PID/cmdline``,
``/proc/PID/environ`` and ``/proc/PID/maps``. When a thread of the target is stuck in the kernel
with that lock held (a CUDA process stuck in the driver is the usual case),
or a writer waits for it, every reader waits too, for as long as it lasts.
``stat``, ``status``, ``wchan``, ``fd``, ``exe`` and ``cgroup`` need no such
lock: names come from there (``comm``, the executable), never from psutil's
``name()``, which reads ``cmdline`` for 15-character names.

``read_files`` reads a batch of such files in worker threads and returns
when all are read or the deadline passed, whichever comes first. One worker
reads them in turn; when it makes no progress for ``STALL_SECONDS``, another
one takes the next file, so that one blocked file costs the others nothing
but that pause. A file still unread at the deadline is reported as such; its
worker, a daemon thread, is left waiting and cannot keep the process alive
at exit (the waits involved are killable). While that read is outstanding,
the same file is not read again: a later batch reports it unread at once,
so that polling a stuck process costs the deadline once, not at every look.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import threading
import time

from . import procfs as _procfs

# Deadline for a batch when the caller gives none (seconds).
DEFAULT_TIMEOUT = 2.0
# A worker that has finished no file for this long is presumed blocked.
STALL_SECONDS = 0.1
# A title or an environment is never longer than this in practice.
MAX_BYTES = 1 << 20

STUCK_TEXT = 'unreadable: possibly stuck in the kernel'


class TimedOut(object):
    """The marker for a file that was not read within the deadline."""

    __slots__ = ('timeout',)

    def __init__(self, timeout):
        self.timeout = timeout

    def __repr__(self):
        return 'TimedOut(%r)' % (self.timeout,)


class NoThread(RuntimeError):
    """The file was not read: no thread could be started to read it under the deadline."""


NO_THREAD_TEXT = 'not read: no thread could be started to read it under a deadline (the process limit is reached)'


def _read_whole(path):
    with open(path, 'rb') as handle:
        return handle.read(MAX_BYTES)


# Files whose read has not returned yet, from any batch of this process.
_OUTSTANDING = set()
_OUTSTANDING_LOCK = threading.Lock()


class _Batch(object):
    def __init__(self, paths, reader):
        self.paths = list(paths)
        self.reader = reader
        self.lock = threading.Lock()
        self.position = 0
        self.completed = 0
        self.results = {}
        self.finished = threading.Event()
        if not self.paths:
            self.finished.set()

    def work(self):
        while True:
            with self.lock:
                if self.position >= len(self.paths):
                    return
                path = self.paths[self.position]
                self.position += 1
            with _OUTSTANDING_LOCK:
                busy = path in _OUTSTANDING
                _OUTSTANDING.add(path)
            if busy:
                outcome = None  # a worker of an earlier batch still waits on it
            else:
                try:
                    outcome = self.reader(path)
                except Exception as exc:  # pylint: disable=broad-except
                    outcome = exc
                finally:
                    with _OUTSTANDING_LOCK:
                        _OUTSTANDING.discard(path)
            with self.lock:
                self.results[path] = outcome
                self.completed += 1
                if self.completed == len(self.paths):
                    self.finished.set()

    def start_worker(self):
        """Start one more worker; False when no thread can be started (the process limit)."""
        thread = threading.Thread(target=self.work, name='procread')
        thread.daemon = True
        try:
            thread.start()
        except RuntimeError:
            return False
        return True


def read_files(paths, timeout=DEFAULT_TIMEOUT, stall=STALL_SECONDS, reader=_read_whole, clock=time.monotonic):
    """``{path: bytes, an exception, or TimedOut}`` for each of ``paths``, within ``timeout`` seconds.

    ``reader(path)`` returns the bytes of one file (tests pass one that
    blocks); whatever it raises is returned as that path's outcome.
    """
    if timeout is None or timeout <= 0:
        raise ValueError('timeout must be greater than 0, got %r' % (timeout,))
    paths = list(paths)
    with _OUTSTANDING_LOCK:
        fresh = [path for path in paths if path not in _OUTSTANDING]
    batch = _Batch(fresh, reader)
    deadline = clock() + timeout
    can_start = bool(batch.paths) and batch.start_worker()
    seen = 0
    while can_start:
        remaining = deadline - clock()
        if remaining <= 0 or batch.finished.wait(min(stall, remaining)):
            break
        with batch.lock:
            progressed = batch.completed != seen
            seen = batch.completed
            waiting = batch.position < len(batch.paths)
        if not progressed and waiting:
            can_start = batch.start_worker()
    with batch.lock:
        results = dict(batch.results)
        started = batch.position
    for position, path in enumerate(batch.paths):
        if path not in results and position >= started and not can_start:
            # Never read in a thread, and never read here: that could block.
            results[path] = NoThread(NO_THREAD_TEXT)
    for path in paths:
        if results.get(path) is None:
            results[path] = TimedOut(timeout)
    return results


def _cmdline_path(pid, proc_root):
    return '%s/%d/cmdline' % (proc_root, pid)


def _read_per_pid(pids, path_of, timeout, reader, convert):
    """``(values, errors, stuck)``: ``convert(outcome)`` of each PID's file read in time, the ``OSError`` of
    each that could not be read, and the sorted PIDs whose read did not return within ``timeout``."""
    paths = dict((path_of(pid), pid) for pid in pids)
    values, errors, stuck = {}, {}, []
    for path, outcome in read_files(sorted(paths), timeout, reader=reader).items():
        pid = paths[path]
        if isinstance(outcome, TimedOut):
            stuck.append(pid)
        elif isinstance(outcome, Exception):
            errors[pid] = outcome
        else:
            values[pid] = convert(outcome)
    return values, errors, sorted(stuck)


def read_titles(pids, timeout=DEFAULT_TIMEOUT, proc_root=_procfs.PROC_ROOT, reader=_read_whole):
    """``(titles, errors, stuck)`` for ``pids``: their titles from ``/proc/PID/cmdline``.

    ``titles`` maps each readable PID to its title (arguments joined by
    spaces, see ``_host.procfs.parse_cmdline``); ``errors`` maps a PID whose file
    could not be opened or read to the ``OSError``; ``stuck`` is the sorted
    list of PIDs whose read did not return within ``timeout`` seconds.
    """
    return _read_per_pid(pids, lambda pid: _cmdline_path(pid, proc_root), timeout, reader, _procfs.parse_cmdline)


def read_maps(pids, prefix, timeout=DEFAULT_TIMEOUT, proc_root=_procfs.PROC_ROOT, reader=_procfs.mapped_paths):
    """``(mapped, errors, stuck)`` for ``pids``: the paths starting with ``prefix`` each has mapped.

    ``mapped`` maps each readable PID to a set of paths (``_host.procfs.mapped_paths``);
    ``errors`` and ``stuck`` are as for ``read_titles``.
    """
    return _read_per_pid(pids, lambda pid: _procfs.maps_path(pid, proc_root), timeout,
                         lambda path: reader(path, prefix), lambda paths: paths)


def read_title(pid, timeout=DEFAULT_TIMEOUT, proc_root=_procfs.PROC_ROOT, reader=_read_whole):
    """The title of one process, ``None`` when its read timed out; raises its ``OSError``."""
    titles, errors, stuck = read_titles([pid], timeout, proc_root, reader)
    if pid in errors:
        raise errors[pid]
    return titles.get(pid)


def _waiting_threads(pid, proc_root, limit=4):
    """``[(tid, state, wchan)]`` of threads other than the main one in uninterruptible sleep."""
    found = []
    try:
        tids = sorted(int(name) for name in os.listdir('%s/%d/task' % (proc_root, pid)) if name.isdigit())
    except OSError:
        return found
    for tid in tids:
        if tid == pid:
            continue
        try:
            stat = _procfs.read_stat(tid, '%s/%d/task' % (proc_root, pid))
        except (OSError, ValueError, IndexError):
            continue
        if stat['state'] == 'D':
            found.append((tid, stat['state'], _procfs.read_wchan(tid, '%s/%d/task' % (proc_root, pid))))
            if len(found) == limit:
                break
    return found


def stuck_reason(pid, timeout, what='cmdline', proc_root=_procfs.PROC_ROOT):
    """``unreadable: possibly stuck in the kernel (...)``, with state and wchan read from stat and wchan."""
    details = []
    try:
        stat = _procfs.read_stat(pid, proc_root)
        details.append('state %s (%s)' % (stat['state'], stat['state_name']))
    except (OSError, ValueError, IndexError):
        pass
    wchan = _procfs.read_wchan(pid, proc_root)
    details.append('wchan %s' % (wchan or '-'))
    # The thread that holds the lock is seldom the main one.
    for tid, state, thread_wchan in _waiting_threads(pid, proc_root):
        details.append('thread %d %s in %s' % (tid, state, thread_wchan or '-'))
    return '%s (%s; /proc/%d/%s did not answer within %g s)' % (
        STUCK_TEXT, ', '.join(details), pid, what, timeout)
