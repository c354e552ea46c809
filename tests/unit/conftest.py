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


import json  # noqa: E402
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
handles = [os.open(path, os.O_RDONLY) for path in sys.argv[4:]]
# Children that hold nothing (they close the inherited handles): part of the holder's tree.
for dummy in range(int(sys.argv[3])):
    if os.fork() == 0:
        for handle in handles:
            os.close(handle)
        os.close(1)
        time.sleep(60)
        os._exit(0)
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


def _children_of(pid):
    try:
        with open('/proc/%d/task/%d/children' % (pid, pid)) as handle:
            return [int(field) for field in handle.read().split()]
    except OSError:
        return []


@pytest.fixture
def spawn_holder():
    """Start child processes that hold the given paths open; they are killed afterwards.

    ``spawn_holder(paths, ignore_sigterm=False, comm=None, forks=0)`` returns
    the Popen; ``forks`` children that hold nothing sit in its tree.
    """
    children = []

    def spawn(paths, ignore_sigterm=False, comm=None, forks=0):
        child = subprocess.Popen(
            [sys.executable, '-c', _HOLDER_CODE, 'ignore' if ignore_sigterm else 'default', comm or '',
             str(forks)] + list(paths),
            stdout=subprocess.PIPE)
        children.append(child)
        assert child.stdout.readline() == b'ready\n'
        return child

    yield spawn
    for child in children:
        if child.poll() is None:
            for grandchild in _children_of(child.pid):
                os.kill(grandchild, signal.SIGKILL)
            child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()


import threading  # noqa: E402
from types import SimpleNamespace  # noqa: E402

MIB = 1024 * 1024


class FakeNvml:
    """A stand-in for the ``pynvml`` module with the names the collection calls.

    ``gpus``: list of dicts (uuid, name, minor, pci_bus_id, total_mib, used_mib,
    reserved_mib, persistence, display). ``processes``: {(index, "compute" |
    "graphics" | "mps"): [(pid, used_mib or None)]}. ``missing``: function
    names that raise NVMLError_FunctionNotFound (for the plain process list
    names: NVMLLibraryMismatchError, as pynvml does). ``unsupported``: names
    that raise NVMLError_NotSupported. ``hang``: names that block until
    ``release`` is set. ``calls`` records every call by name.
    """

    nvmlMemory_v2 = 0x02000028

    class NVMLError(Exception):
        pass

    class NVMLError_FunctionNotFound(NVMLError):
        def __str__(self):
            return 'Function Not Found'

    class NVMLError_NotSupported(NVMLError):
        def __str__(self):
            return 'Not Supported'

    class NVMLError_LibraryNotFound(NVMLError):
        def __str__(self):
            return 'NVML Shared Library Not Found'

    class NVMLError_DriverNotLoaded(NVMLError):
        def __str__(self):
            return 'Driver Not Loaded'

    class NVMLLibraryMismatchError(Exception):
        pass

    _LISTS = {
        'compute': 'nvmlDeviceGetComputeRunningProcesses',
        'graphics': 'nvmlDeviceGetGraphicsRunningProcesses',
        'mps': 'nvmlDeviceGetMPSComputeRunningProcesses',
    }

    def __init__(self, gpus=(), processes=None, driver_version='580.159.04', missing=(), unsupported=(),
                 hang=(), init_error=None):
        self.gpus = [dict(gpu) for gpu in gpus]
        self.processes = dict(processes or {})
        self.driver_version = driver_version
        self.missing = set(missing)
        self.unsupported = set(unsupported)
        self.hang = set(hang)
        self.release = threading.Event()
        self.init_error = init_error
        self.calls = []
        self.shut_down = False
        for list_type, name in self._LISTS.items():
            for suffix in ('', '_v2', '_v3'):
                setattr(self, name + suffix, self._process_list_function(list_type, name + suffix))

    def _enter(self, name):
        self.calls.append(name)
        if name in self.hang:
            self.release.wait(30)
        if name in self.unsupported:
            raise self.NVMLError_NotSupported()
        if name in self.missing:
            raise self.NVMLError_FunctionNotFound()

    def count(self, name):
        return sum(1 for call in self.calls if call == name)

    def nvmlInit(self):
        self._enter('nvmlInit')
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self):
        self._enter('nvmlShutdown')
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self):
        self._enter('nvmlSystemGetDriverVersion')
        return self.driver_version

    def nvmlDeviceGetCount(self):
        self._enter('nvmlDeviceGetCount')
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._enter('nvmlDeviceGetHandleByIndex')
        return ('handle', index)

    def _gpu(self, handle):
        return self.gpus[handle[1]]

    def nvmlDeviceGetMinorNumber(self, handle):
        self._enter('nvmlDeviceGetMinorNumber')
        return self._gpu(handle).get('minor', handle[1])

    def nvmlDeviceGetUUID(self, handle):
        self._enter('nvmlDeviceGetUUID')
        return self._gpu(handle)['uuid']

    def nvmlDeviceGetName(self, handle):
        self._enter('nvmlDeviceGetName')
        return self._gpu(handle).get('name', 'NVIDIA H200').encode()

    def nvmlDeviceGetPciInfo(self, handle):
        self._enter('nvmlDeviceGetPciInfo')
        return SimpleNamespace(busId=self._gpu(handle)['pci_bus_id'].encode())

    def nvmlDeviceGetPersistenceMode(self, handle):
        self._enter('nvmlDeviceGetPersistenceMode')
        return self._gpu(handle).get('persistence', 1)

    def nvmlDeviceGetDisplayActive(self, handle):
        self._enter('nvmlDeviceGetDisplayActive')
        return self._gpu(handle).get('display', 0)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        gpu = self._gpu(handle)
        total = gpu.get('total_mib', 143771) * MIB
        used = gpu.get('used_mib', 0) * MIB
        reserved = gpu.get('reserved_mib', 615) * MIB
        if version:
            self._enter('nvmlDeviceGetMemoryInfo_v2')
            return SimpleNamespace(version=version, total=total, reserved=reserved, used=used,
                                   free=total - used - reserved)
        self._enter('nvmlDeviceGetMemoryInfo')
        return SimpleNamespace(total=total, used=used + reserved, free=total - used - reserved)

    def _process_list_function(self, list_type, name):
        def function(handle):
            try:
                self._enter(name)
            except self.NVMLError_FunctionNotFound:
                if name == self._LISTS[list_type]:
                    raise self.NVMLLibraryMismatchError('use a versioned function')
                raise
            return [SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * MIB,
                                    gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                    for pid, mib in self.processes.get((handle[1], list_type), [])]
        function.__name__ = name
        return function


