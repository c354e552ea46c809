# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Bounded reads: a FIFO that nobody writes to blocks ``open`` for real, as a
``cmdline`` read blocks behind a process stuck in the kernel."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.record import HolderBuilder
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import slow_reads as _procread
from ansible_collections.gpuops.reclaim.plugins.module_utils._host.nvml import NvmlView

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'proc')


@pytest.fixture
def blocked_fifo(tmp_path):
    """A FIFO whose readers block in ``open`` until the test releases them."""
    paths = []

    def make(name='blocked'):
        path = str(tmp_path / name)
        os.mkfifo(path)
        paths.append(path)
        return path

    yield make
    for path in paths:
        # Open for writing without blocking releases any reader still waiting.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        os.close(fd)
    deadline = time.monotonic() + 2
    while any(path in _procread._OUTSTANDING for path in paths) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(path in _procread._OUTSTANDING for path in paths)


def test_every_file_is_read(tmp_path):
    first, second = tmp_path / 'a', tmp_path / 'b'
    first.write_bytes(b'one\0two\0')
    second.write_bytes(b'x' * 10)
    results = _procread.read_files([str(first), str(second), str(tmp_path / 'missing')], timeout=1)
    assert results[str(first)] == b'one\0two\0' and results[str(second)] == b'x' * 10
    assert isinstance(results[str(tmp_path / 'missing')], FileNotFoundError)


def test_a_blocked_read_ends_at_the_deadline_and_costs_the_others_one_stall(tmp_path, blocked_fifo):
    fifo = blocked_fifo()
    healthy = []
    for number in range(5):
        path = tmp_path / ('healthy%d' % number)
        path.write_bytes(b'%d' % number)
        healthy.append(str(path))
    started = time.monotonic()
    results = _procread.read_files([fifo] + healthy, timeout=0.6, stall=0.05)
    elapsed = time.monotonic() - started
    assert isinstance(results[fifo], _procread.TimedOut) and results[fifo].timeout == 0.6
    assert [results[path] for path in healthy] == [b'0', b'1', b'2', b'3', b'4']
    assert 0.6 <= elapsed < 1.0
    # While that read waits, the same file is not read again: a second batch answers at once.
    started = time.monotonic()
    again = _procread.read_files([fifo], timeout=5)
    assert isinstance(again[fifo], _procread.TimedOut)
    assert time.monotonic() - started < 0.2


def test_all_healthy_reads_return_before_the_deadline(tmp_path):
    paths = []
    for number in range(200):
        path = tmp_path / str(number)
        path.write_bytes(b'title %d' % number)
        paths.append(str(path))
    started = time.monotonic()
    results = _procread.read_files(paths, timeout=5)
    assert time.monotonic() - started < 1.0
    assert all(results[path] == b'title %d' % number for number, path in enumerate(paths))


def test_a_read_that_returns_late_is_forgotten(blocked_fifo):
    fifo = blocked_fifo('late')
    assert isinstance(_procread.read_files([fifo], timeout=0.1)[fifo], _procread.TimedOut)
    assert fifo in _procread._OUTSTANDING
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b'late\0title\0')
    os.close(fd)
    deadline = time.monotonic() + 2
    while fifo in _procread._OUTSTANDING and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fifo not in _procread._OUTSTANDING


@pytest.mark.parametrize('timeout', [0, -1, None])
def test_a_deadline_is_required(timeout):
    with pytest.raises(ValueError, match='timeout must be greater than 0'):
        _procread.read_files(['/nonexistent'], timeout=timeout)


def test_titles_of_a_live_process():
    child = subprocess.Popen([sys.executable, '-c', 'import sys, time; sys.stdout.write("ready\\n"); '
                              'sys.stdout.flush(); time.sleep(60)', 'first', 'second arg'],
                             stdout=subprocess.PIPE, env={'GPUOPS_PROBE': 'value=with=equals'})
    try:
        assert child.stdout.readline() == b'ready\n'
        titles, errors, stuck = _procread.read_titles([child.pid, 2 ** 22 + 1], timeout=2)
        assert titles == {child.pid: '%s -c %s first second arg' % (
            sys.executable, child.args[2])}
        assert list(errors) == [2 ** 22 + 1] and isinstance(errors[2 ** 22 + 1], FileNotFoundError)
        assert stuck == []
        assert _procread.read_title(child.pid, 2).endswith(' first second arg')
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    with pytest.raises(FileNotFoundError):
        _procread.read_title(child.pid, 2)


