# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The parts of the role's per-host summary that are worked out, not copied.

Each reads the modules' results as they return them: the first look
(``gpu_assert_free``), the release (``gpu_reclaim``) and the proof. The role's
templates only format what these return. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

# Every kind of holder record the release returns: what a stopped unit left behind may be in any of them.
RELEASE_LISTS = ('released', 'survivors', 'protected', 'skipped_holders')


def _brief(holder):
    return {'pid': holder['pid'], 'title': holder.get('title')}


def left_behind(release, stopped_units=(), stopped_containers=()):
    """What each stopped unit or container left holding a GPU, as the release found it right after the stop.

    Keys are the unit names and ``container <first 12 characters of the id>``;
    values list ``pid`` and ``title`` of each process found.
    """
    found = [holder for key in RELEASE_LISTS for holder in (release or {}).get(key) or []]
    left = {}
    for unit in stopped_units:
        left[unit] = [_brief(holder) for holder in found if holder.get('systemd_unit') == unit]
    for container_id in stopped_containers:
        left['container ' + container_id[:12]] = [
            _brief(holder) for holder in found if ((holder.get('container') or {}).get('id')) == container_id]
    return left


CONTAINER_KEYS = ('runtime', 'id', 'name', 'image', 'confirmed', 'restart_policy', 'systemd_unit', 'reason')


def containers_seen(first_holders=(), release=None):
    """Each container that a holder or a source named, once, as its runtime confirmed it (or why not)."""
    release = release or {}
    found = {}
    records = list(first_holders or []) + list(release.get('released') or []) + list(release.get('survivors') or [])
    records += list(release.get('sources') or [])
    for record in records:
        container = record.get('container') or {}
        if not container.get('id') or container.get('pod_uid'):
            continue
        key = (container.get('runtime'), container.get('id'))
        entry = found.setdefault(key, dict((name, container.get(name)) for name in CONTAINER_KEYS))
        if container.get('confirmed') and not entry.get('confirmed'):
            entry.update((name, container.get(name)) for name in CONTAINER_KEYS)
    return [found[key] for key in sorted(found, key=lambda item: (item[0] or '', item[1] or ''))]


def protected_holders(release, first_holders=()):
    """Holders left alone because they are protected, the modules' own processes aside.

    The release's list when it ran, else the first look's protected holders.
    """
    if release and 'protected' in release:
        holders = release['protected'] or []
    else:
        holders = [holder for holder in first_holders or [] if holder.get('protected')]
    return [holder for holder in holders if holder.get('is_self') is not True]


def executable_name(holder):
    """A protected holder's executable, as the summary names it.

    From ``exe`` when known, else the command line's first word (``name`` is
    cut at 15 characters by the kernel, so it comes last).
    """
    words = (holder.get('title') or '').split() or [holder.get('name') or '']
    return posixpath.basename(holder.get('exe') or words[0] or holder.get('name') or '')


# Interpreters whose title names the program they run in a later word.
INTERPRETERS = ('python', 'perl', 'ruby', 'node', 'bash', 'sh', 'java', 'torchrun', 'uv', 'conda')


def short_title(holder):
    """A holder's title as the summary names it: the program, not the interpreter's path.

    ``/opt/torch/.venv/bin/python3 -u /srv/train.py --lr 3`` is ``train.py``;
    a retitled worker (``VLLM::Worker_TP0``) keeps its title.
    """
    words = (holder.get('title') or '').split() or [holder.get('name') or '?']
    first = posixpath.basename(words[0])
    if first.rstrip('0123456789.').lower() in INTERPRETERS:
        for word in words[1:]:
            if not word.startswith('-'):
                return posixpath.basename(word)
    return first


# Why a holder is still on a GPU after the run, one word each (the metrics' label values).
LEFT_UNKILLABLE = 'unkillable'
LEFT_SURVIVED = 'survived'
LEFT_SKIPPED = 'skipped'
LEFT_PROTECTED = 'protected'
LEFT_KEPT = 'kept'
LEFT_CAME_BACK = 'came_back'
LEFT_NOT_RELEASED = 'not_released'
LEFT_REASONS = (LEFT_UNKILLABLE, LEFT_SURVIVED, LEFT_SKIPPED, LEFT_PROTECTED, LEFT_KEPT, LEFT_CAME_BACK,
                LEFT_NOT_RELEASED)


