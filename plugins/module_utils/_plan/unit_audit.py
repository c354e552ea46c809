# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Serving units audited for what their stop leaves behind.

Orphaned GPU workers come from units whose stop does not reach every process
they started: ``KillMode=process`` (or ``none``) signals the main process only,
``SendSIGKILL=no`` spares what ignores SIGTERM, and a worker moved into another
control group (a scope, a container) is outside the unit's reach whatever its
settings. This module reads ``systemctl show`` output and the holder records
of ``_discover.holders`` and says, per unit, whether its stop frees the GPUs.

Pure functions: the caller runs ``systemctl`` and reads ``/proc``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import os
import re

from .._host.proctree import children_from_map, descendant_pids

SHOW_PROPERTIES = ('Id', 'LoadState', 'ActiveState', 'KillMode', 'TimeoutStopUSec', 'SendSIGKILL',
                   'ControlGroup', 'MainPID', 'DropInPaths')

# The drop-in the role's harden stage writes (roles/gpu_reclaim/tasks/harden.yml).
HARDENING_DROP_IN = '50-gpuops-reclaim.conf'

ORPHANING_KILL_MODES = ('process', 'none')

_SPAN_UNITS = (
    ('us', 1e-6), ('usec', 1e-6), ('ms', 1e-3), ('msec', 1e-3),
    ('s', 1.0), ('sec', 1.0), ('second', 1.0), ('seconds', 1.0),
    ('m', 60.0), ('min', 60.0), ('minute', 60.0), ('minutes', 60.0),
    ('h', 3600.0), ('hr', 3600.0), ('hour', 3600.0), ('hours', 3600.0),
    ('d', 86400.0), ('day', 86400.0), ('days', 86400.0),
    ('w', 604800.0), ('week', 604800.0), ('weeks', 604800.0),
)
_SPAN_FACTORS = dict(_SPAN_UNITS)
_SPAN_PART = re.compile(r'(\d+(?:\.\d+)?)\s*([a-z]*)')


def is_glob(pattern):
    """Whether a unit pattern needs expanding."""
    return any(char in pattern for char in '*?[')


def parse_list_units(text):
    """Unit names from ``systemctl list-units --plain --no-legend`` output."""
    names = []
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] not in names:
            names.append(fields[0])
    return names


def parse_show(text):
    """``systemctl show`` output for several units: one dict per unit, in order.

    Units are separated by an empty line; each line is ``Key=Value``.
    """
    units = []
    current = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                units.append(current)
                current = {}
            continue
        key, sep, value = line.partition('=')
        if sep:
            current[key] = value
    if current:
        units.append(current)
    return units


def parse_timespan(text):
    """Seconds from a systemd time span such as ``1min 30s`` or ``90s``.

    Returns None for ``infinity`` (a stop that may wait forever), and raises
    ValueError for text that is not a time span.
    """
    text = (text or '').strip().lower()
    if text in ('infinity', ''):
        return None
    total = 0.0
    position = 0
    for match in _SPAN_PART.finditer(text):
        if text[position:match.start()].strip():
            raise ValueError('not a time span: %r' % text)
        number, unit = match.groups()
        if unit not in _SPAN_FACTORS and unit != '':
            raise ValueError('unknown time unit %r in %r' % (unit, text))
        # A bare number in systemctl show output is microseconds.
        total += float(number) * _SPAN_FACTORS.get(unit, 1e-6)
        position = match.end()
    if text[position:].strip():
        raise ValueError('not a time span: %r' % text)
    return round(total, 6)


