#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: nvidia_holders
short_description: List the processes that hold NVIDIA GPUs, what they are, and whether they may be touched
version_added: 0.1.0
description:
  - Reports every process that holds an NVIDIA GPU on the host, merged from two views.
  - The NVML view lists compute, graphics and MPS processes with the GPU memory each holds. GPU memory
    is read with NVML's v2 struct, so memory the driver reserves does not count as used.
  - The C(/proc) view finds every process with a C(/dev/nvidiaN) node open, including clients that hold
    no memory and that NVML does not list, such as monitors, exporters and C(nvidia-smi).
  - For each holder it reports the GPUs and memory it holds, its kind (V(compute) or V(client)), its
    systemd unit and container, whether it ignores SIGTERM, whether it is orphaned, and whether it is
    protected.
  - For each holder it also says whether it is within the scope that O(users), O(match), O(systemd_units),
    O(containers) and O(kinds) describe (RV(holders[].in_scope)), decided by the same plan as
    M(gpuops.reclaim.gpu_reclaim)'s, so that a playbook learns what a release with those options would signal.
  - This module only reads. It never signals a process and never changes anything.
  - When NVML cannot be used it returns the C(/proc) view and says in its warnings what it could not see,
    unless O(require_nvml=true).
  - Processes this user may not inspect are skipped and counted in RV(unreadable_processes); run as root
    to see every holder.
  - The full description of every option is in C(docs/modules.md), shipped with the collection.
extends_documentation_fragment:
  - gpuops.reclaim.gpu_selection
  - gpuops.reclaim.protection
  - gpuops.reclaim.scope
  - gpuops.reclaim.nvml
  - gpuops.reclaim.attributes
  - gpuops.reclaim.attributes.read_only
requirements:
  - psutil >= 5.8 on the managed host
notes:
  - A holder is V(compute) when NVML lists it, when it holds GPU memory, or when it holds C(/dev/nvidia-uvm)
    open. Anything else is a V(client).
  - To keep discovery cheaper than C(fuser), C(/proc/PID/maps) is read only for processes that NVML lists
    but whose open files show no GPU node.
seealso:
  - module: gpuops.reclaim.gpu_reclaim
  - module: gpuops.reclaim.gpu_assert_free
'''

EXAMPLES = r'''
- name: See who holds the GPUs
  gpuops.reclaim.nvidia_holders:
  register: __nvidia_holders

- name: Show the summary
  ansible.builtin.debug:
    msg: "{{ __nvidia_holders.msg }}"

- name: Only GPUs 0 and 1, protecting a site monitor as well
  gpuops.reclaim.nvidia_holders:
    gpus:
      - "0"
      - "GPU-8a3f6c1e-9a0b-4d2e-8f7c-1b2c3d4e5f60"
    protect:
      - site-gpu-monitor
  register: __nvidia_holders

- name: List the holders that a release with the default scope would signal
  ansible.builtin.debug:
    msg: "{{ __nvidia_holders.holders | selectattr('in_scope') | map(attribute='pid') | list }}"

- name: Mark the GPU clients in vLLM's units as within the scope (holders[].in_scope)
  gpuops.reclaim.nvidia_holders:
    kinds: [client]
    systemd_units: [vllm-*.service]
  register: __nvidia_holders

- name: Fail when NVML cannot be used, with a short deadline
  gpuops.reclaim.nvidia_holders:
    require_nvml: true
    nvml_timeout: 2
'''

RETURN = r'''
msg:
  description: One line summary.
  returned: always
  type: str
  sample: 8 GPUs, 9 holders (8 compute, 1 client), 768 GiB held
nvml_available:
  description: Whether NVML could be used. When V(false), memory figures are V(null) and GPU indices are
    device minor numbers.
  returned: always
  type: bool
  sample: true
driver_version:
  description: The NVIDIA driver version as NVML reports it, or V(null) without NVML.
  returned: always
  type: str
  sample: 580.159.04
unreadable_processes:
  description: How many processes could not be inspected (permission denied). Holders among them are
    not reported.
  returned: always
  type: int
  sample: 0
