# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A holder's process tree: frozen with it, killed with it, predicted in check mode.

The freeze step stops the holder and then its descendants, rescanning until
no new one appears, so that nothing forks away during the kill; the SIGKILL
step kills the frozen tree. Never part of a tree: holders the plan leaves
alone (``excluded``), processes of this module, and processes that
protection covers.

``Trees`` is a collaborator of ``escalation.Escalation``: it signals through
the release's ``signals.Signals``, reads the tree through the prober, and
calls ``on_tree_killed(pid)`` once a target's tree is killed (the source
parents' supervisors of that target go then).

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .identity import DENIED, GONE, REUSED, SENT, ZOMBIE


class Trees:
    """Freezing and killing the process trees of one release's targets (see above).

    ``signals``: the release's ``Signals``; ``prober``: its ``ProcProber`` (``descendants``, ``describe``);
    ``own_pids``: this module's processes; ``protection(record) -> (protected, reason)``;
    ``excluded(pid)``: whether a process is a holder the plan left alone; ``now()``: seconds since the start,
    and ``deadline`` the last of them a tree may still grow until; ``warn(text)``; ``on_tree_killed(pid)``.
    """

    def __init__(self, signals, prober, own_pids, protection, excluded, now, deadline, warn, on_tree_killed):
        self.signals = signals
        self.prober = prober
        self.own_pids = own_pids
        self.protection = protection
        self.excluded = excluded
        self.now = now
        self.deadline = deadline
        self.warn = warn
        self.on_tree_killed = on_tree_killed

    def protected_descendant(self, pid):
        """Whether a descendant of a target must be left alone even so.

        A holder's tree is frozen and killed with it, but never a process of
        this module, nor one that protection covers (a GPU client a workload
        happened to start, say), whether or not it holds a GPU itself.
        """
        if pid in self.own_pids:
            return True
        describe = getattr(self.prober, 'describe', None)
        record = describe(pid) if describe is not None else None
        if not record:
            return False
        protected, dummy = self.protection(record)
        return bool(protected)

    def in_tree(self, pid):
        """Whether a descendant of a target is frozen and killed with it (see ``freeze``)."""
        return not self.excluded(pid) and not self.protected_descendant(pid)

    def predict(self, pids):
        """``{pid: [descendant pids]}``: what the freeze and SIGKILL steps would take with each of ``pids`` now.

        Check mode's prediction of ``descendants_killed``: the same decision as
        ``freeze`` (holders left alone, protected processes and this
        module's own are never part of a tree), from the same look at the
        process tree, with no signal. A holder that exits on SIGTERM in the
        real run takes no descendant with it.
        """
        return dict((pid, sorted(ref.pid for ref in self.prober.descendants(pid) if self.in_tree(ref.pid)))
                    for pid in sorted(pids))

    def freeze(self, target):
        """SIGSTOP the target and its descendants until no new descendant appears.

        Bounded like every wait of the run: a tree still growing when the
        run's last deadline (``deadline``) passes is killed as frozen so
        far, and a warning says so.
        """
        outcome = self.signals.freeze(target.ref, target.describe())
        if outcome in (GONE, ZOMBIE, REUSED):
            return outcome
        if outcome == DENIED:
            return outcome
        target.frozen = True
        for dummy in range(20):
            if self.now() >= self.deadline:
                self.warn('pid %d: its process tree was still growing when the release reached its deadline; '
                          '%d descendants were frozen and are killed with it' % (target.pid, len(target.tree)))
                break
            fresh = [ref for ref in self.prober.descendants(target.pid)
                     if ref.pid not in target.tree and self.in_tree(ref.pid)]
            if not fresh:
                break
            for ref in fresh:
                if self.now() >= self.deadline:
                    break
                if self.signals.freeze(ref, '(descendant of pid %d)' % target.pid) == SENT:
                    target.tree[ref.pid] = ref
        return SENT

    def kill(self, target, signum):
        """``signum`` (SIGKILL) to the target and its frozen tree, freezing it first if it is not yet."""
        if not target.frozen:
            outcome = self.freeze(target)
            if outcome != SENT:
                return outcome
        outcome = self.signals.send(target.ref, signum, target.describe())
        for pid, ref in sorted(target.tree.items()):
            if self.signals.send(ref, signum, '(descendant of pid %d)' % target.pid) == SENT:
                target.killed.append(pid)
        self.on_tree_killed(target.pid)
        return outcome
