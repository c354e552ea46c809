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


``Newcomers`` is a collaborator of ``escalation.Escalation``: it owns what
it found (``left_alone``, ``over_limit``, ``proc_view``) and when the next
``/proc`` scan is due; it reads the release's ``targets`` and ``known_pids``
(and adds to them when it adopts one), and tells the source parents
(``note_respawn``) when a newcomer shows a parent to be a respawner.

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


class Newcomers:
    """Finding and judging the holders that appear during one release (see above).

    ``release`` is what this watch reads of the loop and adds to: its ``plan`` (``gpus``, ``targets``,
    ``protected``, ``skipped``), ``scope``, ``ladder``, ``targets`` (pid -> target), ``known_pids``, ``own_pids``,
    ``nvml_ok``, ``adoption_limit``, ``clock``, ``poll_interval``, ``log``, ``prober``, and its methods
    ``any_active()``, ``new_target(record, position)``, ``step_log(position, now, skipped=...)``,
    ``protection(record)`` and ``warn(text)``. ``parents`` is its ``SourceParents``. ``minor_to_index``
    maps ``/dev/nvidiaN`` numbers to GPU indices (None: the same number); at most ``max_newcomers`` are
    examined.
    """

    def __init__(self, release, parents, minor_to_index=None, max_newcomers=MAX_NEWCOMERS):
        self.release = release
        self.parents = parents
        self.minor_to_index = dict(minor_to_index) if minor_to_index is not None else None
        self.max_newcomers = max_newcomers
        self.count = 0
        self.left_alone = {}     # pid -> reason left alone
        self.over_limit = {}     # pid -> GPU indices, beyond the limit
        self.proc_view = {}      # index -> pids holding it, from the last /proc scan
        self.scan_due = 0.0      # None once the /proc scan failed
        self.scan_owed = False   # a target exited since the last /proc scan
        self.listed_at = None    # ticks since boot right before the last listing (NVML or /proc)

    def targeted_gpus(self):
        """GPUs of the scope that a target holds: where newcomers are looked for."""
        release = self.release
        held = set()
        for target in release.targets.values():
            held.update(target.record.get('gpus') or [])
        return held & set(release.plan.gpus)

    def from_nvml(self, pids_after, now, listed=None):
        """NVML's lists first: only a PID nobody knows costs a look at ``/proc``.

        ``listed`` maps a GPU index to what NVML lists each PID with there
        (``{pid: {"memory_mib", "types"}}``, ``_host.nvml.NvmlSession.poll``'s
        ``processes``); a reading without it names no list and no memory.
        """
        release = self.release
        held = self.targeted_gpus()
        for index in sorted(pids_after):
            if index not in held:
                continue
            pids = pids_after[index]
            entries = (listed or {}).get(index) or {}
            for pid in sorted(pids - release.known_pids):
                entry = entries.get(pid) or {'memory_mib': None, 'types': set()}
                self.examine(pid, [index], now, {index: entry})
            for pid in pids:
                self.also_holds(pid, index)

    def from_proc(self, now, owed=False):
        """Without NVML: one scan of every ``/proc/PID/fd``, spaced by its own cost.

        A scan is due once the last one is far enough behind, and at once when
        a target exited since the last scan and none is left on the ladder:
        the run may end only after that look at what the exits left behind.
        """
        release = self.release
        self.scan_owed = self.scan_owed or owed
        scan = getattr(release.prober, 'device_holders', None)
        if scan is None or self.scan_due is None:
            self.scan_owed = False
            return
        last_look = self.scan_owed and not release.any_active()
        if now < self.scan_due and not last_look:
            return
        self.scan_owed = False
        started = release.clock()
        self.mark_listing()
        try:
            holders = scan()
        except Exception as exc:  # pylint: disable=broad-except
            release.warn('processes that newly hold the GPUs during the release cannot be seen (%s)' % exc)
            self.scan_due = None
            return
        cost = release.clock() - started
        self.scan_due = now + max(release.poll_interval, cost / PROC_SCAN_SHARE)
        held = self.targeted_gpus()
        view = {}
        for pid in sorted(holders):
            found = holders[pid]
            indices = sorted(set(self.index_of(minor) for minor in found['minors']) & held)
            if not indices:
                continue
            for index in indices:
                view.setdefault(index, set()).add(pid)
            if pid not in release.known_pids:
                self.examine(pid, indices, now)
            for index in indices:
                self.also_holds(pid, index)
        self.proc_view = view

    def mark_listing(self):
        release = self.release
        mark = getattr(release.prober, 'listing_mark', None)
        self.listed_at = mark() if mark is not None else None

    def reused_since_listing(self, pid):
        """Whether the process now behind ``pid`` started after the listing that showed the PID."""
        release = self.release
        born_after = getattr(release.prober, 'born_after', None)
        if born_after is None or self.listed_at is None:
            return False
        return born_after(pid, self.listed_at)

    def index_of(self, minor):
        if self.minor_to_index is None:
            return minor
        return self.minor_to_index.get(minor, -1)

    def also_holds(self, pid, index):
        """An adopted holder seen on one more GPU."""
        release = self.release
        target = release.targets.get(pid)
        if target is not None and target.adopted and index not in target.record['gpus']:
            target.record['gpus'] = sorted(target.record['gpus'] + [index])

    def examine(self, pid, indices, now, nvml_entries=None):
        """Examine, once, a process that newly holds the targeted GPUs ``indices``.

        ``nvml_entries``: what NVML lists it with there, None when it was
        found in ``/proc`` (NVML is not read). Its record is the holder record
        discovery builds (``prober.newcomer``), judged again by the release's
        protection, which the modules make discovery's own.
        """
        release = self.release
        release.known_pids.add(pid)
        if self.count >= self.max_newcomers:
            self.over_limit[pid] = set(indices)
            return
        self.count += 1
        record = release.prober.newcomer(pid, list(indices), nvml_entries, release.own_pids)
        where = 'GPU %s' % ', '.join(str(i) for i in indices)
        # Read after the record: whichever process it describes, a later start
        # than the listing means the PID is not the one listed.
        if record is not None and self.reused_since_listing(pid):
            self.left_alone[pid] = REUSED_SINCE_LISTING
            release.warn('%s: pid %d was listed as a new holder, but the process now behind it started after the '
                         'listing (the PID was reused); it was left alone' % (where, pid))
            return
        if record is None:
            self.left_alone[pid] = 'not visible'
            release.warn('%s: pid %d appeared during the release but cannot be inspected (it exited, or it '
                         'runs in another PID namespace); it was left alone' % (where, pid))
            return
        record['protected'], record['protected_reason'] = release.protection(record)
        verdict, reason = newcomer_verdict(record, release.scope, release.own_pids)
        origins = self.origins(pid, record) if verdict == TARGET else []
        if verdict == TARGET and not origins:
            verdict, reason = SKIPPED, UNRELATED
        if verdict != TARGET:
            self.left_alone[pid] = reason
            entry = summarize(record, reason='appeared during the release; %s' % reason)
            if verdict == PROTECTED:
                entry['is_self'] = reason == REASON_SELF
            listed = release.plan.protected if verdict == PROTECTED else release.plan.skipped
            listed.append(entry)
            listed.sort(key=lambda item: item['pid'])
            release.warn('%s: pid %d (%s) appeared during the release and was left alone: %s'
                         % (where, pid, record.get('title') or record.get('name'), reason))
            return
        position, skipped = adoption_start(release.ladder, [(o.position, o.signalled) for o in origins])
        target = release.new_target(record, position)
        target.limit = release.adoption_limit
        why = 'appeared during the release, after pid %s was signalled' % ', '.join(
            str(o.pid) for o in origins if o.signalled)
        for index in skipped:
            target.skipped_steps.append({'signal': release.ladder[index]['signal'], 'reason': why,
                                         'case': 'appeared-after-signal'})
            release.step_log(index, now, skipped={'pid': pid, 'reason': why})
        release.targets[pid] = target
        release.plan.targets.append(record)
        self.parents.note_respawn(pid)
        if release.log is not None:
            release.log('pid %d (%s) appeared on %s during the release (origin: pid %s); adopted at step %s' % (
                pid, record.get('title') or record.get('name'), where,
                ', '.join(str(o.pid) for o in origins) or 'none',
                release.ladder[position]['name'] if position < len(release.ladder) else 'end'))

    def origins(self, pid, record):
        """The targets a newcomer belongs to: the one it descends from, else those it shares a unit,
        container or session with; ``[]`` when it belongs to none."""
        release = self.release
        for ancestor in release.prober.ancestors(pid):
            if ancestor in release.targets:
                return [release.targets[ancestor]]
            for target in release.targets.values():
                if ancestor in target.tree:
                    return [target]
            for entry in list(self.parents.supervisors) + list(release.plan.parents):
                if entry['pid'] == ancestor:
                    children = [release.targets[c] for c in entry.get('children') or [] if c in release.targets]
                    if children:
                        return children
        # Ancestry lost (reparented to PID 1 or a subreaper): what it kept from its origin.
        mine = _belonging(record)
        return [target for target in release.targets.values()
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
