# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils import _sources
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import build_scope, filter_reason

HEX = 'ab' * 32


@pytest.mark.parametrize('text, unit', [
    ('1:name=systemd:/system.slice/trainer.service\n0::/system.slice/trainer.service\n', 'trainer.service'),
    ('0::/system.slice/trainer.service\n', 'trainer.service'),
    ('0::/system.slice/trainer.service/worker\n', 'trainer.service'),
    # a login session, a user manager and anything under it never count
    ('0::/user.slice/user-1000.slice/session-3.scope\n', None),
    ('0::/user.slice/user-1000.slice/user@1000.service/app.slice/job.service\n', None),
    ('0::/user.slice/user-1000.slice/user@1000.service\n', None),
    # a transient scope (systemd-run --scope, a container runtime's scope) is no service
    ('0::/system.slice/docker-%s.scope\n' % HEX, None),
    ('0::/\n', None),
    ('', None),
])
def test_system_service(text, unit):
    assert _sources.system_service(text) == unit


def props(unit, active='active', sub='running', restart='always', main='400'):
    return {'Id': unit, 'LoadState': 'loaded', 'ActiveState': active, 'SubState': sub, 'Restart': restart,
            'MainPID': main}


@pytest.mark.parametrize('properties, scope_units, action', [
    (props('t.service'), [], _sources.STOP),
    (props('t.service', active='activating', sub='auto-restart'), [], _sources.STOP),
    (props('t.service'), ['t*.service'], _sources.STOP),
    (props('t.service'), ['other.service'], _sources.LEAVE),
    (props('t.service', active='inactive', sub='dead'), [], None),
    (props('t.service', active='failed', sub='failed'), [], None),
    (dict(props('t.service'), LoadState='not-found'), [], None),
])
def test_judge_unit(properties, scope_units, action):
    found = _sources.judge_unit(properties['Id'], properties, [50], scope_units)
    if action is None:
        assert found is None
    else:
        assert found['action'] == action and found['kind'] == 'systemd' and found['unit'] == 't.service'
        assert found['holder_pids'] == [50] and found['pid'] == 400
        assert 'Restart=always' in found['reason']


def matches(record, selectors):
    return filter_reason(record, build_scope([], containers=selectors)) is None


@pytest.mark.parametrize('policy, scope_containers, action', [
    ('always', [], _sources.STOP),
    ('unless-stopped\n', [HEX[:12]], _sources.STOP),
    ('on-failure', ['docker'], _sources.STOP),
    ('always', ['podman'], _sources.LEAVE),
    ('no', [], None),
    ('', [], None),
])
def test_judge_container(policy, scope_containers, action):
    container = {'runtime': 'docker', 'id': HEX}
    found = _sources.judge_container(container, policy, [50], scope_containers, matches)
    if action is None:
        assert found is None
    else:
        assert found['action'] == action and found['container'] == container


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
        (['docker', 'inspect'], (0, 'always\n', '')),
        (['systemctl', 'stop', '--no-block', '--', 'trainer.service'], (0, '', '')),
        (['docker', 'stop'], (1, '', 'daemon not running\n')),
    ])
    targets = [record(50), record(51), record(60), record(70, {'runtime': 'docker', 'id': HEX}),
               record(80, {'runtime': 'containerd', 'id': HEX, 'pod_uid': '1234'}), record(90)]
    plan = _sources.find_sources(targets, read_cgroup, run, container_matches=matches, own_pids=[9],
                                 runtimes={'docker': 'docker', 'podman': None, 'containerd': None})
    assert run.calls[0] == ['systemctl', 'show', '--property=Id,LoadState,ActiveState,SubState,Restart,MainPID',
                            '--', 'gone.service', 'trainer.service']
    assert run.calls[1] == ['docker', 'inspect', '--format', '{{.HostConfig.RestartPolicy.Name}}', HEX]
    assert [(e['kind'], e['unit'], e['holder_pids'], e['action']) for e in plan.entries] == [
        ('systemd', 'trainer.service', [50, 51], 'stop'), ('container', None, [70], 'stop')]
    _sources.stop_sources(plan, run, stop_seconds=7.6)
    assert run.calls[2:] == [['systemctl', 'stop', '--no-block', '--', 'trainer.service'],
                             ['docker', 'stop', '--time', '8', HEX]]
    assert [e['action'] for e in plan.entries] == ['stopped', 'stop failed: daemon not running']
    assert _sources.leftover_lines(plan.entries) == [
        'docker container %s can start pid 70 again: stop failed: daemon not running' % HEX[:12]]


def test_missing_runtime_and_failing_show_are_warnings_not_actions():
    run = Runner([(['systemctl', 'show'], (1, '', 'Failed to connect to bus\n'))])
    targets = [record(50), record(70, {'runtime': 'podman', 'id': HEX})]
    plan = _sources.find_sources(targets, lambda pid: '0::/system.slice/t.service\n', run,
                                 container_matches=matches, runtimes={'podman': None})
    assert plan.entries == []
    assert plan.warnings == ['cannot read the units of the holders (Failed to connect to bus): they are not stopped',
                             'podman container %s: podman is not installed, so its restart policy is unknown'
                             % HEX[:12]]


def test_planned_actions_in_check_mode_and_without_a_release():
    plan = _sources.SourcePlan()
    plan.entries = [_sources.entry('systemd', unit='a.service', action='stop'),
                    _sources.entry('container', container={'runtime': 'docker', 'id': HEX}, action='leave')]
    _sources.planned_actions(plan, check_mode=True)
    assert [e['action'] for e in plan.entries] == ['would be stopped', 'left alone']


def test_pods_named_from_kubelet_logs(tmp_path):
    (tmp_path / 'ml_trainer-0_1234').mkdir()
    assert _sources.pod_reason('1234', str(tmp_path)) == (
        'managed by Kubernetes pod 1234: drain the node (namespace ml, pod trainer-0)')
    assert _sources.pod_reason('99', str(tmp_path)) == 'managed by Kubernetes pod 99: drain the node'
    assert _sources.pod_reason('99', str(tmp_path / 'missing')) == 'managed by Kubernetes pod 99: drain the node'
    entries = _sources.pod_entries([record(80, {'runtime': 'containerd', 'id': HEX, 'pod_uid': '1234'})])
    assert entries[0]['pod'] == '1234' and 'kubelet will restart it' in entries[0]['reason']


def test_parent_entries_and_leftovers():
    parents = [{'pid': 100, 'title': 'bash -c loop', 'children': [50], 'systemd_unit': None, 'container': None,
                'outcome': 'left alone', 'reason': 'outside the scope filters (title does not match): never signalled'},
               {'pid': 101, 'title': 'sv', 'children': [51], 'systemd_unit': 'a.service', 'container': None,
                'outcome': 'frozen and killed', 'reason': 'x'}]
    entries = _sources.parent_entries(parents)
    assert [(e['kind'], e['pid'], e['unit'], e['action']) for e in entries] == [
        ('parent', 100, None, 'left alone'), ('parent', 101, 'a.service', 'frozen and killed')]
    lines = _sources.leftover_lines(entries)
    assert len(lines) == 1 and lines[0].startswith('pid 100 (bash -c loop), parent of pid 50, was left running')
