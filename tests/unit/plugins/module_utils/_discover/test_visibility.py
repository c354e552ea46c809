# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._proof import verdict as _proof
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import visibility as _visibility
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.record import HolderBuilder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import (
    SKIPPED,
    build_scope,
    holder_verdict,
    plan_release,
)
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.prober import ProcProber
from ansible_collections.gpuops.reclaim.plugins.module_utils._host.nvml import NvmlView

NOT_VISIBLE = 'listed by NVML but not visible as a GPU holder here (another PID namespace?)'


def nvml_view(processes):
    gpus = [{'index': index, 'uuid': 'GPU-%d' % index, 'name': 'NVIDIA H200', 'minor': index,
             'pci_bus_id': None, 'memory_total_mib': 143771, 'memory_used_mib': 30720, 'memory_reserved_mib': 615,
             'persistence_mode': True, 'display_active': False, 'holder_pids': []} for index in range(2)]
    return NvmlView(True, driver_version='580.159.04', gpus=gpus, processes=processes)


@pytest.fixture
def unrelated(spawn_holder):
    """A process that holds no device node: what NVML's host PID names from another namespace."""
    return spawn_holder([])


def test_the_text_of_the_issue():
    assert _visibility.NOT_VISIBLE == NOT_VISIBLE


def test_a_plain_file_is_not_the_initial_pid_namespace(tmp_path):
    path = tmp_path / 'pid'
    path.write_text('')
    assert _visibility.in_initial_pid_namespace(str(path)) is False
    assert _visibility.in_initial_pid_namespace(str(tmp_path / 'missing')) is False


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which('unshare'), reason='needs root and unshare')
def test_a_new_pid_namespace_is_not_the_initial_one():
    code = ('import os; print(os.stat("/proc/self/ns/pid").st_ino == %d)' % _visibility.INITIAL_PID_NAMESPACE_INODE)
    output = subprocess.check_output(['unshare', '--pid', '--fork', sys.executable, '-c', code], timeout=30)
    assert output.strip() == b'False'


@pytest.mark.parametrize('listed, paths, shares, expected', [
    (False, [], False, True),                         # found by its fds: a holder by definition
    (True, ['/dev/nvidia0'], False, True),
    (True, ['/dev/nvidiactl'], False, True),
    (True, [], True, True),                           # host namespace: NVML's PID is ours
    (True, [], False, False),
    (True, ['/tmp/nvidia0'], False, False),           # not under the device folder
])
def test_visible(listed, paths, shares, expected):
    assert _visibility.visible(listed, paths, shares, '/dev') is expected


def test_discover_marks_an_nvml_pid_without_a_node_not_visible(fake_dev, spawn_holder, unrelated):
    worker = spawn_holder([os.path.join(fake_dev, 'nvidia0'), os.path.join(fake_dev, 'nvidia-uvm')])
    view = nvml_view({0: {worker.pid: {'memory_mib': 30720, 'types': {'compute'}}},
                      1: {unrelated.pid: {'memory_mib': 30720, 'types': {'compute'}}}})

    snapshot = _holders.discover(view, dev_dir=fake_dev, shares_namespace=False)
    holders = dict((holder['pid'], holder) for holder in snapshot.holders)
    assert holders[worker.pid]['visible'] is True
    assert holders[unrelated.pid]['visible'] is False
    assert any(NOT_VISIBLE in warning and str(unrelated.pid) in warning for warning in snapshot.warnings)

    # Never a target: skipped with the reason, whatever the filters.
    plan = plan_release(snapshot.holders, build_scope([0, 1]))
    assert plan.target_pids == [worker.pid]
    assert [(entry['pid'], entry['reason']) for entry in plan.skipped] == [(unrelated.pid, NOT_VISIBLE)]
    assert holder_verdict(holders[unrelated.pid], build_scope([1])) == (SKIPPED, NOT_VISIBLE)

    # And the proof fails for its GPU, without naming the unrelated process.
    verdict = _proof.evaluate(snapshot.gpus, snapshot.holders, selected=[1])
    assert verdict['free'] is False
    assert verdict['gpus'][0]['holder_pids'] == [unrelated.pid]
    assert 'pid %d %s' % (unrelated.pid, NOT_VISIBLE) in verdict['lines'][0]
    assert any(line.startswith('Next step: NVML lists processes that hold no GPU device node here') for line in
               verdict['lines'])


