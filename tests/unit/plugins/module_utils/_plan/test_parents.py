# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import parents as _parents
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import (
    build_scope,
    filter_reason,
    permission_reason,
)


def parent(pid=100, children=(50,), **extra):
    entry = {'pid': pid, 'ppid': 1, 'name': 'bash', 'title': 'bash -c while true; do python3 worker.py; done',
             'user': 'root', 'uid': 0, 'systemd_unit': None, 'container': None, 'tty': None,
             'children': list(children)}
    entry.update(extra)
    return entry


@pytest.mark.parametrize('process, interactive', [
    (parent(), False),
    (parent(tty='/dev/pts/1'), False),                 # a bash -c loop typed in a terminal
    (parent(tty='/dev/pts/1', title='-bash'), True),   # a login shell
    (parent(tty='/dev/pts/1', title='bash'), True),
    (parent(tty='/dev/pts/1', title='/bin/bash -i'), True),
    (parent(tty='/dev/pts/1', title='bash run.sh'), False),
    (parent(tty=None, title='bash'), False),           # no terminal
    (parent(tty='/dev/pts/1', title='python3', name='python3'), False),
])
def test_interactive_shell(process, interactive):
    assert _parents.is_interactive_shell(process) is interactive


def verdict(process, targets=(50,), **scope):
    return _parents.parent_verdict(process, build_scope([0], **scope), set(targets), filter_reason,
                                   permission_reason)


@pytest.mark.parametrize('process, scope, expected', [
    (parent(), {}, (_parents.KILL, _parents.REASON_RESPAWNER)),
    (parent(name='supervisord', title='/usr/bin/python3 /usr/bin/supervisord'), {},
     (_parents.KILL, _parents.REASON_RESPAWNER)),
    (parent(children=(50, 51)), {}, (_parents.THAW, _parents.REASON_OTHER_CHILDREN)),
    (parent(tty='/dev/pts/0', title='-bash'), {}, (_parents.THAW, _parents.REASON_INTERACTIVE)),
    # an interactive shell is never killed, even when the filters name it
    (parent(tty='/dev/pts/0', title='-bash', systemd_unit='a.service'), {'systemd_units': ['a.service']},
     (_parents.THAW, _parents.REASON_INTERACTIVE)),
    (parent(children=(50, 51), systemd_unit='a.service'), {'systemd_units': ['a.service']},
     (_parents.KILL, _parents.REASON_FILTERS)),
])
def test_verdict_actions(process, scope, expected):
    assert verdict(process, **scope) == expected


@pytest.mark.parametrize('process, scope, reason_part', [
    (parent(), {'match': '^python3'}, 'title does not match'),
    (parent(user='bob', uid=1002), {'users': ['root']}, 'user not selected'),
    (parent(user='bob', uid=1002), {'euid': 1001}, 'permission denied'),
    (parent(protected=True, protected_reason='default protected executable dcgm-exporter'), {},
     'protected (default protected executable dcgm-exporter)'),
])
def test_sources_outside_the_scope_are_never_signalled(process, scope, reason_part):
    action, reason = verdict(process, **scope)
    assert action == _parents.LEAVE
    assert reason_part in reason and 'never signalled' in reason


@pytest.mark.parametrize('process, scope', [
    (parent(pid=1), {}),
    (parent(pid=2), {}),
    (parent(ppid=2), {}),
    (parent(pid=100), {'own_pids': [100]}),
    (parent(is_self=True), {}),
    (parent(name='systemd'), {}),
    (parent(name='containerd-shim-runc-v2'), {}),
    (parent(name='conmon'), {}),
    (parent(name='sshd'), {}),
    (parent(name='sshd-session'), {}),
    (parent(name='tmux: server'), {}),
    (parent(name='screen'), {}),
    (parent(name='sudo'), {}),
    (parent(name='login'), {}),
])
def test_never_a_source(process, scope):
    assert verdict(process, **scope) is None


def test_respawned_only_for_a_thawed_parent_that_is_no_interactive_shell():
    thawed = {'pid': 100, 'action': _parents.THAW, 'reason': _parents.REASON_OTHER_CHILDREN}
    assert _parents.respawned(thawed, [100, 1])
    assert not _parents.respawned(thawed, [200, 1])
    shell = {'pid': 100, 'action': _parents.THAW, 'reason': _parents.REASON_INTERACTIVE}
    assert not _parents.respawned(shell, [100, 1])
    killed = {'pid': 100, 'action': _parents.KILL, 'reason': _parents.REASON_RESPAWNER}
    assert not _parents.respawned(killed, [100])
