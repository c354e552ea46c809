# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The release ladder as data: its steps and their parsing.

``parse_ladder`` validates the ladder (a list of steps) and fills in the
defaults: SIGTERM and wait ``grace_seconds``; freeze; SIGKILL and wait
``kill_seconds``; each wait within ``_base.checks``' bounds.
``adoption_start`` says where on the ladder a holder that appeared during the
release starts.

Pure; this file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

from .._base.checks import EscalationError, check_seconds

DEFAULT_GRACE_SECONDS = 10.0
DEFAULT_KILL_SECONDS = 10.0

FREEZE = 'freeze'

# Signals a ladder may send by name. SIGSTOP/SIGCONT are the freeze step's
# business; job-control and child signals make no sense here.
LADDER_SIGNALS = ('SIGTERM', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2', 'SIGABRT', 'SIGKILL')


def _signal_from_name(option, value):
    if isinstance(value, bool) or not isinstance(value, str) or not value.strip():
        raise EscalationError('%s: must be a signal name such as SIGTERM; got: %r' % (option, value))
    name = value.strip().upper()
    if not name.startswith('SIG'):
        name = 'SIG' + name
    known = signal.Signals.__members__.get(name)
    if known is None:
        raise EscalationError("%s: unknown signal '%s'" % (option, value))
    if name not in LADDER_SIGNALS:
        raise EscalationError("%s: signal '%s' is not allowed in a ladder (use one of %s; "
                              "stopping is the 'freeze' action)" % (option, value, ', '.join(LADDER_SIGNALS)))
    return name, int(known)


def default_ladder(grace_seconds=DEFAULT_GRACE_SECONDS, kill_seconds=DEFAULT_KILL_SECONDS):
    return [
        {'signal': 'SIGTERM', 'wait': grace_seconds},
        {'action': FREEZE},
        {'signal': 'SIGKILL', 'wait': kill_seconds},
    ]


def parse_ladder(ladder=None, grace_seconds=DEFAULT_GRACE_SECONDS, kill_seconds=DEFAULT_KILL_SECONDS):
    """Validate a ladder and return its normalised steps.

    ``ladder`` is ``None`` for the default, or a list of dicts, each either
    ``{"signal": NAME, "wait": SECONDS}`` or ``{"action": "freeze"}``. A
    signal step without ``wait`` waits ``kill_seconds`` after SIGKILL and
    ``grace_seconds`` otherwise. A freeze step must be followed by a SIGKILL
    step: a frozen process honours no other signal. SIGKILL, if present, is the
    last step: a step after it reaches nothing, so the order is wrong.

    Returns dicts ``{"name", "action", "signal", "signum", "wait"}`` where
    ``action`` is ``"signal"`` or ``"freeze"``.
    """
    grace_seconds = check_seconds('grace_seconds', grace_seconds)
    kill_seconds = check_seconds('kill_seconds', kill_seconds)
    if ladder is None:
        ladder = default_ladder(grace_seconds, kill_seconds)
    if not isinstance(ladder, (list, tuple)) or not ladder:
        raise EscalationError('ladder: must be a non-empty list of steps; got: %r' % (ladder,))
    steps = []
    for position, raw in enumerate(ladder):
        where = 'ladder[%d]' % position
        if not isinstance(raw, dict):
            raise EscalationError('%s: must be a dictionary with signal (and wait) or action; got: %r' % (where, raw))
        unknown = sorted(set(raw) - set(('signal', 'wait', 'action')))
        if unknown:
            raise EscalationError('%s: unknown key %s; a step has signal and wait, or action' % (where, ', '.join(unknown)))
        action = raw.get('action')
        if action is not None:
            if action != FREEZE:
                raise EscalationError("%s.action: unknown action %r; the only action is 'freeze'" % (where, action))
            if raw.get('signal') is not None or raw.get('wait') is not None:
                raise EscalationError('%s: a freeze step takes neither signal nor wait; got: %r' % (where, raw))
            steps.append({'name': FREEZE, 'action': FREEZE, 'signal': 'SIGSTOP',
                          'signum': int(signal.SIGSTOP), 'wait': 0.0})
            continue
        if raw.get('signal') is None:
            raise EscalationError('%s: needs a signal or action; got: %r' % (where, raw))
        name, signum = _signal_from_name('%s.signal' % where, raw['signal'])
        if raw.get('wait') is None:
            wait = kill_seconds if signum == signal.SIGKILL else grace_seconds
        else:
            wait = check_seconds('%s.wait' % where, raw['wait'])
        steps.append({'name': name, 'action': 'signal', 'signal': name, 'signum': signum, 'wait': wait})
    for position, step in enumerate(steps):
        # Nothing a step could reach is left after SIGKILL: a later step means the order is wrong.
        if step['signum'] == signal.SIGKILL and position + 1 < len(steps):
            raise EscalationError('ladder[%d]: comes after the SIGKILL of ladder[%d], which must be the last step '
                                  '(order the steps from the mildest); got: %r' % (position + 1, position, list(ladder)))
        if step['action'] == FREEZE:
            following = steps[position + 1] if position + 1 < len(steps) else None
            if following is None or following['signum'] != signal.SIGKILL:
                raise EscalationError('ladder[%d]: a freeze step must be followed by a SIGKILL step; got: %s'
                                      % (position, repr(ladder[position + 1]) if following else 'the end of the ladder'))
    return steps


def adoption_start(ladder, origins):
    """Where a holder that appeared during the release starts on ``ladder``. Pure.

    ``origins`` lists ``(position, signalled)`` for each of its origins (see
    "Newcomers" above): the ladder position an origin is at, and whether a
    step was already sent to it or skipped past. Returns ``(position,
    skipped)``: the index of the step to start at, and the indices of the
    signal steps it skips.

    No origin signalled yet: the first step, as for everyone. Otherwise the
    newcomer appeared after its workload was asked to stop, and it gets no
    grace: it starts at the first freeze or SIGKILL step, or further if an
    origin is further. A ladder without such a step starts it where its most
    advanced origin is.
    """
    signalled = [position for position, sent in origins if sent]
    if not signalled or not ladder:
        return 0, []
    position = max(signalled)
    for index, step in enumerate(ladder):
        if step['action'] == FREEZE or step['signum'] == signal.SIGKILL:
            position = max(position, index)
            break
    position = min(position, len(ladder) - 1)
    return position, [index for index in range(position) if ladder[index]['action'] != FREEZE]


def total_wait(ladder):
    """Seconds the ladder waits in all, step after step."""
    return sum(step['wait'] for step in ladder)


def longest_wait(ladder):
    """The longest single wait of the ladder."""
    return max(step['wait'] for step in ladder)
