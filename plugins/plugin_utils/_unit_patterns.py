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

import fnmatch

from ansible_collections.gpuops.reclaim.plugins.module_utils._protection import is_protected_unit
from ansible_collections.gpuops.reclaim.plugins.module_utils._units import parse_list_units


def pattern_matches(pattern, unit):
    """Whether ``unit`` is one of the units that systemctl lists for ``pattern``.

    systemctl matches each pattern with fnmatch(3) against the unit's full
    name, so a plain name without its type (``vllm`` for ``vllm.service``)
    matches nothing. fnmatch(3) also reads ``[^...]`` as ``[!...]``.
    """
    return fnmatch.fnmatchcase(unit, pattern.replace('[^', '[!'))


def expand_units(listing, patterns, protect_units=(), unprotect=()):
    """Sort the units of one ``systemctl list-units --plain --no-legend`` listing by ``patterns``.

    Returns ``units`` (every listed unit some pattern names, in listing order),
    ``protected`` (those of them that are protected GPU services, which the
    role never stops), ``unprotected`` (the others) and ``unmatched`` (the
    patterns that name no listed unit, in the order given).
    """
    listed = parse_list_units(listing)
    units = [unit for unit in listed if any(pattern_matches(pattern, unit) for pattern in patterns)]
    protected = [unit for unit in units if is_protected_unit(unit, protect_units, unprotect)]
    return {
        'units': units,
        'protected': protected,
        'unprotected': [unit for unit in units if unit not in protected],
        'unmatched': [pattern for pattern in patterns if not any(pattern_matches(pattern, unit) for unit in listed)],
    }