def h200_gpus(count, used_mib=0):
    return [{'uuid': 'GPU-%08d-0000-4000-8000-000000000000' % index, 'minor': index,
             'pci_bus_id': '00000000:%02X:00.0' % (0x18 + index * 0x10), 'used_mib': used_mib}
            for index in range(count)]


@pytest.fixture
def fake_nvml_factory():
    """Build FakeNvml objects; any hung call is released after the test."""
    made = []

    def factory(*args, **kwargs):
        fake = FakeNvml(*args, **kwargs)
        made.append(fake)
        return fake

    factory.h200_gpus = h200_gpus
    factory.FakeNvml = FakeNvml
    yield factory
    for fake in made:
        fake.release.set()


_LIMITED_PREAMBLE = r'''
import json, sys
sys.stdout.write("ready\n")
sys.stdout.flush()
sys.stdin.readline()
'''


def _pids_cgroup_root():
    if os.path.isfile('/sys/fs/cgroup/pids/cgroup.procs'):
        return '/sys/fs/cgroup/pids'
    try:
        with open('/sys/fs/cgroup/cgroup.subtree_control') as handle:
            if 'pids' in handle.read().split():
                return '/sys/fs/cgroup'
    except OSError:
        pass
    return None


@pytest.fixture
def run_under_pids_limit(tmp_path):
    """Run Python code in a child that may not start one more thread or process.

    The child imports what ``setup`` names, then is moved into a pids cgroup of
    its own whose limit is the one task it has; ``code`` runs there and its
    last stdout line is returned as JSON. Skipped where no pids cgroup can be
    made (not root, no pids controller).
    """
    root = _pids_cgroup_root()
    if root is None or not os.access(root, os.W_OK):
        pytest.skip('no writable pids cgroup on this machine')
    group = os.path.join(root, 'gpuops-reclaim-test-%d' % os.getpid())
    children = []

    def run(setup, code, env=None):
        os.makedirs(group, exist_ok=True)
        child = subprocess.Popen([sys.executable, '-c', setup + _LIMITED_PREAMBLE + code],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)))
        children.append(child)
        assert child.stdout.readline() == b'ready\n'
        with open(os.path.join(group, 'pids.max'), 'w') as handle:
            handle.write('1')
        with open(os.path.join(group, 'cgroup.procs'), 'w') as handle:
            handle.write(str(child.pid))
        output, dummy = child.communicate(b'go\n', timeout=30)
        assert child.returncode == 0, output
        return json.loads(output.decode().strip().splitlines()[-1])

    yield run
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()
    if os.path.isdir(group):
        os.rmdir(group)
