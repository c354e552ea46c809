# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in wait_plan.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._waits import wait_plan as _wait_plan


def wait_plan(values, check_mode=False):
    return _wait_plan(result('wait_plan', 'values', values), bool(check_mode))


class FilterModule(object):
    def filters(self):
        return {'wait_plan': wait_plan}
