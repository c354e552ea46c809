# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: reset_plan
short_description: Which GPUs need a reset, and which GPU clients block it
version_added: 0.1.0
author:
  - gpuops.reclaim contributors (@gpuops)
description:
  - Reads a result of M(gpuops.reclaim.nvidia_holders). A GPU is stuck when it holds more memory than
    O(max_used_mib) and no compute holder is left on it (a context that outlived every process).
  - Every protected holder and every GPU client (kind V(client)) on a stuck GPU blocks its reset, except the
    module's own processes.
positional: max_used_mib
options:
  _input:
    description: A registered result of M(gpuops.reclaim.nvidia_holders).
    type: dict
    required: true
  max_used_mib:
    description: GPU memory, in MiB, at or under which a GPU counts as free.
    type: int
    required: true
'''

EXAMPLES = r'''
- name: Show which GPUs would be reset
  ansible.builtin.debug:
    msg: "{{ (holders | gpuops.reclaim.reset_plan(64)).indices }}"
'''

RETURN = r'''
_value:
  description: The reset's plan.
  type: dict
  contains:
    stuck:
      description: The GPU records of the stuck GPUs, as O(_input) gives them.
      type: list
      elements: dict
    indices:
      description: Their indices.
      type: list
      elements: int
    blockers:
      description: The holder records that block their reset.
      type: list
      elements: dict
'''

from collections.abc import Mapping

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._reset_plan import reset_plan as plan


def reset_plan(holders_result, max_used_mib):
    if not isinstance(holders_result, Mapping):
        raise TypeError('reset_plan expects a result of gpuops.reclaim.nvidia_holders (a mapping); got: %s'
                        % type(holders_result).__name__)
    try:
        limit = int(max_used_mib)
    except (TypeError, ValueError):
        raise TypeError('reset_plan: max_used_mib must be a number of MiB; got: %r' % (max_used_mib,))
    return plan(dict(holders_result), limit)


class FilterModule(object):
    def filters(self):
        return {'reset_plan': reset_plan}
