# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in left_behind.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import names, result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import left_behind as found_left_behind

NAME = 'left_behind'


def left_behind(release, stopped_units=None, stopped_containers=None):
    return found_left_behind(result(NAME, 'the release', release), names(NAME, 'stopped_units', stopped_units),
                             names(NAME, 'stopped_containers', stopped_containers, 'container ids'))


class FilterModule(object):
    def filters(self):
        return {NAME: left_behind}