def test_a_stuck_title_is_reported_with_state_and_wchan(tmp_path, blocked_fifo):
    proc = tmp_path / 'proc'
    shutil.copytree(os.path.join(FIXTURES, 'sigterm_ignored'), str(proc / '16175'))
    (proc / '16175' / 'wchan').write_text('uvm_spin_loop')
    blocked_fifo_path = blocked_fifo()
    os.rename(blocked_fifo_path, str(proc / '16175' / 'cmdline'))
    os.symlink(str(proc / '16175' / 'cmdline'), blocked_fifo_path)  # the fixture releases it by this name
    started = time.monotonic()
    titles, errors, stuck = _procread.read_titles([16175], timeout=0.3, proc_root=str(proc))
    assert time.monotonic() - started < 0.8
    assert (titles, errors, stuck) == ({}, {}, [16175])
    assert _procread.read_title(16175, 0.3, proc_root=str(proc)) is None
    assert _procread.stuck_reason(16175, 0.3, proc_root=str(proc)) == (
        'unreadable: possibly stuck in the kernel (state S (sleeping), wchan uvm_spin_loop; '
        '/proc/16175/cmdline did not answer within 0.3 s)')


def blocked_cmdline(tmp_path, blocked_fifo):
    """A copy of a captured /proc/16175 whose cmdline blocks, as it does behind a process stuck in the kernel."""
    proc = tmp_path / 'proc'
    shutil.copytree(os.path.join(FIXTURES, 'sigterm_ignored'), str(proc / '16175'))
    blocked = blocked_fifo()
    os.rename(blocked, str(proc / '16175' / 'cmdline'))
    os.symlink(str(proc / '16175' / 'cmdline'), blocked)
    (proc / 'stat').write_text('btime 1700000000\n')
    return proc


def test_discovery_reports_a_holder_whose_title_blocks_and_keeps_it(tmp_path, monkeypatch, blocked_fifo):
    proc = blocked_cmdline(tmp_path, blocked_fifo)
    monkeypatch.setattr(_holders._procfs, 'scan_device_holders',
                        lambda proc_root, dev_dir: ({16175: set(['/dev/nvidia0', '/dev/nvidia-uvm'])}, [], 0))
    started = time.monotonic()
    snapshot = _holders.discover(None, proc_root=str(proc), dev_dir='/dev', read_timeout=0.4)
    assert time.monotonic() - started < 1.0
    [holder] = snapshot.holders
    assert holder['pid'] == 16175 and holder['kind'] == 'compute' and holder['gpus'] == [0]
    assert holder['title'] == '' and holder['name'] == 'VLLM::Engine) x'
    assert holder['unreadable'].startswith('unreadable: possibly stuck in the kernel (state S (sleeping), wchan ')
    assert 'pid 16175 (VLLM::Engine) x): unreadable: possibly stuck in the kernel' in '\n'.join(snapshot.warnings)


def blocked_maps(tmp_path, blocked_fifo, pid=16175):
    """A copy of a captured /proc/PID whose maps file blocks in open, as it does behind a held mmap lock."""
    proc = tmp_path / 'proc'
    shutil.copytree(os.path.join(FIXTURES, 'sigterm_ignored'), str(proc / str(pid)))
    blocked = blocked_fifo('maps')
    os.remove(str(proc / str(pid) / 'maps'))
    os.rename(blocked, str(proc / str(pid) / 'maps'))
    os.symlink(str(proc / str(pid) / 'maps'), blocked)  # the fixture releases it by this name
    (proc / 'stat').write_text('btime 1700000000\n')
    return proc


def test_maps_are_read_within_the_deadline(tmp_path, blocked_fifo):
    proc = blocked_maps(tmp_path, blocked_fifo)
    (proc / '42').mkdir()
    (proc / '42' / 'maps').write_text('7f0000000000-7f0000001000 rw-s 00000000 00:05 12 /dev/nvidia0\n')
    started = time.monotonic()
    mapped, errors, stuck = _procread.read_maps([16175, 42, 43], '/dev/nvidia', timeout=0.3, proc_root=str(proc))
    assert time.monotonic() - started < 0.8
    assert mapped == {42: {'/dev/nvidia0'}} and stuck == [16175]
    assert list(errors) == [43] and isinstance(errors[43], OSError)
    assert _procread.read_maps([], '/dev/nvidia', timeout=0.3) == ({}, {}, [])


def test_discovery_keeps_an_nvml_holder_whose_maps_block_and_says_so(tmp_path, monkeypatch, blocked_fifo):
    proc = blocked_maps(tmp_path, blocked_fifo)
    monkeypatch.setattr(_holders._procfs, 'scan_device_holders', lambda proc_root, dev_dir: ({}, [], 0))
    listed = {0: {16175: {'memory_mib': 40960, 'types': {'compute'}}}}
    gpu = {'index': 0, 'uuid': 'GPU-0', 'name': 'NVIDIA H200', 'minor': 0, 'memory_total_mib': 143771,
           'memory_used_mib': 40960, 'holder_pids': [16175]}
    view = NvmlView(True, driver_version='580.159.04', processes=listed, gpus=[gpu])
    started = time.monotonic()
    snapshot = _holders.discover(view, proc_root=str(proc), dev_dir='/dev', read_timeout=0.4,
                                 shares_namespace=True)
    # One deadline: the title is not read again behind the same lock.
    assert time.monotonic() - started < 1.0
    [holder] = snapshot.holders
    assert holder['pid'] == 16175 and holder['gpus'] == [0] and holder['kind'] == 'compute'
    assert holder['unreadable'].startswith('unreadable: possibly stuck in the kernel')
    assert ('the memory maps of pid 16175 were not read within 0.4 s (possibly stuck in the kernel); '
            'only NVML tells which GPUs they hold') in snapshot.warnings


