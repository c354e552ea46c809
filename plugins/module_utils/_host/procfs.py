# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Readers for /proc: stat, status, wchan, device paths.

Everything here reads files directly (``os.scandir``, ``os.readlink``) rather
than through psutil, because the scanner visits every process on the host and
must stay cheaper than ``fuser``. Readers raise ``OSError`` subclasses for a
process that vanished (``FileNotFoundError``/``ProcessLookupError``) or that
this user may not inspect (``PermissionError``); callers decide how to count
them.

Nothing here reads ``cmdline`` or ``environ``: those reads can block behind
the target's mmap lock, so they go through ``slow_reads``, under a deadline.
A process's cgroup is ``cgroup``'s business.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re

PROC_ROOT = '/proc'
DEV_DIR = '/dev'

SIGTERM = 15

# /proc/PID/stat state letters, named as psutil names them.
STATE_NAMES = {
    'R': 'running',
    'S': 'sleeping',
    'D': 'disk-sleep',
    'Z': 'zombie',
    'T': 'stopped',
    't': 'tracing-stop',
    'X': 'dead',
    'x': 'dead',
    'K': 'wake-kill',
    'W': 'waking',
    'P': 'parked',
    'I': 'idle',
}

PF_KTHREAD = 0x00200000

# Errors that mean "the process is gone": reading its files raced its exit.
VANISHED_ERRNOS = (errno.ENOENT, errno.ESRCH)


def is_vanished(error):
    return isinstance(error, OSError) and error.errno in VANISHED_ERRNOS


def iter_pids(proc_root=PROC_ROOT):
    """Yield the PID of every process visible in ``proc_root``."""
    with os.scandir(proc_root) as entries:
        for entry in entries:
            name = entry.name
            if name.isdigit():
                yield int(name)


def _read(path, mode='r'):
    with open(path, mode) as handle:
        return handle.read()


def parse_stat(text):
    """Parse the text of /proc/PID/stat.

    The command name sits in parentheses and may itself hold spaces and
    parentheses, so it runs up to the *last* ``)``.
    """
    head, sep, tail = text.rpartition(')')
    if not sep:
        raise ValueError('not a /proc/PID/stat line: %r' % text[:80])
    pid_text, dummy, comm = head.partition(' (')
    fields = tail.split()
    # fields[0] is field 3 of proc(5): state
    state = fields[0]
    return {
        'pid': int(pid_text),
        'comm': comm,
        'state': state,
        'state_name': STATE_NAMES.get(state, state),
        'ppid': int(fields[1]),
        'pgrp': int(fields[2]),
        'session': int(fields[3]),
        'flags': int(fields[6]),
        'tty_nr': int(fields[4]),
        'starttime': int(fields[19]),
        'kernel_thread': bool(int(fields[6]) & PF_KTHREAD),
    }


def read_stat(pid, proc_root=PROC_ROOT):
    return parse_stat(_read('%s/%d/stat' % (proc_root, pid)))


EXITED_STATES = ('Z', 'X', 'x')


def live_thread_state(pid, proc_root=PROC_ROOT):
    """The state letter of a live thread of ``pid`` other than its leader, or None (``live_thread``)."""
    found = live_thread(pid, proc_root)
    return found[1] if found else None


def live_thread(pid, proc_root=PROC_ROOT):
    """``(tid, state letter)`` of a live thread of ``pid`` other than its leader, or None.

    A process is alive while any of its threads is: when the thread-group
    leader has exited (a raw ``exit`` of the main thread) the leader's stat
    reads ``Z`` and its ``fd`` folder is empty, while another thread still
    holds the files (a CUDA context with them).
    """
    task_dir = '%s/%d/task' % (proc_root, pid)
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return None
    for tid in tids:
        if tid == str(pid):
            continue
        try:
            state = parse_stat(_read('%s/%s/stat' % (task_dir, tid)))['state']
        except (OSError, ValueError, IndexError):
            continue
        if state not in EXITED_STATES:
            return int(tid), state
    return None


def process_state(stat, proc_root=PROC_ROOT):
    """``(state letter, leader_exited)`` of the process whose parsed stat is ``stat``.

    The state is the leader's, unless the leader has exited while another
    thread lives: then it is that thread's, and ``leader_exited`` is True.
    """
    state = stat['state']
    if state in EXITED_STATES:
        live = live_thread_state(stat['pid'], proc_root)
        if live is not None:
            return live, True
    return state, False


