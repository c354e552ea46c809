# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import prober as _prober


@pytest.fixture(autouse=True)
def private_dev(monkeypatch, fake_dev):
    """No test scans the host's device nodes."""
    monkeypatch.setattr(_prober, 'DEV_DIR', fake_dev)
    return fake_dev


def test_real_proc_scan_sees_only_the_given_device_nodes(spawn_holder, fake_dev):
    child = spawn_holder([os.path.join(fake_dev, 'nvidia2'), os.path.join(fake_dev, 'nvidia-uvm')])
    found = _prober.ProcProber().device_holders()
    assert found[child.pid] == {'minors': set([2]), 'uvm': True}


def test_born_after_compares_start_times_in_ticks_since_boot():
    prober = _prober.ProcProber()
    before = prober.listing_mark()
    child = subprocess.Popen(['sleep', '5'])
    try:
        time.sleep(0.05)
        after = prober.listing_mark()
        assert prober.born_after(child.pid, before - 100) is True
        assert prober.born_after(child.pid, after + 2) is False
        assert prober.born_after(2 ** 22 + 7, before) is False  # no such process: nothing to reject
    finally:
        child.kill()
        child.wait()
