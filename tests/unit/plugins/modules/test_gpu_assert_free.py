# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import json
import os
import threading

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.reclaim.plugins.module_utils import _holders, _nvml
from ansible_collections.gpuops.reclaim.plugins.modules import gpu_assert_free


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            gpu_assert_free.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def gpus(monkeypatch, fake_nvml_factory):
    def make(used_mib=0, count=2):
        fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(count, used_mib=used_mib))
        monkeypatch.setattr(_nvml, 'pynvml', fake)
        return fake
    return make


@pytest.fixture
def no_library(monkeypatch, fake_nvml_factory):
    fake = fake_nvml_factory(())
    fake.init_error = fake.NVMLError_LibraryNotFound()
    monkeypatch.setattr(_nvml, 'pynvml', fake)
    return fake


@pytest.fixture(autouse=True)
def fake_dev_discovery(monkeypatch, fake_dev):
    """Every test looks at stand-in device nodes only, never at the host's."""
    monkeypatch.setattr(gpu_assert_free, 'discover', functools.partial(_holders.discover, dev_dir=fake_dev))
    monkeypatch.setattr(gpu_assert_free, 'host_gpus', functools.partial(_holders.host_gpus, dev_dir=fake_dev))
    return fake_dev


@pytest.mark.parametrize('args, message', [
    ({'gpus': ['9']}, "gpus[0]: no GPU matches '9'"),
    ({'max_used_mib': -1}, 'max_used_mib: must be 0 or more; got: -1'),
    ({'max_used_percent': 150}, 'max_used_percent: must be from 0 to 100; got: 150.0'),
    ({'max_used_mib': 10, 'max_used_percent': 1}, 'parameters are mutually exclusive: max_used_mib|max_used_percent'),
    ({'timeout_seconds': -1}, 'timeout_seconds: must be a number of seconds from 0 to 3600; got: -1.0'),
    ({'nvml_timeout': 0}, 'nvml_timeout must be greater than 0 and at most 600 seconds; got: 0.0'),
])
def test_bad_input(capsys, gpus, args, message):
    gpus()
    result = run_module(capsys, args)
    assert result['failed'] and result['msg'].startswith(message), result['msg']


@pytest.mark.parametrize('check_mode', [False, True])
def test_free_host_passes(capsys, gpus, check_mode):
    gpus(used_mib=0)
    result = run_module(capsys, {'_ansible_check_mode': check_mode})
    assert 'failed' not in result and result['free'] is True and result['changed'] is False
    assert result['msg'] == '2 GPUs free (0, 1)'
    assert result['waited_seconds'] == 0.0


@pytest.mark.parametrize('check_mode', [False, True])
def test_stuck_context_fails_and_names_the_reset(capsys, gpus, check_mode):
    gpus(used_mib=20480)
    result = run_module(capsys, {'gpus': ['1'], '_ansible_check_mode': check_mode})
    assert result['failed'] and result['free'] is False and result['changed'] is False
    lines = result['msg'].split('\n')
    assert lines[0] == 'GPU 1 (GPU-0000\u2026) busy: 20480 MiB used; holders: none (stuck context)'
    assert 'nvidia-smi --gpu-reset -i 1' in lines[1] and 'reboot' in lines[1]
    assert result['gpus'][0]['reasons'] == ['20480 MiB used, more than 64 MiB']


def test_percent_threshold(capsys, gpus):
    gpus(used_mib=1000)
    assert run_module(capsys, {'max_used_percent': 1})['free'] is True
    assert run_module(capsys, {'max_used_mib': 999})['free'] is False


def test_waits_until_memory_comes_back(capsys, gpus):
    fake = gpus(used_mib=8000)

    def release():
        for gpu in fake.gpus:
            gpu['used_mib'] = 0

    timer = threading.Timer(0.3, release)
    timer.start()
    try:
        result = run_module(capsys, {'timeout_seconds': 5, 'poll_interval': 0.02})
    finally:
        timer.cancel()
    assert result['free'] is True and 0.25 <= result['waited_seconds'] < 1.5
    assert result['msg'].startswith('2 GPUs free (0, 1) after ')


def test_gives_up_at_the_timeout(capsys, gpus):
    gpus(used_mib=8000)
    result = run_module(capsys, {'timeout_seconds': 0.3, 'poll_interval': 0.05})
    assert result['failed'] and 0.3 <= result['waited_seconds'] < 1.0


def test_without_nvml_fails_unless_allowed(capsys, no_library, fake_dev_discovery):
    result = run_module(capsys, {})
    assert result['failed'] and result['free'] is False
    assert result['msg'].startswith('Cannot prove the GPUs free: NVML cannot be used (')
    relaxed = run_module(capsys, {'require_nvml': False})
    assert 'failed' not in relaxed and relaxed['free'] is True and relaxed['nvml_available'] is False
    assert 'GPU memory is not checked' in json.dumps(relaxed.get('warnings'))


def test_proc_holder_makes_a_gpu_busy_and_allow_accepts_it(capsys, no_library, fake_dev_discovery, spawn_holder):
    child = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia2'), os.path.join(fake_dev_discovery, 'nvidia-uvm')],
                         comm='my-exporter')
    result = run_module(capsys, {'require_nvml': False, 'gpus': ['2']})
    assert result['failed'] and [h['pid'] for h in result['holders']] == [child.pid]
    assert result['msg'].startswith('GPU 2 busy: unknown MiB used; holders: pid %d ' % child.pid)
    assert 'run gpuops.reclaim.gpu_reclaim' in result['msg']
    for allow in (['my-exporter'], [str(child.pid)]):
        allowed = run_module(capsys, {'require_nvml': False, 'gpus': ['2'], 'allow': allow})
        assert allowed['free'] is True, allowed['msg']
