# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: fleet_summary
short_description: Roll up the gpu_reclaim role's per-host summaries into one view of the fleet
version_added: 0.1.0
author:
  - gpuops.reclaim contributors (@gpuops)
description:
  - Reads the fact C(gpu_reclaim_summary) that the role C(gpuops.reclaim.gpu_reclaim) keeps on each host it ran
    on, and returns which hosts are free and which failed (each with why, in one line), how many GPUs were freed
    and how much GPU memory came back.
  - A host whose C(gpu_reclaim_summary) is not defined never ran the role and is left out. A host whose summary
    is empty started the role and stopped before its first look at the GPUs (unreachable, or a task failed), and
    counts as failed.
  - A GPU counts as freed when it held more than C(gpu_reclaim_max_used_mib) at the first look and the proof saw
    it at or below it. Memory reclaimed is the memory used at the first look less the memory the proof saw.
positional: _input
options:
  _input:
    description: Host name to that host's variables, such as C(hostvars).
    type: dict
    required: true
'''

EXAMPLES = r'''
- name: Show the fleet's outcome after the role ran on every host
  ansible.builtin.debug:
    msg: "{{ hostvars | gpuops.reclaim.fleet_summary }}"
'''

RETURN = r'''
_value:
  description: The fleet's outcome.
  type: dict
  contains:
    hosts:
      description: Per host, in name order, C(host), C(state) (V(free), V(kept) when only the units kept running hold its GPUs,
        V(failed), or V(unproven) in check mode), C(why) (one line, empty unless failed), C(check_mode), C(gpus), C(gpus_freed), C(memory_reclaimed_mib),
        C(released), C(released_by_signal), C(sources_stopped) and C(duration_seconds).
      type: list
      elements: dict
    host_count:
      description: How many hosts ran the role.
      type: int
    free:
      description: Hosts whose GPUs were proven free.
      type: list
      elements: str
    failed:
      description: Hosts that failed, each with C(host) and C(why).
      type: list
      elements: dict
    kept:
      description: Hosts whose GPUs are held only by the units kept running (gpu_reclaim_keep_units).
      type: list
      elements: str
    unproven:
      description: Hosts with no proof either way (check mode).
      type: list
      elements: str
    check_mode:
      description: Whether any host ran in check mode.
      type: bool
    gpus:
      description: GPUs selected across the fleet.
      type: int
    gpus_freed:
      description: GPUs freed across the fleet.
      type: int
    memory_reclaimed_mib:
      description: GPU memory that came back across the fleet, in MiB.
      type: int
    released:
      description: Holders released across the fleet.
      type: int
'''

# Errors are plain TypeError and ValueError, which Ansible reports with the filter's name; the
# controller's own exception classes are not imported, so the plugin stays importable anywhere.
from collections.abc import Mapping

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._outcome import fleet_outcome

FACT = 'gpu_reclaim_summary'


def fleet_summary(host_variables):
    if not isinstance(host_variables, Mapping):
        raise TypeError('fleet_summary expects a mapping of host names to their variables (hostvars); '
                        'got: %s' % type(host_variables).__name__)
    summaries = {}
    for host in host_variables:
        variables = host_variables[host]
        if not isinstance(variables, Mapping):
            raise TypeError('fleet_summary: the variables of host %s are not a mapping; got: %s'
                            % (host, type(variables).__name__))
        summary = variables.get(FACT)
        summaries[str(host)] = None if summary is None else dict(summary)
    return fleet_outcome(summaries)


class FilterModule(object):
    def filters(self):
        return {'fleet_summary': fleet_summary}
