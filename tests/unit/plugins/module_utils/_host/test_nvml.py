# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml


def test_inventory_reads_every_gpu_once(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(2, used_mib=40960), processes={
        (0, 'compute'): [(4242, 40960)],
        (1, 'compute'): [(4243, 40960)],
        (1, 'graphics'): [(4243, 40960)],
        (1, 'mps'): [(4300, None)],
    })
    view = _nvml.read_inventory(2.0, nvml_module=fake)
    assert view.available and view.error is None
    assert view.driver_version == '580.159.04'
    assert view.warnings == []
    assert view.gpus[0] == {
        'index': 0, 'uuid': 'GPU-00000000-0000-4000-8000-000000000000', 'name': 'NVIDIA H200', 'minor': 0,
        'pci_bus_id': '00000000:18:00.0', 'memory_total_mib': 143771, 'memory_used_mib': 40960,
        'memory_reserved_mib': 615, 'persistence_mode': True, 'display_active': False, 'holder_pids': [4242],
    }
    assert view.gpus[1]['holder_pids'] == [4243, 4300]
    assert view.processes[0] == {4242: {'memory_mib': 40960, 'types': {'compute'}}}
    # A process in two lists counts its memory once.
    assert view.processes[1][4243] == {'memory_mib': 40960, 'types': {'compute', 'graphics'}}
    assert view.processes[1][4300] == {'memory_mib': None, 'types': {'mps'}}
    for name in ('nvmlDeviceGetMemoryInfo_v2', 'nvmlDeviceGetComputeRunningProcesses',
                 'nvmlDeviceGetGraphicsRunningProcesses', 'nvmlDeviceGetMPSComputeRunningProcesses',
                 'nvmlDeviceGetUUID', 'nvmlDeviceGetPciInfo'):
        assert fake.count(name) == 2, name
    assert fake.count('nvmlInit') == 1
    assert fake.shut_down


def test_v2_memory_excludes_reserved(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(1))
    view = _nvml.read_inventory(2.0, nvml_module=fake)
    assert view.gpus[0]['memory_used_mib'] == 0
    assert view.gpus[0]['memory_reserved_mib'] == 615


def test_v1_memory_fallback_warns(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(2), missing={'nvmlDeviceGetMemoryInfo_v2'})
    view = _nvml.read_inventory(2.0, nvml_module=fake)
    assert view.available
    assert view.gpus[0]['memory_used_mib'] == 615
    assert view.gpus[0]['memory_reserved_mib'] is None
    assert len(view.warnings) == 1 and 'no v2 memory struct' in view.warnings[0]
    # The v2 call is not retried for the second GPU.
    assert fake.count('nvmlDeviceGetMemoryInfo_v2') == 1


def test_process_lists_fall_back_to_v2(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(2), processes={(1, 'compute'): [(7, 100)]},
                             missing={'nvmlDeviceGetComputeRunningProcesses'})
    view = _nvml.read_inventory(2.0, nvml_module=fake)
    assert view.processes[1] == {7: {'memory_mib': 100, 'types': {'compute'}}}
    assert view.warnings == []
    # The plain name is tried once, then the working one is remembered.
    assert fake.count('nvmlDeviceGetComputeRunningProcesses') == 1
    assert fake.count('nvmlDeviceGetComputeRunningProcesses_v2') == 2


def test_missing_process_list_is_skipped_with_a_warning(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(1), missing={
        'nvmlDeviceGetMPSComputeRunningProcesses', 'nvmlDeviceGetMPSComputeRunningProcesses_v2'})
    view = _nvml.read_inventory(2.0, nvml_module=fake)
    assert view.available
    assert view.warnings == ['NVML on this driver has no mps process list; mps processes are seen only in /proc']


def test_unsupported_lists_and_getters_are_quiet(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(1), unsupported={
        'nvmlDeviceGetGraphicsRunningProcesses', 'nvmlDeviceGetDisplayActive'})
    session = _nvml.NvmlSession(2.0, nvml_module=fake)
    view = session.inventory()
    assert view.available and view.warnings == []
    assert view.gpus[0]['display_active'] is None
    session.poll([0])
    assert fake.count('nvmlDeviceGetGraphicsRunningProcesses') == 1
    session.close()


