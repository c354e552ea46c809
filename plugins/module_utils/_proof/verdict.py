# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Deciding whether GPUs are free, and saying why not.

A GPU is free when both hold:

- its used memory (NVML v2 struct, reserved memory excluded) is at most the
  limit: ``max_used_percent`` of its total memory when that is given,
  otherwise ``max_used_mib``;
- no holder of kind ``compute`` and no process in an NVML graphics list
  holds it, apart from the holders named in ``allow``.

Monitoring clients (kind ``client``: they hold a device node but no memory)
never make a GPU busy.

``evaluate`` decides from one snapshot; ``wait_until_free`` repeats a probe
until the GPUs are free or the timeout has passed. Both are pure apart from
the injected probe, clock and sleep.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from .._base.advice import AFTER_RELEASE_STEP, INCLUDE_HINTS, NAMESPACE_STEP, POD_STEP, PROTECTED_STEP, RECLAIM_STEP
from .._base.advice import RESET_STEP
from .._discover.keepers import describe as describe_keeping
from .._base.checks import DEFAULT_POLL_INTERVAL, MAX_WAIT_SECONDS, check_poll_interval, check_seconds
from .._host.procfs import STATE_NAMES
from .._discover.visibility import NOT_VISIBLE

DEFAULT_MAX_USED_MIB = 64

# psutil's state names back to /proc's letters (the first letter of a name wins: X for dead).
_STATE_LETTERS = dict((name, letter) for letter, name in reversed(list(STATE_NAMES.items())))


class ProofError(ValueError):
    """Bad input: the message names the option and the value received."""


def check_limits(max_used_mib=None, max_used_percent=None, timeout_seconds=0, poll_interval=DEFAULT_POLL_INTERVAL):
    """Validate the options; raise ``ProofError`` naming the option and value."""
    if max_used_mib is not None and (isinstance(max_used_mib, bool) or max_used_mib < 0):
        raise ProofError('max_used_mib: must be 0 or more; got: %r' % (max_used_mib,))
    if max_used_percent is not None and not (0 <= max_used_percent <= 100):
        raise ProofError('max_used_percent: must be from 0 to 100; got: %r' % (max_used_percent,))
    check_seconds('timeout_seconds', timeout_seconds, maximum=MAX_WAIT_SECONDS, error=ProofError)
    check_poll_interval(poll_interval, error=ProofError)


def state_letter(state):
    return _STATE_LETTERS.get(state or '', state or '?')


def is_allowed(record, allow):
    """Whether ``record`` is named in ``allow`` (executable names or PIDs)."""
    names = set()
    for text in (record.get('name'), record.get('exe')):
        if text:
            names.add(os.path.basename(text))
    title = record.get('title') or ''
    if title:
        names.add(os.path.basename(title.split()[0]))
    for entry in allow or ():
        entry = str(entry).strip()
        if entry.isdigit() and int(entry) == record.get('pid'):
            return True
        if entry in names:
            return True
    return False


def _blocks(record):
    # A keeper of a context whose creator is gone blocks its GPU, an unprotected NVML client among them too.
    return (record.get('kind') == 'compute' or 'graphics' in (record.get('nvml_types') or [])
            or bool(record.get('keeps') and not record.get('protected')))


def check_left_alone(entries):
    """``{pid: reason}`` from ``left_alone`` (None when not given); raise ``ProofError`` naming a bad item."""
    if entries is None:
        return None
    found = {}
    for position, entry in enumerate(entries or []):
        pid = entry.get('pid') if isinstance(entry, dict) else None
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise ProofError('left_alone[%d]: must be a dict with a positive integer pid; got: %r' % (position, entry))
        found[pid] = str(entry.get('reason') or 'left alone')
    return found


def include_hint(reason):
    """The option that would include a holder left alone for ``reason``, or None."""
    for start, hint in INCLUDE_HINTS:
        if reason.startswith(start) or (start == 'default protected' and start in reason):
            return hint
    return None


def left_on_purpose(record, left_alone=None):
    """Why no release will take ``record`` away, or None: protected, not visible here, in a pod, or
    left alone by the release that just ran (``left_alone``: ``{pid: reason}``)."""
    if left_alone and record.get('pid') in left_alone:
        return 'left alone by the release: %s' % left_alone[record['pid']]
    if record.get('protected'):
        return 'protected (%s)' % (record.get('protected_reason') or 'protected')
    if record.get('visible') is False:
        return NOT_VISIBLE
    pod = (record.get('container') or {}).get('pod_uid')
    if pod:
        return 'managed by Kubernetes pod %s' % pod
    return None


def limit_mib(gpu, max_used_mib=None, max_used_percent=None):
    """The most memory a free GPU may show, in MiB."""
    if max_used_percent is not None and gpu.get('memory_total_mib'):
        return gpu['memory_total_mib'] * max_used_percent / 100.0
    return DEFAULT_MAX_USED_MIB if max_used_mib is None else max_used_mib


