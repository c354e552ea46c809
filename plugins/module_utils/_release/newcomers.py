# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Holders that appear during a release: found, judged once, adopted or left alone.

Newcomers: a holder may answer SIGTERM by forking a new holder and exiting
(the child is reparented to PID 1 or a subreaper, so its ancestry is lost),
and a supervisor the plan does not know may restart one. During the waits,
every process that newly holds a targeted GPU (a GPU one of the targets
holds) is therefore examined once:

- with NVML, a PID in a targeted GPU's process list that was no holder at
  discovery; only such a PID's own ``/proc`` entries are read;
- without NVML (or once NVML failed), a process with a targeted GPU's device
  node open in a scan of every ``/proc/PID/fd``. Scans are spaced so that
  they take at most ``PROC_SCAN_SHARE`` of the time, and the run may end
  only after a scan that follows the last exit of a target.

``newcomer_verdict`` judges it as discovery's holders are judged: the scope
(kinds, ``users``, ``match``, ``systemd_units``, ``containers``,
permission) and protection (protected executables, PID 1, kernel threads,
the module and its ancestors). Then it must belong to what is released
(``_origins``), by facts no other user can give it: it descends from a
target (or a process of a target's tree) or from a source parent, or it
shares a target's systemd unit (of the same manager, as the same user), container or session
(``/proc/PID/stat`` field 6; not PID 1's). A process that only holds the same
GPU, a deploy started during the release say, belongs to nothing released:
it is left alone and reported (``skipped``, ``left_alone``), and if it still
holds the GPU the proof fails and names it. A newcomer that passes both is
adopted: it becomes a target with ``adopted: true`` in ``released`` or
``survivors``. One that does not is left alone, listed in ``protected`` or
``skipped`` with the reason, and its memory counts as its own.

Where an adopted holder starts on the ladder (``adoption_start``): its origin
is the target it descends from or shares a unit, container or session with.
If an origin has already been sent a ladder signal
(or skipped past one), the newcomer appeared after its workload was asked to
stop: that is how a process that does not honour the request behaves, and
grace given to it would only let it fork again, each generation with a new
grace period. It therefore gets none: it starts at the freeze step (or the
first SIGKILL step), where its tree is frozen and killed, and the polite
steps it skipped are listed in its ``skipped_steps``. A newcomer whose
origins were not signalled yet starts at the first step with the others.

Bounds: at most ``MAX_NEWCOMERS`` newcomers are examined in one run; any
later one is neither examined nor signalled, and is reported as a survivor,
so that the run fails with the reason rather than chase a fork bomb. Every
wait of an adopted holder ends at the latest ``ADOPTION_SLACK_SECONDS`` after
the sum of the ladder's waits, so a release never runs longer than that
(grace plus kill for the default ladder, plus the slack), whatever appears.
A PID that NVML lists only after the loop ended (a child that claims memory
after its parent's exit was already judged final) is not seen: the proof
that follows the release catches it.


``NewcomerWatch`` is a part of ``_escalation.Escalation``: it uses the loop's
``plan``, ``scope``, ``ladder``, ``prober``, ``targets``, ``known_pids`` and
what the last look (NVML or ``/proc``) saw.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .._plan.ladder import adoption_start
from .._plan.plan import PROTECTED, SKIPPED, TARGET, newcomer_verdict, summarize
from .._discover.protection import REASON_SELF

# Holders that appear during a release: at most this many are examined, and
# so adopted, in one run.
MAX_NEWCOMERS = 64
# An adopted holder's waits end at the latest this long after the ladder of
# the holders found at discovery would have ended.
ADOPTION_SLACK_SECONDS = 0.5
# Without NVML, newcomers are found by a scan of every /proc/PID/fd; scans
# take at most about this share of the waiting time.
PROC_SCAN_SHARE = 0.2

REUSED_SINCE_LISTING = 'started after the listing that showed its PID (PID reused)'
UNRELATED = ('belongs to nothing released: it descends from no target or source, and shares no unit, container '
             'or session with a target')


class NewcomerWatch:
    """Finding and judging the holders that appear during one release (see above)."""

    def _targeted_gpus(self):
        """GPUs of the scope that a target holds: where newcomers are looked for."""
        held = set()
        for target in self.targets.values():
            held.update(target.record.get('gpus') or [])
        return held & set(self.plan.gpus)

    def _newcomers_from_nvml(self, now):
        """NVML's lists first: only a PID nobody knows costs a look at ``/proc``."""
        held = self._targeted_gpus()
        for index in sorted(self.pids_after):
            if index not in held:
                continue
            pids = self.pids_after[index]
            for pid in sorted(pids - self.known_pids):
                self._newcomer(pid, [index], 'compute', now)
            for pid in pids:
                self._also_holds(pid, index)

    def _newcomers_from_proc(self, now):
        """Without NVML: one scan of every ``/proc/PID/fd``, spaced by its own cost.

        A scan is due once the last one is far enough behind, and at once when
        a target exited since the last scan and none is left on the ladder:
        the run may end only after that look at what the exits left behind.
        """
        scan = getattr(self.prober, 'device_holders', None)
        if scan is None or self._scan_due is None:
            self._scan_owed = False
            return
        last_look = self._scan_owed and not self._any_active()
        if now < self._scan_due and not last_look:
            return
        self._scan_owed = False
        started = self.clock()
        self._mark_listing()
        try:
            holders = scan()
        except Exception as exc:  # pylint: disable=broad-except
            self._warn('processes that newly hold the GPUs during the release cannot be seen (%s)' % exc)
            self._scan_due = None
            return
        cost = self.clock() - started
        self._scan_due = now + max(self.poll_interval, cost / PROC_SCAN_SHARE)
        held = self._targeted_gpus()
        view = {}
        for pid in sorted(holders):
            found = holders[pid]
            indices = sorted(set(self._index_of(minor) for minor in found['minors']) & held)
            if not indices:
                continue
            for index in indices:
                view.setdefault(index, set()).add(pid)
            if pid not in self.known_pids:
                self._newcomer(pid, indices, 'compute' if found.get('uvm') else 'client', now)
            for index in indices:
                self._also_holds(pid, index)
        self.proc_view = view

    def _mark_listing(self):
        mark = getattr(self.prober, 'listing_mark', None)
        self._listed_at = mark() if mark is not None else None

    def _reused_since_listing(self, pid):
        """Whether the process now behind ``pid`` started after the listing that showed the PID."""
        born_after = getattr(self.prober, 'born_after', None)
        if born_after is None or self._listed_at is None:
            return False
        return born_after(pid, self._listed_at)

    def _index_of(self, minor):
        if self.minor_to_index is None:
            return minor
        return self.minor_to_index.get(minor, -1)

    def _also_holds(self, pid, index):
        """An adopted holder seen on one more GPU."""
        target = self.targets.get(pid)
        if target is not None and target.adopted and index not in target.record['gpus']:
            target.record['gpus'] = sorted(target.record['gpus'] + [index])

    def _newcomer(self, pid, indices, kind, now):
        """Examine, once, a process that newly holds the targeted GPUs ``indices``."""
        self.known_pids.add(pid)
        if self.newcomers >= self.max_newcomers:
            self.over_limit[pid] = set(indices)
            return
        self.newcomers += 1
        record = self.prober.describe(pid)
        where = 'GPU %s' % ', '.join(str(i) for i in indices)
        # Read after describe: whichever process describe saw, a later start
        # than the listing means the PID is not the one listed.
        if record is not None and self._reused_since_listing(pid):
            self.left_alone[pid] = REUSED_SINCE_LISTING
            self._warn('%s: pid %d was listed as a new holder, but the process now behind it started after the '
                       'listing (the PID was reused); it was left alone' % (where, pid))
            return
        if record is None:
            self.left_alone[pid] = 'not visible'
            self._warn('%s: pid %d appeared during the release but cannot be inspected (it exited, or it '
                       'runs in another PID namespace); it was left alone' % (where, pid))
            return
        record.update({'gpus': list(indices), 'kind': kind, 'adopted': True,
                       'gpu_memory_mib': {}, 'memory_mib': 0, 'is_self': pid in self.own_pids})
        seen_here = getattr(self.prober, 'visible', None)
        if self.nvml_ok and seen_here is not None and not seen_here(pid):
            record['visible'] = False
        record['protected'], record['protected_reason'] = self._protection(record)
        verdict, reason = newcomer_verdict(record, self.scope, self.own_pids)
        origins = self._origins(pid, record) if verdict == TARGET else []
        if verdict == TARGET and not origins:
            verdict, reason = SKIPPED, UNRELATED
        if verdict != TARGET:
            self.left_alone[pid] = reason
            entry = summarize(record, reason='appeared during the release; %s' % reason)
            if verdict == PROTECTED:
                entry['is_self'] = reason == REASON_SELF
            listed = self.plan.protected if verdict == PROTECTED else self.plan.skipped
            listed.append(entry)
            listed.sort(key=lambda item: item['pid'])
            self._warn('%s: pid %d (%s) appeared during the release and was left alone: %s'
                       % (where, pid, record.get('title') or record.get('name'), reason))
            return
        position, skipped = adoption_start(self.ladder, [(o.position, o.signalled) for o in origins])
        target = self._new_target(record, position)
        target.limit = self.adoption_limit
        why = 'appeared during the release, after pid %s was signalled' % ', '.join(
            str(o.pid) for o in origins if o.signalled)
        for index in skipped:
            target.skipped_steps.append({'signal': self.ladder[index]['signal'], 'reason': why,
                                         'case': 'appeared-after-signal'})
            self._step_log(index, now, skipped={'pid': pid, 'reason': why})
        self.targets[pid] = target
        self.plan.targets.append(record)
        self._note_respawn(pid)
        if self.log is not None:
            self.log('pid %d (%s) appeared on %s during the release (origin: pid %s); adopted at step %s' % (
                pid, record.get('title') or record.get('name'), where,
                ', '.join(str(o.pid) for o in origins) or 'none',
                self.ladder[position]['name'] if position < len(self.ladder) else 'end'))

    def _origins(self, pid, record):
        """The targets a newcomer belongs to: the one it descends from, else those it shares a unit,
        container or session with; ``[]`` when it belongs to none."""
        for ancestor in self.prober.ancestors(pid):
            if ancestor in self.targets:
                return [self.targets[ancestor]]
            for target in self.targets.values():
                if ancestor in target.tree:
                    return [target]
            for entry in list(self.supervisors) + list(self.plan.parents):
                if entry['pid'] == ancestor:
                    children = [self.targets[c] for c in entry.get('children') or [] if c in self.targets]
                    if children:
                        return children
        # Ancestry lost (reparented to PID 1 or a subreaper): what it kept from its origin.
        mine = _belonging(record)
        return [target for target in self.targets.values()
                if target.pid != pid and mine & _belonging(target.record)]


def _belonging(record):
    """What a process keeps from where it was started, which no other user can give it: its systemd unit
    with its manager and its user (a unit without logind sessions, as cron.service, runs every user's jobs),
    its container, its session (not PID 1's)."""
    found = set()
    if record.get('systemd_unit'):
        found.add(('unit', record['systemd_unit'], record.get('unit_manager'), record.get('uid')))
    container = record.get('container')
    if container and container.get('id'):
        found.add(('container', container.get('runtime'), container['id']))
    session = record.get('session')
    if isinstance(session, int) and not isinstance(session, bool) and session > 1:
        found.add(('session', session))
    return found
