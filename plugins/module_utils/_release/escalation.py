# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The release loop: the plan's targets walked along the ladder until their GPUs are free.

``Escalation.run`` is one small loop that walks every target along the
ladder (``_ladder``) on its own clock, signals only through
``_identity.signal_process``, and waits by polling NVML and ``/proc`` every
``poll_interval`` seconds until the memory is back, with no fixed sleep.
Check mode never runs it: it plans (``_plan``), then asks
``Escalation.predict_trees`` what the freeze and SIGKILL steps would take.

Its parts live beside it: source parents (``_supervisors``), process trees
(``_trees``), holders that appear during the release (``_newcomers``), and the
shape of what it returns (``_report``). No adopted holder waits past
``ADOPTION_SLACK_SECONDS`` after the sum of the ladder's waits. Every SIGSTOP
goes through a ``_guardian.FreezeLedger``; what is still stopped at the end,
on every path, is thawed.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal
import time

from .grace import SIGTERM_IGNORED
from .guardian import FreezeLedger
from .identity import DENIED, GONE, REUSED, SENT, ZOMBIE, ProcessRef, signal_process
from .._base.checks import DEFAULT_POLL_INTERVAL
from .._plan.ladder import FREEZE, total_wait
from .newcomers import ADOPTION_SLACK_SECONDS, MAX_NEWCOMERS, NewcomerWatch
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
    step_entries,
    stuck_gpus,
    survivor_entry,
    unexamined_entries,
)
from .source_parents import SupervisorSteps
from .trees import TreeSteps

ACTIVE = 'active'
_STOPPED_STATES = ('stopped', 'tracing-stop')


class _Target:
    """One target on its way along the ladder."""

    # Where it stands: the step sent (entered) and when its wait ends.
    entered = False
    deadline = None
    outcome = ACTIVE
    last_signal = None
    # How it left: when, through what, and the time the ladder still granted it.
    released_at = None
    release_outcome = None
    budget_end = None
    frozen = False
    reason = None
    limit = None    # seconds from the start that no wait may pass (adopted holders)

    def __init__(self, record, position=0):
        self.record = record
        self.ref = ProcessRef.from_record(record)
        self.position = position
        self.state = record.get('state')
        self.tree = {}       # pid -> ProcessRef of frozen descendants
        self.killed = []     # descendant pids killed with the tree
        self.skipped_steps = []

    @property
    def adopted(self):
        return bool(self.record.get('adopted'))

    @property
    def signalled(self):
        """Whether the ladder has started on it: a step was sent, or skipped past."""
        return self.entered or self.position > 0 or self.frozen

    def wait_until(self, now, seconds):
        end = now + seconds
        return end if self.limit is None else min(end, self.limit)

    @property
    def pid(self):
        return self.ref.pid

    def describe(self):
        gpus = self.record.get('gpus') or []
        text = '(%s)' % (self.record.get('title') or self.record.get('name') or '?')
        if gpus:
            text += ' on GPU %s' % ', '.join(str(i) for i in gpus)
        return text


