# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._missing_containers import missing_containers

TAIL = ('; nothing was stopped or released. Fix the names (or gpu_reclaim_container_runtime), or set '
        'gpu_reclaim_stop_ignore_missing: true to go on without them.')


@pytest.mark.parametrize('inspections, expected', [
    ([{'item': 'vllm', 'rc': 1, 'stderr': 'Error: No such container: vllm\n'}],
     'gpu_reclaim_stop_containers: docker knows no container vllm on gpu01 (vllm: Error: No such container: vllm)'),
    ([{'item': 'a', 'rc': 1, 'stderr': ''}, {'item': 'b', 'rc': 125, 'stderr': 'Error: b: not found'}],
     'gpu_reclaim_stop_containers: docker knows no container a, b on gpu01 (a: not found (rc 1); '
     'b: Error: b: not found)'),
    ([{'item': 'vllm', 'rc': 2, 'msg': '[Errno 2] No such file or directory: b\'docker\''}],
     'gpu_reclaim_stop_containers: the container runtime docker is not installed on gpu01'),
    ([{'item': 'vllm', 'rc': 2, 'failed': True, 'msg': 'Error executing command.'}],
     'gpu_reclaim_stop_containers: the container runtime docker is not installed on gpu01'),
    ([{'item': 'vllm', 'failed': True, 'msg': 'the module failed'}],
     'gpu_reclaim_stop_containers: the container runtime docker is not installed on gpu01'),
])
def test_the_message_names_each_container_or_the_missing_runtime(inspections, expected):
    assert missing_containers(inspections, 'docker', 'gpu01') == expected + TAIL


def test_ignored_it_is_the_warning_of_a_run_that_goes_on():
    assert missing_containers([{'item': 'vllm', 'rc': 1, 'stderr': 'Error: No such container: vllm'}], 'podman',
                              'gpu01', ignored=True) == (
        'gpu_reclaim_stop_containers: podman knows no container vllm on gpu01 (vllm: Error: No such container: vllm); '
        'gone on without them (gpu_reclaim_stop_ignore_missing)')