NEWCOMER_GPU = {'index': 0, 'uuid': 'GPU-0', 'name': 'NVIDIA H200', 'minor': 0, 'holder_pids': []}


@pytest.mark.parametrize('blocks', ['maps', 'cmdline'])
def test_a_newcomer_whose_reads_block_is_described_within_one_deadline(tmp_path, blocked_fifo, blocks):
    """A newcomer NVML lists with no device node open: its maps are read as discovery reads them, and
    whatever blocks (its maps, or its cmdline after them) costs one deadline and is said in ``unreadable``."""
    if blocks == 'maps':
        proc = blocked_maps(tmp_path, blocked_fifo)
    else:
        proc = blocked_cmdline(tmp_path, blocked_fifo)
    (proc / '16175' / 'fd').mkdir()
    builder = HolderBuilder([NEWCOMER_GPU], proc_root=str(proc), dev_dir='/dev', read_timeout=0.4,
                            shares_namespace=True)
    started = time.monotonic()
    record = builder.newcomer(16175, [0], {0: {'memory_mib': 40960, 'types': {'compute'}}})
    assert time.monotonic() - started < 1.0
    assert record['pid'] == 16175 and record['gpus'] == [0] and record['kind'] == 'compute'
    assert record['title'] == '' and record['unreadable'].startswith('unreadable: possibly stuck in the kernel')
    assert record['adopted'] is True and record['visible'] is True


def test_under_a_pids_limit_nothing_is_read_unbounded_and_holders_stay_visible(
        run_under_pids_limit, spawn_holder, fake_dev):
    """With no thread to spare (a fork bomb exhausted the PIDs), reads are not made
    without a deadline, and discovery still lists the holder, saying why its title is missing."""
    worker = spawn_holder([os.path.join(fake_dev, 'nvidia0'), os.path.join(fake_dev, 'nvidia-uvm')])
    setup = ('from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders\n'
             'from ansible_collections.gpuops.reclaim.plugins.module_utils._host import slow_reads as _procread\n'
             'import threading\n')
    code = r'''
results = _procread.read_files(["/proc/self/stat"], timeout=1)
try:
    threading.Thread(target=lambda: None).start()
    thread_started = True
except RuntimeError:
    thread_started = False
snapshot = _holders.discover(None, dev_dir=%r, read_timeout=1)
print(json.dumps({"thread_started": thread_started, "read": type(results["/proc/self/stat"]).__name__,
                  "holders": [(h["pid"], h["unreadable"]) for h in snapshot.holders], "warnings": snapshot.warnings}))
''' % fake_dev
    result = run_under_pids_limit(setup, code)
    assert result['thread_started'] is False
    assert result['read'] == 'NoThread'
    assert result['holders'] == [[worker.pid, _procread.NO_THREAD_TEXT]]
    assert not any('not visible' in warning for warning in result['warnings'])


def test_many_blocked_maps_are_named_ten_at_a_time(tmp_path, monkeypatch):
    listed = dict((pid, {'memory_mib': 1, 'types': {'compute'}}) for pid in range(5001, 5013))
    gpu = {'index': 0, 'uuid': 'GPU-0', 'name': 'NVIDIA H200', 'minor': 0, 'holder_pids': sorted(listed)}
    view = NvmlView(True, driver_version='580.159.04', processes={0: listed}, gpus=[gpu])
    monkeypatch.setattr(_holders._procfs, 'scan_device_holders', lambda proc_root, dev_dir: ({}, [], 0))
    monkeypatch.setattr(_holders._procread, 'read_maps',
                        lambda pids, prefix, timeout, proc_root: ({}, {}, sorted(pids)))
    (tmp_path / 'stat').write_text('btime 1700000000\n')
    snapshot = _holders.discover(view, proc_root=str(tmp_path), dev_dir='/dev', read_timeout=0.2, shares_namespace=True)
    assert ('the memory maps of pid 5001, 5002, 5003, 5004, 5005, 5006, 5007, 5008, 5009, 5010 and 2 more were not '
            'read within 0.2 s') in '\n'.join(snapshot.warnings)