def describe_holder(record, left_alone=None):
    """``pid 233730 VLLM::Worker_TP5 (orphaned, parent 1, state S)``."""
    if record.get('visible') is False:
        # The process here with that PID is not the holder: do not name it.
        return 'pid %s %s' % (record.get('pid'), NOT_VISIBLE)
    details = []
    if record.get('orphaned'):
        details.append('orphaned')
    details.append('parent %s' % record.get('ppid'))
    details.append('state %s' % state_letter(record.get('state')))
    if record.get('state') == 'disk-sleep' and record.get('wchan'):
        details.append('wchan %s' % record['wchan'])
    if record.get('leader_exited'):
        details.append('main thread exited, another thread lives')
    keeping = describe_keeping(record)
    if keeping:
        details.append(keeping)
    why = left_on_purpose(record, left_alone)
    if why:
        details.append(why)
    return 'pid %s %s (%s)' % (record.get('pid'), record.get('title') or record.get('name'), ', '.join(details))


def short_uuid(uuid):
    if not uuid:
        return None
    return uuid if len(uuid) <= 8 else uuid[:8] + '\u2026'


def evaluate(gpus, holders, selected=None, max_used_mib=None, max_used_percent=None, allow=(),
             nvml_available=True, left_alone=None, released_gpus=None):
    """Decide, from one snapshot, whether the selected GPUs are free.

    ``gpus`` and ``holders`` are records as in docs/architecture.md;
    ``selected`` GPU indices (None: all). Returns a dict with ``free``,
    ``gpus`` (per GPU: ``index``, ``uuid``, ``memory_used_mib``,
    ``memory_total_mib``, ``limit_mib``, ``free``, ``holder_pids``,
    ``allowed_pids``, ``reasons``), ``holders`` (those that keep a selected
    GPU busy), ``allowed`` (holders accepted through ``allow``) and
    ``lines`` (one text line per busy GPU, then the next steps).
    ``left_alone`` (``{pid: reason}``) names what a release just left alone
    on purpose: the next steps then say why and what would include each,
    and never send the operator back to that release. ``released_gpus``
    (after a release: the GPUs it released holders of) tells where memory
    may still be on its way back; elsewhere memory no holder explains will
    not come back by waiting.
    """
    chosen = [gpu for gpu in gpus if selected is None or gpu['index'] in set(selected)]
    chosen.sort(key=lambda gpu: gpu['index'])
    busy_holders, allowed, lines = [], [], []
    busy_pids, allowed_pids = set(), set()
    reclaim_needed = False
    namespace_step = False
    reset_gpus = []
    result_gpus = []
    for gpu in chosen:
        index = gpu['index']
        on_gpu = [h for h in holders if index in (h.get('gpus') or []) and _blocks(h)]
        blocking = [h for h in on_gpu if not is_allowed(h, allow)]
        accepted = [h for h in on_gpu if is_allowed(h, allow)]
        used = gpu.get('memory_used_mib')
        limit = limit_mib(gpu, max_used_mib, max_used_percent)
        accepted_mib = sum(int((h.get('gpu_memory_mib') or {}).get(str(index)) or 0) for h in accepted)
        reasons = []
        if blocking:
            reasons.append('held by %d process%s' % (len(blocking), '' if len(blocking) == 1 else 'es'))
        memory_busy = used is not None and used - accepted_mib > limit
        if used is None and nvml_available:
            # NVML was relied on but gave no figure (it stopped answering): nothing is proven.
            reasons.append('memory unknown: NVML did not answer')
        if memory_busy:
            reasons.append('%d MiB used, more than %g MiB' % (used, limit))
        free = not reasons
        result_gpus.append({
            'index': index,
            'uuid': gpu.get('uuid'),
            'memory_used_mib': used,
            'memory_total_mib': gpu.get('memory_total_mib'),
            'limit_mib': limit,
            'free': free,
            'holder_pids': sorted(h['pid'] for h in blocking),
            'allowed_pids': sorted(h['pid'] for h in accepted),
            'reasons': reasons,
        })
        for h in blocking:
            if h['pid'] not in busy_pids:
                busy_pids.add(h['pid'])
                busy_holders.append(h)
        for h in accepted:
            if h['pid'] not in allowed_pids:
                allowed_pids.add(h['pid'])
                allowed.append(h)
        if free:
            continue
        uuid = short_uuid(gpu.get('uuid'))
        memory = '%s MiB used' % (used if used is not None else 'unknown')
        held = ', '.join(describe_holder(h, left_alone) for h in blocking) if blocking else (
            'none (stuck context)' if memory_busy else 'none')
        lines.append('GPU %d%s busy: %s; holders: %s' % (index, ' (%s)' % uuid if uuid else '', memory, held))
        stuck = [h for h in blocking if h.get('state') == 'disk-sleep']
        # No reset while a process that may keep the context holds the GPU's node.
        node_held = [h for h in holders if index in (h.get('node_gpus') or h.get('gpus') or [])
                     and not h.get('is_self') and not h.get('protected')]
        if (not blocking and not node_held) or stuck:
            reset_gpus.append(index)
        if any(h.get('state') != 'disk-sleep' and left_on_purpose(h, left_alone) is None for h in blocking):
            reclaim_needed = True
        if any(h.get('visible') is False for h in blocking):
            namespace_step = True

    if lines:
        pods = sorted(set((h.get('container') or {}).get('pod_uid') for h in busy_holders) - set([None]))
        for pod in pods:
            lines.append(POD_STEP % (pod, ', '.join(
                str(h['pid']) for h in busy_holders if (h.get('container') or {}).get('pod_uid') == pod)))
        if reclaim_needed and left_alone is None:
            lines.append('Next step: %s.' % RECLAIM_STEP)
        elif reclaim_needed:
            lines.append('Next step for pid %s: %s.' % (', '.join(
                str(h['pid']) for h in busy_holders if h.get('state') != 'disk-sleep'
                and left_on_purpose(h, left_alone) is None), AFTER_RELEASE_STEP))
        for h in busy_holders:
            if left_alone and h['pid'] in left_alone:
                hint = include_hint(left_alone[h['pid']])
                lines.append('Next step for pid %s: the release left it alone (%s)%s.' % (
                    h['pid'], left_alone[h['pid']], '; it is included by %s' % hint if hint else ''))
        if namespace_step:
            lines.append('Next step: %s.' % NAMESPACE_STEP)
        protected = [h for h in busy_holders if h.get('protected') and not h.get('is_self')
                     and not (left_alone and h['pid'] in left_alone)]
        if protected:
            lines.append(PROTECTED_STEP % ', '.join(str(h['pid']) for h in protected))
        for index in reset_gpus:
            entry = [r for r in result_gpus if r['index'] == index][0]
            why = ('a holder in state D cannot be killed' if entry['holder_pids']
                   else 'memory is held with no holder (stuck context)')
            lines.append('Next step for GPU %d: %s, so %s.' % (index, why, RESET_STEP % index))
    busy = [g for g in result_gpus if not g['free']]

    def settled(entry):
        if entry['holder_pids']:
            return all(left_on_purpose(h, left_alone) for h in busy_holders if h['pid'] in entry['holder_pids'])
        # Memory with no holder: in flight only on a GPU the release has just released holders of.
        return released_gpus is not None and entry['index'] not in released_gpus
    return {
        'free': not busy,
        # Every busy GPU is held only by what no release takes away, or by memory nothing is freeing:
        # waiting longer changes nothing (``wait_until_free`` still checks that the memory stopped dropping).
        'nothing_in_flight': bool(busy) and all(settled(g) for g in busy),
        'gpus': result_gpus,
        'holders': busy_holders,
        'allowed': allowed,
        'lines': lines,
    }


