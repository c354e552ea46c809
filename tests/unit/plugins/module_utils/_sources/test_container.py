# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope, filter_reason
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import container as _container
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import kind as _kind

HEX = 'ab' * 32


def matches(record, selectors):
    return filter_reason(record, build_scope([], containers=selectors)) is None


@pytest.mark.parametrize('policy, scope_containers, action', [
    ('always', [], _kind.STOP),
    ('unless-stopped\n', [HEX[:12]], _kind.STOP),
    ('on-failure', ['docker'], _kind.STOP),
    ('always', ['podman'], _kind.LEAVE),
    ('no', [], None),
    ('', [], None),
])
def test_judge_container(policy, scope_containers, action):
    container = {'runtime': 'docker', 'id': HEX}
    found = _container.judge_container(container, policy, [50], scope_containers, matches)
    if action is None:
        assert found is None
    else:
        assert found['action'] == action and found['container'] == container


@pytest.mark.parametrize('cli, expected', [
    ('docker', [['docker', 'update', '--restart=no', HEX], ['docker', 'stop', '--time', '10', HEX]]),
    ('podman', [['podman', 'stop', '--time', '10', HEX]]),
])
def test_a_container_is_stopped_through_its_runtime_policy_cleared_first(cli, expected):
    calls = []

    def run(argv):
        calls.append(argv)
        return (0, '', '') if argv[1] == 'update' else (125, '', 'Error: no such container\n')
    item = _kind.entry('container', container={'runtime': cli, 'id': HEX}, holder_pids=[5], action='stop')
    assert _container.stop(item, run, 10.2) == (125, 'Error: no such container\n')
    assert calls == expected


def test_a_container_left_alone_is_a_leftover():
    item = _kind.entry('container', container={'runtime': 'docker', 'id': HEX}, holder_pids=[5],
                       action='left alone', reason='restart policy always, outside containers')
    assert _container.leftover(item) == ('docker container %s can start pid 5 again: restart policy always, '
                                         'outside containers' % HEX[:12])
    assert _container.leftover(dict(item, action='stopped')) is None
