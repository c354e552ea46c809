# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: reclaim_metrics
short_description: The gpu_reclaim role's last run on a host, in the Prometheus text format
version_added: 0.1.0
author:
  - gpuops.reclaim contributors (@gpuops)
description:
  - Turns the role's per-host summary (the fact C(gpu_reclaim_summary)) into the content of a file for
    node_exporter's textfile collector. Every metric is a gauge describing the last run.
  - C(gpu_reclaim_last_run_timestamp_seconds), C(gpu_reclaim_last_run_success) (1 when the GPUs were proven
    free), C(gpu_reclaim_last_run_gpus_freed), C(gpu_reclaim_last_run_memory_reclaimed_bytes),
    C(gpu_reclaim_last_run_holders_released) (label C(signal)), C(gpu_reclaim_last_run_sources_stopped) (label
    C(kind), one of C(systemd_unit), C(container), C(pod), C(parent)), C(gpu_reclaim_last_run_duration_seconds) and
    C(gpu_reclaim_last_run_failure) (label C(reason), one of C(holders_left), C(survivors), C(stuck_gpus), C(reset),
    C(other); 1 for each reason the run failed).
  - Per GPU, with labels C(gpu) (NVML's index) and C(uuid), C(gpu_reclaim_last_run_gpu_memory_used_before_bytes),
    C(gpu_reclaim_last_run_gpu_memory_used_after_bytes) (absent when nothing was proven) and
    C(gpu_reclaim_last_run_gpu_holders_left) (label C(reason), one of C(unkillable), C(survived), C(skipped),
    C(protected), C(kept), C(came_back), C(not_released)).
  - A series with a fixed set of label values is written for each of them, zeros included.
positional: _input, timestamp
options:
  _input:
    description: The role's summary of one host.
    type: dict
    required: true
  timestamp:
    description: Unix time, in seconds, at which the run ended.
    type: float
    required: true
'''

EXAMPLES = r'''
- name: Write the metrics of the last run
  ansible.builtin.copy:
    content: "{{ gpu_reclaim_summary | gpuops.reclaim.reclaim_metrics(now().timestamp()) }}"
    dest: /var/lib/node_exporter/textfile_collector/gpu_reclaim.prom.tmp
    mode: "0644"
'''

RETURN = r'''
_value:
  description: The metrics, one sample per line, with C(# HELP) and C(# TYPE) lines, ending in a newline.
  type: str
'''

# Errors are plain TypeError and ValueError, which Ansible reports with the filter's name; the
# controller's own exception classes are not imported, so the plugin stays importable anywhere.
from collections.abc import Mapping

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._metrics import MetricsError, render


def reclaim_metrics(summary, timestamp):
    if not isinstance(summary, Mapping):
        raise TypeError('reclaim_metrics expects the role summary of one host (a mapping); got: %s'
                        % type(summary).__name__)
    try:
        return render(dict(summary), timestamp)
    except MetricsError as exc:
        raise ValueError('reclaim_metrics: %s' % exc)


class FilterModule(object):
    def filters(self):
        return {'reclaim_metrics': reclaim_metrics}