def test_discover_in_the_host_namespace_trusts_nvml(fake_dev, spawn_holder):
    worker = spawn_holder([os.path.join(fake_dev, 'nvidia1')])
    view = nvml_view({1: {worker.pid: {'memory_mib': 30720, 'types': {'compute'}}}})
    snapshot = _holders.discover(view, dev_dir=fake_dev, shares_namespace=True)
    assert [(holder['pid'], holder['visible']) for holder in snapshot.holders] == [(worker.pid, True)]


def test_in_the_host_namespace_a_listed_pid_whose_process_holds_no_node_is_not_the_listed_process(
        fake_dev, unrelated):
    # Its PID was reused (or it is exiting): never a holder, and the listed process counts as gone.
    view = nvml_view({1: {unrelated.pid: {'memory_mib': 30720, 'types': {'compute'}}}})
    snapshot = _holders.discover(view, dev_dir=fake_dev, shares_namespace=True)
    assert snapshot.holders == []
    assert snapshot.contexts == [{'gpu': 1, 'creator_pids': [unrelated.pid], 'memory_mib': 30720, 'keepers': []}]


def test_the_prober_applies_the_same_rule_to_newcomers(fake_dev, spawn_holder, unrelated):
    worker = spawn_holder([os.path.join(fake_dev, 'nvidia0')])
    listed = {0: {'memory_mib': 30720, 'types': {'compute'}}}

    def visible(pid, shares_namespace):
        prober = ProcProber(dev_dir=fake_dev, builder=HolderBuilder(dev_dir=fake_dev, shares_namespace=shares_namespace))
        record = prober.newcomer(pid, [0], listed)
        return None if record is None else record['visible']
    assert visible(worker.pid, False) is True
    assert visible(unrelated.pid, False) is False
    assert visible(4194303, False) is None  # no such process: nothing to describe
    assert visible(unrelated.pid, True) is True
    # Found in /proc, without NVML: visible, as discovery's holders are.
    assert ProcProber(dev_dir=fake_dev, builder=HolderBuilder(dev_dir=fake_dev, shares_namespace=False)).newcomer(
        worker.pid, [0])['visible'] is True


# --- a module in a container without the host's PID namespace -------------------------

def test_discover_names_listed_pids_that_no_process_here_has(fake_dev, spawn_holder):
    worker = spawn_holder([os.path.join(fake_dev, 'nvidia0')])
    gone = worker.pid
    worker.kill()
    worker.wait()
    view = nvml_view({0: {gone: {'memory_mib': 30720, 'types': {'compute'}}}})
    snapshot = _holders.discover(view, dev_dir=fake_dev, shares_namespace=False)
    assert snapshot.foreign_pids == [gone]
    assert snapshot.holders == []
    # A PID listed on a GPU that is not selected decides nothing.
    assert _holders.discover(view, dev_dir=fake_dev, shares_namespace=False, gpu_indices=[1]).foreign_pids == []


def test_discover_in_the_host_namespace_names_a_dead_creator_without_keeper_too(fake_dev, spawn_holder):
    worker = spawn_holder([os.path.join(fake_dev, 'nvidia0')])
    keeper_pids = [worker.pid]
    view = nvml_view({0: {worker.pid: {'memory_mib': 30720, 'types': {'compute'}}}})
    snapshot = _holders.discover(view, dev_dir=fake_dev, shares_namespace=False)
    # Seen here, holding its node: nothing foreign.
    assert snapshot.foreign_pids == [] and [h['pid'] for h in snapshot.holders] == keeper_pids


@pytest.mark.parametrize('foreign, shares, refused', [
    ([386], False, True),
    ([], False, False),          # every listed PID is here
    ([386], True, False),        # the host's namespace: a PID gone is an exit, not another namespace
])
def test_namespace_refusal(foreign, shares, refused):
    text = _visibility.namespace_refusal(foreign, shares)
    if not refused:
        assert text is None
    else:
        assert text == (
            "NVML lists PID 386, which this PID namespace does not have: the module runs in a container without "
            "the host's PID namespace, where it can neither see who holds the GPUs nor signal them. Nothing was "
            "signalled or stopped. Run it in the host's PID namespace (on the host itself, or in a container "
            "started with --pid=host).")


def test_namespace_refusal_reads_this_process_namespace_by_default(monkeypatch):
    monkeypatch.setattr(_visibility, 'in_initial_pid_namespace', lambda: True)
    assert _visibility.namespace_refusal([386]) is None
    monkeypatch.setattr(_visibility, 'in_initial_pid_namespace', lambda: False)
    assert 'Run it in the host' in _visibility.namespace_refusal([386])
