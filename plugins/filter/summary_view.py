# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in summary_view.yml and fleet_lines.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._summary_text import fleet_lines as _fleet_lines
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._summary_text import summary_view as _summary_view


def summary_view(summary, result_format='json'):
    return _summary_view(result('summary_view', 'the summary', summary), str(result_format))


def fleet_lines(fleet):
    return _fleet_lines(result('fleet_lines', 'the fleet summary', fleet))


class FilterModule(object):
    def filters(self):
        return {'summary_view': summary_view, 'fleet_lines': fleet_lines}