def fd_dirs(pid, proc_root=PROC_ROOT, leader_fds=None):
    """The ``fd`` folder that shows what ``pid`` holds, in a list: its own, or,
    when its leader has exited (``leader_fds`` empty and the leader a zombie),
    that of one live thread (threads share their fd table)."""
    own = '%s/%d/fd' % (proc_root, pid)
    if leader_fds is None:
        leader_fds = os.listdir(own)
    if leader_fds:
        return [own]
    try:
        if read_stat(pid, proc_root)['state'] not in EXITED_STATES:
            return [own]
    except (OSError, ValueError, IndexError):
        return [own]
    # Threads share one fd table: one live thread's folder shows it, whatever the thread count.
    thread = live_thread(pid, proc_root)
    return ['%s/%d/task/%d/fd' % (proc_root, pid, thread[0])] if thread else [own]


def parse_status(text):
    """Parse /proc/PID/status into a dict of field name -> raw text value."""
    status = {}
    for line in text.splitlines():
        key, sep, value = line.partition(':')
        if sep:
            status[key] = value.strip()
    return status


def read_status(pid, proc_root=PROC_ROOT):
    return parse_status(_read('%s/%d/status' % (proc_root, pid)))


def signal_mask(status, field):
    """The set of signal numbers in a SigIgn/SigCgt/SigBlk/SigPnd/ShdPnd mask."""
    value = status.get(field)
    if not value:
        return set()
    mask = int(value, 16)
    return set(number + 1 for number in range(64) if mask >> number & 1)


def has_signal(status, field, signum):
    """Whether ``signum`` is in a parsed status's mask ``field`` (False when absent or unreadable)."""
    value = (status or {}).get(field)
    try:
        mask = int(value, 16) if value else 0
    except ValueError:
        mask = 0
    return bool(mask >> (int(signum) - 1) & 1)


def sigterm_ignored(status):
    """True when the process ignores SIGTERM (SIG_IGN), so grace is pointless."""
    return has_signal(status, 'SigIgn', SIGTERM)


def status_uid(status):
    """Real UID from a parsed status, or None."""
    value = status.get('Uid')
    if not value:
        return None
    return int(value.split()[0])


def read_wchan(pid, proc_root=PROC_ROOT):
    """Kernel function the process sleeps in, or None (running, or hidden)."""
    try:
        value = _read('%s/%d/wchan' % (proc_root, pid)).strip()
    except OSError:
        return None
    if not value or value == '0':
        return None
    return value


def parse_cmdline(data):
    """The process title from the bytes of /proc/PID/cmdline.

    Arguments are NUL-separated; setproctitle may overwrite the area with one
    space-separated string and NUL padding. Either way the title is the
    arguments joined by spaces.
    """
    if isinstance(data, bytes):
        data = data.decode('utf-8', 'replace')
    parts = data.split('\0')
    while parts and not parts[-1]:
        parts.pop()
    return ' '.join(parts)


def _strip_deleted(path):
    if path.endswith(' (deleted)'):
        return path[:-len(' (deleted)')]
    return path


def read_exe(pid, proc_root=PROC_ROOT):
    """Path of the executable, or None when unreadable (kernel thread, other user)."""
    try:
        return _strip_deleted(os.readlink('%s/%d/exe' % (proc_root, pid)))
    except OSError as exc:
        if is_vanished(exc) and not os.path.exists('%s/%d' % (proc_root, pid)):
            raise
        return None


def fd_device_paths(pid, prefix, proc_root=PROC_ROOT):
    """Targets of the open file descriptors of ``pid`` that start with ``prefix``.

    Raises PermissionError / FileNotFoundError for the fd directory itself;
    an fd closed while being read is skipped.
    """
    own = '%s/%d/fd' % (proc_root, pid)
    names = os.listdir(own)
    listings = []
    for fd_dir in fd_dirs(pid, proc_root, names):
        try:
            listings.append((fd_dir, names if fd_dir == own else os.listdir(fd_dir)))
        except OSError:
            continue
    return nodes_in(listings, prefix) or set()


def nodes_in(listings, prefix, readlink=None):
    """The nodes held by the fds of ``listings`` (``[(fd folder, names)]``) whose targets start with
    ``prefix``, by ``node_held``; None when there are none. An fd closed while being read is skipped."""
    readlink = readlink or os.readlink
    found = None
    for fd_dir, names in listings:
        for name in names:
            try:
                target = readlink(fd_dir + '/' + name)
            except OSError:
                continue
            if target.startswith(prefix):
                if found is None:
                    found = set()
                found.add(node_held(fd_dir + '/' + name, _strip_deleted(target), prefix))
    return found


