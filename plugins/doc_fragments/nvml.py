# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # Matches NVML_ARGUMENT_SPEC in plugins/module_utils/_host/nvml.py.
    DOCUMENTATION = r'''
options:
  nvml_timeout:
    description:
      - Seconds that one NVML step, or one read of another process's C(/proc/PID/cmdline), may take before it is
        abandoned; above 0 and at most 600.
    type: raw
    default: 5.0
  require_nvml:
    description:
      - What to do when NVML cannot be used (library or driver missing, or a step overran O(nvml_timeout)). V(false)
        goes on with the C(/proc) view alone; V(true) fails the task.
    type: bool
    default: false
requirements:
  - nvidia-ml-py (the C(pynvml) module) on the managed host, to read GPU memory and the NVML process lists
'''
