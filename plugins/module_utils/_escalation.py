# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The release ladder as data, the release plan, and its execution.

Three pieces, separated so that check mode is "plan, then stop":

``parse_ladder``
    validates the ladder (a list of steps) and fills in the defaults:
    SIGTERM and wait ``grace_seconds``; freeze; SIGKILL and wait
    ``kill_seconds``.

``plan_release``
    pure: from holder records (docs/architecture.md) and a ``Scope`` it
    decides which holders are targets, which are protected, which are skipped
    and why, which parents are supervisors, and which targets are shared with
    GPUs outside the scope.

``Escalation.run``
    one small loop that walks every target along the ladder on its own
    clock, signals only through ``_identity.signal_process``, and waits by
    polling NVML and ``/proc`` every ``poll_interval`` seconds until the
    memory is back, with no fixed sleep.

Supervisor rule (see ``plan_release``): the parent of a target is a
supervisor, frozen before anything else is signalled and killed with the
targets, only if it is not PID 1 or a kernel thread, not the module or one of
its ancestors, not protected, not itself a holder, not a shell, init system,
session manager or container runtime, may be signalled by this user, passes
the ``users`` filter, and either

- matches every identifying filter given (``match``, ``systemd_units``,
  ``containers``; at least one of them given), or
- has live children that are all targets (a plain respawning parent).

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
the module and its ancestors). A newcomer that passes is adopted: it becomes
a target with ``adopted: true`` in ``released`` or ``survivors``. One that
does not is left alone, listed in ``protected`` or ``skipped`` with the
reason, and its memory counts as its own.

Where an adopted holder starts on the ladder (``adoption_start``): its origin
is the target it descends from, or, when its ancestry is lost, the targets
that hold the same GPUs. If an origin has already been sent a ladder signal
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

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import math
import os
import re
import signal
import time

from ._identity import (
    DENIED,
    GONE,
    REUSED,
    SENT,
    ZOMBIE,
    ProcessRef,
    check_identity,
    signal_process,
)

try:
    from ._procfs import (
        DEV_DIR,
        PROC_ROOT,
        classify_device_path,
        fd_device_paths,
        maps_device_paths,
        read_cgroup,
        read_stat,
        read_status,
        read_wchan,
        scan_device_holders,
        signal_mask,
    )
    from ._procread import DEFAULT_TIMEOUT as DEFAULT_READ_TIMEOUT, read_title, stuck_reason
except ImportError:  # pragma: no cover
    read_status = read_wchan = signal_mask = read_stat = read_cgroup = None
    read_title = stuck_reason = None
    DEFAULT_READ_TIMEOUT = 2.0
    classify_device_path = scan_device_holders = fd_device_paths = maps_device_paths = None
    DEV_DIR, PROC_ROOT = '/dev', '/proc'

from ._grace import SIGTERM_IGNORED, grace_case
from ._guardian import FreezeLedger
from ._parents import KILL as PARENT_KILL
from ._parents import REASON_RESPAWNED
from ._parents import THAW as PARENT_THAW
from ._parents import parent_verdict, respawned
from ._protection import protection_of
from ._visibility import NOT_VISIBLE, holds_device_node, in_initial_pid_namespace

try:
    import psutil
except ImportError:  # pragma: no cover - reported by the modules
    psutil = None

DEFAULT_GRACE_SECONDS = 10.0
DEFAULT_KILL_SECONDS = 10.0
DEFAULT_POLL_INTERVAL = 0.05
MAX_WAIT_SECONDS = 3600.0
MIN_POLL_INTERVAL = 0.005
MAX_POLL_INTERVAL = 5.0
# A GPU counts as released when its used memory is within this much of what
# the holders left alone account for.
RELEASE_THRESHOLD_MIB = 64
# Holders that appear during a release (see "Newcomers" above): at most this
# many are examined, and so adopted, in one run.
MAX_NEWCOMERS = 64
# An adopted holder's waits end at the latest this long after the ladder of
# the holders found at discovery would have ended.
ADOPTION_SLACK_SECONDS = 0.5
# Without NVML, newcomers are found by a scan of every /proc/PID/fd; scans
# take at most about this share of the waiting time.
PROC_SCAN_SHARE = 0.2

FREEZE = 'freeze'
KINDS = ('compute', 'client')
ON_SHARED_HOLDER = ('release', 'fail')

# Signals a ladder may send by name. SIGSTOP/SIGCONT are the freeze step's
# business; job-control and child signals make no sense here.
LADDER_SIGNALS = ('SIGTERM', 'SIGINT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2', 'SIGABRT', 'SIGKILL')

