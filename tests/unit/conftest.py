# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Make ``ansible_collections.gpuops.reclaim`` importable under plain pytest.

ansible-test lays the collection out itself. Plain pytest gets the same
import path from ``build/collections``, whose ``gpuops/reclaim`` entry links
back to the repository root.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

_REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
_COLLECTIONS = os.path.join(_REPO_ROOT, 'build', 'collections')
_LINK = os.path.join(_COLLECTIONS, 'ansible_collections', 'gpuops', 'reclaim')

try:
    import ansible_collections.gpuops.reclaim  # noqa: F401  pylint: disable=unused-import
except ImportError:
    if os.path.basename(os.path.dirname(os.path.dirname(_REPO_ROOT))) != 'ansible_collections':
        if not os.path.lexists(_LINK):
            os.makedirs(os.path.dirname(_LINK), exist_ok=True)
            os.symlink(os.path.join('..', '..', '..', '..'), _LINK)
        if _COLLECTIONS not in sys.path:
            sys.path.insert(0, _COLLECTIONS)


import signal  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402

import pytest  # noqa: E402

_HOLDER_CODE = r'''
import os, signal, sys, time
if sys.argv[1] == 'ignore':
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.argv[2]:
    with open('/proc/self/comm', 'w') as comm:
        comm.write(sys.argv[2])
handles = [os.open(path, os.O_RDONLY) for path in sys.argv[3:]]
sys.stdout.write('ready\n')
sys.stdout.flush()
time.sleep(60)
'''


def make_device_node(path):
    """A stand-in for an NVIDIA device node: a /dev/null clone, or a plain file without root."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        with open(path, 'w'):
            pass
    return path


@pytest.fixture
def fake_dev(tmp_path):
    """A folder with stand-in nodes nvidia0..nvidia3, nvidiactl and nvidia-uvm."""
    for name in ('nvidia0', 'nvidia1', 'nvidia2', 'nvidia3', 'nvidiactl', 'nvidia-uvm'):
        make_device_node(str(tmp_path / name))
    return str(tmp_path)


@pytest.fixture
def spawn_holder():
    """Start child processes that hold the given paths open; they are killed afterwards.

    ``spawn_holder(paths, ignore_sigterm=False, comm=None)`` returns the Popen.
    """
    children = []

    def spawn(paths, ignore_sigterm=False, comm=None):
        child = subprocess.Popen(
            [sys.executable, '-c', _HOLDER_CODE, 'ignore' if ignore_sigterm else 'default', comm or ''] + list(paths),
            stdout=subprocess.PIPE)
        children.append(child)
        assert child.stdout.readline() == b'ready\n'
        return child

    yield spawn
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
