# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.protection import is_protected_unit


def protected_units(units, protect_units=None, unprotect=None):
    """The names among ``units`` that are protected (the defaults, plus ``protect_units``, less ``unprotect``)."""
    for name, value in (('units', units), ('protect_units', protect_units or []), ('unprotect', unprotect or [])):
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
            raise TypeError('protected_units: %s must be a list of unit names; got: %r' % (name, value))
    return [unit for unit in units if is_protected_unit(unit, protect_units or (), unprotect or ())]


class FilterModule(object):

    def filters(self):
        return {'protected_units': protected_units}