gpus:
  description: The selected GPUs, ordered by index.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML index of the GPU (without NVML, the device minor number).
      type: int
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-8a3f6c1e-9a0b-4d2e-8f7c-1b2c3d4e5f60
    name:
      description: Product name.
      type: str
      sample: NVIDIA H200
    minor:
      description: Minor number N of the device node C(/dev/nvidiaN).
      type: int
      sample: 0
    pci_bus_id:
      description: PCI bus id as NVML writes it.
      type: str
      sample: 00000000:3B:00.0
    memory_total_mib:
      description: Total memory in MiB.
      type: int
      sample: 143771
    memory_used_mib:
      description: Used memory in MiB, memory reserved by the driver not included.
      type: int
      sample: 98304
    memory_reserved_mib:
      description: Memory reserved by the driver in MiB, or V(null) when the driver has no v2 memory struct.
      type: int
      sample: 615
    persistence_mode:
      description: Whether persistence mode is on, or V(null) when unknown.
      type: bool
      sample: true
    display_active:
      description: Whether a display is active on the GPU, or V(null) when unknown.
      type: bool
      sample: false
    holder_pids:
      description: PIDs of the holders of this GPU.
      type: list
      elements: int
      sample: [4242, 4243]
  sample:
    - index: 0
      uuid: GPU-8a3f6c1e-9a0b-4d2e-8f7c-1b2c3d4e5f60
      name: NVIDIA H200
      minor: 0
      pci_bus_id: 00000000:3B:00.0
      memory_total_mib: 143771
      memory_used_mib: 98304
      memory_reserved_mib: 615
      persistence_mode: true
      display_active: false
      holder_pids: [4242, 4243]
