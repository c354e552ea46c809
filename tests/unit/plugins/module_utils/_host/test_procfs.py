# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host import procfs as _procfs

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'proc')


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts), 'rb') as handle:
        return handle.read().decode('utf-8')


# --- stat -------------------------------------------------------------------

@pytest.mark.parametrize('sample, comm, state, state_name, ppid, kernel_thread', [
    ('sigterm_ignored', 'VLLM::Engine) x', 'S', 'sleeping', 16174, False),
    ('sigterm_caught', 'python', 'S', 'sleeping', None, False),
    ('kernel_thread', 'kthreadd', 'S', 'sleeping', 0, True),
    ('zombie', 'sh', 'Z', 'zombie', 16174, False),
])
def test_parse_stat_samples(sample, comm, state, state_name, ppid, kernel_thread):
    stat = _procfs.parse_stat(fixture(sample, 'stat'))
    assert stat['comm'].startswith(comm)
    assert stat['state'] == state
    assert stat['state_name'] == state_name
    if ppid is not None:
        assert stat['ppid'] == ppid
    assert stat['kernel_thread'] is kernel_thread
    assert stat['starttime'] > 0 or sample == 'kernel_thread'


def test_parse_stat_comm_with_parentheses_and_spaces():
    stat = _procfs.parse_stat(fixture('sigterm_ignored', 'stat'))
    assert stat == {
        'pid': 16175, 'comm': 'VLLM::Engine) x', 'state': 'S', 'state_name': 'sleeping', 'ppid': 16174,
        'pgrp': 16171, 'session': 4205, 'flags': 4194304, 'tty_nr': 0, 'starttime': 64865, 'kernel_thread': False,
    }


def test_parse_stat_rejects_garbage():
    with pytest.raises(ValueError):
        _procfs.parse_stat('garbage')


def test_read_stat_of_this_process():
    stat = _procfs.read_stat(os.getpid())
    assert stat['pid'] == os.getpid()
    assert stat['ppid'] == os.getppid()
    assert stat['state'] in ('R', 'S')


# --- status and signals ---------------------------------------------------------

@pytest.mark.parametrize('sample, ignored', [
    ('sigterm_ignored', True),
    ('sigterm_caught', False),
    ('zombie', False),
    ('kernel_thread', True),
])
def test_sigterm_disposition(sample, ignored):
    status = _procfs.parse_status(fixture(sample, 'status'))
    assert _procfs.sigterm_ignored(status) is ignored


def test_parse_status_fields():
    status = _procfs.parse_status(fixture('sigterm_ignored', 'status'))
    assert status['State'] == 'S (sleeping)'
    assert status['PPid'] == '16174'
    assert _procfs.status_uid(status) == 0
    # SIGPIPE (13), SIGTERM (15) and SIGXFSZ (25) ignored: bit N-1 of the mask is signal N.
    assert _procfs.signal_mask(status, 'SigIgn') == {13, 15, 25}
    assert _procfs.signal_mask(status, 'SigCgt') == {2}


def test_status_without_masks():
    assert _procfs.sigterm_ignored({}) is False
    assert _procfs.signal_mask({}, 'SigIgn') == set()
    assert _procfs.status_uid({}) is None


# --- cmdline ----------------------------------------------------------------------

@pytest.mark.parametrize('data, title', [
    (b'python3\x00-m\x00vllm.entrypoints.openai.api_server\x00--port\x008000\x00',
     'python3 -m vllm.entrypoints.openai.api_server --port 8000'),
    (b'VLLM::EngineCore\x00\x00\x00\x00\x00\x00', 'VLLM::EngineCore'),
    (b'VLLM::Worker_DP0_PP0_TP0_EP0 ', 'VLLM::Worker_DP0_PP0_TP0_EP0 '),
    (b'', ''),
])
def test_parse_cmdline(data, title):
    assert _procfs.parse_cmdline(data) == title


def test_parse_cmdline_sample():
    title = _procfs.parse_cmdline(fixture('sigterm_ignored', 'cmdline').encode('utf-8'))
    assert title.split(' ')[1] == '-c'


# --- device paths -----------------------------------------------------------------

@pytest.mark.parametrize('path, kind', [
    ('/dev/nvidia0', ('gpu', 0)),
    ('/dev/nvidia15', ('gpu', 15)),
    ('/dev/nvidiactl', ('control', None)),
    ('/dev/nvidia-uvm', ('uvm', None)),
    ('/dev/nvidia-uvm-tools', ('control', None)),
    ('/dev/nvidia-modeset', ('control', None)),
    ('/dev/nvidia-caps/nvidia-cap1', ('control', None)),
    ('/dev/null', None),
    ('/dev/dri/card0', None),
    ('/tmp/nvidia0', None),
])
def test_classify_device_path(path, kind):
    assert _procfs.classify_device_path(path) == kind


def test_classify_device_path_in_another_folder():
    assert _procfs.classify_device_path('/tmp/x/nvidia2', '/tmp/x') == ('gpu', 2)
    assert _procfs.classify_device_path('/tmp/x/nvidia2', '/tmp/x/') == ('gpu', 2)
    assert _procfs.classify_device_path('/dev/nvidia2', '/tmp/x') is None


def _fake_proc(tmp_path, pid, **files):
    folder = tmp_path / str(pid)
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return str(tmp_path)


def test_mapped_paths_hand_written_cuda(tmp_path):
    proc_root = _fake_proc(tmp_path, 42, maps=fixture('maps_cuda'))
    assert _procfs.mapped_paths(_procfs.maps_path(42, proc_root), '/dev/nvidia') == {
        '/dev/nvidiactl', '/dev/nvidia0', '/dev/nvidia1', '/dev/nvidia-uvm', '/dev/nvidia3'}


