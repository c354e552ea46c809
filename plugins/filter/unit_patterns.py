# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in unit_patterns.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import names
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._unit_patterns import expand_units, unmatched_warnings


def unit_patterns(listing, patterns, protect_units=None, unprotect=None):
    if not isinstance(listing, str):
        raise TypeError('unit_patterns expects the text systemctl printed; got: %s' % type(listing).__name__)
    return expand_units(listing, names('unit_patterns', 'patterns', patterns, 'unit names or globs'),
                        names('unit_patterns', 'protect_units', protect_units, 'unit names or globs'),
                        names('unit_patterns', 'unprotect', unprotect, 'unit names or globs'))


def unit_warnings(expanded, host):
    if not isinstance(expanded, dict):
        raise TypeError('unit_warnings expects what unit_patterns returned; got: %s' % type(expanded).__name__)
    return unmatched_warnings(expanded, str(host))


class FilterModule(object):
    def filters(self):
        return {'unit_patterns': unit_patterns, 'unit_warnings': unit_warnings}
