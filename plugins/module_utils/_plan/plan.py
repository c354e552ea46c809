# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The release plan: scope, filters, verdicts and source parents. Pure.

``plan_release`` decides, from holder records (docs/architecture.md) and a
``Scope``, which holders are targets, which are protected, which are skipped
and why, which parents are supervisors, and which targets are shared with
GPUs outside the scope. No signal is sent and no ``/proc`` file is read here.

Supervisor rule: the parent of a target is a supervisor, frozen before
anything else is signalled and killed with the targets, only if it is not
PID 1 or a kernel thread, not the module or one of its ancestors, not
protected, not itself a holder, not a shell, init system, session manager or
container runtime, may be signalled by this user, passes the ``users``
filter, and either

- matches every identifying filter given (``match``, ``systemd_units``,
  ``containers``; at least one of them given), or
- has live children that are all targets (a plain respawning parent).

``_plan.parents.parent_verdict`` holds that rule.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import re

from .._discover.keepers import CLIENT, MAPPED, RANKS, RECEIVED, keeper_rounds
from .._base.checks import EscalationError
from .parents import KILL as PARENT_KILL
from .parents import parent_verdict
from .._discover.protection import REASON_SELF, never_signalled
from .._discover.visibility import NOT_VISIBLE

KINDS = ('compute', 'client')
ON_SHARED_HOLDER = ('release', 'fail')

# The options that say which holders a release may touch, in every module that has them (documented by the
# doc fragment gpuops.reclaim.scope); build_scope checks them.
SCOPE_ARGUMENT_SPEC = dict(
    users=dict(type='list', elements='str', default=[]),
    match=dict(type='str'),
    systemd_units=dict(type='list', elements='str', default=[]),
    containers=dict(type='list', elements='str', default=[]),
    kinds=dict(type='list', elements='str', choices=list(KINDS), default=['compute']),
)

TARGET = 'target'
PROTECTED = 'protected'
SKIPPED = 'skipped'


class SharedHolderError(Exception):
    """``on_shared_holder: fail`` and a target also holds GPUs outside the scope."""


class Scope:
    """What a run may touch. Build it with ``build_scope`` (validates)."""

    def __init__(self, gpus, users=None, match=None, systemd_units=None, containers=None,
                 kinds=('compute',), on_shared_holder='release', euid=None, own_pids=(), release_pods=False,
                 pod_reason=None):
        self.gpus = sorted(set(int(index) for index in gpus))
        # Holders of Kubernetes pods are skipped (kubelet restarts them) unless this is set.
        self.release_pods = bool(release_pods)
        # pod_reason(uid) -> why a pod's holder is skipped (the modules add its namespace and name).
        self.pod_reason = pod_reason
        self.users = list(users or [])
        self.match = match
        self.systemd_units = list(systemd_units or [])
        self.containers = list(containers or [])
        self.kinds = list(kinds or ['compute'])
        self.on_shared_holder = on_shared_holder
        self.euid = euid
        self.own_pids = set(own_pids or ())

    @property
    def identifying_filters(self):
        return bool(self.match is not None or self.systemd_units or self.containers)


def build_scope(gpus, users=None, match=None, systemd_units=None, containers=None,
                kinds=None, on_shared_holder='release', euid=None, own_pids=(), release_pods=False,
                pod_reason=None):
    """Validate the filters and return a ``Scope``. ``gpus`` are resolved indices."""
    pattern = None
    if match is not None and match != '':
        try:
            pattern = re.compile(match)
        except re.error as exc:
            raise EscalationError("match: invalid regular expression %r: %s" % (match, exc))
    if kinds is not None and not list(kinds):
        raise EscalationError('kinds: must name at least one of %s; got: []' % ', '.join(KINDS))
    kinds = list(kinds) if kinds else ['compute']
    for position, kind in enumerate(kinds):
        if kind not in KINDS:
            raise EscalationError("kinds[%d]: must be one of %s; got: %r" % (position, ', '.join(KINDS), kind))
    if on_shared_holder not in ON_SHARED_HOLDER:
        raise EscalationError('on_shared_holder: must be one of %s; got: %r'
                              % (', '.join(ON_SHARED_HOLDER), on_shared_holder))
    for option, values in (('users', users), ('systemd_units', systemd_units), ('containers', containers)):
        for position, value in enumerate(values or []):
            if value is None or str(value).strip() == '':
                raise EscalationError('%s[%d]: must not be empty; got: %r' % (option, position, value))
    return Scope(gpus, users=[str(u) for u in users or []], match=pattern,
                 systemd_units=[str(u) for u in systemd_units or []],
                 containers=[str(c) for c in containers or []], kinds=kinds,
                 on_shared_holder=on_shared_holder, euid=euid, own_pids=own_pids, release_pods=release_pods,
                 pod_reason=pod_reason)


