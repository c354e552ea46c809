# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys
import time

import psutil
import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import prober as _prober
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import proctree as _proctree
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import RESPAWNER, kill_tree


@pytest.fixture
def respawner():
    """A parent that keeps one child alive; both killed at the end (only what the test started)."""
    proc = subprocess.Popen([sys.executable, '-c', RESPAWNER])
    yield proc
    kill_tree(proc)


def first_child(pid, timeout=5.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        children = psutil.Process(pid).children()
        if children:
            return children[0]
        time.sleep(0.01)
    raise AssertionError('no child of pid %d in %s s' % (pid, timeout))


def test_self_and_ancestors():
    found = _proctree.self_and_ancestors()
    assert os.getpid() in found and os.getppid() in found


def test_ancestors_nearest_first_up_to_pid_1():
    chain = _proctree.ancestors(os.getpid())
    assert chain[0] == os.getppid()
    assert chain[-1] == 1 or 1 not in chain  # a test runner in a PID namespace may not reach the host's PID 1
    assert _proctree.ancestors(2 ** 22 + 7) == []


def test_descendants_follow_the_tree():
    parents = {10: 1, 11: 10, 12: 11, 13: 1, 14: 13}
    children = _proctree.children_from_map(parents)
    assert set(_proctree.descendant_pids(10, children)) == {11, 12}
    assert set(_proctree.descendant_pids(99, children)) == set()
    assert _proctree.descendant_pids(1, children) == [10, 13, 11, 14, 12]  # parents before children


def test_child_and_descendant_pids_follow_the_tree(respawner):
    supervisor = respawner
    worker = first_child(supervisor.pid)
    assert _proctree.child_pids(supervisor.pid) == [worker.pid]
    assert worker.pid in _proctree.descendant_pids(os.getpid())
    info = _prober.describe_process(supervisor.pid)
    assert info['children'] == [worker.pid] and info['ppid'] == os.getpid()
    assert _proctree.child_pids(2 ** 22 + 7) == []


def test_parent_map_holds_this_process_and_its_parent():
    parents = _proctree.parent_map()
    assert parents[os.getpid()] == os.getppid()
    assert os.getpid() in _proctree.descendant_pids(os.getppid(), _proctree.children_from_map(parents))
