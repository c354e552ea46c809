# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import signal
import subprocess
import sys

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import protection as _protection
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import record as _record
from ansible_collections.gpuops.reclaim.plugins.module_utils._host.nvml import NvmlView

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'proc')

HOLDER_KEYS = {
    'pid', 'ppid', 'user', 'uid', 'name', 'title', 'exe', 'create_time', 'state', 'wchan', 'gpus', 'gpu_uuids',
    'gpu_memory_mib', 'memory_mib', 'nvml_types', 'device_paths', 'kind', 'systemd_unit', 'container',
    'protected', 'protected_reason', 'is_self', 'sigterm_ignored', 'orphaned', 'visible', 'unreadable',
    'pgrp', 'session', 'leader_exited', 'node_gpus', 'unit_manager', 'suspicious',
}
GPU_KEYS = {
    'index', 'uuid', 'name', 'minor', 'pci_bus_id', 'memory_total_mib', 'memory_used_mib', 'memory_reserved_mib',
    'persistence_mode', 'display_active', 'holder_pids',
}


# --- protection and kind ----------------------------------------------------------

@pytest.mark.parametrize('pid, executable, kernel_thread, is_self, protect, unprotect, expected', [
    (1, 'init', False, False, (), (), (True, 'pid 1')),
    (1, 'systemd', False, False, (), ('systemd', '*'), (True, 'pid 1')),
    (2, 'kthreadd', True, False, (), (), (True, 'kernel thread')),
    (77, 'python3', False, True, (), (), (True, 'self or ancestor of this module')),
    (77, 'python3', False, True, (), ('python3',), (True, 'self or ancestor of this module')),
    (100, 'nv-hostengine', False, False, (), (), (True, 'default protected executable nv-hostengine')),
    (100, 'nvidia-persistenced', False, False, (), (), (True, 'default protected executable nvidia-persistenced')),
    (100, 'dcgm-exporter', False, False, (), (), (True, 'default protected executable dcgm-exporter')),
    (100, 'nv-fabricmanager', False, False, (), (), (True, 'default protected executable nv-fabricmanager')),
    (100, 'Xorg', False, False, (), (), (True, 'default protected executable Xorg')),
    (100, 'Xwayland', False, False, (), (), (True, 'default protected executable Xwayland')),
    (100, 'xorg', False, False, (), (), (False, None)),
    (100, 'Xorg', False, False, (), ('Xorg',), (False, None)),
    (100, 'Xorg', False, False, (), ('X*',), (False, None)),
    (100, 'Xwayland', False, False, (), ('Xorg',), (True, 'default protected executable Xwayland')),
    (100, 'python3.12', False, False, (), (), (False, None)),
    (100, 'python3.12', False, False, ('python3.12',), (), (True, 'user protected executable python3.12')),
    (100, 'python3.12', False, False, ('python3*',), (), (True, 'user protected executable python3.12')),
    (100, 'python3.12', False, False, ('python',), (), (False, None)),
    (100, 'Xorg', False, False, ('Xorg',), ('Xorg',), (True, 'user protected executable Xorg')),
    (100, None, False, False, ('*',), (), (False, None)),
])
def test_protection(pid, executable, kernel_thread, is_self, protect, unprotect, expected):
    assert _protection.protection(pid, executable, kernel_thread, is_self, protect, unprotect) == expected


@pytest.mark.parametrize('nvml_types, memory_mib, holds_uvm, nvml_available, kind', [
    ({'compute'}, 0, False, True, 'compute'),
    ({'graphics'}, 0, False, True, 'compute'),
    (set(), 512, False, True, 'compute'),
    # Driver 580 opens nvidia-uvm for an NVML-only client: with NVML, uvm proves nothing.
    (set(), 0, True, True, 'client'),
    # Without NVML, uvm is the best sign of a CUDA context there is.
    (set(), 0, True, False, 'compute'),
    (set(), 0, False, False, 'client'),
    (set(), 0, False, True, 'client'),
])
def test_classify_kind(nvml_types, memory_mib, holds_uvm, nvml_available, kind):
    assert _record.classify_kind(nvml_types, memory_mib, holds_uvm, nvml_available) == kind


