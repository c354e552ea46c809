# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One builder for every holder record (``_discover.record``): a real process described as a holder at
discovery and as a newcomer during a release gives the same record, and a parent the same facts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import record as _record
from ansible_collections.gpuops.reclaim.plugins.module_utils._host.nvml import NvmlView
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import prober as _prober
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils._discover.test_holders import HOLDER_KEYS


def nvml_view(processes):
    gpus = [{'index': index, 'uuid': 'GPU-%d' % index, 'name': 'NVIDIA H200', 'minor': index,
             'pci_bus_id': None, 'memory_total_mib': 143771, 'memory_used_mib': 0, 'memory_reserved_mib': 615,
             'persistence_mode': True, 'display_active': False, 'holder_pids': sorted(processes.get(index, {}))}
            for index in range(4)]
    return NvmlView(True, driver_version='580.159.04', gpus=gpus, processes=processes)


def node(dev, name):
    return os.path.join(dev, name)


def holder_of(snapshot, pid):
    [found] = [holder for holder in snapshot.holders if holder['pid'] == pid]
    return found


# What a live process may change between two reads: where it waits in the kernel, and whether it runs.
VOLATILE = frozenset(['wchan', 'state'])


def assert_same_record(holder, newcomer):
    assert set(holder) == HOLDER_KEYS
    assert set(newcomer) == HOLDER_KEYS | {'adopted'} and newcomer['adopted'] is True
    assert dict((key, newcomer[key]) for key in HOLDER_KEYS - VOLATILE) == dict(
        (key, holder[key]) for key in HOLDER_KEYS - VOLATILE)


def test_a_process_listed_by_nvml_is_the_same_record_as_a_holder_and_as_a_newcomer(fake_dev, spawn_holder):
    worker = spawn_holder([node(fake_dev, 'nvidia1'), node(fake_dev, 'nvidiactl'), node(fake_dev, 'nvidia-uvm')],
                          ignore_sigterm=True, comm='VLLM::Worker_TP1')
    entry = {'memory_mib': 30720, 'types': {'compute'}}
    snapshot = _holders.discover(nvml_view({1: {worker.pid: entry}}), dev_dir=fake_dev)
    holder = holder_of(snapshot, worker.pid)
    # The release's newcomer: NVML lists it on GPU 1, a targeted GPU, and the prober has discovery's builder.
    prober = _prober.ProcProber(dev_dir=fake_dev, builder=snapshot.builder)
    newcomer = prober.newcomer(worker.pid, [1], {1: dict(entry)}, own_pids=())
    assert_same_record(holder, newcomer)
    assert newcomer['kind'] == 'compute' and newcomer['gpu_memory_mib'] == {'1': 30720}
    assert newcomer['gpu_uuids'] == ['GPU-1'] and newcomer['nvml_types'] == ['compute']
    assert newcomer['sigterm_ignored'] is True and newcomer['name'] == 'VLLM::Worker_TP'
    assert newcomer['visible'] is True and newcomer['unreadable'] is None and newcomer['suspicious'] is None


def test_a_process_found_in_proc_is_the_same_record_as_a_holder_and_as_a_newcomer(fake_dev, spawn_holder):
    client = spawn_holder([node(fake_dev, 'nvidia2'), node(fake_dev, 'nvidiactl')])
    worker = spawn_holder([node(fake_dev, 'nvidia3'), node(fake_dev, 'nvidia-uvm')])
    snapshot = _holders.discover(None, dev_dir=fake_dev)
    for child, index, kind in ((client, 2, 'client'), (worker, 3, 'compute')):
        holder = holder_of(snapshot, child.pid)
        # Without NVML, the release's /proc scan finds it; nvidia-uvm decides its kind, as in discovery.
        newcomer = snapshot.builder.newcomer(child.pid, [index], None)
        assert_same_record(holder, newcomer)
        assert newcomer['kind'] == kind and newcomer['gpus'] == [index] and newcomer['device_paths']


def test_a_newcomer_is_protected_exactly_as_discovery_protects(fake_dev, spawn_holder):
    child = spawn_holder([node(fake_dev, 'nvidia0')])
    executable = os.path.basename(os.path.realpath('/proc/%d/exe' % child.pid))
    snapshot = _holders.discover(nvml_view({}), dev_dir=fake_dev, protect=['python*'], unprotect=['Xorg'])
    holder = holder_of(snapshot, child.pid)
    assert holder['protected'] and holder['protected_reason'] == 'user protected executable %s' % executable
    newcomer = snapshot.builder.newcomer(child.pid, [0], None)
    assert_same_record(holder, newcomer)
    # The release's judgement, from the same builder, says the same of the newcomer and of a parent.
    assert snapshot.builder.protection(newcomer) == (True, holder['protected_reason'])
    assert snapshot.builder.protection(_prober.describe_process(child.pid))[0] is True
    # This module and its ancestors, as the release knows them.
    assert snapshot.builder.newcomer(child.pid, [0], None, own_pids=[child.pid])['is_self'] is True


def test_a_parent_is_read_as_a_holder_is(fake_dev, spawn_holder):
    child = spawn_holder([node(fake_dev, 'nvidia0')])
    holder = holder_of(_holders.discover(None, dev_dir=fake_dev), child.pid)
    parent = _prober.describe_process(child.pid)
    assert set(parent) == set(_prober.PARENT_FACTS) | {'tty', 'children'}
    assert dict((key, parent[key]) for key in _prober.PARENT_FACTS) == dict(
        (key, holder[key]) for key in _prober.PARENT_FACTS)


def test_a_newcomer_that_is_gone_has_no_record(fake_dev, spawn_holder):
    child = spawn_holder([node(fake_dev, 'nvidia0')])
    builder = _record.HolderBuilder(dev_dir=fake_dev)
    pid = child.pid
    child.kill()
    child.wait()
    assert builder.newcomer(pid, [0], {0: {'memory_mib': 100, 'types': {'compute'}}}) is None
    assert builder.newcomer(pid, [0], None) is None
