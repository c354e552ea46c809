# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host import proctree as _proctree
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import container as _container
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import kind as _kind
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import registry as _sources
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope, filter_reason
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import TableRunner

HEX = 'ab' * 32
C = 'cd' * 32
INSPECT_FORMAT = ('{{.Id}}\t{{.Name}}\t{{.Config.Image}}\t{{.State.Pid}}\t{{.HostConfig.RestartPolicy.Name}}\t'
                  '{{index .Config.Labels "PODMAN_SYSTEMD_UNIT"}}\t{{.HostConfig.PidMode}}')


def inspected(main_pid, policy, container_id=None, name='/vllm', image='localhost/vllm:latest', unit='<no value>'):
    """What ``container inspect --format INSPECT_FORMAT`` prints."""
    return '\t'.join((container_id or C, name, image, str(main_pid), policy, unit, 'private')) + '\n'


def matches(record, selectors):
    return filter_reason(record, build_scope([], containers=selectors)) is None


class Runner:
    """Answers commands from a table; records every argv."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        for prefix, answer in self.answers:
            if argv[:len(prefix)] == prefix:
                return answer
        return 1, '', 'unexpected command %s' % argv


def record(pid, container=None):
    return {'pid': pid, 'container': container}


def test_find_and_stop_sources_table():
    cgroups = {
        50: '0::/system.slice/trainer.service\n',
        51: '0::/system.slice/trainer.service\n',
        60: '0::/system.slice/gone.service\n',
        70: '0::/system.slice/docker-%s.scope\n' % HEX,
        80: '0::/kubepods.slice/kubepods-pod1234.slice/cri-containerd-%s.scope\n' % HEX,
        9: '0::/system.slice/ansible.service\n',   # the module's own lineage
        90: '0::/system.slice/ansible.service\n',  # a holder in the module's own unit
    }

    def read_cgroup(pid):
        return cgroups[pid]
    show = ('Id=trainer.service\nLoadState=loaded\nActiveState=active\nSubState=running\nRestart=always\nMainPID=49\n'
            '\nId=gone.service\nLoadState=loaded\nActiveState=inactive\nSubState=dead\nRestart=no\nMainPID=0\n')
    run = Runner([
        (['systemctl', 'show'], (0, show, '')),
        (['docker', 'container', 'inspect'], (0, inspected(70, 'always', HEX), '')),
        (['docker', 'update', '--restart=no', HEX], (0, HEX + '\n', '')),
        (['systemctl', 'stop', '--no-block', '--', 'trainer.service'], (0, '', '')),
        (['docker', 'stop'], (1, '', 'daemon not running\n')),
    ])
    targets = [record(50), record(51), record(60), record(70, {'runtime': 'docker', 'id': HEX}),
               record(80, {'runtime': 'containerd', 'id': HEX, 'pod_uid': '1234'}), record(90)]
    plan = _sources.find_sources(targets, read_cgroup, run, container_matches=matches, own_pids=[9],
                                 runtimes={'docker': 'docker', 'podman': None, 'containerd': None},
                                 ancestors=lambda pid: [1])
    # The runtime first: a confirmed Quadlet-style container joins its unit.
    assert run.calls[0] == ['docker', 'container', 'inspect', '--format', INSPECT_FORMAT, HEX]
    assert run.calls[1] == ['systemctl', 'show', '--property=Id,LoadState,ActiveState,SubState,Restart,MainPID',
                            '--', 'gone.service', 'trainer.service']
    assert [(e['kind'], e['unit'], e['holder_pids'], e['action']) for e in plan.entries] == [
        ('systemd', 'trainer.service', [50, 51], 'stop'), ('container', None, [70], 'stop')]
    _sources.stop_sources(plan, run, stop_seconds=7.6)
    # docker restarts an always container with the daemon, even after a stop: its policy goes first.
    assert run.calls[2:] == [['systemctl', 'stop', '--no-block', '--', 'trainer.service'],
                             ['docker', 'update', '--restart=no', HEX], ['docker', 'stop', '--time', '8', HEX]]
    assert [e['action'] for e in plan.entries] == ['stopped', 'stop failed: daemon not running']
    assert _sources.leftover_lines(plan.entries) == [
        'docker container %s can start pid 70 again: stop failed: daemon not running' % HEX[:12]]


def test_missing_runtime_and_failing_show_are_warnings_not_actions():
    run = Runner([(['systemctl', 'show'], (1, '', 'Failed to connect to bus\n'))])
    targets = [record(50), record(70, {'runtime': 'podman', 'id': HEX})]
    plan = _sources.find_sources(targets, lambda pid: '0::/system.slice/t.service\n', run,
                                 container_matches=matches, runtimes={'podman': None})
    assert plan.entries == []
    assert plan.warnings == ['podman container %s: podman is not installed, so its restart policy is unknown'
                             % HEX[:12],
                             'cannot read the units of the holders (Failed to connect to bus): they are not stopped']


def test_planned_actions_in_check_mode_and_without_a_release():
    plan = _sources.SourcePlan()
    plan.entries = [_kind.entry('systemd', unit='a.service', action='stop'),
                    _kind.entry('container', container={'runtime': 'docker', 'id': HEX}, action='leave')]
    _sources.planned_actions(plan, check_mode=True)
    assert [e['action'] for e in plan.entries] == ['would be stopped', 'left alone']


# --- containers from facts: the runtime confirms the container and its process ---------------

DOCKER_INSPECT = ['docker', 'container', 'inspect', '--format', INSPECT_FORMAT, C]
PODMAN_INSPECT = ['podman', 'container', 'inspect', '--format', INSPECT_FORMAT, C]
DOCKER_TOP = ['docker', 'container', 'top', C, '-o', 'pid']
PODMAN_TOP = ['podman', 'container', 'top', C, 'hpid']
NO_SUCH = (1, '', 'Error: No such container: %s\n' % C)


# Each case: the runtime, the holders, their ancestors, the commands expected with their answers, and the
# outcome: the restart policy (confirmed), or a part of the reason it is not a container source.
CONFIRM_CASES = [
    dict(id='the main process itself', cli='docker', pids=[500], parents={},
         commands=[(DOCKER_INSPECT, (0, inspected(500, 'always'), ''))], policy='always'),
    dict(id='a descendant of the main process', cli='docker', pids=[502], parents={502: [501, 500, 1]},
         commands=[(DOCKER_INSPECT, (0, inspected(500, 'unless-stopped'), ''))], policy='unless-stopped'),
    # docker exec: a child of the shim, not of the main process; the runtime's own list has it.
    dict(id='exec, listed by top', cli='docker', pids=[610], parents={610: [400, 1]},
         commands=[(DOCKER_INSPECT, (0, inspected(500, 'always'), '')), (DOCKER_TOP, (0, 'PID\n500\n610\n', ''))],
         policy='always'),
    dict(id='podman lists host pids', cli='podman', pids=[610], parents={610: [400, 1]},
         commands=[(PODMAN_INSPECT, (0, inspected(500, 'always'), '')), (PODMAN_TOP, (0, 'HPID\n500\n610\n', ''))],
         policy='always'),
    dict(id='no restart policy', cli='podman', pids=[500], parents={},
         commands=[(PODMAN_INSPECT, (0, inspected(500, ''), ''))], policy='no'),
    # Security: a container the runtime does not know (a cgroup named after it, an id read elsewhere).
    dict(id='no such container', cli='docker', pids=[700], parents={700: [1]},
         commands=[(DOCKER_INSPECT, NO_SUCH)], why='docker knows no container %s (Error: No such container' % C[:12]),
    dict(id='not running', cli='docker', pids=[700], parents={700: [1]},
         commands=[(DOCKER_INSPECT, (0, inspected(0, 'always'), ''))], why='docker container %s is not running' % C[:12]),
    # Security: the container exists, but the holder is none of its processes.
    dict(id='not one of its processes', cli='docker', pids=[700], parents={700: [650, 1]},
         commands=[(DOCKER_INSPECT, (0, inspected(500, 'always'), '')), (DOCKER_TOP, (0, 'PID\n500\n501\n', ''))],
         why='pid 700: not a process of docker container %s (its main process is 500), whatever its cgroup says'
             % C[:12]),
    dict(id='one holder of two is not', cli='docker', pids=[501, 700], parents={501: [500], 700: [1]},
         commands=[(DOCKER_INSPECT, (0, inspected(500, 'always'), '')), (DOCKER_TOP, (0, 'PID\n500\n501\n', ''))],
         why='pid 700: not a process of docker container'),
    dict(id='top fails', cli='docker', pids=[700], parents={700: [1]},
         commands=[(DOCKER_INSPECT, (0, inspected(500, 'always'), '')),
                   (DOCKER_TOP, (124, '', 'docker container top did not answer within 10 s'))],
         why='pid 700: docker cannot list the processes of container %s (docker container top did not answer'
             % C[:12]),
    dict(id='garbled inspect', cli='docker', pids=[700], parents={},
         commands=[(DOCKER_INSPECT, (0, inspected('<no value>', 'always'), ''))], why='is not running'),
]


@pytest.mark.parametrize('case', CONFIRM_CASES, ids=[case['id'] for case in CONFIRM_CASES])
def test_confirm_container(case):
    run = TableRunner(case['commands'])
    policy, why = _container.confirm_container(case['cli'], {'runtime': case['cli'], 'id': C}, case['pids'], run,
                                               lambda pid: case['parents'].get(pid, []))
    assert run.expected == [], 'commands not run: %s' % run.expected
    if 'policy' in case:
        assert (policy, why) == (case['policy'], None)
    else:
        assert policy is None and case['why'] in why


# Security: a holder the runtime does not confirm is no container source: nothing is stopped, the result says why.
@pytest.mark.parametrize('answers, reason', [
    ([(DOCKER_INSPECT, NO_SUCH)], 'docker knows no container %s' % C[:12]),
    ([(DOCKER_INSPECT, (0, inspected(500, 'always'), '')), (DOCKER_TOP, (0, 'PID\n500\n', ''))],
     'pid 700: not a process of docker container %s' % C[:12]),
])
def test_an_unconfirmed_container_is_no_source_and_nothing_is_stopped(answers, reason):
    run = TableRunner(answers)
    plan = _sources.find_sources([record(700, {'runtime': 'docker', 'id': C})], lambda pid: '0::/x.scope\n', run,
                                 container_matches=matches, runtimes={'docker': 'docker'}, ancestors=lambda pid: [1])
    assert run.expected == []
    assert [(e['kind'], e['holder_pids'], e['action']) for e in plan.entries] == [
        ('container', [700], 'not a container source')]
    assert reason in plan.entries[0]['reason']
    assert plan.entries[0]['reason'].endswith(': not stopped, and nothing else asked of the runtime')
    assert plan.to_stop() == []
    assert plan.warnings == ['docker container %s is not a source of pid 700: %s' % (C[:12], plan.entries[0][
        'reason'].split(': not stopped')[0])]
    _sources.stop_sources(plan, run)
    _sources.planned_actions(plan, check_mode=True)
    assert run.calls == [argv for argv, dummy in answers]
    assert plan.entries[0]['action'] == 'not a container source'
    assert _sources.leftover_lines(plan.entries) == []


def test_a_confirmed_container_is_stopped_through_its_runtime():
    run = TableRunner([(DOCKER_INSPECT, (0, inspected(500, 'always'), '')),
                       (['docker', 'update', '--restart=no', C], (0, C + '\n', '')),
                       (['docker', 'stop', '--time', '10', C], (0, C + '\n', ''))])
    plan = _sources.find_sources([record(501, {'runtime': 'docker', 'id': C})], lambda pid: '0::/x.scope\n', run,
                                 container_matches=matches, runtimes={'docker': 'docker'},
                                 ancestors=lambda pid: [500, 400, 1])
    assert [e['action'] for e in plan.entries] == ['stop']
    _sources.stop_sources(plan, run)
    assert [e['action'] for e in plan.entries] == ['stopped'] and run.expected == []


def test_a_policy_that_cannot_be_taken_away_is_said_and_the_stop_still_runs():
    run = TableRunner([(DOCKER_INSPECT, (0, inspected(500, 'always'), '')),
                       (['docker', 'update', '--restart=no', C], (1, '', 'Error response from daemon: denied\n')),
                       (['docker', 'stop', '--time', '10', C], (0, C + '\n', ''))])
    plan = _sources.find_sources([record(501, {'runtime': 'docker', 'id': C})], lambda pid: '0::/x.scope\n', run,
                                 container_matches=matches, runtimes={'docker': 'docker'},
                                 ancestors=lambda pid: [500, 400, 1])
    before = plan.entries[0]['reason']
    _sources.stop_sources(plan, run)
    assert [e['action'] for e in plan.entries] == ['stopped'] and run.expected == []
    assert plan.entries[0]['reason'] == (
        before + '; but its restart policy could not be taken away (Error response from daemon: denied), '
        'so docker can start it again')


def test_the_real_process_tree_confirms_a_descendant(spawned):
    # This test's own child: its ancestors, read from /proc, include this process.
    child = spawned('import time; time.sleep(30)')
    run = TableRunner([(DOCKER_INSPECT, (0, inspected(os.getpid(), 'always'), ''))])
    assert _container.confirm_container('docker', {'runtime': 'docker', 'id': C}, [child.pid], run,
                                        _proctree.ancestors) == ('always', None)


def test_every_kind_has_its_own_metric_name_in_the_order_the_metrics_keep():
    # The metrics' kind label values, which dashboards and alerts query by name.
    assert [kind.metric for kind in _sources.KINDS.values()] == ['systemd_unit', 'container', 'pod', 'parent']
    assert [kind.name for kind in _sources.KINDS.values()] == ['systemd', 'container', 'pod', 'parent']
    assert all(isinstance(kind, _kind.SourceKind) and kind.label for kind in _sources.KINDS.values())


@pytest.mark.parametrize('item, name', [
    ({'kind': 'systemd', 'unit': 'vllm.service'}, 'vllm.service'),
    ({'kind': 'pod', 'pod': 'uid-1'}, 'uid-1'),
    ({'kind': 'parent', 'pid': 50, 'title': 'supervisord -n'}, '50 supervisord -n'),
    ({'kind': 'parent', 'pid': 50, 'title': 'x' * 46}, u'50 ' + 'x' * 39 + u'\u2026'),
    ({'kind': 'container', 'container': {'runtime': 'docker', 'id': HEX}}, HEX[:12]),
])
def test_each_kind_names_its_entry_for_a_summary_row(item, name):
    assert _sources.KINDS[item['kind']].row_name(item) == name
