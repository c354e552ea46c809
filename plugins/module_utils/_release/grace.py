# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether a polite signal can do anything to a process, so its grace can be skipped.

Two cases, both read from ``/proc/PID/status`` (which never blocks behind
the target's memory map):

``sigterm-ignored``
    the signal is in ``SigIgn``: the process set it to SIG_IGN.

``namespace-init-without-handler``
    the process is the init of a PID namespace other than the one it is
    seen from (``NSpid`` has more than one value and the last is 1), and the
    signal is not in ``SigCgt``. The kernel drops any signal but SIGKILL and
    SIGSTOP sent to such an init from an ancestor namespace unless the init
    has a handler for it: a container whose main process is the worker,
    started without an init, or ``unshare --pid --fork``.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

from .identity import signal_name
from .._host.procfs import has_signal

SIGTERM_IGNORED = 'sigterm-ignored'
NAMESPACE_INIT = 'namespace-init-without-handler'
# A process in one of these states cannot act on a polite signal until it is continued.
STOPPED_STATES = ('stopped', 'tracing-stop')


def namespace_pids(status):
    """The ``NSpid`` values, outermost namespace first; ``[]`` when absent."""
    try:
        return [int(field) for field in ((status or {}).get('NSpid') or '').split()]
    except ValueError:
        return []


def is_namespace_init(status):
    """Whether the process is PID 1 of a PID namespace nested below the reader's."""
    pids = namespace_pids(status)
    return len(pids) > 1 and pids[-1] == 1


def grace_case(status, signum):
    """``(case, reason)`` when ``signum`` cannot reach the process's code, else None. Pure.

    SIGKILL and SIGSTOP always reach it: never a case.
    """
    if signum in (signal.SIGKILL, signal.SIGSTOP):
        return None
    name = signal_name(signum)
    if has_signal(status, 'SigIgn', signum):
        case = SIGTERM_IGNORED if signum == signal.SIGTERM else '%s-ignored' % name.lower()
        return case, 'ignores %s' % name
    if is_namespace_init(status) and not has_signal(status, 'SigCgt', signum):
        return NAMESPACE_INIT, ('init of its own PID namespace with no %s handler: the kernel drops %s '
                                'sent from outside the namespace' % (name, name))
    return None


def pointless_step(target, step, prober):
    """``(case, reason)`` when ``step`` cannot work on ``target`` (its wait is skipped), or None.

    ``case`` is a stable name: ``stopped``, ``sigterm-ignored`` (or
    ``<signal>-ignored``), ``namespace-init-without-handler`` (see
    above).
    """
    if step['signum'] == signal.SIGKILL:
        return None
    if target.state in STOPPED_STATES:
        return 'stopped', 'stopped'
    if step['signum'] == signal.SIGTERM and target.record.get('sigterm_ignored'):
        return SIGTERM_IGNORED, 'ignores SIGTERM'
    probe = getattr(prober, 'grace_case', None)
    if probe is not None:
        return probe(target.pid, step['signum'])
    ignored = prober.ignored_signals(target.pid)
    if ignored and step['signum'] in ignored:
        return ('%s-ignored' % step['signal'].lower(), 'ignores %s' % step['signal'])
    return None
