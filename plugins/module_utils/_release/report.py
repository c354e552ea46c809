# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a release reports: result entries, stuck GPUs, steps, failure lines and next steps. Pure.

``shape_result`` turns the GPU records, the holders, the plan and what
``Escalation.run`` returned into the module's result; the helpers above it
shape the run's own lists (``released``, ``survivors``, ``stuck_gpus``,
``steps``). The operator's next-step texts live here, and ``_proof.verdict`` uses
the same reset text.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .._base.advice import RESET_STEP
from .._plan.parents import KILL as PARENT_KILL
from .._plan.parents import THAW as PARENT_THAW
from .._discover.keepers import KEEPER_HELD_BACK
from .._plan.plan import summarize

# A GPU counts as released when its used memory is within this much of what
# the holders left alone account for.
RELEASE_THRESHOLD_MIB = 64

# What became of a target.
RELEASED = 'released'
SURVIVOR = 'survivor'
REFUSED = 'denied'

UNEXAMINED_PREFIX = 'appeared during the release after '
UNEXAMINED = UNEXAMINED_PREFIX + '%d others had been examined (the limit); not signalled'
# Keys of a source parent that the ``supervisors`` list does not show.
_PARENT_ONLY = ('action', 'systemd_unit', 'container')


def released_entry(target):
    """The ``released`` entry of a target (an ``_release.escalation`` target) that let its GPUs go."""
    record = target.record
    return summarize(
        record,
        last_signal=target.last_signal,
        seconds_to_release=round(target.released_at, 3),
        outcome=target.release_outcome,
        shared=bool(record.get('shared')),
        skipped_steps=target.skipped_steps,
        descendants_killed=sorted(target.killed),
        adopted=target.adopted,
    )


def survivor_entry(target, wchan=None):
    """The ``survivors`` entry of a target still alive (``wchan``: where it sleeps in the kernel)."""
    return summarize(
        target.record,
        state=target.state,
        wchan=wchan,
        last_signal=target.last_signal,
        reason=target.reason or 'still alive after %s and its wait' % (target.last_signal or 'the ladder'),
        adopted=target.adopted,
    )


def unexamined_entries(over_limit, holding, limit):
    """``(entries, warning)``: survivor entries for newcomers beyond ``limit`` that still hold a GPU.

    ``over_limit`` maps such a PID to the GPU indices it was seen on;
    ``holding`` is every PID the last look saw on a GPU.
    """
    pids = sorted(pid for pid in over_limit if pid in holding)
    warning = None
    if len(pids) > limit:
        warning = ('%d more processes appeared on the GPUs during the release and still hold them; '
                   'they are not listed' % (len(pids) - limit))
        pids = pids[:limit]
    return [summarize({'pid': pid, 'gpus': sorted(over_limit[pid])}, state=None, wchan=None,
                      last_signal=None, adopted=True, reason=UNEXAMINED % limit)
            for pid in pids], warning


def stuck_gpus(gpus, released, survivors, memory_after):
    """GPUs that are not released though no survivor holds them: a stuck context.

    ``released`` maps an index to ``(released, reason)``.
    """
    alive_on = set()
    for entry in survivors:
        alive_on.update(entry['gpus'])
    stuck = []
    for index in gpus:
        ok, why = released.get(index, (True, None))
        if not ok and index not in alive_on:
            stuck.append({'index': index, 'memory_used_mib': memory_after.get(index), 'reason': why})
    return stuck


def gpus_released(gpus, targets, pids_after, memory_after, known_pids, left_alone, over_limit, baseline_mib,
                  threshold_mib=RELEASE_THRESHOLD_MIB):
    """``{index: (released, reason)}`` for each of ``gpus``, from the last NVML reading. Pure.

    ``targets``: pid -> target of the release; ``pids_after`` and ``memory_after``: what NVML listed and
    read per GPU; ``known_pids``: every holder known to the release; ``left_alone`` and ``over_limit``: the
    newcomers it left alone and those it did not examine. A GPU is released when no target is listed, no
    unexamined newcomer holds it, and its memory is within ``threshold_mib`` of ``baseline_mib``, unless a
    process left alone accounts for it.
    """
    target_pids = set(targets)
    # Only GPUs a target held are waited on: a GPU that was already stuck
    # with no holder is the reset stage's business, not this loop's.
    held = set()
    for target in targets.values():
        held.update(target.record.get('gpus') or [])
    result = {}
    for index in gpus:
        if index not in held:
            result[index] = (True, None)
            continue
        pids = pids_after.get(index, set())
        listed = sorted(pids & target_pids)
        unexamined = sorted(pid for pid in pids if pid in over_limit)
        used = memory_after.get(index)
        limit = baseline_mib.get(index, 0) + threshold_mib
        # Memory of a process left alone (unknown, or a newcomer out of
        # scope or protected) is its own, not a stuck context.
        others = (pids - known_pids) or (pids & set(left_alone))
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


def step_entries(parents, step_log, freeze_supervisors_done, elapsed):
    """The ``steps`` list: the source parents' freeze first, then every ladder step that started."""
    steps = []
    frozen_parents = [entry['pid'] for entry in parents if entry['action'] in (PARENT_KILL, PARENT_THAW)]
    if frozen_parents:
        steps.append({'name': 'freeze supervisors', 'signal': 'SIGSTOP',
                      'pids': frozen_parents,
                      'started_at': 0.0, 'seconds': round(freeze_supervisors_done, 3), 'skipped': []})
    for entry in step_log:
        if entry['started_at'] is None:
            continue
        ended = entry['_ended'] if entry['_ended'] is not None else elapsed
        steps.append({'name': entry['name'], 'signal': entry['signal'], 'pids': entry['pids'],
                      'skipped': entry['skipped'], 'started_at': round(entry['started_at'], 3),
                      'seconds': round(max(0.0, ended - entry['started_at']), 3)})
    return steps


def parent_lists(supervisors, parents):
    """``(supervisors, parents)`` as the result shows them: no private keys, supervisors shorter."""
    return ([dict((k, v) for k, v in entry.items() if not k.startswith('_') and k not in _PARENT_ONLY)
             for entry in supervisors],
            [dict((k, v) for k, v in entry.items() if not k.startswith('_')) for entry in parents])


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
            RESET_STEP % (entry['gpus'][0] if entry['gpus'] else 'N')))
    for entry in result['stuck_gpus']:
        uuid = uuids.get(entry['index'])
        lines.append('GPU %d%s still has %s MiB used after every targeted holder is gone (stuck context%s); '
                     'next step: %s' % (
                         entry['index'], ' (%s)' % uuid if uuid else '',
                         entry['memory_used_mib'] if entry['memory_used_mib'] is not None else '?',
                         ': %s' % entry['reason'] if entry.get('reason') and 'listed' in entry['reason'] else '',
                         RESET_STEP % entry['index']))
    return lines


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
        # Keepers held back for a later round: whether the context stays is known only once the run is made.
        spared = [summarize(record, reason=KEEPER_HELD_BACK)
                  for record in getattr(plan, 'deferred', None) or []]
        outcome = {'changed': False, 'released': released, 'survivors': [], 'stuck_gpus': [],
                   'supervisors': supervisors, 'parents': parents, 'steps': [], 'warnings': [], 'spared': spared}
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
        'skipped_holders': plan.skipped + (outcome.get('spared') or []),
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
    return result