def test_missing_minor_number_warns(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(1), unsupported={'nvmlDeviceGetMinorNumber'})
    view = _nvml.read_inventory(2.0, nvml_module=fake)
    assert view.gpus[0]['minor'] is None
    assert 'GPU 0: NVML gives no minor number' in view.warnings[0]


@pytest.mark.parametrize('error, text', [
    ('NVMLError_LibraryNotFound', 'NVML could not be initialised: NVML Shared Library Not Found'),
    ('NVMLError_DriverNotLoaded', 'NVML could not be initialised: Driver Not Loaded'),
])
def test_init_failure_gives_an_unavailable_view(fake_nvml_factory, error, text):
    fake = fake_nvml_factory(())
    fake.init_error = getattr(fake, error)()
    view = _nvml.read_inventory(2.0, nvml_module=fake)
    assert not view.available
    assert view.error == text
    assert view.gpus == [] and view.driver_version is None


def test_missing_pynvml(monkeypatch):
    monkeypatch.setattr(_nvml, 'pynvml', None)
    view = _nvml.read_inventory(2.0)
    assert not view.available
    assert view.error == 'the Python library nvidia-ml-py (pynvml) is not installed'


def test_real_pynvml_without_a_driver_never_raises():
    if not _nvml.HAS_PYNVML:
        pytest.skip('pynvml is not installed')
    view = _nvml.read_inventory(2.0)
    assert view.available in (True, False)


@pytest.mark.parametrize('hung', ['nvmlInit', 'nvmlDeviceGetCount', 'nvmlDeviceGetMinorNumber',
                                  'nvmlDeviceGetComputeRunningProcesses'])
def test_hang_stops_at_the_deadline_and_kills_the_session(fake_nvml_factory, hung):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(1), hang={hung})
    session = _nvml.NvmlSession(0.2, nvml_module=fake)
    started = time.monotonic()
    view = session.inventory()
    assert time.monotonic() - started < 1.0
    assert not view.available
    # The error names the NVML function that hung, not the step it was part of.
    assert view.error == 'NVML call %s did not return within 0.2 seconds; NVML is no longer used' % hung
    assert session.dead and not session.available
    calls = len(fake.calls)
    started = time.monotonic()
    with pytest.raises(_nvml.NvmlUnavailable):
        session.poll([0] if hung == 'nvmlDeviceGetComputeRunningProcesses' else None)
    assert time.monotonic() - started < 0.1
    session.close()
    assert len(fake.calls) == calls  # nothing more was asked of a hung library


def test_poll_is_one_read_per_gpu_and_list(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(8, used_mib=1000), processes={
        (3, 'compute'): [(11, 1000), (12, 0)], (5, 'mps'): [(13, 5)]})
    # As the flows use it: opened once, closed in a finally.
    session = _nvml.NvmlSession(1.0, nvml_module=fake)
    session.open()
    try:
        assert session.indices == list(range(8))
        fake.calls[:] = []
        result = session.poll([3, 5])
        assert result == {3: {'memory_used_mib': 1000, 'pids': {11, 12},
                              'processes': {11: {'memory_mib': 1000, 'types': {'compute'}},
                                            12: {'memory_mib': 0, 'types': {'compute'}}}},
                          5: {'memory_used_mib': 1000, 'pids': {13},
                              'processes': {13: {'memory_mib': 5, 'types': {'mps'}}}}}
        assert sorted(fake.calls) == sorted(
            ['nvmlDeviceGetMemoryInfo_v2', 'nvmlDeviceGetComputeRunningProcesses',
             'nvmlDeviceGetGraphicsRunningProcesses', 'nvmlDeviceGetMPSComputeRunningProcesses'] * 2)
        assert set(session.poll()) == set(range(8))
        with pytest.raises(ValueError, match='no GPU with index 9'):
            session.poll([9])
        fake.gpus[3]['used_mib'] = 0
        fake.processes.clear()
        assert session.poll([3]) == {3: {'memory_used_mib': 0, 'pids': set(), 'processes': {}}}
    finally:
        session.close()
    assert fake.shut_down


def test_poll_is_cheap(fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(8))
    session = _nvml.NvmlSession(1.0, nvml_module=fake)
    session.open()
    try:
        started = time.monotonic()
        for dummy in range(50):
            session.poll()
        assert (time.monotonic() - started) / 50 < 0.01
    finally:
        session.close()
