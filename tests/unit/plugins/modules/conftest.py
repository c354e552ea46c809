# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures shared by the module tests: running a module's main(), and the
states of NVML that every module must handle."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import functools
import json

import pytest

from ansible.module_utils import basic

try:
    from ansible.module_utils.testing import patch_module_args
except ImportError:  # ansible-core 2.18 and older have no helper: set the arguments as they read them
    @contextlib.contextmanager
    def patch_module_args(args):
        saved = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = json.dumps({'ANSIBLE_MODULE_ARGS': args}).encode('utf-8')
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = saved

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import module_harness as _discovery
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import lock as _host_lock
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml


@pytest.fixture(autouse=True)
def host_lock_path(monkeypatch, tmp_path):
    """The modules' host lock, in the test's own folder: a test never waits on (or takes) the host's."""
    path = str(tmp_path / 'gpuops-reclaim.lock')
    monkeypatch.setattr(_host_lock, 'LOCK_PATH', path)
    return path


@pytest.fixture
def module_runner(capsys):
    """``module_runner(module)(args)`` runs ``module.main()`` with ``args`` and returns its JSON result."""
    def for_module(module):
        def run(args):
            with patch_module_args(args):
                with pytest.raises(SystemExit):
                    module.main()
            return json.loads(capsys.readouterr().out)
        return run
    return for_module


@pytest.fixture
def no_library(monkeypatch, fake_nvml_factory):
    """pynvml is importable, but libnvidia-ml.so.1 is not found."""
    fake = fake_nvml_factory(())
    fake.init_error = fake.NVMLError_LibraryNotFound()
    monkeypatch.setattr(_nvml, 'pynvml', fake)
    return fake


@pytest.fixture
def point_discovery(monkeypatch, fake_dev):
    """``point_discovery(module)`` makes the module see holders of the stand-in nodes only, never the host's.

    Every module looks through ``_flows.module_harness``, so that is where the look is pointed.
    """
    def at(module):
        monkeypatch.setattr(_discovery, 'discover', functools.partial(_holders.discover, dev_dir=fake_dev))
        monkeypatch.setattr(_discovery, 'host_gpus', functools.partial(_holders.host_gpus, dev_dir=fake_dev))
        return fake_dev
    return at
