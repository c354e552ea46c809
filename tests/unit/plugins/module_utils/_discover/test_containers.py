# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import containers as _containers
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import commands as _commands
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import TableRunner

C = 'cd' * 32
FORMAT = ('{{.Id}}\t{{.Name}}\t{{.Config.Image}}\t{{.State.Pid}}\t{{.HostConfig.RestartPolicy.Name}}\t'
          '{{index .Config.Labels "PODMAN_SYSTEMD_UNIT"}}\t{{.HostConfig.PidMode}}')
PODMAN_INSPECT = ['podman', 'container', 'inspect', '--format', FORMAT, C]
DOCKER_INSPECT = ['docker', 'container', 'inspect', '--format', FORMAT, C]
PODMAN_TOP = ['podman', 'container', 'top', C, 'hpid']


def inspected(main_pid, policy='always', name='vllm', image='localhost/vllm:latest', unit='<no value>', ident=C,
              pid_mode='private'):
    return '\t'.join((ident, name, image, str(main_pid), policy, unit, pid_mode)) + '\n'


def test_the_inspect_command_is_one_template_for_every_runtime():
    assert _commands.container_inspect('podman', C, _containers.INSPECT_FORMAT) == PODMAN_INSPECT
    assert _commands.container_inspect('docker', C, _containers.INSPECT_FORMAT) == DOCKER_INSPECT


@pytest.mark.parametrize('out, expected', [
    (inspected(500), dict(id=C, name='vllm', image='localhost/vllm:latest', main_pid=500, restart_policy='always',
                          label_unit='', pid_mode='private')),
    # docker names a container "/name"
    (inspected(500, name='/vllm', policy='unless-stopped'),
     dict(id=C, name='vllm', image='localhost/vllm:latest', main_pid=500, restart_policy='unless-stopped',
          label_unit='', pid_mode='private')),
    (inspected(0, policy='', unit='serve.service'),
     dict(id=C, name='vllm', image='localhost/vllm:latest', main_pid=None, restart_policy='', label_unit='serve.service',
          pid_mode='private')),
    ('', dict(id='', name='', image='', main_pid=None, restart_policy='', label_unit='', pid_mode='')),
    ('garbled\n', dict(id='garbled', name='', image='', main_pid=None, restart_policy='', label_unit='',
                       pid_mode='')),
])
def test_parse_inspect(out, expected):
    assert _containers.parse_inspect(out) == expected


# Each case: holders, their ancestors, the commands with their answers, the cgroup's unit, and the record.
CASES = [
    dict(id='main process', pids=[500], parents={}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500), ''))],
         record=dict(confirmed=True, name='vllm', image='localhost/vllm:latest', restart_policy='always',
                     systemd_unit=None, reason=None)),
    dict(id='descendant', pids=[502, 503], parents={502: [501, 500, 1], 503: [501, 500, 1]}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500), ''))],
         record=dict(confirmed=True, name='vllm')),
    dict(id='listed by top (exec)', pids=[610], parents={610: [400, 1]}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500), '')), (PODMAN_TOP, (0, 'HPID\n500\n610\n', ''))],
         record=dict(confirmed=True)),
    # A Quadlet payload: the label names the unit its cgroup lies under.
    dict(id='Quadlet unit', pids=[500], parents={}, unit='serve.service',
         commands=[(PODMAN_INSPECT, (0, inspected(500, policy='', unit='serve.service'), ''))],
         record=dict(confirmed=True, systemd_unit='serve.service', restart_policy='no')),
    # Security: a label anyone can set names no unit the holder's cgroup is not under.
    dict(id='label of another unit', pids=[500], parents={}, unit='other.service',
         commands=[(PODMAN_INSPECT, (0, inspected(500, unit='serve.service'), ''))],
         record=dict(confirmed=True, systemd_unit=None)),
    dict(id='label, no unit', pids=[500], parents={}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500, unit='serve.service'), ''))],
         record=dict(confirmed=True, systemd_unit=None)),
    # Security: a cgroup named after a container the runtime does not know.
    dict(id='unknown', pids=[700], parents={}, unit=None,
         commands=[(PODMAN_INSPECT, (125, '', 'Error: no such container %s\n' % C))],
         record=dict(confirmed=False, name=None, image=None,
                     reason='podman knows no container %s (Error: no such container %s)' % (C[:12], C))),
    dict(id='another id', pids=[700], parents={}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500, ident='ef' * 32), ''))],
         record=dict(confirmed=False, reason='podman container %s has another id (%s)' % (C[:12], 'ef' * 6))),
    dict(id='not running', pids=[700], parents={}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(0), ''))],
         record=dict(confirmed=False, reason='podman container %s is not running' % C[:12])),
    # Security: the container exists, the holder is none of its processes.
    dict(id='not one of its processes', pids=[700], parents={700: [1]}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500), '')), (PODMAN_TOP, (0, 'HPID\n500\n', ''))],
         record=dict(confirmed=False, name=None,
                     reason='pid 700: not a process of podman container %s (its main process is 500), whatever its '
                            'cgroup says' % C[:12])),
    # Security: in the host's PID namespace the runtime's list may be every host process; it is not asked.
    dict(id='host PID namespace, not in its tree', pids=[700], parents={700: [1]}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500, pid_mode='host'), ''))],
         record=dict(confirmed=False, name=None,
                     reason='pid 700: not in the process tree of podman container %s (its main process is 500), '
                            'which runs in the host\'s PID namespace, whatever its cgroup says' % C[:12])),
    dict(id='host PID namespace, a descendant', pids=[501], parents={501: [500, 1]}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500, pid_mode='host'), ''))],
         record=dict(confirmed=True, name='vllm')),
    dict(id='top past its deadline', pids=[700], parents={700: [1]}, unit=None,
         commands=[(PODMAN_INSPECT, (0, inspected(500), '')),
                   (PODMAN_TOP, (124, '', 'podman container top did not answer within 30 s'))],
         record=dict(confirmed=False,
                     reason='pid 700: podman cannot list the processes of container %s (podman container top did '
                            'not answer within 30 s)' % C[:12])),
]


