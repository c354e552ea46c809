# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in protected_holders.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import records, result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import protected_holders as left_alone

NAME = 'protected_holders'


def protected_holders(release, first_holders=None):
    return left_alone(result(NAME, 'the release', release), records(NAME, 'first_holders', first_holders))


class FilterModule(object):
    def filters(self):
        return {NAME: protected_holders}
