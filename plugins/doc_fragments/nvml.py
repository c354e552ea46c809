# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # Matches NVML_ARGUMENT_SPEC in plugins/module_utils/_nvml.py.
    DOCUMENTATION = r'''
options:
  nvml_timeout:
    description:
      - Seconds that one NVML step may take before it is abandoned. A step is initialising NVML and
        reading the GPUs, or one poll of memory and process lists.
      - NVML and the driver can hang. When a step overruns, NVML is not used again in this task,
        and the task carries on with what C(/proc) shows, saying so in its warnings (or fails when
        O(require_nvml=true)).
      - "The same deadline bounds the reads of other processes' C(/proc/PID/cmdline), which block behind a
        process stuck in the kernel. All holders' titles are read at once; one that does not come in time
        leaves that holder with an empty title and C(unreadable) saying C(unreadable: possibly stuck in the
        kernel) with its state and wchan. It is still a holder, and still released when in scope."
      - A number greater than 0 and at most 600. A boolean is an error.
    type: raw
    default: 5.0
  require_nvml:
    description:
      - What to do when NVML cannot be used (the Python library C(nvidia-ml-py) is missing,
        C(libnvidia-ml.so.1) is missing, the driver is not loaded, or NVML overran O(nvml_timeout)).
      - V(false) carries on with the C(/proc) view alone, returns RV(nvml_available=false) and warns
        about what could not be seen (memory per GPU and per process, and processes that hold no
        device node open).
      - V(true) fails the task instead.
    type: bool
    default: false
requirements:
  - nvidia-ml-py (the C(pynvml) module) on the managed host, to read GPU memory and the NVML process lists
'''