def summarize(record, **extra):
    """The short, stable view of a holder used in result lists."""
    entry = {
        'pid': record.get('pid'),
        'ppid': record.get('ppid'),
        'name': record.get('name'),
        'title': record.get('title') or record.get('name'),
        'user': record.get('user'),
        'kind': record.get('kind'),
        'state': record.get('state'),
        'gpus': list(record.get('gpus') or []),
        'gpu_memory_mib': dict(record.get('gpu_memory_mib') or {}),
        'memory_mib': record.get('memory_mib') or 0,
        'systemd_unit': record.get('systemd_unit'),
        'container': record.get('container'),
    }
    if record.get('keeps'):
        entry['keeps'] = [dict(item) for item in record['keeps']]
    entry.update(extra)
    return entry


def _user_matches(record, users):
    if not users:
        return True
    candidates = set()
    if record.get('user') is not None:
        candidates.add(str(record['user']))
    if record.get('uid') is not None:
        candidates.add(str(record['uid']))
    return bool(candidates & set(users))


def _title_matches(record, pattern):
    if pattern is None:
        return True
    for text in (record.get('title'), record.get('name'), record.get('exe')):
        if text and pattern.search(text):
            return True
    return False


def _unit_matches(record, patterns):
    if not patterns:
        return True
    unit = record.get('systemd_unit')
    return bool(unit) and any(fnmatch.fnmatchcase(unit, pattern) for pattern in patterns)


def container_matches(record, selectors):
    if not selectors:
        return True
    container = record.get('container')
    if not container:
        return False
    runtime = container.get('runtime') or ''
    ident = container.get('id') or ''
    pod_uid = container.get('pod_uid') or ''
    for selector in selectors:
        if selector == runtime or (ident and ident.startswith(selector)):
            return True
        # Every container of a Kubernetes pod, whatever its runtime, is a kubepods holder;
        # a pod can also be named by a prefix of its UID.
        if pod_uid and (selector == 'kubepods' or pod_uid.startswith(selector)):
            return True
    return False


def filter_reason(record, scope):
    """Why the filters (users, match, units, containers) leave ``record`` out, or None."""
    if not _user_matches(record, scope.users):
        return 'user not selected'
    if not _title_matches(record, scope.match):
        return 'title does not match'
    if not _unit_matches(record, scope.systemd_units):
        return 'systemd unit not selected'
    if not container_matches(record, scope.containers):
        return 'container not selected'
    return None


def permission_reason(record, scope):
    if scope.euid is None or scope.euid == 0:
        return None
    uid = record.get('uid')
    if uid is not None and int(uid) != int(scope.euid):
        return 'permission denied (owned by user %s)' % (record.get('user') or uid)
    return None


def holder_verdict(record, scope, own_pids=()):
    """``(verdict, reason)`` for one holder record: what a release does with it.

    ``verdict`` is ``target``, ``protected`` (never signalled: the module or
    one of its ancestors, a record marked protected) or ``skipped`` (left
    alone by the scope: out of the selected GPUs, kind, already exited, the
    filters, permission), with ``reason`` None for a target. Pure.
    ``plan_release`` judges the holders found at discovery with it (whose
    records already say PID 1 and kernel threads are protected), and
    ``newcomer_verdict`` every holder that appears during the release.
    ``own_pids`` adds to ``scope.own_pids``.
    """
    pid = record.get('pid')
    if record.get('is_self') or pid in scope.own_pids or pid in own_pids:
        return PROTECTED, REASON_SELF
    if record.get('protected'):
        return PROTECTED, record.get('protected_reason') or 'protected'
    if record.get('visible') is False:
        return SKIPPED, NOT_VISIBLE
    gpus = set(record.get('gpus') or [])
    if not gpus & set(scope.gpus):
        reason = 'out of scope'
    elif record.get('kind') not in scope.kinds:
        reason = 'kind %s not selected' % record.get('kind')
    elif record.get('state') in ('zombie', 'dead'):
        reason = 'already exited'
    else:
        reason = filter_reason(record, scope) or permission_reason(record, scope) or _pod_reason(record, scope)
    if reason:
        return SKIPPED, reason
    return TARGET, None


def _pod_reason(record, scope):
    """Why a holder of a Kubernetes pod is left alone (kubelet restarts it), or None."""
    pod = (record.get('container') or {}).get('pod_uid')
    if not pod or scope.release_pods:
        return None
    if scope.pod_reason is not None:
        return scope.pod_reason(pod)
    return 'managed by Kubernetes pod %s: drain the node' % pod


