# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.filter.role_variable_errors import FilterModule, role_variable_errors

SPECS = {'argument_specs': {'main': {'options': {'gpu_reclaim_scope_users': {}, 'gpu_reclaim_settle_seconds': {}}}}}


def test_names_the_unknown_variable_and_the_bad_value():
    assert role_variable_errors({'gpu_reclaim_scope_user': ['alice'], 'gpu_reclaim_settle_seconds': 100000}, SPECS) == [
        'gpu_reclaim_scope_user: not a variable of the role gpu_reclaim; did you mean gpu_reclaim_scope_users?',
        'gpu_reclaim_settle_seconds: must be a number of seconds from 0 to 600; got: 100000.0',
    ]


def test_is_registered():
    assert FilterModule().filters() == {'role_variable_errors': role_variable_errors}
