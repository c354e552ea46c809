# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest


from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import module_harness as _discovery
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml
from ansible_collections.gpuops.reclaim.plugins.modules import nvidia_holders


def warnings_text(result):
    """The warnings as one text, whatever structure this ansible-core version gives them."""
    return json.dumps(result.get('warnings', []))


@pytest.fixture
def run_module(module_runner):
    return module_runner(nvidia_holders)


@pytest.fixture
def two_gpus(monkeypatch, fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(2, used_mib=1024))
    monkeypatch.setattr(_nvml, 'pynvml', fake)
    return fake


@pytest.fixture
def fake_dev_discovery(monkeypatch, fake_dev, point_discovery):
    """Let the module's discovery look at stand-in nodes instead of /dev."""
    point_discovery(nvidia_holders)
    return fake_dev


@pytest.mark.parametrize('args, message', [
    ({'nvml_timeout': 0}, 'nvml_timeout must be greater than 0 and at most 600 seconds; got: 0.0'),
    ({'nvml_timeout': -2}, 'nvml_timeout must be greater than 0 and at most 600 seconds; got: -2.0'),
    ({'nvml_timeout': 3600}, 'nvml_timeout must be greater than 0 and at most 600 seconds; got: 3600.0'),
    ({'gpus': ['GPU-abc']}, "gpus[0]: no GPU matches 'GPU-abc'; GPUs on this host: "
                            "0 (GPU-00000000-0000-4000-8000-000000000000, 00000000:18:00.0), "
                            "1 (GPU-00000001-0000-4000-8000-000000000000, 00000000:28:00.0)"),
    ({'gpus': ['0', '2']}, "gpus[1]: no GPU matches '2'; GPUs on this host: "
                           "0 (GPU-00000000-0000-4000-8000-000000000000, 00000000:18:00.0), "
                           "1 (GPU-00000001-0000-4000-8000-000000000000, 00000000:28:00.0)"),
    ({'protect': 'nv-hostengine', 'bogus': 1}, 'Unsupported parameters'),
    ({'nvml_timeout': True}, 'nvml_timeout: must be a number of seconds, not a boolean; got: True'),
])
def test_bad_input_fails_with_a_clear_message(run_module, two_gpus, args, message):
    result = run_module(args)
    assert result['failed']
    assert result['msg'].startswith(message)


def test_reads_nvml(run_module, two_gpus, fake_dev_discovery):
    result = run_module({'gpus': ['GPU-00000001-0000-4000-8000-000000000000']})
    assert not result['changed'] and 'failed' not in result
    assert result['nvml_available'] and result['driver_version'] == '580.159.04'
    assert [gpu['index'] for gpu in result['gpus']] == [1]
    assert result['gpus'][0]['memory_used_mib'] == 1024
    assert result['unreadable_processes'] == 0
    assert result['msg'] == '1 GPU, 0 holders (0 compute, 0 client), 0 MiB held', result['holders']


def test_falls_back_to_proc_without_the_library(run_module, no_library, fake_dev_discovery, spawn_holder):
    child = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia1'),
                          os.path.join(fake_dev_discovery, 'nvidia-uvm')])
    result = run_module({'gpus': ['1']})
    assert not result['changed'] and not result['nvml_available']
    assert result['driver_version'] is None
    assert [gpu['index'] for gpu in result['gpus']] == [1]
    assert [holder['pid'] for holder in result['holders']] == [child.pid]
    assert result['holders'][0]['kind'] == 'compute'
    assert result['msg'] == '1 GPU, 1 holder (1 compute, 0 client), 0 MiB held'
    assert 'NVML cannot be used (NVML could not be initialised: NVML Shared Library Not Found)' in warnings_text(result)


def test_check_mode_gives_the_same_answer(run_module, no_library, fake_dev_discovery, spawn_holder):
    spawn_holder([os.path.join(fake_dev_discovery, 'nvidia0')])
    real = run_module({})
    checked = run_module({'_ansible_check_mode': True})
    for key in ('msg', 'nvml_available', 'gpus'):
        assert checked[key] == real[key]
    assert [h['pid'] for h in checked['holders']] == [h['pid'] for h in real['holders']]
    assert not checked['changed']


def test_require_nvml_fails_without_the_library(run_module, no_library):
    result = run_module({'require_nvml': True})
    assert result['failed'] and not result['nvml_available']
    assert result['msg'] == ('NVML cannot be used and require_nvml is true: '
                             'NVML could not be initialised: NVML Shared Library Not Found')


def test_require_nvml_fails_without_pynvml(run_module, monkeypatch):
    monkeypatch.setattr(_discovery, 'HAS_PYNVML', False)
    result = run_module({'require_nvml': True})
    assert result['failed']
    assert 'Failed to import the required Python library (nvidia-ml-py)' in result['msg']


def test_missing_psutil_is_reported(run_module, monkeypatch):
    monkeypatch.setattr(_discovery, 'HAS_PSUTIL', False)
    result = run_module({})
    assert result['failed']
    assert 'Failed to import the required Python library (psutil)' in result['msg']


def test_hung_nvml_falls_back_within_the_deadline(run_module, monkeypatch, fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(1), hang={'nvmlDeviceGetComputeRunningProcesses'})
    monkeypatch.setattr(_nvml, 'pynvml', fake)
    result = run_module({'nvml_timeout': 0.2})
    assert not result['nvml_available'] and 'failed' not in result
    assert 'did not return within 0.2 seconds' in warnings_text(result)