def newcomer_verdict(record, scope, own_pids=()):
    """``(verdict, reason)`` for a process that newly holds a targeted GPU during the release.

    The same decision as for the holders found at discovery
    (``holder_verdict``: scope, filters, protection, permission), plus what
    discovery's protection says of every process and a late record may not
    carry: PID 1 and kernel threads are never adopted. Pure.
    """
    reason = never_signalled(record.get('pid'), record.get('kernel_thread'), record.get('ppid'))
    if reason:
        return PROTECTED, reason
    return holder_verdict(record, scope, own_pids)


class Plan:
    """The outcome of ``plan_release``; every list holds plain dicts."""

    def __init__(self, gpus, scope=None):
        self.gpus = list(gpus)
        self.scope = scope     # the Scope it was planned for (holders that appear later obey it too)
        self.targets = []      # holder records (copies) to release
        self.protected = []    # summaries with ``reason``
        self.skipped = []      # summaries with ``reason``
        self.shared = []       # summaries of targets that also hold other GPUs
        self.supervisors = []  # process summaries with ``children`` and ``reason``
        self.parents = []      # every source parent (``_plan.parents``): supervisors, and those only frozen or named
        # Keepers held back for a later round: released only while their context stays (``keeper_rounds``).
        self.deferred = []

    @property
    def target_pids(self):
        return [record['pid'] for record in self.targets]

    @property
    def planned_pids(self):
        """The PIDs the release plans to signal: its targets, and the keepers held back for a later round."""
        return sorted(set(self.target_pids) | set(record['pid'] for record in self.deferred))

    @property
    def changes(self):
        """Whether running the plan would send a signal."""
        return bool(self.targets or self.supervisors)


def keeper_hold_back(entry, record, scope):
    """Why the keeps ``entry`` of ``record`` is named but not acted on, or None.

    What an ordinary user can arrange must not steer root: weak evidence on
    its own never signals a system service or a mere NVML client, and memory
    that no process accounts for is acted on only where the node is mapped.
    """
    rank = entry['rank']
    if not entry['creator_pids'] and rank > RANKS[MAPPED]:
        return ('may keep %d MiB no live process accounts for on GPU %d, but only a mapped node would show that it '
                'does: named, not signalled' % (entry['memory_mib'], entry['gpu']))
    if rank >= RANKS[CLIENT] and 'client' not in scope.kinds:
        return ('an NVML client that may keep the context of exited pid %s on GPU %d: not signalled unless kinds '
                'includes client' % (', '.join(str(p) for p in entry['creator_pids']), entry['gpu']))
    unit = record.get('systemd_unit') or ''
    if rank >= RANKS[RECEIVED] and unit.endswith('.service') and not (
            scope.systemd_units and _unit_matches(record, scope.systemd_units)):
        return ('holds the node of GPU %d without having mapped it, in service %s: named, not signalled unless '
                'systemd_units selects it' % (entry['gpu'], unit))
    return None


def _context_key(entry):
    return (entry['gpu'], tuple(entry['creator_pids']))


def _plan_keepers(plan, keepers, left_alone):
    """Fill ``plan.targets`` and ``plan.deferred`` from the keepers that may be signalled.

    ``left_alone`` are ``(record, reason)`` of the candidates protected, out
    of the filters or held back: a context whose stronger candidate is left
    alone has no weaker one signalled either (the left-alone one may be the
    keeper, and signalling the others would free nothing).
    """
    ceiling = {}
    for record, reason in left_alone:
        for entry in record.get('keeps') or []:
            key = _context_key(entry)
            if entry['rank'] < ceiling.get(key, (99, None))[0]:
                ceiling[key] = (entry['rank'], '%d (%s)' % (record['pid'], reason))
    allowed = []
    for record in keepers:
        entries = [entry for entry in record['keeps'] if entry['rank'] <= ceiling.get(_context_key(entry), (99,))[0]]
        if not entries:
            stronger = ceiling[_context_key(record['keeps'][0])][1]
            reason = 'a stronger candidate keeper of the same context is left alone: pid %s' % stronger
            plan.skipped.append(summarize(record, reason=reason))
            continue
        record['keeps'] = entries
        allowed.append(record)
    now, plan.deferred = keeper_rounds(allowed)
    plan.targets = sorted(plan.targets + now, key=lambda r: r['pid'])


