# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: unit_patterns
short_description: Sort one systemctl listing by the unit names and globs asked for
version_added: 0.1.0
author:
  - gpuops.reclaim contributors (@gpuops)
description:
  - Reads the output of one C(systemctl list-units --plain --no-legend --full -- PATTERN...) (or
    C(list-unit-files --no-legend --full)) call made for every pattern at once, and tells which listed units the
    patterns name, which of them are protected GPU services (never stopped by the role), and which patterns
    matched nothing.
  - A pattern matches as systemctl matches it, with fnmatch(3) on the unit's full name, so a plain name without
    its type (V(vllm) for V(vllm.service)) matches nothing.
positional: patterns, protect_units, unprotect
options:
  _input:
    description: The listing, as systemctl printed it.
    type: str
    required: true
  patterns:
    description: The unit names and globs given to systemctl.
    type: list
    elements: str
    required: true
  protect_units:
    description: More unit names or globs to protect.
    type: list
    elements: str
    default: []
  unprotect:
    description: Default protected names or globs to protect no longer.
    type: list
    elements: str
    default: []
'''

EXAMPLES = r'''
- name: Stop every vllm unit but never a protected one
  ansible.builtin.debug:
    msg: "{{ listing.stdout | gpuops.reclaim.unit_patterns(['vllm-*.service', 'nvidia-*']) }}"
'''

RETURN = r'''
_value:
  description: The listed units sorted by the patterns.
  type: dict
  contains:
    units:
      description: Every listed unit that a pattern names, in listing order.
      type: list
      elements: str
    protected:
      description: Those of O(_input)'s units that are protected GPU services.
      type: list
      elements: str
    unprotected:
      description: The others.
      type: list
      elements: str
    unmatched:
      description: The patterns that name no listed unit.
      type: list
      elements: str
'''

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import names
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._unit_patterns import expand_units


def unit_patterns(listing, patterns, protect_units=None, unprotect=None):
    if not isinstance(listing, str):
        raise TypeError('unit_patterns expects the text systemctl printed; got: %s' % type(listing).__name__)
    return expand_units(listing, names('unit_patterns', 'patterns', patterns, 'unit names or globs'),
                        names('unit_patterns', 'protect_units', protect_units, 'unit names or globs'),
                        names('unit_patterns', 'unprotect', unprotect, 'unit names or globs'))


class FilterModule(object):
    def filters(self):
        return {'unit_patterns': unit_patterns}
