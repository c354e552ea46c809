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
module_utils' content, and the size and time of Ansible's own module_utils and
of any folder of module_utils that could shadow them.
The next run puts them back into its temporary folder before the module is
built, and Ansible finds them there as if it had built them itself.

The payload runs as root on the hosts (and Ansible 2.19 and later unpickle a
cache file), so a kept file is used only when it, and every folder of its real
path, can be changed by no one but this user or root: owned by one of them,
writable by no other (a sticky folder such as /tmp aside, where no one else can
replace what is ours). Every file is then read and written by that real path,
which no one else can change under it, and checked against the digest kept with
it. Anything else, or any error, and Ansible builds the payload as always.

Controller side only; the standard library only, so that importing it loads none of Ansible's controller code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import time

# What Ansible leaves beside its cache files while it writes them.
_PARTIAL = ('.lock', '-part')


def payload_key(module_file, collection_trees, other_trees, other_files, ansible_version):
    """A name for everything a module's payload is built from; another name as soon as any of it changes.

    The module and the collection's trees count by content; the other trees (Ansible's own module_utils, and
    any folder of module_utils that could shadow them) and files (what packs the payload) by size and time.
    """
    digest = hashlib.sha256()
    digest.update(repr((ansible_version, sys.version, os.path.realpath(module_file))).encode('utf-8'))
    with open(module_file, 'rb') as handle:
        digest.update(handle.read())
    listed = [(path, True) for path in _python_files(collection_trees)]
    listed += [(path, False) for path in _python_files(other_trees) + sorted(other_files)]
    for path, content in listed:
        digest.update(path.encode('utf-8') + b'\0')
        if content:
            with open(path, 'rb') as handle:
                digest.update(handle.read())
        elif os.path.exists(path):
            status = os.stat(path)
            digest.update(('%d %d' % (status.st_size, status.st_mtime_ns)).encode('ascii'))
        digest.update(b'\0')
    return digest.hexdigest()[:40]


def _python_files(trees):
    found = []
    for tree in trees:
        for root, dirs, files in os.walk(tree):
            dirs.sort()
            found.extend(os.path.join(root, name) for name in sorted(files) if name.endswith('.py'))
    return found


def _others_may_write(status):
    return bool(status.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _only_ours(status, uid):
    """Owned by this user or root, and writable by no one else (unless sticky, where no one else can replace ours)."""
    if status.st_uid not in (uid, 0):
        return False
    return not _others_may_write(status) or bool(status.st_mode & stat.S_ISVTX)


def trusted_folder(path, uid=None):
    """The folder's real path when it belongs to this user, is writable by no one else, and every folder above
    it can be changed by no one but this user or root; else None. No one else can then change what that real
    path names."""
    uid = os.geteuid() if uid is None else uid
    try:
        real = os.path.realpath(path)
        status = os.lstat(real)
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != uid or _others_may_write(status):
            return None
        parent = real
        while os.path.dirname(parent) != parent:
            parent = os.path.dirname(parent)
            status = os.lstat(parent)
            if not stat.S_ISDIR(status.st_mode) or not _only_ours(status, uid):
                return None
        return real
    except OSError:
        return None


def _ours(names, prefix):
    return sorted(name for name in names if name.startswith(prefix) and not name.endswith(_PARTIAL))


_DIGESTS = 'SHA256SUMS.json'


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def restore(entry, run_cache, prefix, uid=None):
    """Copy the kept files of one key into this run's cache; returns how many. None kept or not trusted: 0."""
    uid = os.geteuid() if uid is None else uid
    entry = trusted_folder(entry, uid)
    if entry is None or not os.path.isfile(os.path.join(entry, _DIGESTS)):
        return 0
    with open(os.path.join(entry, _DIGESTS)) as handle:
        digests = json.load(handle)
    if not isinstance(digests, dict):
        return 0
    kept = {}
    for name in _ours(os.listdir(entry), prefix):
        path = os.path.join(entry, name)
        status = os.lstat(path)
        if not stat.S_ISREG(status.st_mode) or status.st_uid != uid or _others_may_write(status):
            return 0
        with open(path, 'rb') as handle:
            data = handle.read()
        # Cut short (a crash while it was kept) or changed: build again.
        if digests.get(name) != _sha256(data):
            return 0
        kept[name] = data
    if not kept:
        return 0
    if not os.path.isdir(run_cache):
        os.makedirs(run_cache, mode=0o700)
    copied = 0
    for name, data in sorted(kept.items()):
        target = os.path.join(run_cache, name)
        if os.path.exists(target):
            continue
        # Whole or not at all: Ansible takes a file that exists as complete.
        handle, temporary = tempfile.mkstemp(dir=run_cache, prefix='.gpuops-', suffix='-part')
        with os.fdopen(handle, 'wb') as out:
            out.write(data)
        os.rename(temporary, target)
        copied += 1
    return copied


def _private_subfolder(parent, name, uid):
    """parent/name, made when missing (parent is a real path no one else can change), and trusted; else None."""
    path = os.path.join(parent, name)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    return trusted_folder(path, uid)


def keep(home, parts, run_cache, prefix, uid=None):
    """Keep what this run's cache holds for the module under home/parts..., the last part being the key; drop the
    module's older keys.

    Returns how many files were kept; 0 when the key is kept already, when there is nothing to keep, or when
    home, or a folder of its real path, is not this user's alone (nothing is made there then).
    """
    uid = os.geteuid() if uid is None else uid
    if not os.path.isdir(run_cache):
        return 0
    names = _ours(os.listdir(run_cache), prefix)
    folder = trusted_folder(home, uid) if names else None
    for part in parts[:-1]:
        if folder is None:
            return 0
        folder = _private_subfolder(folder, part, uid)
    if folder is None or os.path.lexists(os.path.join(folder, parts[-1])):
        return 0
    staging = tempfile.mkdtemp(dir=folder, prefix='.part-')
    try:
        digests = {}
        for name in names:
            with open(os.path.join(run_cache, name), 'rb') as handle:
                data = handle.read()
            digests[name] = _sha256(data)
            _write_synced(os.path.join(staging, name), data)
        _write_synced(os.path.join(staging, _DIGESTS), json.dumps(digests, sort_keys=True).encode('utf-8'))
        try:
            os.rename(staging, os.path.join(folder, parts[-1]))
        except OSError:
            # Another task's process kept the same key first.
            return 0
    finally:
        if os.path.isdir(staging):
            shutil.rmtree(staging, ignore_errors=True)
    for other in os.listdir(folder):
        path = os.path.join(folder, other)
        # Not another process's key on its way in, unless it was left by one that died an hour ago or more.
        if other != parts[-1] and (not other.startswith('.part-') or os.lstat(path).st_mtime < time.time() - 3600):
            shutil.rmtree(path, ignore_errors=True)
    return len(names)


def _write_synced(path, data):
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(handle, 'wb') as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
