# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # Matches GPU_SELECTION_ARGUMENT_SPEC in plugins/module_utils/_selectors.py.
    DOCUMENTATION = r'''
options:
  gpus:
    description:
      - The GPUs to act on. An empty list selects every GPU of the host.
      - Each item is a GPU index as NVML numbers them (V(0)), a GPU UUID (V(GPU-8a3f...), compared
        without regard to case), or a PCI bus id in either the Linux form (V(0000:3b:00.0)) or
        NVML's form (V(00000000:3B:00.0)).
      - Every selector must match a GPU on the host. A selector that matches none fails the task,
        naming the option, the value and the GPUs that exist.
      - Without NVML (see O(require_nvml)), GPUs are known only by their device node
        C(/dev/nvidiaN), and the index is the node's number N.
      - A holder is in scope when it holds at least one of the selected GPUs. Its record still
        lists every GPU it holds.
    type: list
    elements: str
    default: []
'''
