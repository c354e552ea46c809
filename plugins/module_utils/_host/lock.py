# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One release at a time per host: a lock under ``/run/lock``.

Two releases at once would both signal the same holders and both report the
same releases. ``HostLock`` takes ``fcntl.flock`` on
``/run/lock/gpuops-reclaim.lock`` before the release looks at anything, and
keeps it until the release is over; a second run waits up to
``lock_timeout`` seconds (as ``apt`` and ``dnf`` do), then looks at the GPUs
afresh and finds them free. A run that waits longer fails naming the PID of
the run that holds the lock, which writes its PID into the file.

The file is root's, mode 0600, opened with ``O_NOFOLLOW`` in a directory
that passes ``_host.safe_file``'s test (``/run/lock`` is sticky and root's): a
link, or a file another user made there first, is refused with an error
naming it, never used. Only root takes the lock: a run as another user can
signal only that user's processes, and a lock it could open could be held to
stop root's releases. The kernel drops the lock when the module's process
ends, however it ends.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import os
import stat
import time

from .safe_file import open_directory

LOCK_PATH = '/run/lock/gpuops-reclaim.lock'
DEFAULT_LOCK_TIMEOUT = 60.0
LOCK_MODE = 0o600
POLL_SECONDS = 0.1


class LockError(Exception):
    """The lock could not be taken: the message says why, ``holder_pid`` names the run that holds it."""

    def __init__(self, msg, holder_pid=None):
        Exception.__init__(self, msg)
        self.holder_pid = holder_pid


def _holder(handle):
    try:
        text = os.pread(handle, 32, 0).decode('ascii', 'replace').strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


class HostLock:
    """``acquire()`` within ``timeout`` seconds or raise ``LockError``; ``release()``. Also a context manager."""

    def __init__(self, timeout=DEFAULT_LOCK_TIMEOUT, path=None, clock=time.monotonic, sleep=time.sleep,
                 poll_seconds=POLL_SECONDS):
        self.timeout = float(timeout)
        self.path = path or LOCK_PATH
        self.clock = clock
        self.sleep = sleep
        self.poll_seconds = poll_seconds
        self.handle = None
        self.waited = 0.0

    def _open(self):
        folder, name = self.path.rsplit('/', 1)
        try:
            directory = open_directory(folder or '/')
        except OSError as exc:
            raise LockError('lock_timeout: cannot take the host lock %s: %s' % (self.path, exc.strerror or exc))
        try:
            handle = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0), LOCK_MODE,
                             dir_fd=directory)
        except OSError as exc:
            why = 'it is a symbolic link' if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            raise LockError('lock_timeout: cannot take the host lock %s: %s; remove it and run again'
                            % (self.path, why))
        finally:
            os.close(directory)
        info = os.fstat(handle)
        problem = None
        if not stat.S_ISREG(info.st_mode):
            problem = 'it is not a regular file'
        elif info.st_uid != os.geteuid():
            problem = 'it is owned by uid %d' % info.st_uid
        elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_nlink != 1:
            problem = 'others can write it, or it has another name (mode %04o, %d links)' % (
                stat.S_IMODE(info.st_mode), info.st_nlink)
        if problem:
            os.close(handle)
            raise LockError('lock_timeout: cannot take the host lock %s: %s; remove it and run again'
                            % (self.path, problem))
        return handle

    def acquire(self):
        """Take the lock, waiting up to ``timeout`` seconds; return the seconds waited."""
        handle = self._open()
        start = self.clock()
        try:
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                waited = self.clock() - start
                if waited >= self.timeout:
                    holder = _holder(handle)
                    raise LockError(
                        'lock_timeout: another run (PID %s) has held the host lock %s for the %g s waited; nothing '
                        'was looked at or signalled. Let it end and run again, or raise lock_timeout'
                        % (holder if holder is not None else 'unknown', self.path, self.timeout), holder_pid=holder)
                self.sleep(min(self.poll_seconds, self.timeout - waited))
            os.ftruncate(handle, 0)
            os.pwrite(handle, ('%d\n' % os.getpid()).encode('ascii'), 0)
        except BaseException:
            os.close(handle)
            raise
        self.handle = handle
        self.waited = self.clock() - start
        return self.waited

    def release(self):
        """Let the next run go (the PID stays in the file; only a held lock means a run is on)."""
        if self.handle is not None:
            handle, self.handle = self.handle, None
            os.close(handle)

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc_info):
        self.release()
        return False


class NoLock:
    """What a run takes where it takes no host lock (check mode, or not root)."""

    waited = 0.0
    path = None

    def acquire(self):
        return 0.0

    def release(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False


def host_lock(timeout, check_mode=False, euid=None, path=None):
    """The lock a run takes: a ``HostLock`` for a real run as root, else ``NoLock``."""
    euid = os.geteuid() if euid is None else euid
    if check_mode or euid != 0:
        return NoLock()
    return HostLock(timeout, path=path)