@pytest.mark.parametrize('case', CASES, ids=[case['id'] for case in CASES])
def test_confirm(case):
    run = TableRunner(case['commands'])
    inspector = _containers.Inspector(run, {'podman': 'podman'}, lambda pid: case['parents'].get(pid, []))
    record = inspector.confirm({'runtime': 'podman', 'id': C}, case['pids'], cgroup_unit=case['unit'])
    assert run.expected == []
    assert record['runtime'] == 'podman' and record['id'] == C
    for key, value in case['record'].items():
        assert record[key] == value, key


def test_a_runtime_not_installed_confirms_nothing_and_runs_nothing():
    run = TableRunner([])
    record = _containers.Inspector(run, {'docker': None}).confirm({'runtime': 'docker', 'id': C}, [500])
    assert record['confirmed'] is False
    assert record['reason'] == 'docker is not installed, so the container cannot be confirmed'


def test_identify_asks_each_container_once_and_leaves_pods_and_plain_processes():
    run = TableRunner([(PODMAN_INSPECT, (0, inspected(500), ''))])
    records = [{'pid': 501, 'container': {'runtime': 'podman', 'id': C}},
               {'pid': 502, 'container': {'runtime': 'podman', 'id': C}},
               {'pid': 600, 'container': {'runtime': 'containerd', 'id': C, 'pod_uid': 'u-1'}},
               {'pid': 700, 'container': {'runtime': 'kubepods', 'id': C}},
               {'pid': 800, 'container': None}]
    _containers.identify(records, _containers.Inspector(run, {'podman': 'podman'}, lambda pid: [500, 1]),
                         lambda pid: None)
    assert run.expected == [] and len(run.calls) == 1
    assert [r['container']['name'] for r in records[:2]] == ['vllm', 'vllm']
    assert records[2]['container'] == {'runtime': 'containerd', 'id': C, 'pod_uid': 'u-1'}
    assert records[3]['container'] == {'runtime': 'kubepods', 'id': C}
    assert records[4]['container'] is None


def test_describe():
    assert _containers.describe(None) == ''
    assert _containers.describe({'runtime': 'podman', 'id': C, 'name': 'vllm', 'image': 'localhost/vllm'}) == (
        'podman container vllm (%s, localhost/vllm)' % C[:12])
    assert _containers.describe({'runtime': 'docker', 'id': C}) == 'docker container %s' % C[:12]


def test_the_systemd_unit_label_counts_for_podman_only():
    # Security: docker sets no such label itself; a docker container that carries it, under a unit's cgroup
    # (--cgroup-parent), still names no unit to stop.
    run = TableRunner([(DOCKER_INSPECT, (0, inspected(500, unit='serve.service'), ''))])
    inspector = _containers.Inspector(run, {'docker': 'docker'}, lambda pid: [])
    record = inspector.confirm({'runtime': 'docker', 'id': C}, [500], cgroup_unit='serve.service')
    assert run.expected == []
    assert record['confirmed'] is True and record['systemd_unit'] is None
