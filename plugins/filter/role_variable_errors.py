# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in role_variable_errors.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._role_variables import variable_errors


def role_variable_errors(values, argument_specs):
    return variable_errors(values, argument_specs)


class FilterModule(object):
    def filters(self):
        return {'role_variable_errors': role_variable_errors}
