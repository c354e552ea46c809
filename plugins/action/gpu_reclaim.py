# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpu_reclaim module, with a line at least every 5 s while it waits (plugin_utils/_heartbeat.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._heartbeat import what_release
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._module_action import WaitingModuleAction


class ActionModule(WaitingModuleAction):
    what = staticmethod(what_release)
