#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_assert_free
short_description: Prove that NVIDIA GPUs are free, or fail with a clear account of why not
version_added: 0.1.0
description:
  - The last check before a model is deployed. Succeeds only when every selected GPU is free, and otherwise
    fails with one line per busy GPU naming its memory and holders, followed by the operator's next step.
  - "A GPU is free when both hold: its used memory (NVML v2 struct, memory reserved by the driver excluded) is
    at most O(max_used_percent) of its total memory when that is given, otherwise at most O(max_used_mib); and
    no compute process and no NVML graphics process holds it, apart from the holders named in O(allow)."
  - Monitoring clients that hold a device node but no memory (kind V(client) in
    M(gpuops.reclaim.nvidia_holders)) never make a GPU busy.
  - Waits up to O(timeout_seconds), looking every O(poll_interval) seconds, and returns as soon as the GPUs are
    free. RV(waited_seconds) tells how long it waited.
  - The next step in the message is to run M(gpuops.reclaim.gpu_reclaim) when holders are left; and a GPU reset
    or a reboot when a holder is in state D (it cannot be killed) or when memory is held with no holder (a
    stuck context).
  - With O(settle_seconds), the GPUs must then stay free for that long; see O(settle_seconds).
  - This module only reads. It never signals a process.
  - The full description of every option is in C(docs/modules.md), shipped with the collection.
extends_documentation_fragment:
  - gpuops.reclaim.attributes
  - gpuops.reclaim.attributes.read_only
  - gpuops.reclaim.gpu_selection
  - gpuops.reclaim.nvml
options:
  max_used_mib:
    description:
      - The most memory, in MiB, that a free GPU may show as used. Must be 0 or more.
    type: int
  max_used_percent:
    description:
      - The most memory, as a percentage of the GPU's total memory (0 to 100), that a free GPU may show as used.
    type: float
  allow:
    description:
      - Holders whose holding is accepted, for example an exporter that keeps a context open.
    type: list
    elements: str
    default: []
  left_alone:
    description:
      - The holders a release just left alone on purpose, as M(gpuops.reclaim.gpu_reclaim) returns them in
        RV(ignore:skipped_holders) and RV(ignore:protected), each a dict with C(pid) and C(reason).
    type: list
    elements: dict
  released_gpus:
    description:
      - After a release, the GPU indices it released holders of, where memory may still be on its way back (the
        driver can take seconds to free it, for example with much pinned host memory).
    type: list
    elements: int
  timeout_seconds:
    description:
      - How long to wait for the GPUs to become free, from 0 to 3600 seconds. V(0) checks once. A boolean is an
        error.
    type: raw
    default: 0.0
  poll_interval:
    description:
      - Seconds between two looks while waiting, from 0.005 to 5. A boolean is an error.
    type: raw
    default: 0.05
  settle_seconds:
    description:
      - Once the GPUs first read free, how long they must stay free, from 0 to 600 seconds. V(0) proves one instant
        only.
    type: raw
    default: 0.0
  require_nvml:
    description:
      - Without NVML, memory cannot be read, so freedom cannot be proven. V(true) fails the task then, saying why;
        V(false) accepts the C(/proc) view alone and warns.
    type: bool
    default: true
requirements:
  - psutil >= 5.8 on the managed host
seealso:
  - module: gpuops.reclaim.gpu_reclaim
  - module: gpuops.reclaim.nvidia_holders
'''

EXAMPLES = r'''
- name: Prove every GPU free before deploying
  gpuops.reclaim.gpu_assert_free:

- name: Wait up to 30 s for GPUs 0 to 3, accepting the exporter
  gpuops.reclaim.gpu_assert_free:
    gpus: ["0", "1", "2", "3"]
    timeout_seconds: 30
    allow:
      - dcgm-exporter

- name: Accept up to 1 % of memory used
  gpuops.reclaim.gpu_assert_free:
    max_used_percent: 1
  register: __gpu_assert_free

- name: Show how long it took
  ansible.builtin.debug:
    msg: "free after {{ __gpu_assert_free.waited_seconds }} s"