# --- discovery with real child processes ------------------------------------------

def nvml_view(dev_dir_count=4, processes=None):
    gpus = []
    for index in range(dev_dir_count):
        gpus.append({
            'index': index, 'uuid': 'GPU-%d' % index, 'name': 'NVIDIA H200', 'minor': index,
            'pci_bus_id': '00000000:%02X:00.0' % (0x18 + index), 'memory_total_mib': 143771,
            'memory_used_mib': 0, 'memory_reserved_mib': 615, 'persistence_mode': True, 'display_active': False,
            'holder_pids': sorted((processes or {}).get(index, {})),
        })
    return NvmlView(True, driver_version='580.159.04', gpus=gpus, processes=processes or {})


def node(dev, name):
    return os.path.join(dev, name)


def by_pid(snapshot):
    return dict((holder['pid'], holder) for holder in snapshot.holders)


def test_discover_merges_nvml_and_proc(fake_dev, spawn_holder):
    uvm = spawn_holder([node(fake_dev, 'nvidia0'), node(fake_dev, 'nvidiactl'), node(fake_dev, 'nvidia-uvm')])
    monitor = spawn_holder([node(fake_dev, 'nvidia1'), node(fake_dev, 'nvidiactl')], comm='nv-hostengine')
    worker = spawn_holder([node(fake_dev, 'nvidia2'), node(fake_dev, 'nvidia3')], ignore_sigterm=True,
                          comm='VLLM::Worker_TP0_PP0')
    only_ctl = spawn_holder([node(fake_dev, 'nvidiactl'), node(fake_dev, 'nvidia-uvm')])
    gone = 4194303  # above any pid_max default: never a live process
    view = nvml_view(processes={
        2: {worker.pid: {'memory_mib': 40960, 'types': {'compute'}}},
        3: {worker.pid: {'memory_mib': 1024, 'types': {'compute', 'graphics'}},
            gone: {'memory_mib': 2048, 'types': {'compute'}}},
    })
    snapshot = _holders.discover(view, dev_dir=fake_dev)
    holders = by_pid(snapshot)
    assert set(holders) == {uvm.pid, monitor.pid, worker.pid}
    assert only_ctl.pid not in holders
    for holder in snapshot.holders:
        assert set(holder) == HOLDER_KEYS
        assert holder['unreadable'] is None
    for gpu in snapshot.gpus:
        assert set(gpu) == GPU_KEYS

    first = holders[uvm.pid]
    assert first['gpus'] == [0] and first['gpu_uuids'] == ['GPU-0']
    # nvidia-uvm without an NVML context: an NVML-only client on current drivers.
    assert first['kind'] == 'client' and first['memory_mib'] == 0 and first['nvml_types'] == []
    assert first['device_paths'] == sorted([node(fake_dev, 'nvidia-uvm'), node(fake_dev, 'nvidia0'),
                                            node(fake_dev, 'nvidiactl')])
    assert first['ppid'] == os.getpid() and not first['orphaned']
    assert first['state'] == 'sleeping' and not first['sigterm_ignored']
    assert first['user'] and first['uid'] == os.getuid()
    assert first['exe'] == os.path.realpath(sys.executable) or first['exe'].startswith('/')
    assert first['title'].startswith(sys.executable)
    assert isinstance(first['create_time'], float)
    assert not first['protected'] and first['protected_reason'] is None and not first['is_self']

    # A comm that looks like a protected daemon protects nothing: only the executable counts.
    second = holders[monitor.pid]
    assert second['name'] == 'nv-hostengine' and second['kind'] == 'client'
    assert not second['protected']

    third = holders[worker.pid]
    assert third['gpus'] == [2, 3] and third['gpu_memory_mib'] == {'2': 40960, '3': 1024}
    assert third['memory_mib'] == 41984 and third['nvml_types'] == ['compute', 'graphics']
    assert third['kind'] == 'compute' and third['sigterm_ignored'] and third['name'] == 'VLLM::Worker_TP'

    assert [gpu['holder_pids'] for gpu in snapshot.gpus] == [[uvm.pid], [monitor.pid], [worker.pid],
                                                             [worker.pid]]
    assert snapshot.nvml_available and snapshot.driver_version == '580.159.04'
    assert any('NVML lists PID %d' % gone in warning for warning in snapshot.warnings)
    assert snapshot.summary() == '4 GPUs, 3 holders (1 compute, 2 client), 41 GiB held'


