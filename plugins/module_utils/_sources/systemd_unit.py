# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Source kind ``systemd``: the system manager's service that owns a holder and can restart it.

Detection: the last ``.service`` of the holder's systemd cgroup path (``system_service``), still active,
activating or waiting to auto-restart (``unit_is_live``). Never a login session's scope, ``user@.service`` or
anything under it, nor a unit that holds this module's own lineage (the registry leaves those out). In scope
(``systemd_units`` empty or matching) it is stopped through systemd (``systemctl stop --no-block``, while its
parents are frozen and before any holder is signalled), so that ``Restart=`` cannot bring it back; otherwise
it is named.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch

from .._host.commands import systemctl_stop
from .kind import LEAVE, STOP, SourceKind, as_int, entry, pid_list

NAME = 'systemd'
UNIT_PROPERTIES = ('Id', 'LoadState', 'ActiveState', 'SubState', 'Restart', 'MainPID')
# A unit in one of these states can still start (or keeps) a holder.
LIVE_STATES = ('active', 'activating', 'reloading')


def system_service(cgroup_text):
    """The system manager's ``.service`` a process runs in, from /proc/PID/cgroup, or None.

    The last ``.service`` of the systemd hierarchy's path; None under a user
    manager (``user@UID.service``) or when the nearest unit is a scope.
    """
    path = None
    for line in (cgroup_text or '').splitlines():
        parts = line.split(':', 2)
        if len(parts) != 3:
            continue
        if 'name=systemd' in parts[1].split(','):
            path = parts[2]
            break
        if parts[0] == '0' and parts[1] == '' and path is None:
            path = parts[2]
    if not path:
        return None
    components = [part for part in path.split('/') if part]
    if any(part.startswith('user@') for part in components):
        return None
    for part in reversed(components):
        if part.endswith('.scope'):
            return None
        if part.endswith('.service'):
            return part
    return None


def unit_is_live(properties):
    return (properties.get('LoadState') == 'loaded'
            and (properties.get('ActiveState') in LIVE_STATES or properties.get('SubState') == 'auto-restart'))


def judge_unit(unit, properties, holder_pids, scope_units):
    """The source entry for a unit, or None when it can start nothing any more. Pure."""
    if not unit_is_live(properties):
        return None
    state = '%s/%s' % (properties.get('ActiveState'), properties.get('SubState'))
    restart = properties.get('Restart') or 'no'
    if scope_units and not any(fnmatch.fnmatchcase(unit, pattern) for pattern in scope_units):
        action = LEAVE
        reason = ('%s (Restart=%s) owns the holders and is outside systemd_units: never stopped; stop it '
                  '(systemctl stop %s) or add it to the scope' % (state, restart, unit))
    else:
        action = STOP
        reason = '%s (Restart=%s) owns the holders: stopped through systemd so that it cannot start them again' % (
            state, restart)
    return entry(NAME, unit=unit, holder_pids=holder_pids, action=action, reason=reason,
                 pid=as_int(properties.get('MainPID')) or None)


def stop(item, run, stop_seconds):
    """Stop the unit of ``item``; ``(rc, err)``. The stop is queued: the ladder deals with the holders."""
    rc, dummy, err = run(systemctl_stop(item['unit']))
    return rc, err


def leftover(item):
    action = item.get('action') or ''
    if not action.startswith(('left alone', 'stop failed')):
        return None
    return '%s can start pid %s again: %s' % (
        item['unit'], pid_list(item), item.get('reason') if action == 'left alone' else action)


def row_name(item):
    return str(item.get('unit'))


# The units the role's own stop stage stopped count as this kind too.
KIND = SourceKind(NAME, label='systemd service', metric='systemd_unit', leftover=leftover, stop=stop,
                  row_name=row_name, role_stopped='stopped_units', older_list=None)