holders:
  description: Every process that holds at least one selected GPU, ordered by PID.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: The holder's process id.
      type: int
      sample: 4242
    ppid:
      description: Parent process id.
      type: int
      sample: 1
    user:
      description: Name of the real user, or the UID when it has no name.
      type: str
      sample: vllm
    uid:
      description: Real user id.
      type: int
      sample: 1001
    name:
      description: Command name (C(/proc/PID/comm)), cut at 15 characters by the kernel.
      type: str
      sample: VLLM::EngineCor
    title:
      description: Command line, as the process may have set it with setproctitle.
      type: str
      sample: VLLM::EngineCore
    exe:
      description: Path of the executable, or V(null) when it cannot be read.
      type: str
      sample: /usr/bin/python3.12
    create_time:
      description: Start time in seconds since the epoch, as psutil computes it. Identifies the process
        together with its PID.
      type: float
      sample: 1767000000.12
    state:
      description: Process state, named as psutil names them.
      type: str
      sample: sleeping
    wchan:
      description: Kernel function the process waits in, or V(null).
      type: str
      sample: uvm_spin_loop
    gpus:
      description: Indices of every GPU the process holds, selected or not.
      type: list
      elements: int
      sample: [0, 1]
    gpu_uuids:
      description: UUIDs of those GPUs.
      type: list
      elements: str
      sample: [GPU-8a3f6c1e-9a0b-4d2e-8f7c-1b2c3d4e5f60]
    gpu_memory_mib:
      description: GPU memory held per GPU index (as a string key), in MiB, as NVML reports it.
      type: dict
      sample: {"0": 98304}
    memory_mib:
      description: GPU memory held on all GPUs, in MiB.
      type: int
      sample: 98304
    nvml_types:
      description: NVML process lists that show the process.
      type: list
      elements: str
      sample: [compute]
    device_paths:
      description: NVIDIA device paths the process holds open (or has mapped).
      type: list
      elements: str
      sample: [/dev/nvidia-uvm, /dev/nvidia0, /dev/nvidiactl]
    kind:
      description: V(compute) for a process with a GPU context, memory or C(/dev/nvidia-uvm), else V(client).
      type: str
      sample: compute
    systemd_unit:
      description: The systemd unit (service or scope) the process runs in, from its cgroup, or V(null).
      type: str
      sample: vllm.service
    unit_manager:
      description: Which systemd manager runs RV(holders[].systemd_unit). V(system) for the system manager.
        V(user) for a user's own manager (under C(user@UID.service)), whose units never count as protected.
        V(null) without a unit.
      type: str
      sample: system
    container:
      description:
        - The container the process runs in, or V(null). Its cgroup names a candidate (never one under a user
          manager or a user slice, where any user names scopes as they like); C(runtime) is one of V(docker),
          V(containerd), V(cri-o), V(podman), V(kubepods), C(id) the container id (or the pod UID when only the pod
          is known), C(pod_uid) present for Kubernetes pods.
        - For docker, podman and containerd (nerdctl), the runtime is asked, within a deadline, whether it runs
          that container and counts the process among its processes. C(confirmed) says whether it does; only then
          are C(name), C(image) and C(restart_policy) set, and C(systemd_unit) when the container's
          C(PODMAN_SYSTEMD_UNIT) label names the unit whose cgroup holds the process (a Quadlet unit). Otherwise
          C(reason) says why not.
      type: dict
      sample: {"runtime": "podman", "id": "35f2...", "name": "vllm", "image": "localhost/vllm:latest",
               "restart_policy": "always", "systemd_unit": null, "confirmed": true, "reason": null}
    protected:
      description: Whether the process must never be signalled.
      type: bool
      sample: false
    protected_reason:
      description: Why it is protected, or V(null).
      type: str
      sample: default protected executable nv-hostengine
    suspicious:
      description: Why a process named like a protected daemon is not protected, or V(null). Its executable or
        script is one that another user could have put there, its unit is a user's own, or NVML lists it as a
        compute process, which the GPU services never are. Also named in the warnings.
      type: str
      sample: "named like the protected nvidia-persistenced, but /tmp/nvidia-persistenced is owned by uid 1001,
        not by root: not protected"
    in_scope:
      description: Whether M(gpuops.reclaim.gpu_reclaim), given the same O(gpus), protection and scope options
        (O(users), O(match), O(systemd_units), O(containers), O(kinds)), would plan to signal the process itself, at
        once or in a later keeper round. V(false) for a protected holder, one of a kind not in O(kinds) (a keeper
        counts as V(compute)), one a filter leaves out, one this user may not signal, one that has exited, and one
        in a Kubernetes pod.
      type: bool
      sample: true
    is_self:
      description: Whether the process is an ancestor of this module (the module's own process is never listed).
      type: bool
      sample: false
    sigterm_ignored:
      description: Whether the process ignores SIGTERM, so a grace period would be wasted on it.
      type: bool
      sample: false
    orphaned:
      description: Whether the parent is PID 1 or a systemd subreaper, as with workers that outlived their server.
        Daemons that PID 1 started directly count as well; use RV(holders[].systemd_unit) to tell them apart.
      type: bool
      sample: true
    visible:
      description: False for a PID that NVML lists but whose process here holds no NVIDIA device node, when the
        module runs outside the host's PID namespace (NVML may report host PIDs there, naming other processes).
        Such a record describes whatever process has that PID here; it is never signalled, and it keeps its GPU
        from counting as free. True otherwise.
      type: bool
      sample: true
    leader_exited:
      description: Whether the process's main thread has exited while another thread lives on. Such a process is
        alive, holds what it held, and is released like any holder; C(/proc/PID/stat) alone would call it a zombie.
      type: bool
      sample: false
    node_gpus:
      description: The GPUs whose device node C(/dev/nvidiaN) the process holds open, listed by NVML there or not.
      type: list
      elements: int
      sample: [5]
    pgrp:
      description: The process group ID.
      type: int
      sample: 233714
    session:
      description: The session ID.
      type: int
      sample: 233714
    keeps:
      description:
        - Only for a keeper. A GPU's memory belongs to a context, which lives as long as any process holds its
          open file description of C(/dev/nvidia*). When NVML lists a PID that has exited, the live processes that
          still hold that GPU's node keep its memory, one entry per such context, with the GPU, the exited
          C(creator_pids), the C(memory_mib) and the C(evidence), strongest first, and its C(rank) (1 strongest).
        - C(mapped) (the node is mapped, as in a child forked from a CUDA process), C(session) (in the exited
          creator's session or process group), C(received) (holds the node but mapped no NVIDIA node; the
          descriptors were sent to it) or C(client) (an NVML client; released only when nothing else explains the
          memory, and never outside the host's PID namespace).
      type: list
      elements: dict
      returned: for keepers
      sample: [{gpu: 5, creator_pids: [233702], memory_mib: 6144, evidence: [mapped, session], rank: 1}]
    unreadable:
      description:
        - Why the title could not be read, or V(null). Reading C(/proc/PID/cmdline) waits for the process's
          memory lock, which a thread stuck in the kernel (typically in the GPU driver) holds; after
          O(nvml_timeout) the read is given up, the title is left empty, and this says so with the state and wchan.
      type: str
      sample: "unreadable: possibly stuck in the kernel (state D (disk-sleep), wchan uvm_spin_loop; /proc/4242/cmdline did not answer within 5 s)"
  sample:
    - pid: 4242
      ppid: 1
      user: vllm
      uid: 1001
      name: VLLM::EngineCor
      title: VLLM::EngineCore
      exe: /usr/bin/python3.12
      create_time: 1767000000.12
      state: sleeping
      wchan: null
      gpus: [0]
      gpu_uuids: [GPU-8a3f6c1e-9a0b-4d2e-8f7c-1b2c3d4e5f60]
      gpu_memory_mib: {"0": 98304}
      memory_mib: 98304
      nvml_types: [compute]
      device_paths: [/dev/nvidia-uvm, /dev/nvidia0, /dev/nvidiactl]
      kind: compute
      systemd_unit: null
      unit_manager: null
      container: null
      protected: false
      protected_reason: null
      suspicious: null
      in_scope: true
      is_self: false
      sigterm_ignored: false
      orphaned: true
      visible: true
      unreadable: null
'''

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.holders import holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import answer, argument_spec, missing_library


def main():
    module = AnsibleModule(argument_spec=argument_spec(protection=True, scope=True), supports_check_mode=True)
    missing = missing_library(module.params['require_nvml'])
    if missing:
        module.fail_json(msg=missing_required_lib(missing[0]), exception=missing[1])
    answer(module, holders)


if __name__ == '__main__':
    main()