def test_discover_protects_by_executable(fake_dev, spawn_holder):
    child = spawn_holder([node(fake_dev, 'nvidia0')])
    executable = os.path.basename(os.path.realpath('/proc/%d/exe' % child.pid))
    snapshot = _holders.discover(nvml_view(), dev_dir=fake_dev, protect=['python*'])
    holder = by_pid(snapshot)[child.pid]
    assert holder['protected'] and holder['protected_reason'] == 'user protected executable %s' % executable


def test_discover_leaves_out_its_own_process(fake_dev):
    handle = os.open(node(fake_dev, 'nvidia1'), os.O_RDONLY)
    try:
        snapshot = _holders.discover(nvml_view(), dev_dir=fake_dev)
    finally:
        os.close(handle)
    assert os.getpid() not in by_pid(snapshot)
    assert [gpu['holder_pids'] for gpu in snapshot.gpus] == [[], [], [], []]


def test_discover_marks_an_ancestor_as_self(fake_dev, spawn_holder):
    # Seen from a child (as if the child were the module), this process is an ancestor: listed, never signalled.
    child = spawn_holder([node(fake_dev, 'nvidia0')])
    handle = os.open(node(fake_dev, 'nvidia1'), os.O_RDONLY)
    try:
        snapshot = _holders.discover(nvml_view(), dev_dir=fake_dev, self_pid=child.pid)
    finally:
        os.close(handle)
    holders = by_pid(snapshot)
    assert child.pid not in holders
    holder = holders[os.getpid()]
    assert holder['is_self'] and holder['protected']
    assert holder['protected_reason'] == 'self or ancestor of this module'


def test_discover_scopes_to_selected_gpus(fake_dev, spawn_holder):
    zero = spawn_holder([node(fake_dev, 'nvidia0')])
    both = spawn_holder([node(fake_dev, 'nvidia1'), node(fake_dev, 'nvidia2')])
    snapshot = _holders.discover(nvml_view(), dev_dir=fake_dev, gpu_indices=[2])
    assert [gpu['index'] for gpu in snapshot.gpus] == [2]
    assert zero.pid not in by_pid(snapshot)
    # A holder in scope still lists every GPU it holds.
    assert by_pid(snapshot)[both.pid]['gpus'] == [1, 2]


def test_summary_counts_memory_on_the_selected_gpus_only(fake_dev, spawn_holder):
    # A worker that sees every GPU (as CUDA does) and holds memory on GPU 0 only,
    # and a small holder on GPU 2.
    worker = spawn_holder([node(fake_dev, 'nvidia0'), node(fake_dev, 'nvidia2'), node(fake_dev, 'nvidia-uvm')])
    small = spawn_holder([node(fake_dev, 'nvidia2'), node(fake_dev, 'nvidia-uvm')])
    view = nvml_view(processes={
        0: {worker.pid: {'memory_mib': 87858, 'types': {'compute'}}},
        2: {small.pid: {'memory_mib': 1536, 'types': {'compute'}}},
    })
    everything = _holders.discover(view, dev_dir=fake_dev)
    assert everything.summary() == '4 GPUs, 2 holders (2 compute, 0 client), 87.3 GiB held'
    # The worker has /dev/nvidia2 open but no context there: it does not hold GPU 2.
    assert by_pid(everything)[worker.pid]['gpus'] == [0]
    assert by_pid(everything)[worker.pid]['device_paths'] == sorted(
        [node(fake_dev, 'nvidia-uvm'), node(fake_dev, 'nvidia0'), node(fake_dev, 'nvidia2')])
    scoped = _holders.discover(view, dev_dir=fake_dev, gpu_indices=[2])
    assert set(by_pid(scoped)) == {small.pid}
    assert scoped.summary() == '1 GPU, 1 holder (1 compute, 0 client), 1.5 GiB held'


