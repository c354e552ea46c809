# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in reset_plan.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._reset_plan import reset_plan as plan

NAME = 'reset_plan'


def reset_plan(holders_result, max_used_mib):
    try:
        limit = int(max_used_mib)
    except (TypeError, ValueError):
        raise TypeError('reset_plan: max_used_mib must be a number of MiB; got: %r' % (max_used_mib,))
    return plan(result(NAME, 'the result of gpuops.reclaim.nvidia_holders', holders_result), limit)


class FilterModule(object):
    def filters(self):
        return {NAME: reset_plan}