def test_mapped_paths_captured(tmp_path):
    proc_root = _fake_proc(tmp_path, 16175, maps=fixture('sigterm_ignored', 'maps'))
    path = _procfs.maps_path(16175, proc_root)
    assert _procfs.mapped_paths(path, '/tmp/tmpfhvlwjn0/nvidia') == {'/tmp/tmpfhvlwjn0/nvidia0'}
    assert _procfs.mapped_paths(path, '/dev/nvidia') == set()


def test_fd_device_paths_of_a_real_child(fake_dev, spawn_holder):
    child = spawn_holder([os.path.join(fake_dev, 'nvidia1'), os.path.join(fake_dev, 'nvidia-uvm'), '/dev/null'])
    assert _procfs.fd_device_paths(child.pid, fake_dev.rstrip('/') + '/nvidia') == {
        os.path.join(fake_dev, 'nvidia1'), os.path.join(fake_dev, 'nvidia-uvm')}


def test_scan_device_holders_finds_real_children(fake_dev, spawn_holder):
    first = spawn_holder([os.path.join(fake_dev, 'nvidia0'), os.path.join(fake_dev, 'nvidiactl')])
    second = spawn_holder([os.path.join(fake_dev, 'nvidia2')])
    bystander = spawn_holder(['/dev/null'])
    holders, unreadable, vanished = _procfs.scan_device_holders(dev_dir=fake_dev)
    assert holders[first.pid] == {os.path.join(fake_dev, 'nvidia0'), os.path.join(fake_dev, 'nvidiactl')}
    assert holders[second.pid] == {os.path.join(fake_dev, 'nvidia2')}
    assert bystander.pid not in holders
    assert os.getpid() not in holders
    assert vanished >= 0
    assert all(isinstance(pid, int) for pid in unreadable)

    holders, dummy, dummy2 = _procfs.scan_device_holders(dev_dir=fake_dev, skip_pids={first.pid})
    assert first.pid not in holders and second.pid in holders


def test_scan_device_holders_counts_unreadable_fd_folders(tmp_path):
    proc_root = tmp_path / 'proc'
    (proc_root / '7' / 'fd').mkdir(parents=True)
    (proc_root / '7' / 'fd' / '3').symlink_to('/dev/nvidia0')
    (proc_root / '8').mkdir()  # exited between scandir and listdir
    (proc_root / '9' / 'fd').mkdir(parents=True)
    (proc_root / 'self').mkdir()
    os.chmod(str(proc_root / '9' / 'fd'), 0)
    try:
        holders, unreadable, vanished = _procfs.scan_device_holders(str(proc_root))
    finally:
        os.chmod(str(proc_root / '9' / 'fd'), 0o755)
    assert holders == {7: {'/dev/nvidia0'}}
    assert vanished == 1
    if os.geteuid() != 0:  # root reads a folder with mode 0 anyway
        assert unreadable == [9]


def test_iter_pids_includes_this_process():
    assert os.getpid() in set(_procfs.iter_pids())


def test_read_wchan_of_a_sleeping_child(spawn_holder):
    child = spawn_holder([])
    wchan = _procfs.read_wchan(child.pid)
    assert wchan is None or isinstance(wchan, str) and wchan != '0'


def test_read_exe_of_this_process():
    assert os.path.basename(_procfs.read_exe(os.getpid())).startswith('python')


# --- a GPU node is named by its device number -------------------------------------

class _Stat(object):
    def __init__(self, major, minor):
        self.st_rdev = os.makedev(major, minor)


@pytest.mark.parametrize('target, rdev, expected', [
    # A container that maps host GPU 3 as its /dev/nvidia0: the inode says 195:3.
    ('/dev/nvidia0', (195, 3), '/dev/nvidia3'),
    ('/dev/nvidia3', (195, 3), '/dev/nvidia3'),
    # Stand-in nodes of the simulated hosts (clones of /dev/null) keep their names.
    ('/dev/nvidia0', (1, 3), '/dev/nvidia0'),
    # nvidiactl (195:255) and nvidia-uvm are no GPU node.
    ('/dev/nvidiactl', (195, 255), '/dev/nvidiactl'),
    ('/dev/nvidia-uvm', (510, 0), '/dev/nvidia-uvm'),
    ('/dev/nvidia0', (195, 255), '/dev/nvidia0'),
])
def test_node_held_trusts_the_device_number_of_a_real_gpu_node(target, rdev, expected):
    def stat(path):
        assert path == '/proc/77/fd/5'
        return _Stat(*rdev)

    assert _procfs.node_held('/proc/77/fd/5', target, '/dev/nvidia', stat=stat) == expected


def test_node_held_keeps_the_path_when_the_fd_is_gone():
    def stat(path):
        raise FileNotFoundError(path)

    assert _procfs.node_held('/proc/77/fd/5', '/dev/nvidia0', '/dev/nvidia', stat=stat) == '/dev/nvidia0'


def test_scan_reads_the_device_number_behind_each_gpu_fd(fake_dev, spawn_holder, monkeypatch):
    holder = spawn_holder([os.path.join(fake_dev, 'nvidia0')])
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if path.startswith('/proc/%d/fd/' % holder.pid):
            return _Stat(195, 3)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(_procfs.os, 'stat', stat)
    holders = _procfs.scan_device_holders(dev_dir=fake_dev)[0]
    assert holders[holder.pid] == {os.path.join(fake_dev, 'nvidia3')}
    assert _procfs.fd_device_paths(holder.pid, os.path.join(fake_dev, 'nvidia')) == {os.path.join(fake_dev, 'nvidia3')}