def holder_left(pid, release, kept_pids):
    """Why a holder the proof found is still there: (one of LEFT_REASONS, a few words)."""
    for holder in release.get('survivors') or []:
        if holder.get('pid') == pid:
            if holder.get('state') == 'disk-sleep':
                return LEFT_UNKILLABLE, 'unkillable (state D%s): reset or reboot' % (
                    ', ' + holder['wchan'] if holder.get('wchan') else '')
            return LEFT_SURVIVED, 'survived %s' % (holder.get('last_signal') or 'the release')
    for holder in release.get('skipped_holders') or []:
        if holder.get('pid') == pid:
            return LEFT_SKIPPED, holder.get('reason') or 'left alone'
    for holder in release.get('protected') or []:
        if holder.get('pid') == pid:
            return LEFT_PROTECTED, 'protected'
    if pid in kept_pids:
        return LEFT_KEPT, 'kept running'
    if release:
        return LEFT_CAME_BACK, 'came back after the release'
    return LEFT_NOT_RELEASED, 'not released'


def left_on_gpu(verdict_gpu, holders, release=None, kept_pids=()):
    """What stayed on one GPU after the run, and why: one short line per holder, or the memory without one."""
    if not verdict_gpu or verdict_gpu.get('free', True):
        return []
    by_pid = dict((holder.get('pid'), holder) for holder in holders or [])
    lines = []
    for pid in verdict_gpu.get('holder_pids') or []:
        holder = by_pid.get(pid) or {'pid': pid}
        lines.append('%s (%s): %s' % (short_title(holder), pid, holder_left(pid, release or {}, kept_pids)[1]))
    if not lines:
        lines.append('%s MiB with no holder: reset (gpu_reclaim_allow_reset) or reboot'
                     % verdict_gpu.get('memory_used_mib'))
    return lines


def left_reasons_on_gpu(verdict_gpu, release=None, kept_pids=()):
    """Why each holder stayed on one busy GPU, one of LEFT_REASONS per holder; empty for a free GPU."""
    if not verdict_gpu or verdict_gpu.get('free', True):
        return []
    return [holder_left(pid, release or {}, kept_pids)[0] for pid in verdict_gpu.get('holder_pids') or []]


def stuck_on_gpu(verdict_gpu):
    """A GPU the proof found busy with no holder: a context only a reset or a reboot frees."""
    return bool(verdict_gpu) and not verdict_gpu.get('free', True) and not verdict_gpu.get('holder_pids')


def _holds_memory_on(holder, index):
    # A CUDA process opens every visible GPU's device node: count it on the GPUs where it holds memory.
    memory = holder.get('gpu_memory_mib') or {}
    if memory:
        return (memory.get(str(index)) or 0) > 0
    return index in (holder.get('gpus') or ())


def gpu_rows(first_gpus, proof_gpus=(), released=(), protected=(), proof_holders=(), release=None, kept_pids=()):
    """One row per GPU of the first look: memory before and after, and who held it.

    ``memory_used_mib_after`` is the proof's reading, or None without a proof;
    ``released`` lists the pids released from that GPU and ``released_names``
    their short titles; ``protected`` the executables of the protected holders
    on it; ``left`` what stayed on it after the proof, and why; ``left_reasons``
    the same as one of LEFT_REASONS per holder; ``stuck`` whether it stayed busy
    with no holder.
    """
    after = dict((str(gpu['index']), gpu.get('memory_used_mib')) for gpu in proof_gpus or [])
    verdicts = dict((str(gpu['index']), gpu) for gpu in proof_gpus or [])
    rows = []
    for gpu in first_gpus or []:
        names = []
        for holder in protected or []:
            name = executable_name(holder) if gpu['index'] in (holder.get('gpus') or ()) else ''
            if name and name not in names:
                names.append(name)
        rows.append({
            'index': gpu['index'],
            'uuid': gpu.get('uuid'),
            'memory_total_mib': gpu.get('memory_total_mib'),
            'memory_used_mib_before': gpu.get('memory_used_mib'),
            'memory_used_mib_after': after.get(str(gpu['index'])),
            'released': [holder['pid'] for holder in released or [] if _holds_memory_on(holder, gpu['index'])],
            'released_names': ['%s (%s)' % (short_title(holder), holder['pid'])
                               for holder in released or [] if _holds_memory_on(holder, gpu['index'])],
            'protected': names,
            'left': left_on_gpu(verdicts.get(str(gpu['index'])), proof_holders, release, kept_pids),
            'left_reasons': left_reasons_on_gpu(verdicts.get(str(gpu['index'])), release, kept_pids),
            'stuck': stuck_on_gpu(verdicts.get(str(gpu['index']))),
        })
    return rows


def command_seconds(results):
    """Seconds the given command results took, from each one's ``delta`` (``H:MM:SS.ffffff``)."""
    total = 0.0
    for result in results or []:
        delta = (result or {}).get('delta') or ''
        try:
            hours, minutes, seconds = delta.split(':')
            total += int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        except ValueError:
            continue
    return round(total, 2)


