# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""bench/nshosts.py end to end: two namespace hosts, a holder on one, each host
sees only its own processes and simulated GPUs, and down removes everything."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NSHOSTS = os.path.join(ROOT, 'bench', 'nshosts.py')
LIBRARY = os.path.join(ROOT, 'build', 'simhost', 'stage', 'files', 'usr', 'lib', 'x86_64-linux-gnu')

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason='namespace hosts need root'),
    pytest.mark.skipif(not (shutil.which('unshare') and shutil.which('nsenter')), reason='needs util-linux'),
    pytest.mark.skipif(not os.path.exists(os.path.join(LIBRARY, 'libnvidia-ml.so.1')),
                       reason='the stand-in NVML is not built (tests/simhost/simhost setup)'),
]

PROBE = '''
import json, os, psutil, pynvml
pynvml.nvmlInit()
gpus = []
for index in range(pynvml.nvmlDeviceGetCount()):
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    gpus.append({'used_mib': pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used >> 20,
                 'pids': [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]})
print(json.dumps({'gpus': gpus, 'pids': psutil.pids(), 'me': os.getpid()}))
'''


def nshosts(*args):
    return subprocess.run([sys.executable, NSHOSTS] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120, check=False)


def probe(work, name):
    proc = subprocess.run([os.path.join(work, name, 'python'), '-c', PROBE], stdout=subprocess.PIPE,
                          universal_newlines=True, timeout=60, check=True)
    return json.loads(proc.stdout)


def test_hosts_are_isolated_and_removed(tmp_path):
    work = str(tmp_path / 'hosts')
    up = nshosts('up', '--dir', work, '--count', '2', '--gpus', '2', '--python', sys.executable, '--library', LIBRARY)
    try:
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout) == ['nshost-01', 'nshost-02']
        with open(os.path.join(work, 'inventory.json')) as handle:
            inventory = json.load(handle)['gpu_hosts']
        assert inventory['vars'] == {'ansible_connection': 'local', 'ansible_pipelining': True}
        assert inventory['hosts']['nshost-02']['ansible_python_interpreter'] == os.path.join(work, 'nshost-02',
                                                                                             'python')
        held = nshosts('hold', '--dir', work, 'nshost-01', '--', '--gpu', '1', '--mib', '4096', '--title', 'worker')
        assert held.returncode == 0, held.stderr
        holder = json.loads(held.stdout.strip().splitlines()[-1])

        one, two = probe(work, 'nshost-01'), probe(work, 'nshost-02')
        # PID 1 of the host, the holder, and the probe itself: nothing of the machine.
        assert holder['pid'] in one['pids'] and 1 in one['pids'] and len(one['pids']) <= 4
        assert one['gpus'] == [{'used_mib': 0, 'pids': []}, {'used_mib': 4096, 'pids': [holder['pid']]}]
        assert two['gpus'] == [{'used_mib': 0, 'pids': []}, {'used_mib': 0, 'pids': []}]
        with open(os.path.join(work, 'hosts.json')) as handle:
            inits = [host['init_pid'] for host in json.load(handle)['hosts'].values()]
    finally:
        down = nshosts('down', '--dir', work)
    assert down.returncode == 0, down.stderr
    assert not any(os.path.exists('/proc/%d' % pid) for pid in inits)
    assert not os.path.exists(os.path.join(work, 'hosts.json'))


def test_up_refuses_without_the_stand_in_library(tmp_path):
    proc = nshosts('up', '--dir', str(tmp_path / 'hosts'), '--library', str(tmp_path))
    assert proc.returncode == 1
    assert 'no libnvidia-ml.so.1 in %s' % tmp_path in proc.stderr
