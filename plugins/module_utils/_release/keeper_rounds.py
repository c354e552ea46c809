# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The keeper rounds of one release: who is held back, who goes next, who was spared.

``_plan.plan`` puts the strongest keepers of each context in the plan's targets
and the weaker ones in ``plan.deferred``; ``KeeperRounds`` holds those for the
loop (``_release.escalation``), which asks ``next_round`` once no target is active and
a GPU is still held, and ``left_behind`` once a target that has exited stays
listed by NVML (a forked child or a receiver keeps its context).

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .._discover.keepers import CLIENT, KEEPER_HELD_BACK, KEEPER_ROUND_SLACK, RANKS, keeper_rounds, left_behind
from .._plan.plan import TARGET, keeper_hold_back


class KeeperRounds:
    """The keepers held back for a later round of one release, and those it spared.

    The loop asks ``next_round`` once no target is active and a GPU is still
    held: with ``listed`` (GPU index -> PIDs NVML lists now) and the time of
    the last release, it answers ``(records, wait)``: the keepers to start now,
    and whether to keep looking before deciding (the driver gets
    ``KEEPER_ROUND_SLACK`` seconds to free a context after its keeper left).
    """

    def __init__(self, deferred, scope):
        self.deferred = list(deferred or [])
        self.spared = []  # (record, reason)
        self.scope = scope

    def creator_pids(self):
        """The exited creators NVML lists the held-back keepers' contexts under."""
        return set(pid for record in self.deferred for entry in record.get('keeps') or []
                   for pid in entry['creator_pids'])

    def spare_all(self, reason=KEEPER_HELD_BACK):
        self.spared.extend((record, reason) for record in self.deferred)
        self.deferred = []

    def next_round(self, now, last_release, listed):
        if not self.deferred:
            return [], False
        if last_release is not None and now - last_release < KEEPER_ROUND_SLACK:
            return [], True

        def alive(entry):
            return bool(set(entry['creator_pids']) & set(listed.get(entry['gpu']) or ()))
        start, later = keeper_rounds(self.deferred, alive)
        self.spared.extend((record, KEEPER_HELD_BACK) for record in self.deferred
                           if record not in start and record not in later)
        self.deferred = later
        return start, False

    def left_behind(self, exited, listed, prober, index_of_minor, known, judge, host_namespace=True):
        """Add to the next round whoever keeps the contexts ``exited`` targets left behind.

        ``exited`` and ``listed`` are as for ``_discover.keepers.left_behind``; ``prober``
        gives ``device_holders()``, ``describe(pid)`` and, optionally,
        ``mapped(pids)``; ``judge(record)`` returns ``(verdict, reason)`` for a
        candidate as for a newcomer (``_plan.plan.newcomer_verdict`` after protection).
        Returns the PIDs examined; True in ``added`` when one joined the rounds.
        """
        found = left_behind(exited, listed, prober.device_holders(), index_of_minor, known, prober.describe,
                            getattr(prober, 'mapped', lambda pids: {}))
        examined, added = [], False
        for record in found:
            examined.append(record['pid'])
            if record['keeper_rank'] == RANKS[CLIENT] and not host_namespace:
                continue
            record['adopted'] = True
            verdict, reason = judge(record)
            held_back = [keeper_hold_back(entry, record, self.scope) for entry in record['keeps']]
            if verdict == TARGET and all(held_back):
                verdict, reason = None, held_back[0]
            record['keeps'] = [entry for entry, why in zip(record['keeps'], held_back) if not why] or record['keeps']
            if verdict == TARGET:
                self.deferred.append(record)
                added = True
            else:
                self.spared.append((record, 'keeps the context of exited pid %s; %s' % (
                    ', '.join(str(p) for p in record['keeps'][0]['creator_pids']), reason)))
        return examined, added
