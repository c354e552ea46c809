# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether a PID that NVML lists names the process that holds the GPU here.

NVML reports process IDs as the driver sees them. Current drivers translate
them into the caller's PID namespace and drop the ones it cannot see; older
drivers report host PIDs even to a caller in a container. A module that runs
in another PID namespace (a privileged container, say) may therefore read in
NVML's list the PID of an unrelated local process. Signalling it would hit
the wrong process.

So NVML's word alone does not make a target. A PID NVML lists is a GPU holder
here only if

* that process holds an NVIDIA device node (its fds or its memory mappings),
  which every process with a GPU context does, or
* this module runs in the host's (initial) PID namespace, where NVML's PIDs
  and ours are the same numbers whatever the driver does.

Otherwise it is reported with ``NOT_VISIBLE`` and never signalled, and the
proof counts it against the GPU.

A module that runs in a container without the host's PID namespace sees
neither the holders nor their sources. The fact that shows it: this process
is not in the initial PID namespace, and NVML lists PIDs that no process here
has (and that no keeper here explains: ``_discover.keepers``). Then nothing is judged
or signalled (``namespace_refusal``).

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from .._host.procfs import DEV_DIR, classify_device_path

# The inode of the initial PID namespace (PROC_PID_INIT_INO in the kernel).
INITIAL_PID_NAMESPACE_INODE = 0xEFFFFFFC

NOT_VISIBLE = 'listed by NVML but not visible as a GPU holder here (another PID namespace?)'


def in_initial_pid_namespace(path='/proc/self/ns/pid'):
    """Whether this process runs in the host's PID namespace (False when it cannot tell)."""
    try:
        return os.stat(path).st_ino == INITIAL_PID_NAMESPACE_INODE
    except OSError:
        return False


def holds_device_node(device_paths, dev_dir=DEV_DIR):
    """Whether any of ``device_paths`` is an NVIDIA device node (a GPU, nvidiactl or nvidia-uvm)."""
    return any(classify_device_path(path, dev_dir) is not None for path in device_paths or ())


def visible(listed_by_nvml, device_paths, shares_namespace, dev_dir=DEV_DIR):
    """Whether a process is a GPU holder here, by the rule above."""
    return not listed_by_nvml or shares_namespace or holds_device_node(device_paths, dev_dir)


def namespace_refusal(foreign_pids, shares_namespace=None):
    """The refusal text when NVML names processes this module cannot see from its PID namespace, or None.

    ``shares_namespace`` None: whether this process is in the initial PID namespace.
    """
    if shares_namespace is None:
        shares_namespace = in_initial_pid_namespace()
    if shares_namespace or not foreign_pids:
        return None
    return ('NVML lists PID %s, which this PID namespace does not have: the module runs in a container '
            'without the host\'s PID namespace, where it can neither see who holds the GPUs nor signal them. '
            'Nothing was signalled or stopped. Run it in the host\'s PID namespace (on the host itself, or in a '
            'container started with --pid=host).' % ', '.join(str(pid) for pid in sorted(foreign_pids)))
