# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in keep_units.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import names, result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._keep_units import keep_units as _keep_units


def keep_units(first_look, show_text, units):
    if not isinstance(show_text, str):
        raise TypeError('keep_units expects the text systemctl show printed; got: %s' % type(show_text).__name__)
    return _keep_units(result('keep_units', 'first_look', first_look), show_text,
                       names('keep_units', 'units', units))


class FilterModule(object):
    def filters(self):
        return {'keep_units': keep_units}
