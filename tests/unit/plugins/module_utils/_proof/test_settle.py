# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._proof import settle as _settle


class Host:
    """GPU 0 and its holders over time: ``timeline`` is [(from_second, used_mib, holders)]."""

    def __init__(self, timeline):
        self.now = 0.0
        self.timeline = timeline
        self.looks = 0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds > 0
        self.now += seconds

    def probe(self):
        self.looks += 1
        used, holders = 0, []
        for start, mib, present in self.timeline:
            if self.now >= start:
                used, holders = mib, present
        return [{'index': 0, 'uuid': 'GPU-0', 'memory_used_mib': used, 'memory_total_mib': 1000}], holders, True


def holder(pid, kind='compute', ppid=4000, **extra):
    record = {'pid': pid, 'ppid': ppid, 'title': 'python3 worker.py', 'name': 'python3', 'gpus': [0],
              'kind': kind, 'state': 'sleeping', 'gpu_memory_mib': {'0': 500}, 'systemd_unit': None,
              'container': None, 'protected': False, 'is_self': False, 'orphaned': False}
    record.update(extra)
    return record


def run(host, baseline=(), seconds=2.0, **kwargs):
    return _settle.settle(host.probe, baseline, seconds, 0.05, selected=[0], clock=host.clock, sleep=host.sleep,
                          parent_title=lambda pid: 'bash' if pid == 4000 else None, **kwargs)


def test_stays_free_for_the_whole_window():
    host = Host([(0, 0, [holder(7, kind='client', protected=True)])])
    result = run(host, baseline=[7])
    assert result['free'] is True
    assert 2.0 <= result['observed_seconds'] < 2.06
    assert host.looks >= 40


def test_a_respawned_holder_fails_at_once_naming_parent_and_next_step():
    host = Host([(0, 0, []), (0.8, 500, [holder(42)])])
    result = run(host)
    assert result['free'] is False
    assert 0.8 <= result['observed_seconds'] < 0.9
    line = result['lines'][0]
    assert line.startswith('pid 42 (python3 worker.py) took GPU 0 back 0.8')
    assert 'parent pid 4000 (bash)' in line
    assert 'next step: stop its parent pid 4000 (bash)' in line


@pytest.mark.parametrize('extra, owner, step', [
    ({'systemd_unit': 'trainer.service', 'ppid': 1, 'orphaned': True}, 'unit trainer.service',
     'systemctl disable --now trainer.service'),
    ({'container': {'runtime': 'docker', 'id': 'ab' * 32}, 'ppid': 900}, 'docker container abababababab',
     'docker stop abababababab'),
    ({'container': {'runtime': 'containerd', 'id': 'cd' * 32, 'pod_uid': 'u-1'}, 'ppid': 900}, 'pod u-1',
     'drain the node'),
    ({'ppid': 1, 'orphaned': True}, '', 'a cron job, a scheduler'),
])
def test_the_line_names_unit_container_or_pod(extra, owner, step):
    host = Host([(0, 0, []), (0.3, 500, [holder(42, **extra)])])
    line = run(host)['lines'][0]
    assert owner in line and step in line


def test_a_new_opener_of_a_device_node_fails_even_without_memory():
    host = Host([(0, 0, []), (0.5, 0, [holder(43, kind='client', gpu_memory_mib={})])])
    result = run(host)
    assert result['free'] is False and result['lines'][0].startswith('pid 43 ')


@pytest.mark.parametrize('extra, allow', [
    ({'protected': True}, ()), ({'is_self': True}, ()), ({'name': 'dcgm-exporter'}, ('dcgm-exporter',)),
    ({'gpus': [1]}, ()),
])
def test_protected_own_allowed_and_other_gpus_do_not_count(extra, allow):
    host = Host([(0, 0, []), (0.5, 0, [holder(44, kind='client', gpu_memory_mib={}, **extra)])])
    assert run(host, allow=allow)['free'] is True


def test_memory_back_with_no_holder_seen():
    host = Host([(0, 0, []), (1.0, 900, [])])
    result = run(host)
    assert result['free'] is False
    assert result['lines'][-1] == 'The memory came back during the 2 s settle with no holder seen.'


def test_the_next_step_for_a_quadlet_container_is_its_unit():
    record = {'pid': 5, 'ppid': 4, 'container': {'runtime': 'podman', 'id': 'cd' * 32, 'confirmed': True,
                                                 'systemd_unit': 'serve.service'}}
    assert _settle.next_step(record) == (
        'stop its unit (systemctl stop serve.service), which runs the container, then run again')
    record['container']['systemd_unit'] = None
    assert _settle.next_step(record).startswith('stop the container (podman stop cdcdcdcdcdcd)')
