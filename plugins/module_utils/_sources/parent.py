# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Source kind ``parent``: a respawning parent of a holder (a shell loop, supervisord, a Python parent).

The release decides what to do with it (``_plan.parents``: leave, thaw, kill) and does it
(``_release.source_parents``); this file turns those results into source entries.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .._base.text import truncate
from .kind import SourceKind, entry, pid_list

NAME = 'parent'


def parent_entries(parents):
    """Source entries for the release's parent results (``outcome`` is the action taken)."""
    found = []
    for parent in parents:
        container = parent.get('container')
        found.append(entry(NAME, pid=parent['pid'], title=parent.get('title'),
                           unit=parent.get('systemd_unit'), container=container,
                           pod=(container or {}).get('pod_uid'), holder_pids=parent.get('children') or [],
                           action=parent.get('outcome'), reason=parent.get('reason')))
    return found


def leftover(item):
    if (item.get('action') or '') != 'left alone':
        return None
    return 'pid %s (%s), parent of pid %s, was left running (%s); next step: stop it, then run again' % (
        item['pid'], item.get('title'), pid_list(item), item.get('reason'))


def row_name(item):
    """Its pid and title, the title cut to 40 characters."""
    return '%s %s' % (item.get('pid'), truncate(item.get('title') or '', 40))


# An older release reported its killed parents as ``supervisors`` only.
KIND = SourceKind(NAME, label='respawning parent', metric='parent', leftover=leftover, stop=None,
                  row_name=row_name, role_stopped=None, older_list='supervisors')
