# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures of the release loop's tests (``escalation_harness`` holds the rest of their harness)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess
import sys

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import prober as _prober
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import kill_tree


@pytest.fixture
def private_dev(monkeypatch, fake_dev):
    """No test scans the host's device nodes: holders outside the tests are never adopted."""
    monkeypatch.setattr(_prober, 'DEV_DIR', fake_dev)
    return fake_dev


@pytest.fixture
def spawned():
    procs = []

    def spawn(code):
        proc = subprocess.Popen([sys.executable, '-c', code])
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        kill_tree(proc)
