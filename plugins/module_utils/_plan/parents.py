# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which parent of a released holder is a source, and what the release does to it.

A holder's parent can start it again once it dies: a ``bash -c`` loop,
supervisord, a Python parent that restarts its workers. ``parent_verdict``
decides, from a process dict (see ``_release.prober.describe_process``), one of:

``None``
    not a source: PID 1, a kernel thread, the module or one of its
    ancestors, an init system, a container runtime or shim, a scheduler
    daemon (they reap and restart by design, and are never signalled), a
    session process (``sshd``, ``login``, ``su``, ``sudo``, ``tmux``,
    ``screen``) or a launcher (``unshare``, ``timeout``, ``nohup``...): the
    names of ``_discover.protection.NEVER_SUPERVISORS`` but the shells, by command
    name or executable.

``LEAVE``
    a source that is never signalled: protected, or outside the scope
    filters (``users``, ``match``, ``systemd_units``, ``containers``,
    permission). It is named so that the proof can say what will bring the
    holder back.

``THAW``
    frozen (SIGSTOP) before the first signal to its children, so that it
    cannot respawn anything during the release, and thawed (SIGCONT)
    afterwards: an interactive shell on a terminal (never killed), or a
    parent with children that are not targets.

``KILL``
    a respawner: frozen first, and killed once its holder children are
    gone. A parent whose live children are all targets (and that is not an
    interactive shell on a terminal), or one that matches every identifying
    filter given (the operator named it). A ``THAW`` parent that starts a new
    holder during the release becomes one, unless it is an interactive shell.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from .._discover.protection import NEVER_SUPERVISORS, never_signalled, never_supervisor

LEAVE = 'leave'
THAW = 'thaw'
KILL = 'kill'

SHELLS = frozenset(('sh', 'bash', 'dash', 'zsh', 'ksh', 'mksh', 'fish', 'csh', 'tcsh'))

# Never a source: sessions, launchers, init systems, container runtimes and schedulers (``_discover.protection``'s
# parents that are never supervisors), less the shells, which are judged here: a ``bash -c`` loop respawns.
NOT_SOURCES = frozenset(NEVER_SUPERVISORS) - SHELLS - frozenset(('busybox',))

# Options that leave a shell reading commands from its terminal.
_INTERACTIVE_OPTIONS = frozenset(('-i', '-l', '--login', '--norc', '--noprofile', '--posix', '-s'))

REASON_RESPAWNER = 'parent whose children are all targeted holders: it could respawn them'
REASON_FILTERS = 'parent of targeted holders, within the selected filters'
REASON_INTERACTIVE = 'interactive shell on a terminal: frozen during the release, then thawed, never killed'
REASON_OTHER_CHILDREN = ('parent with children that are not targeted holders: frozen during the release, '
                         'then thawed')
REASON_RESPAWNED = 'started a new holder during the release: a respawner'


def is_interactive_shell(process):
    """Whether ``process`` is a shell reading commands from a terminal.

    A shell (by command name) with a controlling terminal whose command line
    is a login shell (``-bash``) or has no script and no ``-c``. A
    ``bash -c 'while ...'`` loop started from a terminal is not one.
    """
    if process.get('name') not in SHELLS or not process.get('tty'):
        return False
    argv = (process.get('title') or process.get('name') or '').split()
    if not argv or argv[0].startswith('-'):
        return True
    return all(arg in _INTERACTIVE_OPTIONS for arg in argv[1:])


def parent_verdict(process, scope, target_pids, filter_reason, permission_reason):
    """``(action, reason)`` for the parent of targeted holders, or None when it is no source. Pure.

    ``process`` is a process dict with ``children`` (live child PIDs);
    ``scope`` a ``_plan.plan.Scope``; ``filter_reason(process, scope)`` and
    ``permission_reason(process, scope)`` say why the scope leaves a record
    out (None when it does not).
    """
    pid = process.get('pid')
    if never_signalled(pid, process.get('kernel_thread'), process.get('ppid')):
        return None
    if pid in scope.own_pids or process.get('is_self'):
        return None
    if never_supervisor(process, NOT_SOURCES):
        return None
    if process.get('protected'):
        return LEAVE, 'protected (%s): never signalled' % (process.get('protected_reason') or 'protected')
    outside = filter_reason(process, scope) or permission_reason(process, scope)
    if outside:
        return LEAVE, 'outside the scope filters (%s): never signalled' % outside
    if is_interactive_shell(process):
        return THAW, REASON_INTERACTIVE
    children = list(process.get('children') or [])
    if scope.identifying_filters:
        return KILL, REASON_FILTERS
    if children and all(child in target_pids for child in children):
        return KILL, REASON_RESPAWNER
    return THAW, REASON_OTHER_CHILDREN


def respawned(entry, ancestors):
    """Whether the frozen parent ``entry`` started the holder whose ancestors (nearest first) are given.

    An interactive shell never counts: it is thawed whatever it did.
    """
    if entry.get('action') != THAW or entry.get('reason') == REASON_INTERACTIVE:
        return False
    return entry['pid'] in ancestors
