# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # Matches SCOPE_ARGUMENT_SPEC in plugins/module_utils/_plan/plan.py.
    DOCUMENTATION = r'''
options:
  users:
    description:
      - Only holders run by these users (names or numeric UIDs) are within the scope. Empty means any user.
    type: list
    elements: str
    default: []
  match:
    description:
      - Only holders whose title (command line), command name or executable path matches this Python regular
        expression (searched, not anchored) are within the scope, for example V(^VLLM::).
    type: str
  systemd_units:
    description:
      - Only holders that run in one of these systemd units (services or scopes) are within the scope. Shell-style
        globs such as V(vllm-*.service) are allowed.
    type: list
    elements: str
    default: []
  containers:
    description:
      - Only holders in one of these containers are within the scope, each a runtime name (V(docker), V(podman),
        ...), a prefix of a container id or of a pod UID, or V(kubepods) for every pod.
    type: list
    elements: str
    default: []
  kinds:
    description:
      - Which kinds of holder are within the scope. V(compute) holders hold a GPU context or memory; V(client) holders
        only hold a device node, as monitors and exporters do.
    type: list
    elements: str
    choices: [compute, client]
    default: [compute]
notes:
  - The scope options (O(users), O(match), O(systemd_units), O(containers), O(kinds)) mean the same in every module
    that takes them. Within the scope are the holders of the selected GPUs, of a kind in O(kinds), that pass every
    filter given; never a protected holder, one that has exited, one this user may not signal, or (unless
    M(gpuops.reclaim.gpu_reclaim) is told to release pods) one in a Kubernetes pod. M(gpuops.reclaim.gpu_reclaim)
    signals those and, as it goes, their descendants, the parents that would start them again, and the processes
    that take their place.
  - A keeper of a context whose creator is gone counts as V(compute) for O(kinds), whatever kind its record shows.
'''
