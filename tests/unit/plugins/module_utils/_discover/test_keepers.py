# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Keepers of a context whose creator is gone: evidence, ranks, and discovery on real processes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import identity as _identity
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import keepers as _keepers
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import record as _record
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import procfs as _procfs
from ansible_collections.gpuops.reclaim.plugins.module_utils._host.nvml import NvmlView


def record(pid, gpus, session=0, pgrp=0, **extra):
    entry = {'pid': pid, 'gpus': list(gpus), 'node_gpus': list(gpus), 'kind': 'client', 'session': session,
             'pgrp': pgrp, 'is_self': False}
    entry.update(extra)
    return entry


@pytest.mark.parametrize('maps, session, expected', [
    ({'/dev/nvidia0', '/dev/nvidiactl'}, 0, ['mapped']),
    ({'/dev/nvidia0'}, 41, ['mapped', 'session']),
    (set(), 0, ['received']),
    # Maps that could not be read tell nothing.
    (None, 0, []),
    ({'/dev/nvidiactl'}, 0, ['client']),
    ({'/dev/nvidiactl'}, 41, ['session', 'client']),
    # A CUDA process of another GPU maps that GPU's node, not this one's.
    ({'/dev/nvidia1', '/dev/nvidiactl'}, 0, ['client']),
])
def test_evidence_strongest_first(maps, session, expected):
    assert _keepers.evidence_of(record(7, [0], session=session), 0, 0, {41}, maps) == expected


def test_gone_creators_are_missing_or_zombie_pids():
    processes = {0: {41: {'memory_mib': 6144}, 42: {'memory_mib': 10}}, 1: {43: {'memory_mib': 20}}}
    records = {42: {'state': 'sleeping'}, 43: {'state': 'zombie'}}
    assert _keepers.gone_creators(processes, records, {41}) == {0: {41: 6144}, 1: {43: 20}}


def test_attribute_ranks_marks_and_leaves_listed_and_self_alone():
    pool = record(50, [0], session=41)
    receiver = record(51, [0])
    monitor = record(52, [0, 1])
    listed = record(53, [0], kind='compute')
    module = record(54, [0], is_self=True)
    holders = [pool, receiver, monitor, listed, module]
    maps = {50: {'/dev/nvidia0', '/dev/nvidiactl'}, 51: set(), 52: {'/dev/nvidiactl'}, 53: {'/dev/nvidia0'},
            54: {'/dev/nvidiactl'}}
    asked = []

    def maps_of(pids):
        asked.append(list(pids))
        return dict((pid, maps[pid]) for pid in pids)

    contexts = _keepers.attribute(holders, {0: {41: 6144}}, {0: 0}, maps_of, {0: {41, 53}})
    assert contexts == [{'gpu': 0, 'creator_pids': [41], 'memory_mib': 6144, 'keepers': [50, 51, 52]}]
    assert asked == [[50, 51, 52]]
    assert (pool['kind'], pool['keeper_rank'], pool['keeps'][0]['evidence']) == ('compute', 1, ['mapped', 'session'])
    assert (receiver['kind'], receiver['keeper_rank']) == ('compute', 3)
    # An NVML client stays a client, a candidate of the last round only.
    assert (monitor['kind'], monitor['keeper_rank']) == ('client', 4)
    assert 'keeps' not in listed and 'keeps' not in module
    assert 'keeps the context of exited pid 41 on GPU 0 (has the GPU node mapped' in _keepers.describe(pool)


def test_outside_the_host_namespace_a_client_is_never_a_keeper():
    monitor = record(52, [0])
    contexts = _keepers.attribute([monitor], {0: {41: 10}}, {0: 0}, lambda pids: {52: {'/dev/nvidiactl'}}, {},
                                  clients_may_keep=False)
    assert contexts[0]['keepers'] == [] and 'keeps' not in monitor
    assert 'no other process here holds' in _keepers.warnings_for(contexts)[0]


# --- real processes ------------------------------------------------------------

