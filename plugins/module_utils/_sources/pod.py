# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Source kind ``pod``: a Kubernetes pod, which kubelet restarts whatever is done on the host.

Its holders are skipped unless ``release_pods`` is set; when they are released anyway, the entry says that
kubelet will restart it. Nothing is stopped: the next step is to drain the node.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from .kind import SourceKind, entry

NAME = 'pod'
PODS_LOG_DIR = '/var/log/pods'


def pod_reason(pod_uid, pods_dir=PODS_LOG_DIR):
    """Why a pod's holder is left alone, with its namespace and name where the host can tell."""
    reason = 'managed by Kubernetes pod %s: drain the node' % pod_uid
    named = pod_names(pods_dir).get(pod_uid)
    if named:
        reason += ' (namespace %s, pod %s)' % named
    return reason


def pod_names(pods_dir=PODS_LOG_DIR):
    """``{uid: (namespace, name)}`` from kubelet's log directories ``<namespace>_<name>_<uid>``."""
    names = {}
    try:
        entries = os.listdir(pods_dir)
    except OSError:
        return names
    for name in entries:
        parts = name.split('_')
        if len(parts) >= 3:
            names[parts[-1]] = (parts[0], '_'.join(parts[1:-1]))
    return names


def pod_entries(targets):
    """One entry per pod whose holders are released anyway (``release_pods``)."""
    pods = {}
    for record in targets:
        pod = (record.get('container') or {}).get('pod_uid')
        if pod:
            pods.setdefault(pod, []).append(record['pid'])
    return [entry(NAME, pod=pod, holder_pids=pids, action='left alone',
                  reason='released with release_pods: kubelet will restart it; drain the node to keep it away')
            for pod, pids in sorted(pods.items())]


def leftover(item):
    # Said in the entry's reason already: kubelet restarts it, and the node is drained, not the pod stopped.
    return None


def row_name(item):
    return str(item.get('pod'))


KIND = SourceKind(NAME, label='Kubernetes pod', metric='pod', leftover=leftover, stop=None,
                  row_name=row_name, role_stopped=None, older_list=None)
