# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import kind as _kind
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import systemd_unit as _systemd_unit

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
    assert _systemd_unit.system_service(text) == unit


def props(unit, active='active', sub='running', restart='always', main='400'):
    return {'Id': unit, 'LoadState': 'loaded', 'ActiveState': active, 'SubState': sub, 'Restart': restart,
            'MainPID': main}


@pytest.mark.parametrize('properties, scope_units, action', [
    (props('t.service'), [], _kind.STOP),
    (props('t.service', active='activating', sub='auto-restart'), [], _kind.STOP),
    (props('t.service'), ['t*.service'], _kind.STOP),
    (props('t.service'), ['other.service'], _kind.LEAVE),
    (props('t.service', active='inactive', sub='dead'), [], None),
    (props('t.service', active='failed', sub='failed'), [], None),
    (dict(props('t.service'), LoadState='not-found'), [], None),
])
def test_judge_unit(properties, scope_units, action):
    found = _systemd_unit.judge_unit(properties['Id'], properties, [50], scope_units)
    if action is None:
        assert found is None
    else:
        assert found['action'] == action and found['kind'] == 'systemd' and found['unit'] == 't.service'
        assert found['holder_pids'] == [50] and found['pid'] == 400
        assert 'Restart=always' in found['reason']


def test_a_unit_left_alone_or_failing_to_stop_is_a_leftover():
    left = _kind.entry('systemd', unit='a.service', holder_pids=[5, 4], action='left alone', reason='outside')
    failed = _kind.entry('systemd', unit='b.service', holder_pids=[6], action='stop failed: rc 1')
    stopped = _kind.entry('systemd', unit='c.service', holder_pids=[7], action='stopped')
    assert _systemd_unit.leftover(left) == 'a.service can start pid 4, 5 again: outside'
    assert _systemd_unit.leftover(failed) == 'b.service can start pid 6 again: stop failed: rc 1'
    assert _systemd_unit.leftover(stopped) is None


def test_a_unit_stop_is_queued_through_the_runner():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, '', ''
    assert _systemd_unit.stop({'unit': 'a.service'}, run, 10) == (0, '')
    assert calls == [['systemctl', 'stop', '--no-block', '--', 'a.service']]