def verdict_message(verdict):
    """The one text for a verdict: one line per busy GPU and the next steps, or which GPUs are free."""
    if not verdict['free']:
        return '\n'.join(verdict['lines'])
    waited = verdict.get('waited_seconds')
    return '%d GPU%s free (%s)%s' % (
        len(verdict['gpus']), '' if len(verdict['gpus']) == 1 else 's',
        ', '.join(str(g['index']) for g in verdict['gpus']) or 'none',
        ' after %.2f s' % waited if waited else '')


# Polls in a row that find the GPUs held only by what no release takes away (or memory nothing is
# freeing, no longer dropping), before the proof gives up.
FAIL_FAST_POLLS = 3
# ... and the seconds those polls must span, so that a fast poll interval judges no less.
FAIL_FAST_SECONDS = 1.0


def wait_until_free(probe, timeout_seconds=0, poll_interval=DEFAULT_POLL_INTERVAL, clock=time.monotonic,
                    sleep=time.sleep, **criteria):
    """Call ``probe()`` until ``evaluate`` says free or ``timeout_seconds`` passed.

    ``probe()`` returns ``(gpus, holders, nvml_available)``. ``criteria`` go
    to ``evaluate``. Returns the last evaluation with ``waited_seconds`` and
    ``polls`` added. With ``timeout_seconds`` 0 the probe runs once.
    """
    start = clock()
    polls = 0
    settled, settled_since = 0, None
    last_used = {}
    while True:
        # A GPU found free at the first look was waited on for 0 s.
        looked_at = clock() - start
        gpus, holders, nvml_available = probe()
        polls += 1
        verdict = evaluate(gpus, holders, nvml_available=nvml_available, **criteria)
        if verdict['free']:
            waited = looked_at
            break
        waited = clock() - start
        used = dict((g['index'], g['memory_used_mib'] or 0) for g in verdict['gpus'])
        dropping = any(index in last_used and mib < last_used[index] for index, mib in used.items())
        last_used = used
        if verdict['nothing_in_flight'] and not dropping:
            settled += 1
            settled_since = waited if settled_since is None else settled_since
        else:
            settled, settled_since = 0, None
        if waited >= timeout_seconds or (settled >= FAIL_FAST_POLLS and waited - settled_since >= FAIL_FAST_SECONDS):
            break
        sleep(max(0.0, min(poll_interval, timeout_seconds - waited)))
    verdict['waited_seconds'] = round(waited, 3)
    verdict['polls'] = polls
    return verdict