class Escalation(SupervisorSteps, TreeSteps, NewcomerWatch):
    """Walk every target along the ladder and wait until its GPUs are released.

    ``nvml`` has ``poll(indices, timeout)`` (``_nvml.NvmlSession``) or is
    None; ``prober`` is a ``ProcProber``; ``signaller(ref, signum, describe)``
    returns an ``_identity`` outcome; ``clock()`` returns seconds and
    ``sleep(seconds)`` waits. All are injectable for tests.

    Holders that appear during the release (``_newcomers``) are
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
    away, ``_controller``) or None. Once it answers, nothing more is
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
        self.protection = protection
        self.minor_to_index = dict(minor_to_index) if minor_to_index is not None else None
        self.max_newcomers = max_newcomers
        self.prober = prober or ProcProber(read_timeout=nvml_timeout or DEFAULT_READ_TIMEOUT)
        self.log = log
        # Every SIGSTOP and SIGCONT is recorded, and a guardian thaws what is
        # still stopped if this process dies (see _guardian). Stand-in
        # signallers stop nothing real, so they need no guardian.
        self.ledger = ledger or FreezeLedger(guardian=signaller is None)
        if signaller is None:
            def signaller(ref, signum, describe=''):
                return signal_process(ref, signum, log=self.log, describe=describe)
        self.signaller = signaller
        self.clock = clock
        self.sleep = sleep
        self.poll_interval = poll_interval
        self.nvml_timeout = nvml_timeout
        self.threshold_mib = threshold_mib
        self.known_pids = set(known_pids)  # every holder of the snapshot
        self.baseline_mib = dict(baseline_mib or {})
        self.warnings = []
        self.sent = 0
        self.on_frozen = on_frozen
        # should_stop() -> why to stop escalating (the controller went away), or None; asked between steps.
        self.should_stop = should_stop
        self.stopped_because = None
        self.targets = {}
        self.supervisors = []
        self.parents = []
        self.memory_after = {}
        self.pids_after = {}
        self.nvml_ok = nvml is not None
        self._start = None
        self._steps = []
        # Newcomers: pid -> reason left alone; pid -> GPU indices beyond the limit.
        self.newcomers = 0
        self.left_alone = {}
        self.over_limit = {}
        self.proc_view = {}      # index -> pids holding it, from the last /proc scan
        self._scan_due = 0.0        # None once the /proc scan failed
        self._scan_owed = False     # a target exited since the last /proc scan
        self._exit_unobserved = False
        self._listed_at = None      # ticks since boot right before the last listing (NVML or /proc)
        # No adopted holder waits past this (seconds from the start).
        self.adoption_limit = total_wait(ladder) + ADOPTION_SLACK_SECONDS
        # Keepers of a context held back for a later round, and those its release made unneeded.
        self.rounds = KeeperRounds(getattr(plan, 'deferred', None), self.scope)
        # What descended from each target when the release started, and the targets already searched
        # for keepers of a context they left behind.
        self._descendants = {}
        self._searched = set()

    # -- helpers -----------------------------------------------------------

    def _now(self):
        return self.clock() - self._start

    def _warn(self, text):
        if text not in self.warnings:
            self.warnings.append(text)

    def _signal(self, ref, signum, describe=''):
        if signum in (signal.SIGSTOP, signal.SIGCONT):
            outcome = self.ledger.signal(ref, signum, lambda r, s: self.signaller(r, s, describe))
        else:
            outcome = self.signaller(ref, signum, describe)
            if signum == signal.SIGKILL and outcome == SENT:
                self.ledger.killed(ref)
        if outcome == SENT:
            self.sent += 1
        return outcome

    def _freeze(self, ref, describe=''):
        """The one way a run stops a process (SIGSTOP): the ledger records it until it is thawed or killed."""
        return self._signal(ref, signal.SIGSTOP, describe)

    def _thaw(self, ref, describe=''):
        """The one way a run thaws a process it froze (SIGCONT), through the ledger."""
        return self._signal(ref, signal.SIGCONT, describe)

    def _thaw_left_frozen(self):
        """SIGCONT to whatever is still stopped: nothing frozen outlives the run."""
        thawed = [pid for pid, ref in sorted(self.ledger.frozen.items())
                  if self._thaw(ref, '(frozen by this run, never killed)') == SENT]
        if thawed:
            self._warn('pid %s stayed frozen and was thawed at the end' % ', '.join(str(pid) for pid in thawed))

    def _step_log(self, position, now, pid=None, skipped=None):
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
            self._step_log(target.position, now)
        target.outcome = RELEASED
        target.released_at = now
        target.release_outcome = outcome

    # -- one target, one step ----------------------------------------------

    def _pointless(self, target, step):
        """``(case, reason)`` when ``step`` cannot work on ``target`` (its wait is skipped), or None.

        ``case`` is a stable name: ``stopped``, ``sigterm-ignored`` (or
        ``<signal>-ignored``), ``namespace-init-without-handler`` (see
        ``_grace``).
        """
        if step['signum'] == signal.SIGKILL:
            return None
        if target.state in _STOPPED_STATES:
            return 'stopped', 'stopped'
        if step['signum'] == signal.SIGTERM and target.record.get('sigterm_ignored'):
            return SIGTERM_IGNORED, 'ignores SIGTERM'
        probe = getattr(self.prober, 'grace_case', None)
        if probe is not None:
            return probe(target.pid, step['signum'])
        ignored = self.prober.ignored_signals(target.pid)
        if ignored and step['signum'] in ignored:
            return ('%s-ignored' % step['signal'].lower(), 'ignores %s' % step['signal'])
        return None

    def _advance(self, target, now):
        while target.outcome == ACTIVE:
            if target.entered:
                if now < target.deadline:
                    return
                self._step_log(target.position, now)
                target.position += 1
                target.entered = False
            if target.position >= len(self.ladder):
                target.outcome = SURVIVOR
                target.budget_end = now
                return
            step = self.ladder[target.position]
            if step['action'] == FREEZE:
                outcome = self._freeze_tree(target)
                self._step_log(target.position, now, pid=target.pid)
                for pid in target.tree:
                    self._step_log(target.position, now, pid=pid)
                if self._settle(target, outcome, now):
                    return
                target.position += 1
                continue
            pointless = self._pointless(target, step)
            if pointless:
                case, why = pointless
                self._step_log(target.position, now, skipped={'pid': target.pid, 'reason': why})
                target.skipped_steps.append({'signal': step['signal'], 'reason': why, 'case': case})
                target.position += 1
                continue
            if step['signum'] == signal.SIGKILL:
                outcome = self._kill_tree(target, step['signum'])
            else:
                outcome = self._signal(target.ref, step['signum'], target.describe())
            self._step_log(target.position, now, pid=target.pid)
            for pid in target.killed:
                self._step_log(target.position, now, pid=pid)
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
        self._mark_listing()
        if self.nvml_ok:
            try:
                polled = self.nvml.poll(self.plan.gpus, self.nvml_timeout)
            except Exception as exc:  # pylint: disable=broad-except
                self.nvml_ok = False
                self._warn('NVML polling stopped (%s); release is judged from /proc alone' % exc)
            else:
                for index, reading in polled.items():
                    self.memory_after[index] = reading.get('memory_used_mib')
                    self.pids_after[index] = set(reading.get('pids') or ())
                self._newcomers_from_nvml(now)
                return
        self._scan_owed = self._scan_owed or exited
        self._newcomers_from_proc(now)

    def _protection(self, record):
        if self.protection is not None:
            return self.protection(record)
        return protection_of(record)

    # -- decisions ---------------------------------------------------------

    def _gpus_released(self):
        """``{index: (released, reason)}`` from the last NVML reading."""
        target_pids = set(self.targets)
        # Only GPUs a target held are waited on: a GPU that was already stuck
        # with no holder is the reset stage's business, not this loop's.
        held = set()
        for target in self.targets.values():
            held.update(target.record.get('gpus') or [])
        result = {}
        for index in self.plan.gpus:
            if index not in held:
                result[index] = (True, None)
                continue
            pids = self.pids_after.get(index, set())
            listed = sorted(pids & target_pids)
            unexamined = sorted(pid for pid in pids if pid in self.over_limit)
            used = self.memory_after.get(index)
            limit = self.baseline_mib.get(index, 0) + self.threshold_mib
            # Memory of a process left alone (unknown, or a newcomer out of
            # scope or protected) is its own, not a stuck context.
            others = (pids - self.known_pids) or (pids & set(self.left_alone))
            if listed:
                result[index] = (False, 'pid %s still listed by NVML' % ', '.join(str(p) for p in listed))
            elif unexamined:
                result[index] = (False, 'pid %s appeared during the release and was not examined'
                                 % ', '.join(str(p) for p in unexamined))
            elif used is not None and used > limit and not others:
                result[index] = (False, '%d MiB used' % used)
            else:
                result[index] = (True, None)
        return result

    def _add_target(self, record):
        self.targets[record['pid']] = _Target(record)
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
            record['protected'], record['protected_reason'] = self._protection(record)
            return newcomer_verdict(dict(record, kind='compute'), self.scope, self.own_pids)
        examined, added = self.rounds.left_behind(
            exited, self.pids_after, self.prober,
            lambda minor: self.minor_to_index.get(minor) if self.minor_to_index is not None else minor,
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
            self._warn('the context of exited pid %s stayed after its stronger keepers were released; '
                       'released its weaker keepers too: pid %s' % (
                           ', '.join(sorted(set(str(pid) for r in records for e in r['keeps']
                                                for pid in e['creator_pids']))),
                           ', '.join(str(r['pid']) for r in records)))
        return wait or bool(records)

    def _any_active(self):
        return any(t.outcome == ACTIVE for t in self.targets.values())

    def _new_target(self, record, position):
        return _Target(record, position=position)

    def _finished(self, now):
        if self._any_active():
            return False
        if self._exit_unobserved or self._scan_owed:
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
            self._freeze_supervisors()
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
                self._end_parents()
        finally:
            # Normal end or exception alike; the module's death is the guardian's.
            self._thaw_left_frozen()
            self.ledger.close()
        if self.ledger.warning:
            self._warn(self.ledger.warning)
        return self.result(freeze_supervisors_done)

    def _stop_asked(self):
        """Whether ``should_stop`` asks to stop escalating; then nothing more is signalled or killed, and what was
        frozen is thawed on the way out."""
        if self.stopped_because is None and self.should_stop is not None:
            reason = self.should_stop()
            if reason:
                self.stopped_because = reason
                self._warn('escalation stopped: %s; nothing more was signalled, and what was frozen was thawed'
                           % reason)
        return self.stopped_because is not None

    # -- the result --------------------------------------------------------

    def result(self, freeze_supervisors_done=0.0):
        """What the run did (``_report`` shapes each list)."""
        elapsed = self._now()
        released, survivors = [], []
        for pid in sorted(self.targets):
            target = self.targets[pid]
            if target.outcome == RELEASED:
                released.append(released_entry(target))
            else:
                survivors.append(survivor_entry(target, self.prober.wchan(pid) if target.outcome == SURVIVOR else None))
        holding = set()
        for pids in (self.pids_after if self.nvml_ok else self.proc_view).values():
            holding.update(pids)
        unexamined, warning = unexamined_entries(self.over_limit, holding, self.max_newcomers)
        if warning:
            self._warn(warning)
        survivors.extend(unexamined)
        supervisors, parents = parent_lists(self.supervisors, self.parents)
        return {
            'changed': self.sent > 0,
            'signals_sent': self.sent,
            'released': released,
            'survivors': survivors,
            'stuck_gpus': stuck_gpus(self.plan.gpus, self._gpus_released() if self.nvml_ok else {}, survivors,
                                     self.memory_after),
            'supervisors': supervisors,
            'parents': parents,
            'steps': step_entries(self.parents, self._steps, freeze_supervisors_done, elapsed),
            'memory_after': dict(self.memory_after) if self.nvml_ok or self.memory_after else {},
            'nvml_used': self.nvml_ok,
            'elapsed_seconds': round(elapsed, 3),
            'warnings': list(self.warnings),
            'spared': [summarize(record, reason=reason) for record, reason in self.rounds.spared],
        }
