# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import pod as _pod

HEX = 'ab' * 32


def record(pid, container=None):
    return {'pid': pid, 'container': container}


def test_pods_named_from_kubelet_logs(tmp_path):
    (tmp_path / 'ml_trainer-0_1234').mkdir()
    assert _pod.pod_reason('1234', str(tmp_path)) == (
        'managed by Kubernetes pod 1234: drain the node (namespace ml, pod trainer-0)')
    assert _pod.pod_reason('99', str(tmp_path)) == 'managed by Kubernetes pod 99: drain the node'
    assert _pod.pod_reason('99', str(tmp_path / 'missing')) == 'managed by Kubernetes pod 99: drain the node'
    entries = _pod.pod_entries([record(80, {'runtime': 'containerd', 'id': HEX, 'pod_uid': '1234'})])
    assert entries[0]['pod'] == '1234' and 'kubelet will restart it' in entries[0]['reason']
    assert _pod.leftover(entries[0]) is None