REUSED_SINCE_LISTING = 'started after the listing that showed its PID (PID reused)'
UNEXAMINED_PREFIX = 'appeared during the release after '
UNEXAMINED = UNEXAMINED_PREFIX + '%d others had been examined (the limit); not signalled'

NEXT_STEP = 'a GPU reset (gpu_reclaim_allow_reset in the role, or nvidia-smi --gpu-reset -i %s) or a reboot'


class EscalationError(ValueError):
    """Bad input: the message names the option and the value received."""


class SharedHolderError(Exception):
    """``on_shared_holder: fail`` and a target also holds GPUs outside the scope."""


# -- input -------------------------------------------------------------------

def check_seconds(option, value, maximum=MAX_WAIT_SECONDS, minimum=0.0):
    """Return ``value`` as a float, or raise naming ``option`` and the value."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if isinstance(value, bool) or number is None or math.isnan(number) or number < minimum or number > maximum:
        raise EscalationError('%s: must be a number of seconds from %g to %g; got: %r'
                              % (option, minimum, maximum, value))
    return number


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
    step: a frozen process honours no other signal.

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
        if step['action'] == FREEZE:
            following = steps[position + 1] if position + 1 < len(steps) else None
            if following is None or following['signum'] != signal.SIGKILL:
                raise EscalationError('ladder[%d]: a freeze step must be followed by a SIGKILL step; got: %s'
                                      % (position, repr(ladder[position + 1]) if following else 'the end of the ladder'))
    return steps


def check_poll_interval(value, option='poll_interval'):
    return check_seconds(option, value, maximum=MAX_POLL_INTERVAL, minimum=MIN_POLL_INTERVAL)


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


def own_lineage(pid=None):
    """The PIDs of this process and all its ancestors (never signalled)."""
    pid = os.getpid() if pid is None else pid
    pids = set()
    while pid and pid not in pids:
        pids.add(pid)
        try:
            pid = psutil.Process(pid).ppid()
        except Exception:  # pylint: disable=broad-except
            break
    return pids


# -- the plan ----------------------------------------------------------------

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


def _container_matches(record, selectors):
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
    if not _container_matches(record, scope.containers):
        return 'container not selected'
    return None


def _permission_reason(record, scope):
    if scope.euid is None or scope.euid == 0:
        return None
    uid = record.get('uid')
    if uid is not None and int(uid) != int(scope.euid):
        return 'permission denied (owned by user %s)' % (record.get('user') or uid)
    return None


TARGET = 'target'
PROTECTED = 'protected'
SKIPPED = 'skipped'
SELF_REASON = 'the module itself or one of its ancestors'


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
        return PROTECTED, SELF_REASON
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
        reason = filter_reason(record, scope) or _permission_reason(record, scope) or _pod_reason(record, scope)
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
    pid = record.get('pid')
    if not isinstance(pid, int) or pid <= 1:
        return PROTECTED, 'pid 1'
    if pid == 2 or record.get('ppid') == 2:
        return PROTECTED, 'kernel thread'
    return holder_verdict(record, scope, own_pids)


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
        self.parents = []      # every source parent (``_parents``): supervisors, and those only frozen or named

    @property
    def target_pids(self):
        return [record['pid'] for record in self.targets]

    @property
    def changes(self):
        """Whether running the plan would send a signal."""
        return bool(self.targets or self.supervisors)

    @property
    def frozen_parents(self):
        """The source parents a run freezes first: supervisors, and parents only thawed afterwards."""
        return [entry for entry in self.parents if entry['action'] in (PARENT_KILL, PARENT_THAW)]


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
    for record in sorted(holders, key=lambda r: r['pid']):
        holder_pids.add(record['pid'])
        gpus = set(record.get('gpus') or [])
        verdict, reason = holder_verdict(record, scope)
        if verdict == PROTECTED:
            plan.protected.append(summarize(record, reason=reason, is_self=reason == SELF_REASON))
            continue
        if verdict == SKIPPED:
            plan.skipped.append(summarize(record, reason=reason))
            continue
        target = dict(record)
        outside = sorted(gpus - selected)
        target['shared'] = bool(outside)
        if outside:
            plan.shared.append(summarize(record, outside_gpus=outside))
        plan.targets.append(target)

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
    """The parents of the targets that are sources (``_parents``).

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
        verdict = parent_verdict(dict(process, pid=ppid), scope, target_pids, filter_reason, _permission_reason)
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


