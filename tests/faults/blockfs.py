# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A FUSE file system whose one file can be opened but never read.

    blockfs.py [--give-up SECONDS] MOUNTPOINT

Mounts itself on MOUNTPOINT (root, /dev/fuse) and serves one file, ``block``,
of one page. Every READ request is left unanswered, so a process that maps the
file and touches the page waits in the kernel for as long as the server
lives, as a thread stuck in a GPU driver does. Two answers are still given:

- an INTERRUPT (the waiting task got a fatal signal) fails the read with
  EINTR, so the waiting task can die, as a killable one can;
- everything else the kernel needs to look up, open and close the file.

It speaks the kernel's FUSE protocol directly (no libfuse), with the
standard library only. It stops on SIGTERM, unmounting first, and by
itself after ``--give-up`` seconds (default 300); its exit fails every read
still waiting, so nothing it blocked outlives it.
"""

from __future__ import print_function

import ctypes
import errno
import os
import signal
import stat
import struct
import sys

FUSE_LOOKUP, FUSE_FORGET, FUSE_GETATTR = 1, 2, 3
FUSE_OPEN, FUSE_READ, FUSE_RELEASE = 14, 15, 18
FUSE_FLUSH, FUSE_INIT, FUSE_OPENDIR = 25, 26, 27
FUSE_RELEASEDIR, FUSE_INTERRUPT, FUSE_DESTROY, FUSE_BATCH_FORGET = 29, 36, 38, 42
NO_REPLY = (FUSE_FORGET, FUSE_BATCH_FORGET)

IN_HEADER = struct.Struct('<IIQQIIIHH')   # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct('<IiQ')        # len, error, unique
ATTR = struct.Struct('<QQQQQQIIIIIIIIII')
ROOT, FILE = 1, 2
FILE_NAME = b'block'
PAGE = 4096


def attr(node):
    if node == ROOT:
        return ATTR.pack(ROOT, 0, 0, 0, 0, 0, 0, 0, 0, stat.S_IFDIR | 0o755, 2, 0, 0, 0, PAGE, 0)
    return ATTR.pack(FILE, PAGE, 1, 0, 0, 0, 0, 0, 0, stat.S_IFREG | 0o444, 1, 0, 0, 0, PAGE, 0)


def mount(mountpoint, fd):
    libc = ctypes.CDLL(None, use_errno=True)
    options = 'fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other' % fd
    if libc.mount(b'blockfs', mountpoint.encode(), b'fuse', ctypes.c_ulong(0x2 | 0x4),  # nosuid, nodev
                  options.encode()) != 0:
        code = ctypes.get_errno()
        raise OSError(code, 'mount %s: %s' % (mountpoint, os.strerror(code)))
    return libc


def reply(fd, unique, payload=b'', error=0):
    os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(payload), -error, unique) + payload)


def answer(fd, opcode, unique, nodeid, body, pending):
    if opcode == FUSE_INIT:
        major, minor = struct.unpack_from('<II', body)
        # 7.31, no async reads: a read waits in the task that asked for it.
        reply(fd, unique, struct.pack('<IIIIHHIIHHII', 7, 31, 0, 0, 16, 12, PAGE, 1, 1, 0, 0, 0) + b'\0' * 24)
    elif opcode == FUSE_LOOKUP:
        if nodeid == ROOT and body.rstrip(b'\0') == FILE_NAME:
            reply(fd, unique, struct.pack('<QQQQII', FILE, 0, 3600, 3600, 0, 0) + attr(FILE))
        else:
            reply(fd, unique, error=errno.ENOENT)
    elif opcode == FUSE_GETATTR:
        reply(fd, unique, struct.pack('<QII', 3600, 0, 0) + attr(nodeid))
    elif opcode in (FUSE_OPEN, FUSE_OPENDIR):
        reply(fd, unique, struct.pack('<QIi', 0, 0, 0))
    elif opcode == FUSE_READ:
        pending.add(unique)   # never answered
    elif opcode == FUSE_INTERRUPT:
        (target,) = struct.unpack_from('<Q', body)
        if target in pending:
            pending.discard(target)
            reply(fd, target, error=errno.EINTR)
    elif opcode in (FUSE_RELEASE, FUSE_RELEASEDIR, FUSE_FLUSH):
        reply(fd, unique)
    elif opcode in NO_REPLY:
        pass
    elif opcode == FUSE_DESTROY:
        reply(fd, unique)
        return False
    else:
        reply(fd, unique, error=errno.ENOSYS)
    return True


def main(argv):
    give_up = 300
    if len(argv) == 4 and argv[1] == '--give-up':
        give_up, argv = int(argv[2]), argv[:1] + argv[3:]
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    mountpoint = argv[1]
    fd = os.open('/dev/fuse', os.O_RDWR)
    libc = mount(mountpoint, fd)

    def stop(_signum, _frame):
        # Closing /dev/fuse (at exit) fails every read still waiting.
        libc.umount2(mountpoint.encode(), 2)  # MNT_DETACH
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # A bounded life: whatever a test left waiting is released in the end.
    signal.signal(signal.SIGALRM, stop)
    signal.alarm(give_up)
    pending = set()
    while True:
        try:
            data = os.read(fd, 1 << 17)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EINTR, errno.EAGAIN):
                continue
            if exc.errno == errno.ENODEV:   # unmounted
                return 0
            raise
        length, opcode, unique, nodeid = IN_HEADER.unpack_from(data)[:4]
        try:
            if not answer(fd, opcode, unique, nodeid, data[IN_HEADER.size:length], pending):
                return 0
        except OSError as exc:
            if exc.errno != errno.ENOENT:   # the request was interrupted meanwhile
                raise


if __name__ == '__main__':
    sys.exit(main(sys.argv))
