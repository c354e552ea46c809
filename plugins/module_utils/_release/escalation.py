# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The release loop: the plan's targets walked along the ladder until their GPUs are free.

``Escalation.run`` is one small loop that walks every target along the
ladder (``_plan.ladder``) on its own clock, signals only through
``_release.identity.signal_process``, and waits by polling NVML and ``/proc`` every
``poll_interval`` seconds until the memory is back, with no fixed sleep.
Check mode never runs it: it plans (``_plan.plan``), then asks
``Escalation.predict_trees`` what the freeze and SIGKILL steps would take.

It is a small core with collaborators, each owning its state behind an
explicit interface: every signal goes through one ``signals.Signals``; the
source parents are a ``source_parents.SourceParents``, the process trees a
``trees.Trees``, the holders that appear during the release a
``newcomers.Newcomers``, the keeper rounds a ``keeper_rounds.KeeperRounds``;
``report`` shapes what it returns. No adopted holder waits past
``ADOPTION_SLACK_SECONDS`` after the sum of the ladder's waits. Every SIGSTOP
goes through a ``guardian.FreezeLedger``; what is still stopped at the end,
on every path, is thawed.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal
import time

from .grace import pointless_step
from .guardian import FreezeLedger
from .identity import DENIED, GONE, REUSED, ZOMBIE, signal_process
from .._base.checks import DEFAULT_POLL_INTERVAL
from .._plan.ladder import FREEZE, total_wait
from .newcomers import ADOPTION_SLACK_SECONDS, MAX_NEWCOMERS, Newcomers
from .._discover.keepers import KEEPER_ROUND_SLACK
from .._plan.plan import Scope, newcomer_verdict, summarize
from .keeper_rounds import KeeperRounds
from .prober import DEFAULT_READ_TIMEOUT, ProcProber
from .._host.proctree import self_and_ancestors
from .._discover.protection import protection_of
from .report import (
    REFUSED,
    RELEASE_THRESHOLD_MIB,
    RELEASED,
    SURVIVOR,
    parent_lists,
    released_entry,
    gpus_released,
    step_entries,
    stuck_gpus,
    survivor_entry,
    unexamined_entries,
)
from .signals import Signals
from .source_parents import SourceParents
from .target import ACTIVE, Target
from .trees import Trees