def audit_unit(properties, holders, parent_of):
    """One unit's audit record.

    ``properties``: the unit's ``systemctl show`` dict; ``holders``: holder
    records (``_discover.holders``) of the host; ``parent_of``: {pid: ppid} of every
    process, to find GPU holders that the unit started but that live in
    another control group.
    """
    unit = properties.get('Id', '')
    kill_mode = properties.get('KillMode') or None
    send_sigkill = (properties.get('SendSIGKILL') or 'yes') == 'yes'
    try:
        timeout = parse_timespan(properties.get('TimeoutStopUSec'))
        timeout_valid = True
    except ValueError:
        timeout = None
        timeout_valid = False
    try:
        main_pid = int(properties.get('MainPID') or 0)
    except ValueError:
        main_pid = 0
    active_state = properties.get('ActiveState') or None

    inside = [holder for holder in holders if holder.get('systemd_unit') == unit]
    started = set(descendant_pids(main_pid, children_from_map(parent_of))) if main_pid > 0 else set()
    escaped = [holder for holder in holders
               if holder['pid'] in started and holder.get('systemd_unit') != unit]

    findings = []
    if kill_mode in ORPHANING_KILL_MODES:
        findings.append('KillMode=%s: a stop signals only the main process; the workers it started '
                        'outlive the stop and keep their GPUs' % kill_mode)
    if not send_sigkill:
        findings.append('SendSIGKILL=no: a process that ignores SIGTERM survives the stop')
    if timeout_valid and timeout is None:
        findings.append('TimeoutStopSec=infinity: a stop may wait forever')
    if escaped:
        findings.append('%d GPU holder(s) started by the unit live outside its control group (%s): '
                        'no stop reaches them' % (len(escaped), ', '.join(str(holder['pid']) for holder in escaped)))
    drop_ins = (properties.get('DropInPaths') or '').split()
    overriding = later_drop_ins(drop_ins)
    overridden = bool(overriding) and (kill_mode in ORPHANING_KILL_MODES or not send_sigkill)
    if overridden:
        effective = 'KillMode=%s, SendSIGKILL=%s' % (kill_mode, 'yes' if send_sigkill else 'no')
        findings.append('drop-in %s sorts after %s and overrides its hardening: the effective settings are %s'
                        % (', '.join(overriding), HARDENING_DROP_IN, effective))
    if inside and active_state in ('inactive', 'failed'):
        findings.append('%d process(es) of the stopped unit still hold GPUs (%s): orphans of an earlier stop' % (
            len(inside), ', '.join(str(holder['pid']) for holder in inside)))

    return {
        'unit': unit,
        'load_state': properties.get('LoadState') or None,
        'active_state': active_state,
        'kill_mode': kill_mode,
        'send_sigkill': send_sigkill,
        'timeout_stop_seconds': timeout,
        'control_group': properties.get('ControlGroup') or None,
        'main_pid': main_pid or None,
        'holder_pids': sorted(holder['pid'] for holder in inside),
        'escaped_holder_pids': sorted(holder['pid'] for holder in escaped),
        'holders_inside_control_group': not escaped,
        'leaves_orphans': bool(kill_mode in ORPHANING_KILL_MODES or escaped or not send_sigkill),
        'drop_ins': drop_ins,
        'hardening_overridden': overridden,
        'findings': findings,
    }


def later_drop_ins(drop_ins):
    """The drop-ins that systemd reads after the hardening drop-in (none when it is absent).

    systemd applies a unit's drop-ins in the order of their file names, whatever
    their folder, so a later one (``override.conf`` from ``systemctl edit``,
    ``90-local.conf``) wins over the hardening drop-in's settings.
    """
    ours = [path for path in drop_ins if os.path.basename(path) == HARDENING_DROP_IN]
    if not ours:
        return []
    return [path for path in drop_ins if os.path.basename(path) > HARDENING_DROP_IN]


def units_of_holders(holders, kinds=('compute',)):
    """The systemd units whose processes hold GPUs, in a stable order."""
    units = []
    for holder in holders:
        unit = holder.get('systemd_unit')
        if unit and unit.endswith('.service') and holder.get('kind') in kinds and unit not in units:
            units.append(unit)
    return units


def summarize(records):
    """One line for ``msg``."""
    flagged = [record for record in records if record['leaves_orphans']]
    if not records:
        return 'no serving unit to audit'
    if not flagged:
        return '%d unit(s) audited; a stop of each frees its GPUs' % len(records)
    reasons = ['%s (%s)' % (record['unit'], record['findings'][0].split(':')[0]) for record in flagged]
    return '%d unit(s) audited; %d leave(s) GPU holders behind on stop: %s' % (
        len(records), len(flagged), '; '.join(reasons))


def missing_units_message(missing, loaded):
    """``units: no unit matches vllm (did you mean vllm.service?)``, for names or globs that matched no unit."""
    parts = []
    for name in missing:
        nearest = difflib.get_close_matches(name, loaded, n=1, cutoff=0.5)
        if not nearest:
            nearest = [unit for unit in loaded if unit.startswith(name + '.')][:1]
        parts.append('%s%s' % (name, ' (did you mean %s?)' % nearest[0] if nearest else ''))
    return 'units: no unit matches %s' % ', '.join(parts)