def plan_release(holders, scope, processes=None):
    """Decide what to release. Pure: no signal, no ``/proc`` read.

    ``holders`` are holder records; ``scope`` a ``Scope``. ``processes`` maps
    the PID of each target's parent to a process dict (``pid``, ``ppid``,
    ``name``, ``title``, ``user``, ``uid``, ``create_time``,
    ``systemd_unit``, ``container``, ``children`` as a list of live child
    PIDs); without it no supervisor is planned. Raises
    ``SharedHolderError`` when ``on_shared_holder`` is ``fail`` and a target
    holds GPUs outside the scope.
    """
    plan = Plan(scope.gpus, scope)
    selected = set(scope.gpus)
    holder_pids = set()
    keepers, left_alone = [], []
    for record in sorted(holders, key=lambda r: r['pid']):
        holder_pids.add(record['pid'])
        gpus = set(record.get('gpus') or [])
        if record.get('keeps'):
            # Only what it keeps on the selected GPUs counts, and a client that may keep one is judged as a
            # compute holder would be.
            record = dict(record, keeps=[e for e in record['keeps'] if e['gpu'] in selected])
        held_back = [keeper_hold_back(entry, record, scope) for entry in record.get('keeps') or []]
        kept = [entry for entry, why in zip(record.get('keeps') or [], held_back) if not why]
        if record.get('keeps') and not kept:
            # Named as a possible keeper only: otherwise it is the NVML client its record shows.
            left_alone.append((record, held_back[0]))
            record = dict(record, keeps=[], kind='client')
        elif record.get('keeps'):
            record = dict(record, keeps=kept)
        judged = dict(record, kind='compute') if record.get('keeps') else record
        verdict, reason = holder_verdict(judged, scope)
        if verdict == SKIPPED and not record.get('keeps') and held_back and reason.startswith('kind '):
            reason = held_back[0]
        if verdict != TARGET and record.get('keeps'):
            left_alone.append((record, reason))
        if verdict == PROTECTED:
            plan.protected.append(summarize(record, reason=reason, is_self=reason == REASON_SELF))
            continue
        if verdict == SKIPPED:
            plan.skipped.append(summarize(record, reason=reason))
            continue
        target = dict(record)
        outside = sorted(gpus - selected)
        target['shared'] = bool(outside)
        if outside:
            plan.shared.append(summarize(record, outside_gpus=outside))
        if record.get('keeps'):
            keepers.append(target)
        else:
            plan.targets.append(target)
    _plan_keepers(plan, keepers, left_alone)

    if plan.shared and scope.on_shared_holder == 'fail':
        raise SharedHolderError(
            'on_shared_holder is fail and %s; nothing was signalled' % '; '.join(
                'pid %d (%s) also holds GPU %s outside the selected GPUs %s' % (
                    entry['pid'], entry['title'], ', '.join(str(i) for i in entry['outside_gpus']),
                    ', '.join(str(i) for i in plan.gpus) or 'none')
                for entry in plan.shared))

    plan.supervisors = _plan_supervisors(plan, scope, processes or {}, holder_pids)
    return plan


def _plan_supervisors(plan, scope, processes, holder_pids):
    """The parents of the targets that are sources (``_plan.parents``).

    Fills ``plan.parents`` (every source parent, with ``action``) and
    returns the supervisors: the parents to freeze first and kill.
    """
    target_pids = set(plan.target_pids)
    by_parent = {}
    for record in plan.targets:
        by_parent.setdefault(record.get('ppid'), []).append(record['pid'])
    supervisors = []
    for ppid in sorted(p for p in by_parent if p):
        process = processes.get(ppid)
        if not process or ppid in target_pids or ppid in holder_pids:
            continue
        verdict = parent_verdict(dict(process, pid=ppid), scope, target_pids, filter_reason, permission_reason)
        if verdict is None:
            continue
        action, reason = verdict
        entry = {
            'pid': ppid,
            'ppid': process.get('ppid'),
            'name': process.get('name'),
            'title': process.get('title') or process.get('name'),
            'user': process.get('user'),
            'create_time': process.get('create_time'),
            'children': sorted(by_parent[ppid]),
            'reason': reason,
        }
        plan.parents.append(dict(entry, action=action, systemd_unit=process.get('systemd_unit'),
                                 container=process.get('container')))
        if action == PARENT_KILL:
            supervisors.append(entry)
    return supervisors


def baseline_memory(holders, plan):
    """``{index: MiB}`` held on each selected GPU by the holders left alone."""
    targets = set(plan.target_pids) | set(record['pid'] for record in plan.deferred)
    baseline = dict((index, 0) for index in plan.gpus)
    kept_alone = {}
    for record in holders:
        if record['pid'] in targets:
            continue
        for key, mib in (record.get('gpu_memory_mib') or {}).items():
            index = int(key)
            if index in baseline and mib:
                baseline[index] += int(mib)
        # A context that only keepers left alone keep is not this run's to free: counted once.
        for entry in record.get('keeps') or []:
            kept_alone[(entry['gpu'], tuple(entry['creator_pids']))] = entry['memory_mib']
    released = set((entry['gpu'], tuple(entry['creator_pids']))
                   for record in list(plan.targets) + list(plan.deferred) for entry in record.get('keeps') or [])
    for (index, creators), mib in kept_alone.items():
        if index in baseline and (index, creators) not in released:
            baseline[index] += int(mib)
    return baseline
