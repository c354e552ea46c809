# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import threading

import pytest


from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import module_harness as _discovery
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import cgroup as _cgroup
from ansible_collections.gpuops.reclaim.plugins.modules import gpu_assert_free


@pytest.fixture
def run_module(module_runner):
    return module_runner(gpu_assert_free)


@pytest.fixture
def gpus(monkeypatch, fake_nvml_factory):
    def make(used_mib=0, count=2):
        fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(count, used_mib=used_mib))
        monkeypatch.setattr(_nvml, 'pynvml', fake)
        return fake
    return make


@pytest.fixture(autouse=True)
def fake_dev_discovery(monkeypatch, fake_dev, point_discovery):
    """Every test looks at stand-in device nodes only, never at the host's."""
    point_discovery(gpu_assert_free)
    return fake_dev


@pytest.mark.parametrize('args, message', [
    ({'gpus': ['9']}, "gpus[0]: no GPU matches '9'"),
    ({'max_used_mib': -1}, 'max_used_mib: must be 0 or more; got: -1'),
    ({'max_used_percent': 150}, 'max_used_percent: must be from 0 to 100; got: 150.0'),
    ({'max_used_mib': 10, 'max_used_percent': 1}, 'parameters are mutually exclusive: max_used_mib|max_used_percent'),
    ({'timeout_seconds': -1}, 'timeout_seconds: must be a number of seconds from 0 to 3600; got: -1.0'),
    ({'nvml_timeout': 0}, 'nvml_timeout must be greater than 0 and at most 600 seconds; got: 0.0'),
    ({'timeout_seconds': True}, 'timeout_seconds: must be a number of seconds, not a boolean; got: True'),
    ({'poll_interval': False}, 'poll_interval: must be a number of seconds, not a boolean; got: False'),
    ({'nvml_timeout': 'soon'}, "nvml_timeout: must be a number of seconds; got: 'soon'"),
])
def test_bad_input(run_module, gpus, args, message):
    gpus()
    result = run_module(args)
    assert result['failed'] and result['msg'].startswith(message), result['msg']


@pytest.mark.parametrize('check_mode', [False, True])
def test_free_host_passes(run_module, gpus, check_mode):
    gpus(used_mib=0)
    result = run_module({'_ansible_check_mode': check_mode})
    assert 'failed' not in result and result['free'] is True and result['changed'] is False
    assert result['msg'] == '2 GPUs free (0, 1)'
    assert result['waited_seconds'] == 0.0


@pytest.mark.parametrize('check_mode', [False, True])
def test_stuck_context_fails_and_names_the_reset(run_module, gpus, check_mode):
    gpus(used_mib=20480)
    result = run_module({'gpus': ['1'], '_ansible_check_mode': check_mode})
    assert result['failed'] and result['free'] is False and result['changed'] is False
    lines = result['msg'].split('\n')
    assert lines[0] == 'GPU 1 (GPU-0000\u2026) busy: 20480 MiB used; holders: none (stuck context)'
    assert 'nvidia-smi --gpu-reset -i 1' in lines[1] and 'reboot' in lines[1]
    assert result['gpus'][0]['reasons'] == ['20480 MiB used, more than 64 MiB']


def test_percent_threshold(run_module, gpus):
    gpus(used_mib=1000)
    assert run_module({'max_used_percent': 1})['free'] is True
    assert run_module({'max_used_mib': 999})['free'] is False


def test_waits_until_memory_comes_back(run_module, gpus):
    fake = gpus(used_mib=8000)

    def release():
        for gpu in fake.gpus:
            gpu['used_mib'] = 0

    timer = threading.Timer(0.3, release)
    timer.start()
    try:
        result = run_module({'timeout_seconds': 30, 'poll_interval': 0.02})
    finally:
        timer.cancel()
    # Back as soon as the memory is, far before the 30 s timeout, even on a loaded machine.
    assert result['free'] is True and 0.25 <= result['waited_seconds'] < 10.0
    assert result['msg'].startswith('2 GPUs free (0, 1) after ')


def test_gives_up_at_the_timeout(run_module, gpus):
    gpus(used_mib=8000)
    result = run_module({'timeout_seconds': 0.3, 'poll_interval': 0.05})
    # It gave up after the 0.3 s asked for, not the default 30 s; the bound leaves
    # room for a loaded machine, where one look at /proc may take a second.
    assert result['failed'] and 0.3 <= result['waited_seconds'] < 5.0