def child_pids(pid, proc_root='/proc'):
    """PIDs of the children of ``pid``, from ``/proc/PID/task/*/children``.

    That file costs one read per thread of ``pid``, where psutil's
    ``children()`` reads the stat file of every process on the host (hundreds
    of milliseconds with ten thousand processes). The kernel documents it as
    exact for a stopped process, which is when the freeze step reads it.
    Falls back to psutil where the kernel lacks the file.
    """
    task_dir = '%s/%d/task' % (proc_root, pid)
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return []
    children = []
    for tid in tids:
        try:
            with open('%s/%s/children' % (task_dir, tid)) as handle:
                children.extend(int(field) for field in handle.read().split())
        except FileNotFoundError:
            if os.path.exists('%s/%s' % (task_dir, tid)):
                # No CONFIG_PROC_CHILDREN: ask psutil, the slow way.
                try:
                    return [child.pid for child in psutil.Process(pid).children()]
                except Exception:  # pylint: disable=broad-except
                    return []
        except (OSError, ValueError):
            continue
    return sorted(set(children))


def descendant_pids(pid, proc_root='/proc'):
    """PIDs of every descendant of ``pid``, parents before children."""
    found, frontier, seen = [], [pid], set([pid])
    while frontier:
        parent = frontier.pop(0)
        for child in child_pids(parent, proc_root):
            if child not in seen:
                seen.add(child)
                found.append(child)
                frontier.append(child)
    return found


def describe_process(pid, read_timeout=DEFAULT_READ_TIMEOUT):
    """A process dict as ``plan_release`` wants for ``processes``, or None if gone.

    The name is ``comm`` from ``/proc/PID/stat`` (psutil's ``name()`` may read
    ``cmdline``, which can block); the title is read within ``read_timeout``
    seconds, and when it does not come, ``unreadable`` says so.
    """
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            info = {
                'pid': pid,
                'ppid': proc.ppid(),
                'name': read_stat(pid)['comm'],
                'create_time': proc.create_time(),
                'uid': proc.uids().real,
            }
            try:
                info['user'] = proc.username()
            except Exception:  # pylint: disable=broad-except
                info['user'] = str(info['uid'])
            try:
                info['exe'] = proc.exe() or None
            except Exception:  # pylint: disable=broad-except
                info['exe'] = None
            info['tty'] = _tty_number(pid)
        info['children'] = [child for child in child_pids(pid)
                            if _safe_status(child) not in ('zombie', 'gone')]
    except Exception:  # pylint: disable=broad-except
        return None
    info['title'] = None
    info['systemd_unit'] = None
    info['container'] = None
    info['unreadable'] = None
    try:
        info['title'] = read_title(pid, read_timeout)
    except Exception:  # pylint: disable=broad-except
        info['title'] = info['name']
    if info['title'] is None:
        info['unreadable'] = stuck_reason(pid, read_timeout)
    info['title'] = info['title'] or info['name']
    try:
        info.update(read_cgroup(pid))
    except Exception:  # pylint: disable=broad-except
        pass
    return info


def _tty_number(pid):
    """The controlling terminal's device number (field 7 of /proc/PID/stat), or None: tells an interactive shell."""
    try:
        with open('/proc/%d/stat' % pid) as handle:
            number = int(handle.read().rpartition(')')[2].split()[4])
    except (OSError, ValueError, IndexError):
        return None
    return number or None


def _safe_status(pid):
    try:
        return psutil.Process(pid).status()
    except Exception:  # pylint: disable=broad-except
        return 'gone'


def parent_processes(holders, protection=None, read_timeout=DEFAULT_READ_TIMEOUT):
    """``{ppid: process dict}`` for the parents of ``holders`` (edge of ``plan_release``).

    ``protection(info)`` returns ``(protected, reason)`` for a process dict;
    the modules pass ``_protection.protection_of`` so that a supervisor is never a
    process the holder records would call protected. Each title is read
    within ``read_timeout`` seconds.
    """
    processes = {}
    for record in holders:
        ppid = record.get('ppid')
        if ppid and ppid > 1 and ppid not in processes:
            info = describe_process(ppid, read_timeout)
            if info is None:
                continue
            if protection is not None:
                info['protected'], info['protected_reason'] = protection(info)
            processes[ppid] = info
    return processes


# -- probing the live system -------------------------------------------------

