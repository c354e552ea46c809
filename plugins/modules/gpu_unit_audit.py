#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: gpu_unit_audit
short_description: Audit systemd serving units for GPU workers their stop would leave behind
version_added: 0.1.0
description:
  - Reads, for every systemd service whose processes hold an NVIDIA GPU and for every unit named in O(units),
    the settings that decide what C(systemctl stop) leaves behind, and flags the units whose stop orphans GPU
    workers.
  - C(KillMode=process) or C(none) signals only the main process, so workers that retitle themselves
    (C(VLLM::Worker_TP0)) stay and keep the GPUs. C(SendSIGKILL=no) spares a process that ignores SIGTERM.
    A GPU holder started by the unit but living in another control group is out of reach of any stop.
  - Read-only. Nothing is signalled, stopped or changed.
  - The full description of every option is in C(docs/modules.md), shipped with the collection.
extends_documentation_fragment:
  - gpuops.reclaim.nvml
  - gpuops.reclaim.attributes
  - gpuops.reclaim.attributes.read_only
options:
  units:
    description:
      - Units to audit in addition to those whose processes hold GPUs. Globs such as C(vllm-*.service) are
        expanded to the loaded units they match.
    type: list
    elements: str
    default: []
  fail_on_orphaning:
    description:
      - Fail when a unit would leave GPU holders behind on stop, instead of only reporting it.
    type: bool
    default: false
  ignore_missing:
    description:
      - With V(false), a unit of O(units) that does not exist, or a glob that matches no unit, fails the task,
        naming the nearest loaded unit; with V(true) it is a warning.
    type: bool
    default: false
requirements:
  - psutil
  - systemd (C(systemctl)) on the managed host
notes:
  - Runs C(systemctl show) and C(systemctl list-units) with a C locale, each bounded to 30 seconds by
    coreutils' C(timeout) when it is installed.
seealso:
  - module: gpuops.reclaim.nvidia_holders
  - ref: gpuops.reclaim.gpu_reclaim
    description: The role's C(gpu_reclaim_harden_units) variable installs a drop-in that fixes what this module flags.
'''

EXAMPLES = r'''
- name: Find the serving units whose stop would orphan GPU workers
  gpuops.reclaim.gpu_unit_audit:
    units:
      - vllm-*.service
  register: audit

- name: Show them
  ansible.builtin.debug:
    msg: "{{ audit.units | selectattr('leaves_orphans') | map(attribute='unit') | list }}"

- name: Refuse to deploy behind a unit that would orphan its workers
  gpuops.reclaim.gpu_unit_audit:
    units:
      - vllm.service
    fail_on_orphaning: true
'''

RETURN = r'''
units:
  description: One record per audited unit.
  returned: always
  type: list
  elements: dict
  sample:
    - unit: vllm.service
      load_state: loaded
      active_state: inactive
      kill_mode: process
      send_sigkill: true
      timeout_stop_seconds: 10.0
      control_group: null
      main_pid: null
      holder_pids: [4242, 4243]
      escaped_holder_pids: []
      holders_inside_control_group: true
      leaves_orphans: true
      drop_ins: []
      hardening_overridden: false
      findings:
        - "KillMode=process: a stop signals only the main process; the workers it started outlive the stop and keep their GPUs"
        - "2 process(es) of the stopped unit still hold GPUs (4242, 4243): orphans of an earlier stop"
  contains:
    unit:
      description: The unit's name.
      type: str
      sample: vllm.service
    load_state:
      description: C(loaded), C(not-found) and so on.
      type: str
      sample: loaded
    active_state:
      description: C(active), C(inactive), C(failed) and so on.
      type: str
      sample: inactive
    kill_mode:
      description: The unit's C(KillMode).
      type: str
      sample: process
    send_sigkill:
      description: The unit's C(SendSIGKILL).
      type: bool
      sample: true
    timeout_stop_seconds:
      description: The unit's C(TimeoutStopSec) in seconds; null for infinity.
      type: float
      sample: 10.0
    control_group:
      description: The unit's control group while it runs.
      type: str
      sample: /system.slice/vllm.service
    main_pid:
      description: The unit's main process, or null when it is not running.
      type: int
      sample: 4240
    holder_pids:
      description: GPU holders inside the unit's control group.
      type: list
      elements: int
      sample: [4242, 4243]
    escaped_holder_pids:
      description: GPU holders that the unit's main process started but that live in another control group.
      type: list
      elements: int
      sample: []
    holders_inside_control_group:
      description: Whether every GPU holder that the unit started lives inside its control group.
      type: bool
      sample: true
    leaves_orphans:
      description: Whether a stop of the unit would leave GPU holders behind.
      type: bool
      sample: true
    drop_ins:
      description: The unit's drop-in files, in the order systemd reads them.
      type: list
      elements: str
      sample: [/etc/systemd/system/vllm.service.d/50-gpuops-reclaim.conf, /etc/systemd/system/vllm.service.d/override.conf]
    hardening_overridden:
      description: Whether a drop-in that sorts after the role's hardening drop-in (C(50-gpuops-reclaim.conf)), such
        as the C(override.conf) of C(systemctl edit), undoes its KillMode or SendSIGKILL. The finding names it.
      type: bool
      sample: false
    findings:
      description: Why, one sentence per finding.
      type: list
      elements: str
      sample: ["SendSIGKILL=no: a process that ignores SIGTERM survives the stop"]
nvml_available:
  description: Whether NVML could be used to find the GPU holders.
  returned: always
  type: bool
  sample: true
msg:
  description: A one-line summary.
  returned: always
  type: str
  sample: "2 unit(s) audited; 1 leave(s) GPU holders behind on stop: vllm.service (KillMode=process)"
'''

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import answer, argument_spec, missing_library
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.unit_audit import audit


def main():
    options = dict(
        units=dict(type='list', elements='str', default=[]),
        fail_on_orphaning=dict(type='bool', default=False),
        ignore_missing=dict(type='bool', default=False),
    )
    module = AnsibleModule(argument_spec=argument_spec(options, gpus=False), supports_check_mode=True)
    missing = missing_library(require_nvml=False)
    if missing:
        module.fail_json(msg=missing_required_lib(missing[0]), exception=missing[1])
    answer(module, audit)


if __name__ == '__main__':
    main()