def test_without_nvml_fails_unless_allowed(run_module, no_library, fake_dev_discovery):
    result = run_module({})
    assert result['failed'] and result['free'] is False
    assert result['msg'].startswith('Cannot prove the GPUs free: NVML cannot be used (')
    relaxed = run_module({'require_nvml': False})
    assert 'failed' not in relaxed and relaxed['free'] is True and relaxed['nvml_available'] is False
    assert 'GPU memory is not checked' in json.dumps(relaxed.get('warnings'))


def test_proc_holder_makes_a_gpu_busy_and_allow_accepts_it(run_module, no_library, fake_dev_discovery, spawn_holder):
    child = spawn_holder([os.path.join(fake_dev_discovery, 'nvidia2'), os.path.join(fake_dev_discovery, 'nvidia-uvm')],
                         comm='my-exporter')
    result = run_module({'require_nvml': False, 'gpus': ['2']})
    assert result['failed'] and [h['pid'] for h in result['holders']] == [child.pid]
    assert result['msg'].startswith('GPU 2 busy: unknown MiB used; holders: pid %d ' % child.pid)
    assert 'run gpuops.reclaim.gpu_reclaim' in result['msg']
    for allow in (['my-exporter'], [str(child.pid)]):
        allowed = run_module({'require_nvml': False, 'gpus': ['2'], 'allow': allow})
        assert allowed['free'] is True, allowed['msg']


def test_tells_the_user_id_it_ran_as_whether_free_busy_or_without_nvml(run_module, gpus, no_library):
    assert run_module({'require_nvml': False})['uid'] == os.geteuid()
    assert run_module({})['uid'] == os.geteuid()
    gpus(used_mib=0)
    assert run_module({})['uid'] == os.geteuid()
    gpus(used_mib=4096)
    busy = run_module({})
    assert busy['failed'] and busy['uid'] == os.geteuid()


@pytest.mark.parametrize('flag, library', [('HAS_PSUTIL', 'psutil'), ('HAS_PYNVML', 'nvidia-ml-py')])
def test_a_missing_library_is_named_with_the_user_id(run_module, gpus, monkeypatch, flag, library):
    gpus()
    monkeypatch.setattr(_discovery, flag, False)
    result = run_module({})
    assert result['failed'] and result['uid'] == os.geteuid()
    assert result['msg'].startswith('Failed to import the required Python library (%s)' % library)


def test_settle_passes_when_the_gpus_stay_free(run_module, gpus):
    gpus(used_mib=0)
    result = run_module({'settle_seconds': 0.3, 'poll_interval': 0.02})
    assert 'failed' not in result and result['free'] is True
    assert result['time_to_free_seconds'] == 0.0
    assert 0.3 <= result['settle_seconds_observed'] < 1.0
    assert result['msg'].endswith('and stayed free for %.2f s' % result['settle_seconds_observed'])


def own_container():
    """The container this test runs in (the ansible-core matrix runs some releases in one), or None."""
    with open('/proc/self/cgroup') as handle:
        for line in handle:
            found = _cgroup.container_from_path(line.rstrip('\n').split(':', 2)[-1])
            if found:
                return found
    return None


def test_settle_fails_when_a_holder_comes_back(run_module, no_library, fake_dev_discovery, spawn_holder):
    """A real process that opens GPU 2's node during the settle: the proof fails naming it and its parent."""
    nodes = [os.path.join(fake_dev_discovery, 'nvidia2'), os.path.join(fake_dev_discovery, 'nvidia-uvm')]
    timer = threading.Timer(0.2, lambda: spawn_holder(nodes, comm='comeback'))
    timer.start()
    try:
        result = run_module({'require_nvml': False, 'gpus': ['2'], 'settle_seconds': 3, 'poll_interval': 0.02})
    finally:
        timer.cancel()
    assert result['failed'] and result['free'] is False
    assert result['time_to_free_seconds'] == 0.0
    assert 0.15 <= result['settle_seconds_observed'] < 2.5
    lines = result['msg'].splitlines()
    assert lines[0].startswith('The GPUs read free after 0.00 s, then did not stay free for 3 s:')
    # (the holder's title is its multi-line command line)
    assert ' took GPU 2 back ' in result['msg'] and 'parent pid %d' % os.getpid() in result['msg']
    if own_container():
        # The holder's container restarts it too, and stopping the container is the step that sticks.
        assert 'next step: stop the container (' in result['msg']
    else:
        assert 'next step: stop its parent pid %d' % os.getpid() in result['msg']


def test_settle_seconds_is_validated(run_module, gpus):
    gpus()
    result = run_module({'settle_seconds': 601})
    assert result['failed'] and result['msg'] == 'settle_seconds: must be a number of seconds from 0 to 600; got: 601.0'
