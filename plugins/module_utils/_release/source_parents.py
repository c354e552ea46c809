# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The release's handling of source parents: freeze first, then kill or thaw.

Every source parent the plan names (``_plan.plan.Plan.parents``, judged by
``_plan.parents.parent_verdict``) is frozen before any holder is signalled, so
that nothing can respawn a holder during the release. Once the holders are
gone, supervisors are killed and the other frozen parents thawed. A parent
planned to be thawed that starts a new holder during the release is a
respawner after all, and is killed.

``SourceParents`` is a collaborator of ``escalation.Escalation``: it owns
the release's ``parents`` and ``supervisors`` (the results the report shows),
signals through the release's ``signals.Signals`` and asks the prober for a
newcomer's ancestors.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

from .identity import SENT, ProcessRef
from .._plan.ladder import FREEZE
from .._plan.parents import KILL as PARENT_KILL
from .._plan.parents import REASON_RESPAWNED, respawned
from .._plan.parents import THAW as PARENT_THAW


class SourceParents:
    """Freezing, killing and thawing the source parents of one release (see above).

    ``plan``: the release's plan (``parents``, or the older ``supervisors``); ``ladder``: its steps (a parent
    is frozen only when the ladder has a freeze step, killed only when it has a SIGKILL step); ``signals``:
    the release's ``Signals``; ``prober``: its ``ProcProber`` (``ancestors``).
    """

    def __init__(self, plan, ladder, signals, prober):
        self.plan = plan
        self.ladder = ladder
        self.signals = signals
        self.prober = prober
        self.parents = []
        self.supervisors = []

    def _has_action(self, action=None, signum=None):
        for step in self.ladder:
            if action and step['action'] == action:
                return True
            if signum is not None and step['signum'] == signum:
                return True
        return False

    def freeze_all(self):
        """Freeze every source parent before anything else is signalled (``plan.frozen_parents``)."""
        parents = list(getattr(self.plan, 'parents', None) or [])
        if not parents:
            parents = [dict(entry, action=PARENT_KILL) for entry in self.plan.supervisors]
        can_freeze = self._has_action(action=FREEZE)
        for entry in parents:
            if entry['action'] not in (PARENT_KILL, PARENT_THAW):
                self.parents.append(dict(entry, outcome='left alone'))
                continue
            result = dict(entry, outcome='left alone')
            self.parents.append(result)
            if entry['action'] == PARENT_KILL:
                self.supervisors.append(result)
            if not can_freeze:
                result['outcome'] = 'left alone: the ladder has no freeze step'
                continue
            ref = ProcessRef(entry['pid'], entry['create_time'])
            outcome = self.signals.freeze(ref, '(%s), %s of pid %s' % (
                entry['title'], 'supervisor' if entry['action'] == PARENT_KILL else 'parent',
                ', '.join(str(p) for p in entry['children'])))
            result['outcome'] = 'frozen' if outcome == SENT else outcome
            if outcome == SENT:
                result['_ref'] = ref

    def _kill_supervisor(self, result):
        ref = result.pop('_ref', None)
        if ref is None:
            return
        if self._has_action(signum=signal.SIGKILL):
            outcome = self.signals.send(ref, signal.SIGKILL, '(%s), supervisor' % result['title'])
            result['outcome'] = 'frozen and killed' if outcome == SENT else 'frozen, then %s' % outcome
        else:
            self.signals.thaw(ref, '(%s), supervisor' % result['title'])
            result['outcome'] = 'frozen, then thawed: the ladder has no SIGKILL step'

    def _thaw_parent(self, result):
        ref = result.pop('_ref', None)
        if ref is None:
            return
        outcome = self.signals.thaw(ref, '(%s), parent' % result['title'])
        result['outcome'] = 'frozen, then thawed' if outcome == SENT else 'frozen, then %s' % outcome

    def end(self):
        """Once the holders are gone: kill the supervisors, thaw the other frozen parents."""
        for result in self.parents:
            if '_ref' not in result:
                continue
            if result['action'] == PARENT_KILL:
                self._kill_supervisor(result)
            else:
                self._thaw_parent(result)

    def note_respawn(self, pid):
        """A newcomer whose ancestor is a parent planned to be thawed: that parent is a respawner."""
        ancestors = self.prober.ancestors(pid)
        for result in self.parents:
            if respawned(result, ancestors):
                result['action'] = PARENT_KILL
                result['reason'] = REASON_RESPAWNED
                if result not in self.supervisors:
                    self.supervisors.append(result)

    def kill_supervisors_of(self, pid):
        for result in self.supervisors:
            if pid in result['children'] and '_ref' in result:
                self._kill_supervisor(result)
