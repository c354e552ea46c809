# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Unit names and globs, expanded from one ``systemctl list-units`` (or ``list-unit-files``) call.

The role asks systemctl once for every pattern, then sorts the answer here:
which units each pattern matched, which patterns matched nothing, and which
matched units are protected GPU services. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import fnmatch

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.protection import is_protected_unit
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.unit_audit import parse_list_units


def pattern_matches(pattern, unit):
    """Whether ``unit`` is one of the units that systemctl lists for ``pattern``.

    systemctl matches each pattern with fnmatch(3) against the unit's full
    name, so a plain name without its type (``vllm`` for ``vllm.service``)
    matches nothing. fnmatch(3) also reads ``[^...]`` as ``[!...]``.
    """
    return fnmatch.fnmatchcase(unit, pattern.replace('[^', '[!'))


# ACTIVE states of a unit that `systemctl stop` has something to stop in.
RUNNING_STATES = ('active', 'activating', 'deactivating', 'reloading', 'refreshing')


def _active_states(listing):
    states = {}
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] not in states:
            states[fields[0]] = fields[2]
    return states


def nearest_unit(pattern, units):
    """The listed unit a pattern that matched nothing most likely meant, or None.

    A name without its type (``llama``) means ``llama.service`` when that is
    listed, as systemctl itself reads a plain name; otherwise the closest name.
    """
    for suffix in ('.service', '.scope', '.target'):
        if pattern + suffix in units:
            return pattern + suffix
    close = difflib.get_close_matches(pattern, list(units), n=1, cutoff=0.8)
    return close[0] if close else None


def unmatched_warnings(expanded, host):
    """One warning line per pattern that matched no loaded unit, naming the nearest loaded one."""
    lines = []
    for pattern, nearest in expanded.get('nearest', {}).items():
        line = 'gpu_reclaim_stop_units: no loaded unit on %s matches %r; nothing is stopped for it.' % (host, pattern)
        if nearest:
            line += ' Did you mean %r?' % nearest
        lines.append(line)
    if expanded.get('protected'):
        lines.append('gpu_reclaim_stop_units: %s on %s are protected GPU services; they are not stopped.'
                     % (', '.join(expanded['protected']), host))
    return lines


def expand_units(listing, patterns, protect_units=(), unprotect=()):
    """Sort the units of one ``systemctl list-units --plain --no-legend`` listing by ``patterns``.

    Returns ``units`` (every listed unit some pattern names, in listing order),
    ``protected`` (those of them that are protected GPU services, which the
    role never stops), ``unprotected`` (the others), ``running`` (those of the
    unprotected whose ACTIVE column says there is something to stop),
    ``unmatched`` (the patterns that name no listed unit, in the order given)
    and ``nearest`` ({unmatched pattern: the nearest listed unit, or None}).
    """
    listed = parse_list_units(listing)
    states = _active_states(listing)
    units = [unit for unit in listed if any(pattern_matches(pattern, unit) for pattern in patterns)]
    protected = [unit for unit in units if is_protected_unit(unit, protect_units, unprotect)]
    unmatched = [pattern for pattern in patterns if not any(pattern_matches(pattern, unit) for unit in listed)]
    return {
        'units': units,
        'protected': protected,
        'unprotected': [unit for unit in units if unit not in protected],
        'running': [unit for unit in units if unit not in protected and states.get(unit) in RUNNING_STATES],
        'unmatched': unmatched,
        'nearest': dict((pattern, nearest_unit(pattern, listed)) for pattern in unmatched),
    }
