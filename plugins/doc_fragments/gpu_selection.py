# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # Matches GPU_SELECTION_ARGUMENT_SPEC in plugins/module_utils/_discover/selectors.py.
    DOCUMENTATION = r'''
options:
  gpus:
    description:
      - The GPUs to act on, by index, UUID or PCI bus id; each must match a GPU of the host. An empty list selects
        every GPU.
    type: list
    elements: str
    default: []
'''