class ProcProber:
    """What the loop asks of the live system; unit tests pass a fake.

    ``proc_root`` and ``dev_dir`` serve ``device_holders`` (default: this
    file's ``PROC_ROOT`` and ``DEV_DIR``, read when the prober is made, so
    that tests can point them at stand-in device nodes); everything else
    reads the live ``/proc``.
    """

    def __init__(self, proc_root=None, dev_dir=None, read_timeout=DEFAULT_READ_TIMEOUT):
        self.proc_root = PROC_ROOT if proc_root is None else proc_root
        self.dev_dir = DEV_DIR if dev_dir is None else dev_dir
        self.read_timeout = read_timeout
        self.shares_namespace = None

    def device_holders(self):
        """``{pid: {"minors": set, "uvm": bool}}`` of every process with a GPU node open.

        One pass over every ``/proc/PID/fd`` (``_procfs.scan_device_holders``);
        ``minors`` are the ``/dev/nvidiaN`` numbers held, ``uvm`` whether
        ``/dev/nvidia-uvm`` is held too.
        """
        holders = scan_device_holders(self.proc_root, self.dev_dir)[0]
        found = {}
        for pid, paths in holders.items():
            minors, uvm = set(), False
            for path in paths:
                kind = classify_device_path(path, self.dev_dir)
                if kind is None:
                    continue
                if kind[0] == 'gpu':
                    minors.add(kind[1])
                elif kind[0] == 'uvm':
                    uvm = True
            if minors:
                found[pid] = {'minors': minors, 'uvm': uvm}
        return found

    def status(self, ref):
        """``gone``, ``reused``, ``zombie``, or psutil's status of the live process."""
        outcome = check_identity(ref)
        if outcome in (GONE, REUSED, ZOMBIE):
            return outcome
        try:
            return psutil.Process(ref.pid).status()
        except psutil.ZombieProcess:
            return ZOMBIE
        except psutil.NoSuchProcess:
            return GONE
        except psutil.AccessDenied:
            return 'unknown'

    def visible(self, pid):
        """Whether a PID that NVML lists is a GPU holder here (``_visibility``: a device node, or the host's namespace)."""
        if self.shares_namespace is None:
            self.shares_namespace = in_initial_pid_namespace()
        if self.shares_namespace:
            return True
        prefix = self.dev_dir.rstrip('/') + '/nvidia'
        try:
            paths = fd_device_paths(pid, prefix, self.proc_root) or maps_device_paths(pid, prefix, self.proc_root)
        except OSError:
            return False
        return holds_device_node(paths, self.dev_dir)

    def wchan(self, pid):
        try:
            return read_wchan(pid)
        except Exception:  # pylint: disable=broad-except
            return None

    def ignored_signals(self, pid):
        """The set of signals ``pid`` ignores, or None if unreadable."""
        try:
            return signal_mask(read_status(pid), 'SigIgn')
        except Exception:  # pylint: disable=broad-except
            return None

    def grace_case(self, pid, signum):
        """``(case, reason)`` when ``signum`` cannot reach ``pid``'s code (``_grace``), or None."""
        try:
            return grace_case(read_status(pid), signum)
        except Exception:  # pylint: disable=broad-except
            return None

    def descendants(self, pid):
        """``ProcessRef`` of every live descendant of ``pid``."""
        refs = []
        for child in descendant_pids(pid):
            try:
                refs.append(ProcessRef(child, psutil.Process(child).create_time()))
            except Exception:  # pylint: disable=broad-except
                continue
        return refs

    def listing_mark(self):
        """Now, in clock ticks since boot (``/proc/uptime``), taken right before a listing."""
        try:
            with open('%s/uptime' % self.proc_root) as handle:
                return float(handle.read().split()[0]) * os.sysconf('SC_CLK_TCK')
        except (OSError, ValueError, IndexError):
            return None

    def born_after(self, pid, mark):
        """Whether ``pid`` now names a process started after ``mark`` (a ``listing_mark``).

        Such a process cannot be the one a listing taken after ``mark`` showed:
        the PID was reused in between. Start times are in ticks since boot on
        both sides, so no wall clock is involved.
        """
        try:
            started = read_stat(pid, self.proc_root)['starttime']
        except (OSError, ValueError, IndexError):
            return False
        return started > mark + 1

    def ancestors(self, pid):
        """PIDs of the ancestors of ``pid``, nearest first."""
        chain = []
        try:
            for parent in psutil.Process(pid).parents():
                chain.append(parent.pid)
        except Exception:  # pylint: disable=broad-except
            pass
        return chain

    def describe(self, pid):
        """A minimal holder-like record for a process found during the run, or None."""
        info = describe_process(pid, self.read_timeout)
        if info is None:
            return None
        try:
            status = psutil.Process(pid).status()
        except Exception:  # pylint: disable=broad-except
            status = None
        info.update({'state': status, 'kind': 'compute', 'gpus': [], 'gpu_memory_mib': {},
                     'memory_mib': 0, 'protected': False, 'is_self': False})
        ignored = self.ignored_signals(pid)
        info['sigterm_ignored'] = bool(ignored and signal.SIGTERM in ignored)
        return info


# -- the loop ----------------------------------------------------------------

ACTIVE = 'active'
RELEASED = 'released'
SURVIVOR = 'survivor'
REFUSED = 'denied'