# Character major of the NVIDIA GPU nodes; minors 254 and 255 are nvidia-modeset and nvidiactl.
NVIDIA_MAJOR = 195
NVIDIA_MAX_GPU_MINOR = 253


def node_held(fd_path, target, prefix, stat=None):
    """The GPU node an fd holds, named by its device number rather than the path the process sees.

    A container may map host GPU 3 as its ``/dev/nvidia0``: the fd's link then
    reads ``/dev/nvidia0`` from the host, but the inode behind it is
    ``195:3``. For a real NVIDIA GPU node (major 195) the minor decides, and
    the path returned is the host's name of that node. Anything else (the
    simulated hosts' stand-in nodes, nvidiactl, nvidia-uvm) keeps its path.
    """
    base = prefix[:-len('nvidia')]
    if not _GPU_NODE.match(target[len(base):]):
        return target
    try:
        rdev = (stat or os.stat)(fd_path).st_rdev
    except OSError:
        return target
    if os.major(rdev) == NVIDIA_MAJOR and os.minor(rdev) <= NVIDIA_MAX_GPU_MINOR:
        return '%snvidia%d' % (base, os.minor(rdev))
    return target


def maps_path(pid, proc_root=PROC_ROOT):
    return '%s/%d/maps' % (proc_root, pid)


def mapped_paths(path, prefix):
    """Paths starting with ``prefix`` in the maps file ``path``.

    Reading another process's maps takes its mmap lock, so it can block:
    call it through ``_host.slow_reads.read_maps``, which bounds it by a deadline.
    """
    found = set()
    with open(path, 'r') as handle:
        for line in handle:
            position = line.find(prefix)
            if position != -1:
                found.add(_strip_deleted(line[position:].rstrip('\n')))
    return found


_GPU_NODE = re.compile(r'^nvidia(\d+)$')


def classify_device_path(path, dev_dir=DEV_DIR):
    """What an NVIDIA device path is: ``('gpu', minor)``, ``('uvm', None)``,
    ``('control', None)`` (nvidiactl, modeset, uvm-tools, caps) or None when the
    path is not an NVIDIA device under ``dev_dir``.

    Devices are matched by name: simulated hosts use stand-in nodes with other
    numbers. The fd readers name a real GPU node by its device number first
    (``node_held``), so that a container's renamed node counts as the GPU it is.
    """
    base = dev_dir.rstrip('/') + '/'
    if not path.startswith(base + 'nvidia'):
        return None
    name = path[len(base):]
    match = _GPU_NODE.match(name)
    if match:
        return ('gpu', int(match.group(1)))
    if name == 'nvidia-uvm':
        return ('uvm', None)
    return ('control', None)


def scan_device_holders(proc_root=PROC_ROOT, dev_dir=DEV_DIR, skip_pids=()):
    """Every process with an NVIDIA device node open, from /proc/PID/fd.

    Returns ``(holders, unreadable, vanished)``: ``holders`` maps a PID to the
    set of NVIDIA device paths it holds open; ``unreadable`` is the list of
    PIDs whose fds this user may not read; ``vanished`` counts processes that
    exited during the scan.

    This is the hot path: one ``listdir`` per process and one ``readlink`` per
    fd, no psutil, no /proc/PID/maps.
    """
    prefix = dev_dir.rstrip('/') + '/nvidia'
    holders = {}
    unreadable = []
    vanished = 0
    listdir = os.listdir
    readlink = os.readlink
    with os.scandir(proc_root) as entries:
        for entry in entries:
            name = entry.name
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in skip_pids:
                continue
            fd_dir = proc_root + '/' + name + '/fd'
            try:
                fds = listdir(fd_dir)
            except PermissionError:
                unreadable.append(pid)
                continue
            except OSError:
                vanished += 1
                continue
            # Empty: a process without files, or one whose leader thread has exited.
            found = nodes_in(((fd_dir, fds),) if fds else _thread_fd_listings(pid, proc_root), prefix, readlink)
            if found:
                holders[pid] = found
    return holders, unreadable, vanished


def _thread_fd_listings(pid, proc_root):
    """``[(fd folder, names)]`` of the live threads of a process whose leader has exited."""
    own = '%s/%d/fd' % (proc_root, pid)
    listings = []
    for fd_dir in fd_dirs(pid, proc_root, leader_fds=()):
        if fd_dir == own:
            continue
        try:
            listings.append((fd_dir, os.listdir(fd_dir)))
        except OSError:
            continue
    return listings
