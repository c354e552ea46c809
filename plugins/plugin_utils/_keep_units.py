# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which units a deploy keeps running: its own server, while it is healthy and alone on the selected GPUs.

A deploy that includes the role before it starts its server lists that server in
``gpu_reclaim_keep_units``. On a later run the server is already up; stopping it
would restart a healthy model on every run. It is kept when all of these hold:

- systemd says it is ``active`` and ``running``, with a main process;
- it holds at least one of the selected GPUs;
- none of its GPU holders is an orphan (parent 1 or a subreaper) other than its
  main process: an orphan in the unit's cgroup is what an earlier run of the unit
  left behind (``KillMode=process``), not the running server;
- every busy selected GPU is held only by processes of kept units: anything else
  on them (orphans of another unit, a stray job, memory with no holder) means the
  GPUs are not the server's alone, and the run frees them as if nothing were kept.

Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.unit_audit import parse_show


def _holder_name(holder):
    return 'pid %s (%s)' % (holder.get('pid'), holder.get('title') or holder.get('name') or '?')


def _unit_states(show_text):
    states = {}
    for unit in parse_show(show_text or ''):
        if unit.get('Id'):
            states[unit['Id']] = unit
    return states


def _unit_verdict(unit, state, holders):
    """Why ``unit`` cannot be kept on its own, or '' when it can."""
    if state is None:
        return '%s is not loaded' % unit
    active, sub = state.get('ActiveState', ''), state.get('SubState', '')
    try:
        main_pid = int(state.get('MainPID') or 0)
    except ValueError:
        main_pid = 0
    if (active, sub) != ('active', 'running') or main_pid <= 0:
        return '%s is %s (%s), not running' % (unit, active or 'unknown', sub or 'unknown')
    own = [holder for holder in holders if holder.get('systemd_unit') == unit]
    if not own:
        return '%s holds none of the selected GPUs' % unit
    left = [holder for holder in own if holder.get('orphaned') and holder.get('pid') != main_pid]
    if left:
        return '%s has orphaned GPU holders, left by an earlier run of it: %s' % (
            unit, ', '.join(_holder_name(holder) for holder in left))
    return ''


def keep_units(first_look, show_text, units):
    """Decide which of ``units`` to keep running, from the first look and ``systemctl show`` of them.

    ``first_look`` is gpu_assert_free's result (``gpus`` with ``free`` and
    ``holder_pids``; ``holders`` with ``pid``, ``systemd_unit``, ``orphaned``);
    ``show_text`` is ``systemctl show --property=Id,ActiveState,SubState,MainPID``
    of ``units``. Returns ``kept`` (the units to leave alone, in the order given;
    empty unless every busy selected GPU is theirs alone), ``pids`` (their GPU
    holders) and ``why_not`` (one line per reason a unit is not kept).
    """
    first_look = first_look or {}
    holders = list(first_look.get('holders') or [])
    states = _unit_states(show_text)
    why_not = []
    candidates = []
    for unit in units or []:
        reason = _unit_verdict(unit, states.get(unit), holders)
        if reason:
            why_not.append(reason)
        elif unit not in candidates:
            candidates.append(unit)
    if not candidates:
        return {'kept': [], 'pids': [], 'why_not': why_not}
    if not first_look.get('nvml_available'):
        why_not.append('NVML is not available, so the GPUs cannot be shown to be held by %s alone'
                       % ', '.join(candidates))
        return {'kept': [], 'pids': [], 'why_not': why_not}
    pids = sorted(holder['pid'] for holder in holders if holder.get('systemd_unit') in candidates)
    by_pid = dict((holder.get('pid'), holder) for holder in holders)
    others = []
    for gpu in first_look.get('gpus') or []:
        if gpu.get('free'):
            continue
        holder_pids = gpu.get('holder_pids') or []
        if not holder_pids:
            others.append('GPU %s: %s MiB used with no holder' % (gpu.get('index'), gpu.get('memory_used_mib')))
        for pid in holder_pids:
            if pid not in pids:
                others.append('GPU %s: held by %s, outside %s' % (
                    gpu.get('index'), _holder_name(by_pid.get(pid) or {'pid': pid}), ', '.join(candidates)))
    if others:
        why_not.extend(others)
        return {'kept': [], 'pids': [], 'why_not': why_not}
    return {'kept': candidates, 'pids': pids, 'why_not': why_not}