_STOPPED_STATES = ('stopped', 'tracing-stop')
# Keys of a source parent that the ``supervisors`` list does not show.
_PARENT_ONLY = ('action', 'systemd_unit', 'container')


class _Target:
    def __init__(self, record, position=0):
        self.record = record
        self.ref = ProcessRef.from_record(record)
        self.position = position
        self.entered = False
        self.deadline = None
        self.outcome = ACTIVE
        self.last_signal = None
        self.released_at = None
        self.budget_end = None
        self.release_outcome = None
        self.state = record.get('state')
        self.tree = {}       # pid -> ProcessRef of frozen descendants
        self.frozen = False
        self.killed = []     # descendant pids killed with the tree
        self.skipped_steps = []
        self.reason = None
        self.limit = None    # seconds from the start that no wait may pass (adopted holders)

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


class Escalation:
    """Walk every target along the ladder and wait until its GPUs are released.

    ``nvml`` has ``poll(indices, timeout)`` (``_nvml.NvmlSession``) or is
    None; ``prober`` is a ``ProcProber``; ``signaller(ref, signum, describe)``
    returns an ``_identity`` outcome; ``clock()`` returns seconds and
    ``sleep(seconds)`` waits. All are injectable for tests.

    Holders that appear during the release (see "Newcomers" above) are
    judged against ``plan.scope``; ``protection(record)`` returns
    ``(protected, reason)`` for one of them (the modules pass the same
    protection as discovery, ``protect`` and ``unprotect`` included; the
    default protects the default executables), ``own_pids`` are never
    adopted (default: this process and its ancestors when ``prober`` is the
    live one), ``minor_to_index`` maps ``/dev/nvidiaN`` numbers to GPU
    indices for the ``/proc`` scan (default: the same number), and
    ``max_newcomers`` bounds how many are examined.
    """

    def __init__(self, plan, ladder, nvml=None, prober=None, signaller=None, log=None,
                 clock=time.monotonic, sleep=time.sleep, poll_interval=DEFAULT_POLL_INTERVAL,
                 nvml_timeout=None, known_pids=(), baseline_mib=None,
                 threshold_mib=RELEASE_THRESHOLD_MIB, protection=None, own_pids=None,
                 minor_to_index=None, max_newcomers=MAX_NEWCOMERS, ledger=None, on_frozen=None):
        self.plan = plan
        self.ladder = ladder
        self.nvml = nvml
        self.scope = getattr(plan, 'scope', None) or Scope(plan.gpus)
        if own_pids is None:
            own_pids = own_lineage() if prober is None else ()
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
        self.adoption_limit = sum(step['wait'] for step in ladder) + ADOPTION_SLACK_SECONDS

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

    # -- supervisors -------------------------------------------------------

    def _has_action(self, action=None, signum=None):
        for step in self.ladder:
            if action and step['action'] == action:
                return True
            if signum is not None and step['signum'] == signum:
                return True
        return False

    def _freeze_supervisors(self):
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
            outcome = self._freeze(ref, '(%s), %s of pid %s' % (
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
            outcome = self._signal(ref, signal.SIGKILL, '(%s), supervisor' % result['title'])
            result['outcome'] = 'frozen and killed' if outcome == SENT else 'frozen, then %s' % outcome
        else:
            self._thaw(ref, '(%s), supervisor' % result['title'])
            result['outcome'] = 'frozen, then thawed: the ladder has no SIGKILL step'

    def _thaw_parent(self, result):
        ref = result.pop('_ref', None)
        if ref is None:
            return
        outcome = self._thaw(ref, '(%s), parent' % result['title'])
        result['outcome'] = 'frozen, then thawed' if outcome == SENT else 'frozen, then %s' % outcome

    def _end_parents(self):
        """Once the holders are gone: kill the supervisors, thaw the other frozen parents."""
        for result in self.parents:
            if '_ref' not in result:
                continue
            if result['action'] == PARENT_KILL:
                self._kill_supervisor(result)
            else:
                self._thaw_parent(result)

    def _note_respawn(self, pid):
        """A newcomer whose ancestor is a parent planned to be thawed: that parent is a respawner."""
        ancestors = self.prober.ancestors(pid)
        for result in self.parents:
            if respawned(result, ancestors):
                result['action'] = PARENT_KILL
                result['reason'] = REASON_RESPAWNED
                if result not in self.supervisors:
                    self.supervisors.append(result)

    def _kill_supervisors_of(self, pid):
        for result in self.supervisors:
            if pid in result['children'] and '_ref' in result:
                self._kill_supervisor(result)

    # -- trees -------------------------------------------------------------

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
            self.targets.setdefault(record['pid'], _Target(record))
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

    # -- newcomers ---------------------------------------------------------

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
        last_look = self._scan_owed and not any(t.outcome == ACTIVE for t in self.targets.values())
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
        if verdict != TARGET:
            self.left_alone[pid] = reason
            entry = summarize(record, reason='appeared during the release; %s' % reason)
            if verdict == PROTECTED:
                entry['is_self'] = reason == SELF_REASON
            listed = self.plan.protected if verdict == PROTECTED else self.plan.skipped
            listed.append(entry)
            listed.sort(key=lambda item: item['pid'])
            self._warn('%s: pid %d (%s) appeared during the release and was left alone: %s'
                       % (where, pid, record.get('title') or record.get('name'), reason))
            return
        origins = self._origins(pid, record)
        position, skipped = adoption_start(self.ladder, [(o.position, o.signalled) for o in origins])
        target = _Target(record, position=position)
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

    def _protection(self, record):
        if self.protection is not None:
            return self.protection(record)
        return protection_of(record)

    def _origins(self, pid, record):
        """The targets a newcomer comes from: its ancestor, else the targets of its GPUs."""
        for ancestor in self.prober.ancestors(pid):
            if ancestor in self.targets:
                return [self.targets[ancestor]]
            for target in self.targets.values():
                if ancestor in target.tree:
                    return [target]
            for entry in self.supervisors:
                if entry['pid'] == ancestor:
                    children = [self.targets[c] for c in entry['children'] if c in self.targets]
                    if children:
                        return children
        # Ancestry lost (reparented to PID 1 or a subreaper): the GPUs tell.
        gpus = set(record['gpus'])
        return [target for target in self.targets.values()
                if gpus & set(target.record.get('gpus') or []) and target.pid != pid]

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

    def _finished(self, now):
        if any(t.outcome == ACTIVE for t in self.targets.values()):
            return False
        if self._exit_unobserved or self._scan_owed:
            # A target exited after the last look: one more look for what it left behind.
            return False
        if not self.nvml_ok:
            return True
        if all(ok for ok, dummy in self._gpus_released().values()):
            return True
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
            self.targets[record['pid']] = _Target(record)
            self.known_pids.add(record['pid'])
        try:
            self._freeze_supervisors()
            freeze_supervisors_done = self._now()
            if self.on_frozen is not None:
                # What must happen while the parents are frozen and before any holder is signalled
                # (the modules stop the sources' units and containers here).
                self.on_frozen()
            while True:
                now = self._now()
                self._observe(now)
                for target in list(self.targets.values()):
                    self._advance(target, now)
                if self._finished(now):
                    break
                delay = self._next_wake(now) - self._now()
                if delay > 0:
                    self.sleep(delay)
            self._end_parents()
        finally:
            # Normal end or exception alike; the module's death is the guardian's.
            self._thaw_left_frozen()
            self.ledger.close()
        if self.ledger.warning:
            self._warn(self.ledger.warning)
        return self.result(freeze_supervisors_done)

    # -- the result --------------------------------------------------------

    def _unexamined(self):
        """Survivor entries for newcomers beyond the limit that still hold a GPU."""
        view = self.pids_after if self.nvml_ok else self.proc_view
        holding = set()
        for pids in view.values():
            holding.update(pids)
        pids = sorted(pid for pid in self.over_limit if pid in holding)
        if len(pids) > self.max_newcomers:
            self._warn('%d more processes appeared on the GPUs during the release and still hold them; '
                       'they are not listed' % (len(pids) - self.max_newcomers))
            pids = pids[:self.max_newcomers]
        return [summarize({'pid': pid, 'gpus': sorted(self.over_limit[pid])}, state=None, wchan=None,
                          last_signal=None, adopted=True, reason=UNEXAMINED % self.max_newcomers)
                for pid in pids]

    def result(self, freeze_supervisors_done=0.0):
        elapsed = self._now()
        released, survivors = [], []
        for pid in sorted(self.targets):
            target = self.targets[pid]
            record = target.record
            if target.outcome == RELEASED:
                released.append(summarize(
                    record,
                    last_signal=target.last_signal,
                    seconds_to_release=round(target.released_at, 3),
                    outcome=target.release_outcome,
                    shared=bool(record.get('shared')),
                    skipped_steps=target.skipped_steps,
                    descendants_killed=sorted(target.killed),
                    adopted=target.adopted,
                ))
            else:
                survivors.append(summarize(
                    record,
                    state=target.state,
                    wchan=self.prober.wchan(pid) if target.outcome == SURVIVOR else None,
                    last_signal=target.last_signal,
                    reason=target.reason or 'still alive after %s and its wait' % (target.last_signal or 'the ladder'),
                    adopted=target.adopted,
                ))
        survivors.extend(self._unexamined())
        stuck = []
        gpus_state = self._gpus_released() if self.nvml_ok else {}
        alive_on = set()
        for entry in survivors:
            alive_on.update(entry['gpus'])
        for index in self.plan.gpus:
            ok, why = gpus_state.get(index, (True, None))
            if not ok and index not in alive_on:
                stuck.append({'index': index, 'memory_used_mib': self.memory_after.get(index), 'reason': why})
        steps = []
        frozen_parents = [entry['pid'] for entry in self.parents if entry['action'] in (PARENT_KILL, PARENT_THAW)]
        if frozen_parents:
            steps.append({'name': 'freeze supervisors', 'signal': 'SIGSTOP',
                          'pids': frozen_parents,
                          'started_at': 0.0, 'seconds': round(freeze_supervisors_done, 3), 'skipped': []})
        for entry in self._steps:
            if entry['started_at'] is None:
                continue
            ended = entry['_ended'] if entry['_ended'] is not None else elapsed
            steps.append({'name': entry['name'], 'signal': entry['signal'], 'pids': entry['pids'],
                          'skipped': entry['skipped'], 'started_at': round(entry['started_at'], 3),
                          'seconds': round(max(0.0, ended - entry['started_at']), 3)})
        return {
            'changed': self.sent > 0,
            'signals_sent': self.sent,
            'released': released,
            'survivors': survivors,
            'stuck_gpus': stuck,
            'supervisors': [dict((k, v) for k, v in entry.items() if not k.startswith('_') and k not in _PARENT_ONLY)
                            for entry in self.supervisors],
            'parents': [dict((k, v) for k, v in entry.items() if not k.startswith('_')) for entry in self.parents],
            'steps': steps,
            'memory_after': dict(self.memory_after) if self.nvml_ok or self.memory_after else {},
            'nvml_used': self.nvml_ok,
            'elapsed_seconds': round(elapsed, 3),
            'warnings': list(self.warnings),
        }


def baseline_memory(holders, plan):
    """``{index: MiB}`` held on each selected GPU by the holders left alone."""
    targets = set(plan.target_pids)
    baseline = dict((index, 0) for index in plan.gpus)
    for record in holders:
        if record['pid'] in targets:
            continue
        for key, mib in (record.get('gpu_memory_mib') or {}).items():
            index = int(key)
            if index in baseline and mib:
                baseline[index] += int(mib)
    return baseline


def failure_lines(result, gpus=None):
    """One line per survivor and per stuck GPU, each with the operator's next step."""
    uuids = dict((gpu['index'], gpu.get('uuid')) for gpu in gpus or [])
    lines = []
    for entry in result['survivors']:
        indices = ', '.join(str(i) for i in entry['gpus']) or '?'
        if entry['reason'] == 'permission denied':
            lines.append('pid %s (%s) on GPU %s: permission denied (user %s); run as root or as that user'
                         % (entry['pid'], entry['title'], indices, entry.get('user')))
            continue
        if entry['reason'].startswith(UNEXAMINED_PREFIX):
            lines.append('pid %s on GPU %s %s; next step: find what keeps starting holders (a supervisor '
                         'or a service), stop it, and run again' % (entry['pid'], indices, entry['reason']))
            continue
        lines.append('pid %s (%s) on GPU %s survived %s: state %s, wchan %s; next step: %s' % (
            entry['pid'], entry['title'], indices, entry.get('last_signal') or 'the ladder',
            entry.get('state') or 'unknown', entry.get('wchan') or 'unknown',
            NEXT_STEP % (entry['gpus'][0] if entry['gpus'] else 'N')))
    for entry in result['stuck_gpus']:
        uuid = uuids.get(entry['index'])
        lines.append('GPU %d%s still has %s MiB used after every targeted holder is gone (stuck context%s); '
                     'next step: %s' % (
                         entry['index'], ' (%s)' % uuid if uuid else '',
                         entry['memory_used_mib'] if entry['memory_used_mib'] is not None else '?',
                         ': %s' % entry['reason'] if entry.get('reason') and 'listed' in entry['reason'] else '',
                         NEXT_STEP % entry['index']))
    return lines


# -- shaping what the module returns ------------------------------------------

def _holder_line(record):
    return 'pid %s %s on GPU %s (%s, %s MiB)' % (
        record.get('pid'), record.get('title') or record.get('name'),
        ', '.join(str(i) for i in record.get('gpus') or []) or '-', record.get('kind'),
        record.get('memory_mib') or 0)


def _describe_indices(indices):
    return ', '.join(str(i) for i in indices) if indices else 'none'


def shape_result(gpus, holders, plan, outcome=None, check_mode=False, elapsed=0.0, predicted_trees=None):
    """The module's result from the GPU records, holders, plan and run outcome.

    ``outcome`` is what ``Escalation.run`` returned, or None when nothing ran
    (check mode, or nothing to do). ``predicted_trees`` is what
    ``Escalation.predict_trees`` returned in check mode.
    """
    predicted_trees = predicted_trees or {}
    selected = set(plan.gpus)
    memory_after = (outcome or {}).get('memory_after') or {}
    gpu_results = []
    for gpu in sorted(gpus, key=lambda g: g['index']):
        if gpu['index'] not in selected:
            continue
        before = gpu.get('memory_used_mib')
        after = memory_after.get(gpu['index'], before if outcome is None else None)
        gpu_results.append({'index': gpu['index'], 'uuid': gpu.get('uuid'),
                            'memory_used_mib_before': before, 'memory_used_mib_after': after})
    if outcome is None:
        released = []
        if check_mode:
            released = [summarize(record, last_signal=None, seconds_to_release=None, outcome='planned',
                                  shared=bool(record.get('shared')), skipped_steps=[],
                                  descendants_killed=list(predicted_trees.get(record['pid'], [])), adopted=False)
                        for record in plan.targets]
        supervisors = [dict(entry, outcome='would be frozen and killed' if check_mode else 'left alone')
                       for entry in plan.supervisors]
        planned = {PARENT_KILL: 'would be frozen and killed', PARENT_THAW: 'would be frozen, then thawed'}
        parents = [dict(entry, outcome=planned.get(entry['action'], 'left alone') if check_mode else 'left alone')
                   for entry in getattr(plan, 'parents', [])]
        outcome = {'changed': False, 'released': released, 'survivors': [], 'stuck_gpus': [],
                   'supervisors': supervisors, 'parents': parents, 'steps': [], 'warnings': []}
        changed = plan.changes if check_mode else False
    else:
        changed = outcome['changed']

    in_scope = [h for h in holders if selected.intersection(h.get('gpus') or [])]
    gone = set(entry['pid'] for entry in outcome['released'])
    result = {
        'changed': changed,
        'released': outcome['released'],
        'protected': plan.protected,
        # Not 'skipped': Ansible reads a true 'skipped' key as 'the task was skipped'.
        'skipped_holders': plan.skipped,
        'shared': [entry['pid'] for entry in plan.shared],
        'survivors': outcome['survivors'],
        'stuck_gpus': outcome['stuck_gpus'],
        'supervisors': outcome['supervisors'],
        'parents': outcome.get('parents') or [],
        'gpus': gpu_results,
        'steps': outcome['steps'],
        'elapsed_seconds': round(elapsed, 3),
        'diff': {
            # Descendants go with their holder's tree: killed (or, in check mode, to be killed) with it.
            'before': {'holders': [_holder_line(h) for h in in_scope],
                       'descendants': ['pid %s, descendant of pid %s' % (pid, entry['pid'])
                                       for entry in outcome['released'] for pid in entry.get('descendants_killed') or []]},
            'after': {'holders': [_holder_line(h) for h in in_scope if h['pid'] not in gone], 'descendants': []},
        },
    }
    failures = failure_lines(outcome, gpus)
    verb = 'would release' if check_mode else 'released'
    summary = '%s %d holder%s of GPU %s' % (
        verb, len(result['released']), '' if len(result['released']) == 1 else 's',
        _describe_indices(plan.gpus))
    if not check_mode and outcome.get('elapsed_seconds') is not None:
        summary += ' in %.2f s' % outcome['elapsed_seconds']
    descendants = sum(len(entry.get('descendants_killed') or []) for entry in result['released'])
    if descendants:
        summary += ' with %d descendant%s' % (descendants, '' if descendants == 1 else 's')
    if result['supervisors']:
        summary += ', %d supervisor%s' % (len(result['supervisors']), '' if len(result['supervisors']) == 1 else 's')
    # The module's own processes hold the device nodes while NVML is open: listed, not counted.
    summary += '; %d protected, %d skipped' % (
        len([entry for entry in plan.protected if not entry.get('is_self')]), len(plan.skipped))
    if result['survivors'] or result['stuck_gpus']:
        summary += '; %d survivor%s, %d GPU%s with a stuck context' % (
            len(result['survivors']), '' if len(result['survivors']) == 1 else 's',
            len(result['stuck_gpus']), '' if len(result['stuck_gpus']) == 1 else 's')
    result['msg'] = '\n'.join([summary] + failures)
    result['failed_release'] = bool(failures)
    result['warnings_text'] = list(outcome.get('warnings') or [])
    return result
