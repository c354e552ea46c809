# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in host_summary.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import host_summary as summarize

NAME = 'host_summary'
REQUIRED = ('host', 'start', 'now')


def host_summary(run):
    run = result(NAME, 'the run', run)
    missing = [key for key in REQUIRED if key not in run]
    if missing:
        raise TypeError('%s: the run lacks %s' % (NAME, ', '.join(missing)))
    for key in ('first_look', 'release', 'proof'):
        run[key] = result(NAME, key, run.get(key))
    try:
        return summarize(run)
    except (TypeError, ValueError) as exc:
        raise TypeError('%s: %s' % (NAME, exc))


class FilterModule(object):
    def filters(self):
        return {NAME: host_summary}
