# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What one run of the role achieved on one host, and across the whole play.

Both read the per-host summary the role keeps as the fact ``gpu_reclaim_summary``
(the JSON report's content): its ``gpus`` rows (memory before and after), its
``released`` holders, the units, containers and supervisors it stopped, its
verdict ``free`` and, when the role failed, ``error``. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.module_utils._sources.registry import KINDS
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import LEFT_SURVIVED, LEFT_UNKILLABLE

MIB = 1024 * 1024
# A one-line reason stays readable in a table row.
WHY_LIMIT = 200

FREE = 'free'
FAILED = 'failed'
# Check mode, or a run that stopped before its proof: nothing was proven.
UNPROVEN = 'unproven'
# The GPUs are held by the units the deploy keeps running (gpu_reclaim_keep_units), alone: nothing to free.
KEPT = 'kept'
# The states in which the run did what it was asked.
SUCCEEDED = (FREE, KEPT)

# gpu_reclaim's actions (a supervisor's outcome) on a source that stop it.
SOURCE_STOPPED_ACTIONS = ('frozen and killed', 'stopped')

# Why a run failed, as label values, each with what it means, in the order they are listed.
FAILED_HOLDERS_LEFT = 'holders_left'
FAILED_SURVIVORS = 'survivors'
FAILED_STUCK_GPUS = 'stuck_gpus'
FAILED_RESET = 'reset'
FAILED_OTHER = 'other'
FAILURE_REASONS = {
    FAILED_HOLDERS_LEFT: 'holders the proof still found: left alone, protected, come back',
    FAILED_SURVIVORS: 'holders that outlived the release',
    FAILED_STUCK_GPUS: 'GPUs busy with no holder',
    FAILED_RESET: 'the reset stage failed',
    FAILED_OTHER: 'a stop, the target, no result',
}

NO_RESULT = ('no result: the role stopped on this host before its first look at the GPUs '
             '(unreachable, or a task failed); see its tasks above')


def one_line(text, limit=WHY_LIMIT):
    """The first non-empty line of ``text``, cut to ``limit`` characters."""
    for line in str(text or '').splitlines():
        line = ' '.join(line.split())
        if line:
            return line if len(line) <= limit else line[:limit - 1] + '\u2026'
    return ''


def gpu_freed(row, max_used_mib):
    """A GPU was freed when it was busy at the first look and the proof saw it free."""
    before = row.get('memory_used_mib_before')
    after = row.get('memory_used_mib_after')
    if before is None or after is None:
        return False
    return before > max_used_mib and after <= max_used_mib


def memory_reclaimed_mib(row):
    """Memory that came back on one GPU between the first look and the proof (never negative)."""
    before = row.get('memory_used_mib_before')
    after = row.get('memory_used_mib_after')
    if before is None or after is None:
        return 0
    return max(0, before - after)


def released_by_signal(released):
    """{signal name: holders released} for holders the release signalled (check mode plans count none)."""
    counts = {}
    for holder in released or []:
        signal = holder.get('last_signal')
        if not signal or holder.get('outcome') == 'planned':
            continue
        counts[signal] = counts.get(signal, 0) + 1
    return counts


def source_metrics():
    """The metric name of every kind of source (``_sources.registry.KINDS``), in the registry's order."""
    return [kind.metric for kind in KINDS.values()]


def sources_stopped(summary):
    """{metric name of a kind: count} of what would have brought holders back and was stopped.

    The role's stop stage (each kind's ``role_stopped`` list: ``stopped_units``, ``stopped_containers``) and
    the release's ``sources``: a unit, container or pod it stopped, a respawning parent it froze and killed.
    Without ``sources`` (an older release), each kind's ``older_list`` stands for its entries (the killed
    ``supervisors`` count as parents).
    """
    counts = dict((metric, 0) for metric in source_metrics())
    if summary.get('check_mode'):
        # Nothing is stopped in check mode.
        return counts
    for kind in KINDS.values():
        if kind.role_stopped:
            counts[kind.metric] += len(summary.get(kind.role_stopped) or [])
    if 'sources' in summary:
        actions = [(source.get('kind'), source.get('action')) for source in summary.get('sources') or []]
    else:
        actions = [(kind.name, item.get('outcome')) for kind in KINDS.values() if kind.older_list
                   for item in summary.get(kind.older_list) or []]
    for name, action in actions:
        kind = KINDS.get(name)
        if kind is not None and action in SOURCE_STOPPED_ACTIONS:
            counts[kind.metric] += 1
    return counts


def failure_reasons(summary):
    """Why the run of ``summary`` failed: the FAILURE_REASONS that apply, in that order (FAILED_OTHER alone when
    none of the others does). Call it for a failed run only."""
    summary = summary or {}
    reasons = set()
    if summary.get('survivors'):
        reasons.add(FAILED_SURVIVORS)
    for row in summary.get('gpus') or []:
        for reason in row.get('left_reasons') or []:
            reasons.add(FAILED_SURVIVORS if reason in (LEFT_SURVIVED, LEFT_UNKILLABLE) else FAILED_HOLDERS_LEFT)
        if row.get('stuck'):
            reasons.add(FAILED_STUCK_GPUS)
    if summary.get('reset_errors'):
        reasons.add(FAILED_RESET)
    return [reason for reason in FAILURE_REASONS if reason in reasons] or [FAILED_OTHER]


def host_outcome(host, summary):
    """The outcome of the role on ``host``, from its summary (empty or None when there is none).

    Returns a dict with ``host``, ``state`` (``free``, ``kept``, ``failed`` or ``unproven``), ``why`` (one line, empty
    unless failed), ``failure_reasons`` (FAILURE_REASONS, empty unless failed), ``check_mode``, ``gpus``,
    ``gpus_freed``, ``memory_reclaimed_mib``, ``released``, ``released_by_signal``, ``sources_stopped`` and
    ``duration_seconds``.
    """
    summary = summary or {}
    if not summary.get('host'):
        return {
            'host': host, 'state': FAILED, 'why': NO_RESULT, 'failure_reasons': [FAILED_OTHER], 'check_mode': False,
            'gpus': 0, 'gpus_freed': 0,
            'memory_reclaimed_mib': 0, 'released': 0, 'released_by_signal': {},
            'sources_stopped': dict((metric, 0) for metric in source_metrics()), 'duration_seconds': None,
        }
    rows = summary.get('gpus') or []
    max_used_mib = summary.get('max_used_mib', 0) or 0
    error = summary.get('error')
    free = summary.get('free')
    if error or free is False:
        state = FAILED
        why = one_line(error) or 'the proof found GPUs still busy'
    elif free:
        state = FREE
        why = ''
    elif summary.get('kept_units'):
        state = KEPT
        why = ''
    else:
        state = UNPROVEN
        why = ''
    by_signal = released_by_signal(summary.get('released'))
    return {
        'host': host,
        'state': state,
        'why': why,
        'failure_reasons': failure_reasons(summary) if state == FAILED else [],
        'check_mode': bool(summary.get('check_mode')),
        'gpus': len(rows),
        'gpus_freed': sum(1 for row in rows if gpu_freed(row, max_used_mib)),
        'memory_reclaimed_mib': sum(memory_reclaimed_mib(row) for row in rows),
        'released': sum(by_signal.values()),
        'released_by_signal': by_signal,
        'sources_stopped': sources_stopped(summary),
        'duration_seconds': summary.get('total_seconds'),
    }


def fleet_outcome(summaries):
    """Roll up ``summaries``, a mapping of host name to that host's summary.

    A host whose summary is missing (None) never started the role and is left out; an empty summary means
    the role started there and stopped before its first look. Hosts are listed in name order.
    """
    hosts = []
    for host in sorted(summaries):
        summary = summaries[host]
        if summary is None:
            continue
        hosts.append(host_outcome(host, summary))
    failed = [{'host': outcome['host'], 'why': outcome['why']} for outcome in hosts if outcome['state'] == FAILED]
    return {
        'hosts': hosts,
        'host_count': len(hosts),
        'free': [outcome['host'] for outcome in hosts if outcome['state'] == FREE],
        'kept': [outcome['host'] for outcome in hosts if outcome['state'] == KEPT],
        'failed': failed,
        'unproven': [outcome['host'] for outcome in hosts if outcome['state'] == UNPROVEN],
        'check_mode': any(outcome['check_mode'] for outcome in hosts),
        'gpus': sum(outcome['gpus'] for outcome in hosts),
        'gpus_freed': sum(outcome['gpus_freed'] for outcome in hosts),
        'memory_reclaimed_mib': sum(outcome['memory_reclaimed_mib'] for outcome in hosts),
        'released': sum(outcome['released'] for outcome in hosts),
    }
