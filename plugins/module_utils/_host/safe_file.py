# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Files that root writes where another user cannot redirect them.

``write_text(path, text)`` writes a report or a metrics file in a directory
whose every step from ``/`` only root (or the user writing) could have made:

- the path is walked one directory at a time, each opened with
  ``O_NOFOLLOW`` relative to the one before; a directory that another user
  can write (owned by someone else, or group or world writable unless it is
  sticky and root's, as ``/tmp``) is refused before anything is looked up in
  it, so that no link, file or directory planted there is ever used;
- a symbolic link on the way is followed only when it sits in a directory
  that passed that test (only a trusted user could have made it), and its
  target is walked by the same rule;
- the file is created under a random name in the final directory
  (``O_CREAT | O_EXCL | O_NOFOLLOW``), written, synced, and renamed over the
  final name, which replaces a link planted there instead of following it.

Linux, Python 3.8+. This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import errno
import os
import stat

FILE_MODE = 0o644
FOLDER_MODE = 0o755
MAX_LINKS = 40

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)


class UnsafePath(OSError):
    """A path another user could redirect: the message names the path and why."""

    def __str__(self):
        return str(self.strerror)


def untrusted_reason(info, euid=None):
    """Why a directory with ``os.stat`` result ``info`` could be changed by another user, or None.

    Trusted: owned by root or by ``euid`` (the user writing), and writable by
    nobody else, or sticky and root's (``/tmp``: others can add entries but
    not replace ours).
    """
    euid = os.geteuid() if euid is None else euid
    if info.st_uid not in (0, euid):
        return 'owned by uid %d, not by root%s' % (info.st_uid, '' if euid == 0 else ' or uid %d' % euid)
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if info.st_mode & stat.S_ISVTX and info.st_uid == 0:
            return None
        return 'writable by %s (mode %04o)' % ('others' if info.st_mode & stat.S_IWOTH else 'its group',
                                               stat.S_IMODE(info.st_mode))
    return None


def _components(path):
    return [part for part in path.split('/') if part and part != '.']


def open_directory(path, create=False, euid=None):
    """A file descriptor of the directory ``path``, reached without trusting anything another user can change.

    With ``create``, missing directories are made (mode 0755). Raises
    ``UnsafePath`` for a directory on the way that another user can write,
    and ``OSError`` as the system reports any other problem.
    """
    if not isinstance(path, str) or not path.startswith('/'):
        raise UnsafePath(errno.EINVAL, 'must be an absolute path; got: %r' % (path,))
    pending = _components(path)
    walked = ['']
    current = os.open('/', _DIRECTORY_FLAGS)
    links = 0
    try:
        while True:
            reason = untrusted_reason(os.fstat(current), euid)
            if reason:
                raise UnsafePath(errno.EPERM, '%s: another user can change it (%s); refusing to write under it'
                                 % ('/'.join(walked) or '/', reason))
            if not pending:
                return current
            name = pending.pop(0)
            if name == '..':
                following = os.open('..', _DIRECTORY_FLAGS, dir_fd=current)
                walked = walked[:-1] or ['']
            else:
                try:
                    info = os.stat(name, dir_fd=current, follow_symlinks=False)
                except OSError as exc:
                    if exc.errno != errno.ENOENT or not create:
                        raise
                    os.mkdir(name, FOLDER_MODE, dir_fd=current)
                    info = os.stat(name, dir_fd=current, follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    # Made by a trusted user, since its directory passed the test: walk its target by the same rule.
                    links += 1
                    if links > MAX_LINKS:
                        raise OSError(errno.ELOOP, 'too many symbolic links in %s' % path)
                    target = os.readlink(name, dir_fd=current)
                    pending = _components(target) + pending
                    if target.startswith('/'):
                        following = os.open('/', _DIRECTORY_FLAGS)
                        walked = ['']
                    else:
                        continue
                else:
                    following = os.open(name, _DIRECTORY_FLAGS, dir_fd=current)
                    walked.append(name)
            os.close(current)
            current = following
    except BaseException:
        os.close(current)
        raise


def write_text(path, text, mode=FILE_MODE, create=False, euid=None):
    """Write ``text`` to ``path`` atomically, never following a link another user could have planted.

    ``create`` makes missing directories. Returns ``path``. Raises
    ``UnsafePath`` or ``OSError``; the old file is then left as it was.
    """
    if not isinstance(path, str) or not path.startswith('/') or path.endswith('/'):
        raise UnsafePath(errno.EINVAL, 'must be the absolute path of a file; got: %r' % (path,))
    folder, name = path.rsplit('/', 1)
    if name in ('.', '..'):
        raise UnsafePath(errno.EINVAL, 'must be the absolute path of a file; got: %r' % (path,))
    directory = open_directory(folder or '/', create=create, euid=euid)
    try:
        temporary = '.%s.%s' % (name, binascii.hexlify(os.urandom(8)).decode('ascii'))
        handle = os.open(temporary, _FILE_FLAGS, mode, dir_fd=directory)
        try:
            try:
                data = text.encode('utf-8')
                while data:
                    data = data[os.write(handle, data):]
                os.fchmod(handle, mode)
                os.fsync(handle)
            finally:
                os.close(handle)
            os.rename(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            try:
                os.unlink(temporary, dir_fd=directory)
            except OSError:
                pass
            raise
    finally:
        os.close(directory)
    return path
