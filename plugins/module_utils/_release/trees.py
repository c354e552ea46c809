# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A holder's process tree: frozen with it, killed with it, predicted in check mode.

The freeze step stops the holder and then its descendants, rescanning until
no new one appears, so that nothing forks away during the kill; the SIGKILL
step kills the frozen tree. Never part of a tree: holders the plan leaves
alone, processes of this module, and processes that protection covers.

``TreeSteps`` is a part of ``_escalation.Escalation``: it uses the loop's
``plan``, ``prober``, ``targets``, ``known_pids``, ``adoption_limit`` and its
``_freeze``, ``_signal``, ``_warn``, ``_protection`` and ``_new_target``.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .identity import DENIED, GONE, REUSED, SENT, ZOMBIE


class TreeSteps:
    """Freezing and killing the process trees of one release's targets (see above)."""

    def _excluded(self, pid):
        return pid in self.known_pids and pid not in self.targets

    def _protected_descendant(self, pid):
        """Whether a descendant of a target must be left alone even so.

        A holder's tree is frozen and killed with it, but never a process of
        this module, nor one that protection covers (a GPU client a workload
        happened to start, say), whether or not it holds a GPU itself.
        """
        if pid in self.plan.scope.own_pids:
            return True
        describe = getattr(self.prober, 'describe', None)
        record = describe(pid) if describe is not None else None
        if not record:
            return False
        protected, dummy = self._protection(record)
        return bool(protected)

    def _in_tree(self, pid):
        """Whether a descendant of a target is frozen and killed with it (see ``_freeze_tree``)."""
        return not self._excluded(pid) and not self._protected_descendant(pid)

    def predict_trees(self):
        """``{pid: [descendant pids]}``: what the freeze and SIGKILL steps would take with each target now.

        Check mode's prediction of ``descendants_killed``: the same decision as
        ``_freeze_tree`` (holders left alone, protected processes and this
        module's own are never part of a tree), from the same look at the
        process tree, with no signal. A holder that exits on SIGTERM in the
        real run takes no descendant with it.
        """
        for record in self.plan.targets:
            self.targets.setdefault(record['pid'], self._new_target(record, 0))
            self.known_pids.add(record['pid'])
        return dict((pid, sorted(ref.pid for ref in self.prober.descendants(pid) if self._in_tree(ref.pid)))
                    for pid in sorted(self.targets))

    def _freeze_tree(self, target):
        """SIGSTOP the target and its descendants until no new descendant appears.

        Bounded like every wait of the run: a tree still growing when the
        run's last deadline (``adoption_limit``) passes is killed as frozen so
        far, and a warning says so.
        """
        outcome = self._freeze(target.ref, target.describe())
        if outcome in (GONE, ZOMBIE, REUSED):
            return outcome
        if outcome == DENIED:
            return outcome
        target.frozen = True
        for dummy in range(20):
            if self._now() >= self.adoption_limit:
                self._warn('pid %d: its process tree was still growing when the release reached its deadline; '
                           '%d descendants were frozen and are killed with it' % (target.pid, len(target.tree)))
                break
            fresh = [ref for ref in self.prober.descendants(target.pid)
                     if ref.pid not in target.tree and self._in_tree(ref.pid)]
            if not fresh:
                break
            for ref in fresh:
                if self._now() >= self.adoption_limit:
                    break
                if self._freeze(ref, '(descendant of pid %d)' % target.pid) == SENT:
                    target.tree[ref.pid] = ref
        return SENT

    def _kill_tree(self, target, signum):
        if not target.frozen:
            outcome = self._freeze_tree(target)
            if outcome != SENT:
                return outcome
        outcome = self._signal(target.ref, signum, target.describe())
        for pid, ref in sorted(target.tree.items()):
            if self._signal(ref, signum, '(descendant of pid %d)' % target.pid) == SENT:
                target.killed.append(pid)
        self._kill_supervisors_of(target.pid)
        return outcome