'''

RETURN = r'''
free:
  description: Whether every selected GPU is free.
  returned: always
  type: bool
  sample: false
msg:
  description: On success a summary; on failure one line per busy GPU, then the next steps.
  returned: always
  type: str
  sample: "GPU 5 (GPU-8cdf\u2026) busy: 96798 MiB used; holders: pid 233730 VLLM::Worker_TP5 (orphaned, parent 1, state S)"
waited_seconds:
  description: How long the module waited for the GPUs to become free.
  returned: always
  type: float
  sample: 0.42
gpus:
  description: Per selected GPU, the verdict.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: GPU index.
      type: int
      sample: 5
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-8cdf1234-0000-4000-8000-000000000005
    memory_used_mib:
      description: Used memory in MiB (reserved excluded), or V(null) without NVML.
      type: int
      sample: 96798
    memory_total_mib:
      description: Total memory in MiB, or V(null) without NVML.
      type: int
      sample: 143771
    limit_mib:
      description: The most memory this GPU may show as used and still be free.
      type: float
      sample: 64
    free:
      description: Whether this GPU is free.
      type: bool
      sample: false
    holder_pids:
      description: PIDs of the holders that keep it busy.
      type: list
      elements: int
      sample: [233730]
    allowed_pids:
      description: PIDs of holders accepted through O(allow).
      type: list
      elements: int
      sample: []
    reasons:
      description: Why it is busy.
      type: list
      elements: str
      sample: ["held by 1 process", "96798 MiB used, more than 64 MiB"]
  sample:
    - index: 5
      uuid: GPU-8cdf1234-0000-4000-8000-000000000005
      memory_used_mib: 96798
      memory_total_mib: 143771
      limit_mib: 64
      free: false
      holder_pids: [233730]
      allowed_pids: []
      reasons: ["held by 1 process", "96798 MiB used, more than 64 MiB"]
holders:
  description: The holder records (as M(gpuops.reclaim.nvidia_holders) returns them) that keep a selected GPU
    busy, ordered by PID.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 233730
      ppid: 1
      title: VLLM::Worker_TP5
      state: sleeping
      gpus: [5]
      kind: compute
      orphaned: true
time_to_free_seconds:
  description: Seconds from the start until the GPUs first read free, or V(null) when they never did.
  returned: always
  type: float
  sample: 0.12
settle_seconds_observed:
  description: Seconds the GPUs were watched after they first read free (the settle window, or less when a holder
    came back and ended it). V(0) without O(settle_seconds).
  returned: always
  type: float
  sample: 2.01
nvml_available:
  description: Whether NVML could be used.
  returned: always
  type: bool
  sample: true
uid:
  description: The effective user id the module ran as. Without root (V(0)) it sees only what that user may, so
    the role fails early when it needs root.
  returned: always
  type: int
  sample: 0
'''

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import answer, argument_spec, missing_library
from ansible_collections.gpuops.reclaim.plugins.module_utils._base.checks import seconds_spec
from ansible_collections.gpuops.reclaim.plugins.module_utils._base.checks import DEFAULT_POLL_INTERVAL
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.assert_free import prove


def main():
    spec = argument_spec(dict(
        max_used_mib=dict(type='int'),
        max_used_percent=dict(type='float'),
        allow=dict(type='list', elements='str', default=[]),
        left_alone=dict(type='list', elements='dict'),
        released_gpus=dict(type='list', elements='int'),
        timeout_seconds=seconds_spec(0.0),
        poll_interval=seconds_spec(DEFAULT_POLL_INTERVAL),
        settle_seconds=seconds_spec(0.0),
    ))
    spec['require_nvml'] = dict(type='bool', default=True)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True,
                           mutually_exclusive=[('max_used_mib', 'max_used_percent')])
    # Who the module runs as comes first: without root, installing a missing library is not the next step.
    missing = missing_library(module.params['require_nvml'])
    if missing:
        module.fail_json(msg=missing_required_lib(missing[0]), exception=missing[1], uid=os.geteuid())
    answer(module, prove)


if __name__ == '__main__':
    main()
