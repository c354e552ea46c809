# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The operator's next steps, as the modules word them.

The one place in module_utils that names the role's variables (``gpu_reclaim_*``) beside the module options they
set, so that a renamed variable is one edit here. The proof, the settle and the release report take their texts
from here.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# A GPU that only a reset frees (``%s``: its index).
RESET_STEP = 'a GPU reset (gpu_reclaim_allow_reset in the role, or nvidia-smi --gpu-reset -i %s) or a reboot'

RECLAIM_STEP = 'run gpuops.reclaim.gpu_reclaim (or the role gpuops.reclaim.gpu_reclaim) to release the holders'

# After a release (``left_alone`` given), for a holder it did not leave alone.
AFTER_RELEASE_STEP = ('it holds the GPU although the release ran: it started after the release looked, came back, or '
                      'survived it; see what starts it (its parent, unit or container) in the release\'s sources')

# The option (and role variable) that would include a holder the release left alone, by its reason's start.
INCLUDE_HINTS = (
    ('user not selected', 'users (gpu_reclaim_scope_users in the role)'),
    ('title does not match', 'match (gpu_reclaim_scope_match)'),
    ('systemd unit not selected', 'systemd_units (gpu_reclaim_scope_systemd_units)'),
    ('container not selected', 'containers (gpu_reclaim_scope_containers)'),
    ('kind ', 'kinds (gpu_reclaim_scope_kinds), where the other scope filters select it too'),
    ('out of scope', 'gpus (gpu_reclaim_gpus)'),
    ('managed by Kubernetes pod', 'release_pods (gpu_reclaim_scope_pods), or drain the node'),
    ('permission denied', 'running the release as root (become: true)'),
    ('default protected', 'unprotect (gpu_reclaim_unprotect), if it really holds the GPU'),
    ('protected', 'stopping it yourself, or taking it out of protect (gpu_reclaim_protect)'),
)

NAMESPACE_STEP = ('NVML lists processes that hold no GPU device node here: run the task in the host\'s PID '
                  'namespace (not in a container) to see and release them')

# A pod's holders (``%s``: the pod UID, then its PIDs).
POD_STEP = ('Next step for Kubernetes pod %s (pid %s): kubelet restarts it whatever is done on the host; '
            'drain the node, or release it anyway with gpu_reclaim_scope_pods.')

# Protected holders that keep a GPU busy (``%s``: their PIDs).
PROTECTED_STEP = ('Next step for pid %s: protected, so never signalled; stop it yourself if it really holds '
                  'the GPU, or lift its protection with unprotect (gpu_reclaim_unprotect in the role).')

# A holder that came back within the settle window, from a container (``%s``: the runtime's command, the id).
CONTAINER_COMEBACK_STEP = 'stop the container (%s stop %s) or add it to gpu_reclaim_scope_containers, then run again'

# ... from a service (``%s``: the unit, twice).
SERVICE_COMEBACK_STEP = 'stop and disable %s (systemctl disable --now %s), or add it to gpu_reclaim_stop_units'
