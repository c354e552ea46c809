# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in stages_to_run.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import names, result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._stages import stages_to_run as _stages_to_run


def stages_to_run(state, run_tags=None, skip_tags=None):
    return _stages_to_run(result('stages_to_run', 'state', state),
                          names('stages_to_run', 'run_tags', run_tags, 'tags') or ['all'],
                          names('stages_to_run', 'skip_tags', skip_tags, 'tags'))


class FilterModule(object):
    def filters(self):
        return {'stages_to_run': stages_to_run}