def stage_seconds(run):
    """Seconds per stage, as the stages' own tasks measured them (the modules' and the commands' own times)."""
    first = run.get('first_look') or {}
    release = run.get('release') or {}
    proof = run.get('proof') or {}
    stages = {}
    if first.get('waited_seconds') is not None:
        stages['preflight'] = round(float(first['waited_seconds']), 2)
    # Only the commands that ran: a stage with nothing to do left a skipped result, or none.
    stopped = [result for result in run.get('stop_results') or [] if (result or {}).get('delta')]
    if stopped:
        stages['stop_units'] = command_seconds(stopped)
    if release.get('elapsed_seconds') is not None:
        stages['release'] = round(float(release['elapsed_seconds']), 2)
    if proof.get('waited_seconds') is not None:
        stages['prove'] = round(float(proof['waited_seconds']) + float(proof.get('settle_seconds_observed') or 0), 2)
    return stages


def _seconds_since(start, now):
    return round(float(now) - float(start), 2)


def host_summary(run):
    """The role's per-host summary of one run, from what its stages registered.

    ``run`` holds ``host``, ``check_mode``, ``max_used_mib``, ``first_look`` (the
    first gpu_assert_free result), ``free_at_start``, ``release`` (gpu_reclaim's
    result, empty when it did not run), ``proof`` (the last gpu_assert_free
    result, empty when it did not run), ``stopped_units``,
    ``stopped_containers``, ``reset_gpus``, ``reset_errors``, ``error``,
    ``kept`` (the keep_units decision), ``stages`` (seconds per stage),
    ``start`` and ``now`` (Unix times).

    When units were kept running and nothing was proven since, ``free`` is
    None: the GPUs are the kept units', as the deploy wants them.
    """
    first = run.get('first_look') or {}
    release = run.get('release') or {}
    proof = run.get('proof') or {}
    kept = run.get('kept') or {}
    kept_units = list(kept.get('kept') or [])
    if proof:
        verdict = proof
    elif run.get('free_at_start') and not kept_units:
        verdict = first
    else:
        verdict = {}
    protected = protected_holders(release, first.get('holders') or [])
    stopped_units = list(run.get('stopped_units') or [])
    stopped_containers = list(run.get('stopped_containers') or [])
    stages = dict(run.get('stages') or stage_seconds(run))
    return {
        'host': run['host'],
        'check_mode': bool(run.get('check_mode')),
        'max_used_mib': int(run.get('max_used_mib') or 0),
        'nvml_available': first.get('nvml_available', False),
        'gpus': gpu_rows(first.get('gpus') or [], verdict.get('gpus') or [], release.get('released') or [], protected,
                         verdict.get('holders') or [], release, kept.get('pids') or []),
        # The protected daemons, named once per host.
        'protected_names': sorted(set(executable_name(holder) for holder in protected) - set([''])),
        'released': release.get('released', []),
        'protected': protected,
        'survivors': release.get('survivors', []),
        'supervisors': release.get('supervisors', []),
        'sources': release.get('sources', []),
        # Every container a holder ran in: id, name, image and runtime as the runtime confirmed them.
        'containers': containers_seen(first.get('holders') or [], release),
        'settle_seconds': proof.get('settle_seconds_observed'),
        # Scope filters that name nothing on the host (a typo releases nothing and says so here).
        'filter_warnings': release.get('filter_warnings', []),
        # Stop-stage names that match no loaded unit (with the nearest one), or only protected units.
        'unit_warnings': list(run.get('unit_warnings') or []),
        'stopped_units': stopped_units,
        'stopped_containers': stopped_containers,
        'left_behind': left_behind(release, stopped_units, stopped_containers),
        'kept_units': kept_units,
        'kept_pids': list(kept.get('pids') or []),
        # Why a unit of gpu_reclaim_keep_units was not kept (not running, not alone on the GPUs).
        'keep_why_not': list(kept.get('why_not') or []),
        'reset_gpus': list(run.get('reset_gpus') or []),
        # What the reset stage could not do or undo (the reset itself, persistence mode, a client's restart).
        'reset_errors': list(run.get('reset_errors') or []),
        'free': verdict.get('free'),
        # Why the run failed, when it did (a failed proof, reset or stop).
        'error': run.get('error') or '',
        'stage_seconds': stages or {'preflight': _seconds_since(run['start'], run['now'])},
        'total_seconds': _seconds_since(run['start'], run['now']),
        # The modules' own results, as they returned them: the JSON report keeps them whole.
        'results': {'first_look': first, 'release': release, 'proof': proof},
    }
