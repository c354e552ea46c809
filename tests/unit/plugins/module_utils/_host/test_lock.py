# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One release at a time per host: the lock file, real holders of it started by the tests, and its refusals."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host.lock import (
    HostLock,
    LockError,
    NoLock,
    host_lock,
)

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason='needs root to make a file another user owns')

# Another run: takes the lock, writes its PID, says so, holds it for argv[2] seconds, lets it go and says
# when (a time taken just before it let go).
HOLDER = ('import fcntl, os, sys, time\n'
          'handle = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n'
          'fcntl.flock(handle, fcntl.LOCK_EX)\n'
          'os.ftruncate(handle, 0)\n'
          'os.write(handle, b"%d\\n" % os.getpid())\n'
          'print("ready", flush=True)\n'
          'time.sleep(float(sys.argv[2]))\n'
          'released = time.time()\n'
          'os.close(handle)\n'
          'print("released %r" % released, flush=True)\n')


@pytest.fixture
def other_run():
    children = []

    def start(path, seconds):
        child = subprocess.Popen([sys.executable, '-c', HOLDER, path, str(seconds)], stdout=subprocess.PIPE)
        children.append(child)
        assert child.stdout.readline() == b'ready\n'
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()


def test_takes_the_lock_and_writes_its_pid(tmp_path):
    path = str(tmp_path / 'gpuops-reclaim.lock')
    with HostLock(1, path=path) as lock:
        assert lock.waited < 0.5
        assert open(path).read() == '%d\n' % os.getpid()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    # Released: the next one takes it at once.
    again = HostLock(0, path=path)
    assert again.acquire() < 0.1
    again.release()


# Security: two runs never release at once; the second waits, then goes on.
def test_a_second_run_waits_for_the_first_then_goes_on(tmp_path, other_run):
    path = str(tmp_path / 'gpuops-reclaim.lock')
    first = other_run(path, 0.4)
    lock = HostLock(10, path=path)
    waited = lock.acquire()
    taken = time.time()
    try:
        # The second run took the lock only after the first let it go, however late it began to wait (a busy
        # machine can delay it past the first's 0.4 s); the first may still be exiting then.
        released = float(first.stdout.readline().split()[1])
        assert taken >= released and waited < 5 and first.wait(timeout=5) == 0
        assert open(path).read() == '%d\n' % os.getpid()
    finally:
        lock.release()


def test_a_timeout_names_the_pid_of_the_other_run(tmp_path, other_run):
    path = str(tmp_path / 'gpuops-reclaim.lock')
    first = other_run(path, 30)
    with pytest.raises(LockError) as caught:
        HostLock(0.3, path=path).acquire()
    assert caught.value.holder_pid == first.pid
    assert str(caught.value).startswith('lock_timeout: another run (PID %d) has held the host lock %s for the 0.3 s '
                                        'waited; nothing was looked at or signalled' % (first.pid, path))


# Security: nothing another user can plant at the lock's name is used.
def test_a_link_at_the_lock_name_is_refused(tmp_path):
    victim = tmp_path / 'victim'
    victim.write_text('keep\n')
    os.symlink(str(victim), str(tmp_path / 'gpuops-reclaim.lock'))
    with pytest.raises(LockError) as caught:
        HostLock(0, path=str(tmp_path / 'gpuops-reclaim.lock')).acquire()
    assert 'it is a symbolic link; remove it and run again' in str(caught.value)
    assert victim.read_text() == 'keep\n'


@AS_ROOT
def test_a_lock_file_another_user_made_is_refused(tmp_path):
    path = tmp_path / 'gpuops-reclaim.lock'
    path.write_text('')
    os.chown(str(path), 65534, 65534)
    with pytest.raises(LockError) as caught:
        HostLock(0, path=str(path)).acquire()
    assert 'it is owned by uid 65534' in str(caught.value)


def test_a_lock_file_others_can_write_is_refused(tmp_path):
    path = tmp_path / 'gpuops-reclaim.lock'
    path.write_text('')
    os.chmod(str(path), 0o666)
    with pytest.raises(LockError) as caught:
        HostLock(0, path=str(path)).acquire()
    assert 'others can write it' in str(caught.value)


def test_a_lock_directory_others_can_write_is_refused(tmp_path):
    os.chmod(str(tmp_path), 0o777)
    with pytest.raises(LockError) as caught:
        HostLock(0, path=str(tmp_path / 'gpuops-reclaim.lock')).acquire()
    assert 'another user can change it' in str(caught.value)
    assert os.listdir(str(tmp_path)) == []


def test_check_mode_and_other_users_take_no_lock(tmp_path):
    assert isinstance(host_lock(60, check_mode=True, euid=0), NoLock)
    assert isinstance(host_lock(60, euid=1000), NoLock)
    assert isinstance(host_lock(60, euid=0, path=str(tmp_path / 'x.lock')), HostLock)
