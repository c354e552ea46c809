# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in summary_gpus.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import records
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import gpu_rows

NAME = 'summary_gpus'


def summary_gpus(first_gpus, proof_gpus=None, released=None, protected=None):
    return gpu_rows(records(NAME, "the first look's gpus", first_gpus), records(NAME, 'proof_gpus', proof_gpus),
                    records(NAME, 'released', released), records(NAME, 'protected', protected))


class FilterModule(object):
    def filters(self):
        return {NAME: summary_gpus}