def test_discover_without_nvml_uses_minor_numbers(fake_dev, spawn_holder):
    child = spawn_holder([node(fake_dev, 'nvidia3'), node(fake_dev, 'nvidia-uvm')])
    snapshot = _holders.discover(NvmlView.unavailable('no library'), dev_dir=fake_dev)
    assert not snapshot.nvml_available and snapshot.driver_version is None
    assert [gpu['index'] for gpu in snapshot.gpus] == [0, 1, 2, 3]
    assert snapshot.gpus[3]['uuid'] is None and snapshot.gpus[3]['memory_used_mib'] is None
    holder = by_pid(snapshot)[child.pid]
    assert holder['gpus'] == [3] and holder['gpu_uuids'] == [None] and holder['kind'] == 'compute'
    assert snapshot.gpus[3]['holder_pids'] == [child.pid]


def test_discover_without_nvml_sees_nodes_that_were_removed(tmp_path, spawn_holder):
    dev = tmp_path / 'dev'
    dev.mkdir()
    path = str(dev / 'nvidia5')
    with open(path, 'w'):
        pass
    child = spawn_holder([path])
    os.unlink(path)
    snapshot = _holders.discover(None, dev_dir=str(dev))
    assert [gpu['index'] for gpu in snapshot.gpus] == [5]
    assert by_pid(snapshot)[child.pid]['device_paths'] == [path]


def test_discover_warns_about_nodes_nvml_does_not_know(fake_dev, spawn_holder):
    spawn_holder([node(fake_dev, 'nvidia3')])
    snapshot = _holders.discover(nvml_view(dev_dir_count=2), dev_dir=fake_dev)
    assert snapshot.holders == [] or all(3 not in holder['gpus'] for holder in snapshot.holders)
    assert any('%s, which match no GPU' % node(fake_dev, 'nvidia3') in warning for warning in snapshot.warnings)


def test_discover_warns_about_unknown_unprotect(fake_dev):
    snapshot = _holders.discover(nvml_view(), dev_dir=fake_dev, unprotect=['Xorg', 'nvtop'])
    assert snapshot.warnings[0].startswith('unprotect names no default protected executable or unit: nvtop')


def test_discover_rejects_unknown_maps_mode():
    with pytest.raises(ValueError, match="maps must be one of none, nvml, all; got: 'some'"):
        _holders.discover(None, maps='some')