def _zero_node(path):
    """A /dev/zero clone, which can be mapped (root), or skip."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    except (PermissionError, OSError):
        pytest.skip('needs root to make a device node')
    return path


_POOL_CODE = r'''
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
mapping = mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
sys.stdout.write('%d\n' % child)
sys.stdout.flush()
os._exit(0)
'''

_EXIT_LEADER_CODE = r'''
import ctypes, os, sys, threading, time
fd = os.open(sys.argv[1], os.O_RDWR)
threading.Thread(target=time.sleep, args=(60,)).start()
sys.stdout.write('ready\n')
sys.stdout.flush()
ctypes.CDLL(None).syscall({'x86_64': 60, 'aarch64': 93}[os.uname().machine], 0)
'''


def _view(processes):
    gpus = [{'index': 0, 'uuid': 'GPU-0', 'name': 'H200', 'minor': 0, 'pci_bus_id': None,
             'memory_total_mib': 1000, 'memory_used_mib': 500, 'memory_reserved_mib': 0,
             'persistence_mode': True, 'display_active': False, 'holder_pids': []}]
    return NvmlView(True, driver_version='580.159.04', gpus=gpus, processes=processes)


def _wait(predicate, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_discovery_finds_the_forked_child_that_keeps_a_dead_creators_context(tmp_path):
    node = _zero_node(str(tmp_path / 'nvidia0'))
    creator = subprocess.Popen([sys.executable, '-c', _POOL_CODE, node], stdout=subprocess.PIPE,
                               start_new_session=True)
    child = int(creator.stdout.readline())
    creator.stdout.close()
    creator.wait()
    try:
        snapshot = _holders.discover(_view({0: {creator.pid: {'memory_mib': 500, 'types': {'compute'}}}}),
                                     dev_dir=str(tmp_path), shares_namespace=True)
        keeper = [h for h in snapshot.holders if h['pid'] == child][0]
        assert keeper['kind'] == 'compute'
        assert keeper['keeps'] == [{'gpu': 0, 'creator_pids': [creator.pid], 'memory_mib': 500,
                                    'evidence': ['mapped', 'session'], 'rank': 1}]
        assert snapshot.contexts == [{'gpu': 0, 'creator_pids': [creator.pid], 'memory_mib': 500,
                                      'keepers': [child]}]
        assert any('which has exited; its context is kept by pid %d' % child in w for w in snapshot.warnings)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_process_whose_main_thread_exited_is_alive_and_holds_its_nodes(tmp_path):
    node = _zero_node(str(tmp_path / 'nvidia0'))
    proc = subprocess.Popen([sys.executable, '-c', _EXIT_LEADER_CODE, node], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b'ready\n'
        assert _wait(lambda: _procfs.read_stat(proc.pid)['state'] == 'Z')
        assert os.listdir('/proc/%d/fd' % proc.pid) == []
        stat_now = _procfs.read_stat(proc.pid)
        assert _procfs.process_state(stat_now)[1] is True
        holders, dummy, dummy2 = _procfs.scan_device_holders(dev_dir=str(tmp_path))
        assert holders[proc.pid] == {node}
        assert _procfs.fd_device_paths(proc.pid, str(tmp_path) + '/nvidia') == {node}
        ref = _identity.ProcessRef(proc.pid, _record._create_time(proc.pid, stat_now, '/proc'))
        assert _identity.identity_status(ref) == 'sleeping'
        assert _identity.process_status(proc.pid) == 'sleeping'
        snapshot = _holders.discover(_view({0: {proc.pid: {'memory_mib': 500, 'types': {'compute'}}}}),
                                     dev_dir=str(tmp_path), shares_namespace=True)
        record = [h for h in snapshot.holders if h['pid'] == proc.pid][0]
        assert record['state'] == 'sleeping' and record['leader_exited'] and record['kind'] == 'compute'
        assert record['title'].startswith(sys.executable + ' -c ')
        assert snapshot.contexts == []
        # A signal to the thread group ends it; then it is gone or a zombie.
        assert _identity.signal_process(ref, signal.SIGKILL) == 'sent'
        proc.wait()
        assert _identity.identity_status(ref) in ('gone', 'zombie')
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_memory_no_live_process_accounts_for_is_a_context_with_no_creator():
    gpus = [{'index': 0, 'memory_used_mib': 6000, 'memory_reserved_mib': 615},
            {'index': 1, 'memory_used_mib': 4200, 'memory_reserved_mib': 615},
            {'index': 2, 'memory_used_mib': 5000, 'memory_reserved_mib': 615},
            {'index': 3, 'memory_used_mib': 900, 'memory_reserved_mib': 615},
            # v1 memory only: used counts the reservation, so nothing is unexplained.
            {'index': 4, 'memory_used_mib': 900, 'memory_reserved_mib': None}]
    processes = {1: {60: {'memory_mib': 4096}}, 2: {61: {'memory_mib': None}}, 3: {62: {'memory_mib': 100}}}
    records = {60: {'state': 'sleeping'}, 61: {'state': 'sleeping'}, 62: {'state': 'zombie'}}
    # GPU 0: nothing listed; 1: within the slack; 2: a figure unknown; 3: its listed process has exited.
    assert _keepers.unexplained_memory(gpus, processes, records, gone={}) == {0: 6000, 3: 900}
    assert _keepers.unexplained_memory(gpus, processes, records, gone={3: {62: 100}}) == {0: 6000}

    receiver = record(51, [0])
    worker = record(60, [0, 1], kind='compute', nvml_types=['compute'])
    contexts = _keepers.attribute([receiver, worker], {}, {0: 0}, lambda pids: dict((p, set()) for p in pids),
                                  {1: {60}}, unexplained={0: 6000})
    assert contexts == [{'gpu': 0, 'creator_pids': [], 'memory_mib': 6000, 'keepers': [51]}]
    assert receiver['keeps'][0]['rank'] == 3 and 'keeps' not in worker
    assert 'may keep 6000 MiB that no live process NVML lists accounts for' in _keepers.describe(receiver)
    assert _keepers.warnings_for(contexts)[0].startswith('GPU 0: 6000 MiB used beyond what the live processes')
    # Nobody to keep it: no context recorded (a stuck context is the proof's and the reset's business).
    assert _keepers.attribute([], {}, {0: 0}, dict, {}, unexplained={0: 6000}) == []


def test_a_session_led_from_outside_the_namespace_is_no_evidence():
    # Seen from inside a container, a process whose session leader is outside reads session 0.
    assert _keepers.evidence_of(record(7, [0], session=0, pgrp=0), 0, 0, {0}, {'/dev/nvidiactl'}, sessions={0}) == [
        'client']
