# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A module's AnsiballZ payload, kept from one run of ansible-playbook to the next.

Ansible builds a module's payload once per run: it keeps it in the run's own
temporary folder (``ansiballz_cache``), which goes away with the run. Building
gpu_reclaim's payload means parsing every module_utils file it packs (about a
hundred), which is most of what its task costs before the module starts. This
keeps Ansible's own cache files, as Ansible wrote them, in a folder of the
controller user (``ANSIBLE_HOME``), under a key of everything that goes into
them: Ansible's version and Python's, the module's and the collection's
module_utils' content, and the size and time of Ansible's own module_utils.
The next run puts them back into its temporary folder before the module is
built, and Ansible finds them there as if it had built them itself.

The payload runs as root on the hosts, so a kept file is used only when it, and
every folder above it, can be changed by no one but this user (or root): owned
by one of them, writable by no other (a sticky folder such as /tmp aside).
Anything else, or any error, and Ansible builds the payload as always.

Controller side only; the standard library only, so that importing it loads none of Ansible's controller code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import shutil
import stat
import sys
import tempfile

# What Ansible leaves beside its cache files while it writes them.
_PARTIAL = ('.lock', '-part')


def payload_key(module_file, collection_trees, ansible_trees, ansible_version):
    """A name for everything a module's payload is built from; another name as soon as any of it changes."""
    digest = hashlib.sha256()
    digest.update(repr((ansible_version, sys.version, os.path.realpath(module_file))).encode('utf-8'))
    with open(module_file, 'rb') as handle:
        digest.update(handle.read())
    for tree, content in [(tree, True) for tree in collection_trees] + [(tree, False) for tree in ansible_trees]:
        for root, dirs, files in os.walk(tree):
            dirs.sort()
            for name in sorted(files):
                if not name.endswith('.py'):
                    continue
                path = os.path.join(root, name)
                digest.update(path.encode('utf-8') + b'\0')
                if content:
                    with open(path, 'rb') as handle:
                        digest.update(handle.read())
                else:
                    status = os.stat(path)
                    digest.update(('%d %d' % (status.st_size, status.st_mtime_ns)).encode('ascii'))
                digest.update(b'\0')
    return digest.hexdigest()[:40]


def _only_ours(status, uid):
    """Owned by this user or root, and writable by no one else (unless sticky, where no one else can replace ours)."""
    if status.st_uid not in (uid, 0):
        return False
    return not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or bool(status.st_mode & stat.S_ISVTX)


def trusted_folder(path, uid=None):
    """The folder exists, is no link, belongs to this user, is writable by no one else, and so is every folder above."""
    uid = os.geteuid() if uid is None else uid
    try:
        status = os.lstat(path)
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != uid or status.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
        parent = os.path.dirname(os.path.realpath(path))
        while True:
            if not _only_ours(os.stat(parent), uid):
                return False
            if os.path.dirname(parent) == parent:
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


def _trusted_file(path, uid):
    status = os.lstat(path)
    return stat.S_ISREG(status.st_mode) and status.st_uid == uid and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _ours(names, prefix):
    return sorted(name for name in names if name.startswith(prefix) and not name.endswith(_PARTIAL))


def restore(entry, run_cache, prefix, uid=None):
    """Copy the kept files of one key into this run's cache; returns how many. None kept or not trusted: 0."""
    uid = os.geteuid() if uid is None else uid
    if not trusted_folder(entry, uid):
        return 0
    names = [name for name in _ours(os.listdir(entry), prefix) if _trusted_file(os.path.join(entry, name), uid)]
    if not names:
        return 0
    if not os.path.isdir(run_cache):
        os.makedirs(run_cache, mode=0o700)
    copied = 0
    for name in names:
        target = os.path.join(run_cache, name)
        if os.path.exists(target):
            continue
        # Whole or not at all: Ansible takes a file that exists as complete.
        handle, temporary = tempfile.mkstemp(dir=run_cache, prefix='.gpuops-', suffix='-part')
        with os.fdopen(handle, 'wb') as out, open(os.path.join(entry, name), 'rb') as source:
            shutil.copyfileobj(source, out)
        os.rename(temporary, target)
        copied += 1
    return copied


def keep(entry, run_cache, prefix, uid=None):
    """Keep what this run's cache holds for the module under its key, and drop the module's older keys.

    Returns how many files were kept; 0 when the key is kept already, when there is nothing to keep, or when
    the folder above the key is not this user's alone.
    """
    uid = os.geteuid() if uid is None else uid
    module_folder = os.path.dirname(entry)
    if os.path.lexists(entry) or not os.path.isdir(run_cache):
        return 0
    names = _ours(os.listdir(run_cache), prefix)
    if not names:
        return 0
    os.makedirs(module_folder, mode=0o700, exist_ok=True)
    if not trusted_folder(module_folder, uid):
        return 0
    staging = tempfile.mkdtemp(dir=module_folder, prefix='.part-')
    try:
        for name in names:
            shutil.copyfile(os.path.join(run_cache, name), os.path.join(staging, name))
            os.chmod(os.path.join(staging, name), 0o600)
        try:
            os.rename(staging, entry)
        except OSError:
            # Another task's process kept the same key first.
            return 0
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    for other in os.listdir(module_folder):
        # Not another process's key on its way in.
        if other != os.path.basename(entry) and not other.startswith('.part-'):
            shutil.rmtree(os.path.join(module_folder, other), ignore_errors=True)
    return len(names)