# Python's mmap keeps a duplicate of the fd open; libc's mmap does not.
MAPPER = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
fd = os.open(sys.argv[1], os.O_RDONLY)
address = libc.mmap(None, 4096, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
assert address not in (None, ctypes.c_void_p(-1).value)
os.close(fd)
sys.stdout.write('ready\n')
sys.stdout.flush()
time.sleep(60)
'''


@pytest.fixture
def mapper(tmp_path):
    """A child that maps dev/nvidia0 (a plain file here) and keeps no fd open."""
    dev = tmp_path / 'dev'
    dev.mkdir()
    (dev / 'nvidia0').write_bytes(b'\0' * 4096)
    child = subprocess.Popen([sys.executable, '-c', MAPPER, str(dev / 'nvidia0')], stdout=subprocess.PIPE)
    assert child.stdout.readline() == b'ready\n'
    yield child, str(dev)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()


@pytest.mark.parametrize('maps, listed, found', [
    ('nvml', True, True),
    ('nvml', False, False),
    ('all', False, True),
    ('none', True, True),  # NVML alone makes it a holder, without its device paths
])
def test_discover_reads_maps_as_configured(mapper, maps, listed, found):
    child, dev = mapper
    processes = {0: {child.pid: {'memory_mib': 10, 'types': {'compute'}}}} if listed else {}
    snapshot = _holders.discover(nvml_view(dev_dir_count=1, processes=processes), dev_dir=dev, maps=maps)
    holders = by_pid(snapshot)
    assert (child.pid in holders) is found
    if found:
        expected = [] if maps == 'none' else [os.path.join(dev, 'nvidia0')]
        assert holders[child.pid]['device_paths'] == expected


# --- records built from captured samples --------------------------------------------

def captured_proc(tmp_path, parent_comm):
    proc = tmp_path / 'proc'
    shutil.copytree(os.path.join(FIXTURES, 'sigterm_ignored'), str(proc / '16175'))
    (proc / '16174').mkdir()
    (proc / '16174' / 'stat').write_text('16174 (%s) S 1 16174 16174 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 '
                                         '25 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n'
                                         % parent_comm)
    return str(proc)


@pytest.mark.parametrize('parent_comm, orphaned', [('systemd', True), ('bash', False)])
def test_build_holder_from_a_captured_sample(tmp_path, parent_comm, orphaned):
    proc_root = captured_proc(tmp_path, parent_comm)
    record = _record.build_holder(
        16175, {'/dev/nvidia0', '/dev/nvidiactl'}, {0: {'memory_mib': 0, 'types': {'compute'}}}, {0: 0},
        {0: {'uuid': 'GPU-0'}}, ancestors=set(), protect=(), unprotect=(), proc_root=proc_root, dev_dir='/dev')
    assert record['name'] == 'VLLM::Engine) x'
    assert record['exe'] is None  # not captured: falls back to comm for protection
    assert record['state'] == 'sleeping' and record['sigterm_ignored']
    assert record['orphaned'] is orphaned
    assert record['systemd_unit'] is None and record['container'] is None
    assert record['kind'] == 'compute' and record['gpus'] == [0]
    assert record['wchan'] is None and record['create_time'] is None


def test_build_holder_protects_by_comm_when_exe_is_unreadable(tmp_path):
    proc_root = captured_proc(tmp_path, 'bash')
    record = _record.build_holder(16175, {'/dev/nvidia0'}, {}, {0: 0}, {}, set(), ('VLLM::Engine) x',), (),
                                  proc_root=proc_root)
    assert record['protected_reason'] == ('user protected executable VLLM::Engine) x '
                                          '(from comm VLLM::Engine) x; the executable cannot be read)')


def test_unreadable_kernel_threads_are_not_counted(tmp_path, monkeypatch):
    proc = tmp_path / 'proc'
    shutil.copytree(os.path.join(FIXTURES, 'kernel_thread'), str(proc / '2'))
    shutil.copytree(os.path.join(FIXTURES, 'sigterm_caught'), str(proc / '300'))
    monkeypatch.setattr(_holders._procfs, 'scan_device_holders', lambda proc_root, dev_dir: ({}, [2, 300, 301], 0))
    snapshot = _holders.discover(None, proc_root=str(proc), dev_dir=str(tmp_path / 'dev'))
    # PID 301 vanished: its stat cannot be read, so it still counts as not inspected.
    assert snapshot.unreadable == 2 and snapshot.unreadable_pids == [300, 301]
    assert snapshot.warnings == ['2 processes could not be inspected (permission denied: PID 300, 301); holders '
                                 'among them are not reported. Run as root to see every holder.']