class Escalation:
    """Walk every target along the ladder and wait until its GPUs are released.

    ``nvml`` has ``poll(indices, timeout)`` (``_host.nvml.NvmlSession``) or is
    None; ``prober`` is a ``ProcProber``; ``signaller(ref, signum, describe)``
    returns an ``_release.identity`` outcome; ``clock()`` returns seconds and
    ``sleep(seconds)`` waits. All are injectable for tests.

    Holders that appear during the release (``_release.newcomers``) are
    judged against ``plan.scope``; ``protection(record)`` returns
    ``(protected, reason)`` for one of them (the modules pass the same
    protection as discovery, ``protect`` and ``unprotect`` included; the
    default protects the default executables), ``own_pids`` are never
    adopted (default: this process and its ancestors when ``prober`` is the
    live one), ``minor_to_index`` maps ``/dev/nvidiaN`` numbers to GPU
    indices for the ``/proc`` scan (default: the same number), and
    ``max_newcomers`` bounds how many are examined.

    ``should_stop()``, asked before the sources are stopped and before each
    round of steps, returns why to stop escalating (the controller went
    away, ``_host.controller``) or None. Once it answers, nothing more is
    signalled, stopped or killed, what was frozen is thawed, and the result
    says why in its warnings.
    """

    def __init__(self, plan, ladder, nvml=None, prober=None, signaller=None, log=None,
                 clock=time.monotonic, sleep=time.sleep, poll_interval=DEFAULT_POLL_INTERVAL,
                 nvml_timeout=None, known_pids=(), baseline_mib=None,
                 threshold_mib=RELEASE_THRESHOLD_MIB, protection=None, own_pids=None,
                 minor_to_index=None, max_newcomers=MAX_NEWCOMERS, ledger=None, on_frozen=None, should_stop=None):
        self.plan = plan
        self.ladder = ladder
        self.nvml = nvml
        self.scope = getattr(plan, 'scope', None) or Scope(plan.gpus)
        if own_pids is None:
            own_pids = self_and_ancestors() if prober is None else ()
        self.own_pids = set(own_pids) | set(self.scope.own_pids)
        self._protection_of = protection
        self.prober = prober or ProcProber(read_timeout=nvml_timeout or DEFAULT_READ_TIMEOUT)
        self.log = log
        # Every SIGSTOP and SIGCONT is recorded, and a guardian thaws what is
        # still stopped if this process dies (see _guardian). Stand-in
        # signallers stop nothing real, so they need no guardian.
        self.ledger = ledger or FreezeLedger(guardian=signaller is None)
        if signaller is None:
            def signaller(ref, signum, describe=''):
                return signal_process(ref, signum, log=self.log, describe=describe)
        self.signals = Signals(signaller, self.ledger)
        self.clock = clock
        self.sleep = sleep
        self.poll_interval = poll_interval
        self.nvml_timeout = nvml_timeout
        self.threshold_mib = threshold_mib
        self.known_pids = set(known_pids)  # every holder of the snapshot
        self.baseline_mib = dict(baseline_mib or {})
        self.warnings = []
        self.on_frozen = on_frozen
        # should_stop() -> why to stop escalating (the controller went away), or None; asked between steps.
        self.should_stop = should_stop
        self.stopped_because = None
        self.targets = {}
        self.memory_after = {}
        self.pids_after = {}
        self.nvml_ok = nvml is not None
        self._start = None
        self._steps = []
        self._exit_unobserved = False
        # No adopted holder waits past this (seconds from the start).
        self.adoption_limit = total_wait(ladder) + ADOPTION_SLACK_SECONDS
        self.source_parents = SourceParents(plan, ladder, self.signals, self.prober)
        self.trees = Trees(self.signals, self.prober, self.scope.own_pids, self.protection,
                           lambda pid: pid in self.known_pids and pid not in self.targets, self._now,
                           self.adoption_limit, self.warn, self.source_parents.kill_supervisors_of)
        self.newcomers = Newcomers(self, self.source_parents, minor_to_index, max_newcomers)
        # Keepers of a context held back for a later round, and those its release made unneeded.
        self.rounds = KeeperRounds(getattr(plan, 'deferred', None), self.scope)
        # What descended from each target when the release started, and the targets already searched
        # for keepers of a context they left behind.
        self._descendants = {}
        self._searched = set()

    # -- helpers -----------------------------------------------------------

    def _now(self):
        return self.clock() - self._start

    def warn(self, text):
        if text not in self.warnings:
            self.warnings.append(text)

    def _thaw_left_frozen(self):
        """SIGCONT to whatever is still stopped: nothing frozen outlives the run."""
        thawed = self.signals.thaw_left_frozen()
        if thawed:
            self.warn('pid %s stayed frozen and was thawed at the end' % ', '.join(str(pid) for pid in thawed))

    def step_log(self, position, now, pid=None, skipped=None):
        entry = self._steps[position]
        if entry['started_at'] is None:
            entry['started_at'] = now
        if pid is not None and pid not in entry['pids']:
            entry['pids'].append(pid)
        if skipped is not None:
            entry['skipped'].append(skipped)
        entry['_ended'] = max(entry['_ended'] or now, now)

    def _remaining_wait(self, target, now):
        """Seconds the ladder still grants ``target`` from ``now``."""
        total = 0.0
        position = target.position
        if target.entered and target.deadline is not None:
            total += max(0.0, target.deadline - now)
            position += 1
        for step in self.ladder[position:]:
            total += step['wait']
        return total

    def _release(self, target, now, outcome):
        target.budget_end = target.wait_until(now, self._remaining_wait(target, now))
        if target.entered and target.position < len(self.ladder):
            self.step_log(target.position, now)
        target.outcome = RELEASED
        target.released_at = now
        target.release_outcome = outcome

    # -- one target, one step ----------------------------------------------

    def _advance(self, target, now):
        while target.outcome == ACTIVE:
            if target.entered:
                if now < target.deadline:
                    return
                self.step_log(target.position, now)
                target.position += 1
                target.entered = False
            if target.position >= len(self.ladder):
                target.outcome = SURVIVOR
                target.budget_end = now
                return
            step = self.ladder[target.position]
            if step['action'] == FREEZE:
                outcome = self.trees.freeze(target)
                self.step_log(target.position, now, pid=target.pid)
                for pid in target.tree:
                    self.step_log(target.position, now, pid=pid)
                if self._settle(target, outcome, now):
                    return
                target.position += 1
                continue
            pointless = pointless_step(target, step, self.prober)
            if pointless:
                case, why = pointless
                self.step_log(target.position, now, skipped={'pid': target.pid, 'reason': why})
                target.skipped_steps.append({'signal': step['signal'], 'reason': why, 'case': case})
                target.position += 1
                continue
            if step['signum'] == signal.SIGKILL:
                outcome = self.trees.kill(target, step['signum'])
            else:
                outcome = self.signals.send(target.ref, step['signum'], target.describe())
            self.step_log(target.position, now, pid=target.pid)
            for pid in target.killed:
                self.step_log(target.position, now, pid=pid)
            if self._settle(target, outcome, now):
                return
            target.last_signal = step['signal']
            target.entered = True
            target.deadline = target.wait_until(now, step['wait'])

    def _settle(self, target, outcome, now):
        """Handle a non-``sent`` outcome; True when the target left the ladder."""
        if outcome in (GONE, ZOMBIE, REUSED):
            self._release(target, now, 'exited' if outcome != ZOMBIE else ZOMBIE)
            self._exit_unobserved = True
            return True
        if outcome == DENIED:
            target.outcome = REFUSED
            target.reason = 'permission denied'
            target.budget_end = now
            return True
        return False

    # -- observation -------------------------------------------------------

    def _observe(self, now):
        exited, self._exit_unobserved = self._exit_unobserved, False
        for target in self.targets.values():
            if target.outcome not in (ACTIVE, SURVIVOR, REFUSED):
                continue
            status = self.prober.status(target.ref)
            if status in (GONE, REUSED, ZOMBIE):
                exited = True
                if target.outcome == ACTIVE:
                    self._release(target, now, 'exited' if status != ZOMBIE else ZOMBIE)
                else:
                    # Released at the last moment, after the ladder ended.
                    target.outcome = RELEASED
                    target.released_at = now
                    target.release_outcome = 'exited' if status != ZOMBIE else ZOMBIE
            else:
                target.state = status
        if not self.plan.gpus:
            return
        self.newcomers.mark_listing()
        if self.nvml_ok:
            try:
                polled = self.nvml.poll(self.plan.gpus, self.nvml_timeout)
            except Exception as exc:  # pylint: disable=broad-except
                self.nvml_ok = False
                self.warn('NVML polling stopped (%s); release is judged from /proc alone' % exc)
            else:
                listed = {}
                for index, reading in polled.items():
                    self.memory_after[index] = reading.get('memory_used_mib')
                    self.pids_after[index] = set(reading.get('pids') or ())
                    listed[index] = reading.get('processes') or {}
                self.newcomers.from_nvml(self.pids_after, now, listed)
                return
        self.newcomers.from_proc(now, owed=exited)

    def protection(self, record):
        """``(protected, reason)`` for a process found during the release, as discovery judges it."""
        if self._protection_of is not None:
            return self._protection_of(record)
        return protection_of(record)

    # -- decisions ---------------------------------------------------------

    def _gpus_released(self):
        """``{index: (released, reason)}`` from the last NVML reading (``report.gpus_released``)."""
        return gpus_released(self.plan.gpus, self.targets, self.pids_after, self.memory_after, self.known_pids,
                             self.newcomers.left_alone, self.newcomers.over_limit, self.baseline_mib,
                             self.threshold_mib)

    def _add_target(self, record):
        self.targets[record['pid']] = Target(record)
        self.known_pids.add(record['pid'])
        # NVML lists a kept context under its exited creator: known, so its memory is waited on.
        for entry in record.get('keeps') or []:
            self.known_pids.update(entry['creator_pids'])

    def _keepers_left_behind(self, now):
        """Look, once for each exited target NVML still lists, for whoever keeps its context now.

        A forked child or a receiver of the descriptors keeps a context after its
        creator's polite exit; the creator was a target, so what descended from it
        then, its session and the maps tell who. Candidates are judged as newcomers
        are (scope, protection) and join the keeper rounds. True when one was found.
        """
        exited = {}
        for pid, target in self.targets.items():
            if pid in self._searched or target.outcome != RELEASED or target.released_at is None:
                continue
            if now - target.released_at < KEEPER_ROUND_SLACK:
                continue
            self._searched.add(pid)
            if any(pid in self.pids_after.get(index, ()) for index in target.record.get('gpus') or []):
                exited[pid] = dict(target.record, descendants=self._descendants.get(pid, ()))
        if not exited:
            return False

        def judge(record):
            record['is_self'] = record['pid'] in self.own_pids
            record['protected'], record['protected_reason'] = self.protection(record)
            return newcomer_verdict(dict(record, kind='compute'), self.scope, self.own_pids)
        examined, added = self.rounds.left_behind(
            exited, self.pids_after, self.prober,
            self._keeper_index,
            set(self.targets) | self.own_pids, judge,
            host_namespace=getattr(self.prober, 'in_host_namespace', lambda: True)())
        self.known_pids.update(examined)
        return added

    def _next_keeper_round(self, now):
        """Start the weaker keepers of the contexts that stayed; True when the loop must go on."""
        released = [t.released_at for t in self.targets.values() if t.released_at is not None]
        records, wait = self.rounds.next_round(now, max(released) if released else None, self.pids_after)
        for record in records:
            self._add_target(record)
        if records:
            self.warn('the context of exited pid %s stayed after its stronger keepers were released; '
                      'released its weaker keepers too: pid %s' % (
                          ', '.join(sorted(set(str(pid) for r in records for e in r['keeps']
                                               for pid in e['creator_pids']))),
                          ', '.join(str(r['pid']) for r in records)))
        return wait or bool(records)

    def _keeper_index(self, minor):
        index_of = self.newcomers.minor_to_index
        return index_of.get(minor) if index_of is not None else minor

    def any_active(self):
        return any(t.outcome == ACTIVE for t in self.targets.values())

    def new_target(self, record, position):
        return Target(record, position=position)

    def _finished(self, now):
        if self.any_active():
            return False
        if self._exit_unobserved or self.newcomers.scan_owed:
            # A target exited after the last look: one more look for what it left behind.
            return False
        if not self.nvml_ok:
            self.rounds.spare_all('not released: without NVML no look tells whether the context stayed')
            return True
        if all(ok for ok, dummy in self._gpus_released().values()):
            self.rounds.spare_all()
            return True
        self._keepers_left_behind(now)
        if self._next_keeper_round(now):
            return False
        return now >= self._memory_deadline()

    def _memory_deadline(self):
        ends = [t.budget_end for t in self.targets.values() if t.budget_end is not None]
        return max(ends) if ends else 0.0

    def _next_wake(self, now):
        wake = now + self.poll_interval
        for target in self.targets.values():
            if target.outcome == ACTIVE and target.entered and target.deadline is not None:
                wake = min(wake, target.deadline)
        return wake

    # -- the loop ----------------------------------------------------------

    def run(self):
        """Release the plan's targets; return a result dict (see ``result``)."""
        self._start = self.clock()
        self._steps = [{'name': step['name'], 'signal': step['signal'], 'pids': [], 'skipped': [],
                        'started_at': None, '_ended': None} for step in self.ladder]
        for record in self.plan.targets:
            self._add_target(record)
            self._descendants[record['pid']] = set(ref.pid for ref in self.prober.descendants(record['pid']))
        self.known_pids.update(self.rounds.creator_pids())
        try:
            self.source_parents.freeze_all()
            freeze_supervisors_done = self._now()
            if self.on_frozen is not None and not self._stop_asked():
                # What must happen while the parents are frozen and before any holder is signalled
                # (the modules stop the sources' units and containers here).
                self.on_frozen()
            while not self._stop_asked():
                now = self._now()
                self._observe(now)
                for target in list(self.targets.values()):
                    self._advance(target, now)
                if self._finished(now):
                    break
                delay = self._next_wake(now) - self._now()
                if delay > 0:
                    self.sleep(delay)
            if self.stopped_because is None:
                self.source_parents.end()
        finally:
            # Normal end or exception alike; the module's death is the guardian's.
            self._thaw_left_frozen()
            self.ledger.close()
        if self.ledger.warning:
            self.warn(self.ledger.warning)
        return self.result(freeze_supervisors_done)

    def predict_trees(self):
        """``{pid: [descendant pids]}``: what the freeze and SIGKILL steps would take with each target now.

        Check mode's prediction of ``descendants_killed`` (``trees.Trees.predict``), with no signal.
        """
        for record in self.plan.targets:
            self.targets.setdefault(record['pid'], self.new_target(record, 0))
            self.known_pids.add(record['pid'])
        return self.trees.predict(self.targets)

    def _stop_asked(self):
        """Whether ``should_stop`` asks to stop escalating; then nothing more is signalled or killed, and what was
        frozen is thawed on the way out."""
        if self.stopped_because is None and self.should_stop is not None:
            reason = self.should_stop()
            if reason:
                self.stopped_because = reason
                self.warn('escalation stopped: %s; nothing more was signalled, and what was frozen was thawed'
                          % reason)
        return self.stopped_because is not None

    # -- the result --------------------------------------------------------

    def result(self, freeze_supervisors_done=0.0):
        """What the run did (``_release.report`` shapes each list)."""
        elapsed = self._now()
        released, survivors = [], []
        for pid in sorted(self.targets):
            target = self.targets[pid]
            if target.outcome == RELEASED:
                released.append(released_entry(target))
            else:
                survivors.append(survivor_entry(target, self.prober.wchan(pid) if target.outcome == SURVIVOR else None))
        holding = set()
        for pids in (self.pids_after if self.nvml_ok else self.newcomers.proc_view).values():
            holding.update(pids)
        unexamined, warning = unexamined_entries(self.newcomers.over_limit, holding, self.newcomers.max_newcomers)
        if warning:
            self.warn(warning)
        survivors.extend(unexamined)
        supervisors, parents = parent_lists(self.source_parents.supervisors, self.source_parents.parents)
        return {
            'changed': self.signals.sent > 0,
            'signals_sent': self.signals.sent,
            'released': released,
            'survivors': survivors,
            'stuck_gpus': stuck_gpus(self.plan.gpus, self._gpus_released() if self.nvml_ok else {}, survivors,
                                     self.memory_after),
            'supervisors': supervisors,
            'parents': parents,
            'steps': step_entries(self.source_parents.parents, self._steps, freeze_supervisors_done, elapsed),
            'memory_after': dict(self.memory_after) if self.nvml_ok or self.memory_after else {},
            'nvml_used': self.nvml_ok,
            'elapsed_seconds': round(elapsed, 3),
            'warnings': list(self.warnings),
            'spared': [summarize(record, reason=reason) for record, reason in self.rounds.spared],
        }
