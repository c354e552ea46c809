#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_reclaim
short_description: Release NVIDIA GPUs by a scoped, protected escalation that stops as soon as the memory is back
version_added: 0.1.0
description:
  - Finds every process that holds the selected GPUs (the same discovery as M(gpuops.reclaim.nvidia_holders)),
    decides which of them to release, and walks each one along an escalation ladder until its GPU memory is back.
  - "The default ladder: send SIGTERM and wait up to O(grace_seconds); freeze what is left (SIGSTOP of the holder
    and all its descendants, rescanned until no new process appears) so that nothing can fork or respawn; send
    SIGKILL to the frozen trees and wait up to O(kill_seconds)."
  - Waiting polls NVML and C(/proc) every O(poll_interval) seconds and ends the moment every targeted holder has
    exited or is a zombie, NVML lists none of them, and each GPU's used memory is back to what the holders left
    alone account for (plus 64 MiB). There is no fixed sleep.
  - "Never signalled, in any mode: protected holders (see O(protect)), PID 1, kernel threads, and the module's own
    process with all its ancestors. They appear in RV(protected) with the reason."
  - A signal goes only to the process that was discovered. Right before each signal the process's start time is
    compared with the one seen at discovery, through a pidfd where the kernel has one, so that a PID reused by
    another process is never hit.
  - "What cannot be released is reported, not waited on forever: a holder still alive after the last step of the
    ladder (typically in state D inside the driver), or memory still used after every holder is gone (a stuck
    context), fails the task naming the GPU, the pid, its state and wchan, and the next step: a GPU reset or a
    reboot. With O(fail_on_survivors=false) they are returned instead."
  - How the rest works (each holder's own clock, slow releases, holders that appear during the release, supervisors
    and sources, pods, a controller that goes away, the guardian that thaws what was frozen) and the full text of
    every option are in C(docs/modules.md), shipped with the collection.
  - Bad input fails before anything is signalled, naming the option and the value.
extends_documentation_fragment:
  - gpuops.reclaim.attributes
  - gpuops.reclaim.gpu_selection
  - gpuops.reclaim.nvml
  - gpuops.reclaim.protection
  - gpuops.reclaim.scope
attributes:
  check_mode:
    support: full
    details:
      - Check mode computes the same plan, signals nothing, and returns in RV(released) the holders a real run
        would signal, each with the descendants its tree would lose (C(descendants_killed)), and the supervisors
        that would be frozen and killed. C(changed) predicts the real run.
  diff_mode:
    support: full
    details:
      - The diff lists the holders of the selected GPUs before and after the release, and the descendants
        killed (in check mode, to be killed) with them.
  idempotent:
    support: full
    details:
      - Once the holders are gone there is nothing to signal, and C(changed) is V(false).
options:
  on_shared_holder:
    description:
      - What to do when a holder to release also holds GPUs outside O(gpus). V(release) releases it (it is
        listed in RV(shared)); V(fail) fails before anything is signalled.
    type: str
    choices: [release, fail]
    default: release
  grace_seconds:
    description:
      - How long SIGTERM may take before the holder is frozen and killed, from 0 to 3600 seconds.
    type: raw
    default: 10.0
  kill_seconds:
    description:
      - How long to wait after SIGKILL for the holder to exit and its memory to come back, from 0 to 3600 seconds. A
        holder still alive then is a survivor.
    type: raw
    default: 10.0
  ladder:
    description:
      - A custom escalation ladder, replacing the default built from O(grace_seconds) and O(kill_seconds).
    type: list
    elements: dict
  poll_interval:
    description:
      - Seconds between two looks at NVML and C(/proc) while waiting, from 0.005 to 5. A boolean is an error.
    type: raw
    default: 0.05
  release_pods:
    description:
      - Release holders that run in a Kubernetes pod too; by default they are skipped (kubelet restarts them, so drain the
        node).
    type: bool
    default: false
  fail_on_survivors:
    description:
      - Whether survivors and GPUs with a stuck context fail the task. With V(false) they are returned in
        RV(survivors) and RV(stuck_gpus) and the task succeeds.
    type: bool
    default: true
  only_if_busy:
    description:
      - Release only when a selected GPU is busy, judged as M(gpuops.reclaim.gpu_assert_free) judges it; the picture is
        returned in RV(before).
    type: bool
    default: false
  max_used_mib:
    description:
      - With O(only_if_busy) or O(prove), the most memory in MiB a selected GPU may show and still be free; 64 when
        not set.
    type: int
  allow:
    description:
      - With O(only_if_busy) or O(prove), holders whose holding is accepted, as in M(gpuops.reclaim.gpu_assert_free).
    type: list
    elements: str
    default: []
  prove:
    description:
      - After the release, prove the selected GPUs free as M(gpuops.reclaim.gpu_assert_free) does (NVML needed), in
        RV(proof); GPUs not proven free fail the task. Not in check mode, nor on GPUs O(only_if_busy) found free.
    type: bool
    default: false
  proof_timeout_seconds:
    description:
      - With O(prove), how long to wait for the GPUs to become free after the release, from 0 to 3600 seconds; 60
        when not set.
    type: raw
  settle_seconds:
    description:
      - With O(prove), once the GPUs first read free, how long they must stay free, from 0 to 600 seconds; 0 when
        not set.
    type: raw
  require_root:
    description:
      - Fail before anything is looked at or signalled when the module does not run as root. The failure and
        every result carry RV(uid).
    type: bool
    default: false
  lock_timeout:
    description:
      - Seconds to wait for the host lock C(/run/lock/gpuops-reclaim.lock), as C(apt) and C(dnf) wait for theirs.
    type: raw
    default: 60.0
requirements:
  - psutil >= 5.8 on the managed host
  - Linux 5.3 and Python 3.9 for pidfd signalling; older systems fall back to kill() right after the identity check
notes:
  - As a user other than root, holders of other users are listed in RV(skipped_holders) with the reason
    C(permission denied) and never signalled.
  - Memory comes back long before a killed process disappears, since an orphan stays a zombie until its parent
    reaps it. A zombie counts as released.
seealso:
  - module: gpuops.reclaim.nvidia_holders
  - module: gpuops.reclaim.gpu_assert_free
'''

EXAMPLES = r'''
- name: Release every compute holder of every GPU
  gpuops.reclaim.gpu_reclaim:
  register: __gpu_reclaim

- name: Release the vLLM workers on GPUs 0 to 3, with 5 s of grace
  gpuops.reclaim.gpu_reclaim:
    gpus: ["0", "1", "2", "3"]
    match: "^VLLM::"
    grace_seconds: 5
    kill_seconds: 5

- name: Release what a unit left behind, refusing holders that also use other GPUs
  gpuops.reclaim.gpu_reclaim:
    systemd_units:
      - vllm-*.service
    on_shared_holder: fail

- name: A custom ladder, SIGINT first, then SIGTERM, then freeze and kill
  gpuops.reclaim.gpu_reclaim:
    ladder:
      - signal: SIGINT
        wait: 3
      - signal: SIGTERM
        wait: 5
      - action: freeze
      - signal: SIGKILL
        wait: 10

- name: Release the holders of GPUs 0 and 1 only when one of them is busy, and say which were
  gpuops.reclaim.gpu_reclaim:
    gpus: ["0", "1"]
    only_if_busy: true
    max_used_mib: 64
    require_root: true
  register: __gpu_reclaim

- name: Show the GPUs as they were before the release
  ansible.builtin.debug:
    msg: "{{ __gpu_reclaim.before.msg }}"

- name: Release the holders of busy GPUs and prove them free, still free 2 s later, in one task
  gpuops.reclaim.gpu_reclaim:
    only_if_busy: true
    prove: true
    proof_timeout_seconds: 30
    settle_seconds: 2

- name: Report survivors instead of failing, and decide in the play
  gpuops.reclaim.gpu_reclaim:
    fail_on_survivors: false
  register: __gpu_reclaim

- name: Show what could not be released
  ansible.builtin.debug:
    msg: "{{ __gpu_reclaim.survivors | map(attribute='pid') | list }}"
  when: __gpu_reclaim.survivors | length > 0
'''

RETURN = r'''
msg:
  description: A summary line, followed by one line per survivor or stuck GPU with the next step.
  returned: always
  type: str
  sample: released 8 holders of GPU 0, 1, 2, 3, 4, 5, 6, 7 in 0.31 s; 2 protected, 0 skipped
released:
  description:
    - The holders released, ordered by PID. In check mode, the holders a real run would signal, with
      C(last_signal) and C(seconds_to_release) V(null) and C(outcome) V(planned).
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: Process id.
      type: int
      sample: 233730
    ppid:
      description: Parent process id at discovery.
      type: int
      sample: 1
    name:
      description: Command name.
      type: str
      sample: VLLM::Worker_TP
    title:
      description: Command line as set by setproctitle.
      type: str
      sample: VLLM::Worker_TP5
    user:
      description: User name.
      type: str
      sample: vllm
    kind:
      description: V(compute) or V(client).
      type: str
      sample: compute
    state:
      description: Process state at discovery.
      type: str
      sample: sleeping
    gpus:
      description: Indices of every GPU the holder held.
      type: list
      elements: int
      sample: [5]
    gpu_memory_mib:
      description: GPU memory held per GPU index (string key), in MiB.
      type: dict
      sample: {"5": 96798}
    memory_mib:
      description: GPU memory held in all, in MiB.
      type: int
      sample: 96798
    systemd_unit:
      description: The holder's systemd unit, or V(null).
      type: str
      sample: vllm.service
    container:
      description: The holder's container, or V(null).
      type: dict
      sample: null
    last_signal:
      description: The last signal sent to it, or V(null) when it exited before any.
      type: str
      sample: SIGTERM
    seconds_to_release:
      description: Seconds from the start of the release until it was seen exited or a zombie.
      type: float
      sample: 0.21
    outcome:
      description: V(exited), V(zombie) (exited, not yet reaped by its parent), or V(planned) in check mode.
      type: str
      sample: zombie
    shared:
      description: Whether it also held GPUs outside O(gpus).
      type: bool
      sample: false
    skipped_steps:
      description: Ladder steps skipped for it, with the reason (for example C(ignores SIGTERM)) and C(case), one
        of V(sigterm-ignored), V(namespace-init-without-handler), V(stopped) or V(appeared-after-signal).
      type: list
      elements: dict
      sample: [{"signal": "SIGTERM", "reason": "ignores SIGTERM", "case": "sigterm-ignored"}]
    descendants_killed:
      description: PIDs of its descendants frozen and killed with it. In check mode, the descendants that the
        freeze and SIGKILL steps would take with it, judged as the real run judges them (a holder that exits on
        SIGTERM takes none with it).
      type: list
      elements: int
      sample: []
    adopted:
      description: Whether it was no holder at discovery but appeared during the release (for example forked by
        a holder on SIGTERM) and was adopted. Its C(ppid) and C(state) are those seen when it appeared.
      type: bool
      sample: false
  sample:
    - pid: 233730
      ppid: 1
      name: VLLM::Worker_TP
      title: VLLM::Worker_TP5
      user: vllm
      kind: compute
      state: sleeping
      gpus: [5]
      gpu_memory_mib: {"5": 96798}
      memory_mib: 96798
      systemd_unit: null
      container: null
      last_signal: SIGTERM
      seconds_to_release: 0.21
      outcome: zombie
      shared: false
      skipped_steps: []
      descendants_killed: []
      adopted: false
protected:
  description: Holders never signalled, with C(reason), ordered by PID. Same keys as RV(released) without
    the release details, and C(is_self), true for an ancestor of the module (the module's own process,
    which holds the device nodes while NVML is open, is never listed). A process that appeared during the release and is protected
    has a reason that starts with C(appeared during the release).
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 1200
      title: /usr/bin/nv-hostengine
      name: nv-hostengine
      gpus: [0, 1]
      kind: client
      reason: default protected executable nv-hostengine
      is_self: false
skipped_holders:
  description: Holders left alone, with C(reason) such as V(out of scope), V(kind client not selected),
    V(user not selected), V(title does not match), V(systemd unit not selected), V(container not selected),
    V(already exited), V(permission denied (owned by user bob)) or
    V(listed by NVML but not visible as a GPU holder here (another PID namespace?)) (a PID NVML lists whose process
    here holds no NVIDIA device node, seen from outside the host's PID namespace; never signalled), ordered by PID. For a process that appeared
    during the release the reason starts with C(appeared during the release), for example
    V(appeared during the release; title does not match).
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4100
      title: python train.py
      gpus: [6]
      reason: out of scope
shared:
  description: PIDs of released holders that also held GPUs outside O(gpus).
  returned: always
  type: list
  elements: int
  sample: []
survivors:
  description: Targeted holders still alive after the ladder, or that could not be signalled, with
    C(state), C(wchan), C(last_signal), C(reason) and C(adopted) (see RV(released)). A process that appeared
    during the release after the limit of 64 was reached has C(adopted=true), C(last_signal=null) and a reason
    saying it was not signalled.
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 233731
      title: VLLM::EngineCore
      gpus: [5]
      state: disk-sleep
      wchan: uvm_spin_loop
      last_signal: SIGKILL
      reason: still alive after SIGKILL and its wait
      adopted: false
stuck_gpus:
  description: Selected GPUs whose memory stayed used after every targeted holder was gone (a stuck context).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 5
      memory_used_mib: 20480
      reason: 20480 MiB used
supervisors:
  description: Parents of targeted holders that were frozen first and killed with them, with C(children),
    C(reason) and C(outcome).
  returned: always
  type: list
  elements: dict
  sample:
    - pid: 4000
      ppid: 1
      name: python3
      title: python3 supervisor.py
      user: root
      create_time: 1767000000.5
      children: [4001]
      reason: "parent whose children are all targeted holders: it could respawn them"
      outcome: frozen and killed
sources:
  description:
    - What could start a released holder again, and what was done about it. C(kind) is V(parent), V(systemd),
      V(container) or V(pod); C(pid) is the parent's (or the unit's main) process, C(title) its command line,
      C(unit), C(container) and C(pod) where they apply, C(holder_pids) the holders it owns.
    - "C(action) is V(frozen and killed), V(frozen, then thawed), V(stopped), V(stop failed: ...), V(left alone),
      or in check mode V(would be frozen and killed), V(would be frozen, then thawed), V(would be stopped).
      C(reason) says why."
    - "V(not a container source) is a container that a holder's cgroup names but its runtime does not confirm: it
      knows no such container, the container is not running, or the holder is none of its processes (neither
      its main process or a descendant, nor in C(container top)). Nothing is stopped then; C(reason) says which."
  returned: always
  type: list
  elements: dict
  sample:
    - kind: parent
      pid: 4000
      title: "bash -c while true; do python3 worker.py; done"
      unit: null
      container: null
      pod: null
      holder_pids: [4001]
      action: frozen and killed
      reason: "parent whose children are all targeted holders: it could respawn them"
    - kind: systemd
      pid: 3990
      title: null
      unit: trainer.service
      container: null
      pod: null
      holder_pids: [4001]
      action: stopped
      reason: "active/running (Restart=always) owns the holders: stopped through systemd so that it cannot start
        them again"
gpus:
  description: Per selected GPU, memory before and after. C(memory_used_mib_after) is V(null) when NVML was
    not polled (no NVML, or check mode with nothing to do keeps the value before).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 5
      uuid: GPU-8cdf1234-0000-4000-8000-000000000005
      memory_used_mib_before: 96798
      memory_used_mib_after: 0
steps:
  description: The ladder steps that ran, with the PIDs signalled, the holders that skipped the step and why,
    when the step started (seconds from the start of the release) and how long it lasted.
  returned: always
  type: list
  elements: dict
  sample:
    - name: SIGTERM
      signal: SIGTERM
      pids: [233730, 233731]
      skipped: [{"pid": 233732, "reason": "ignores SIGTERM"}]
      started_at: 0.0
      seconds: 0.21
    - name: freeze
      signal: SIGSTOP
      pids: [233732]
      skipped: []
      started_at: 0.0
      seconds: 0.0
elapsed_seconds:
  description: Seconds the module took, discovery included.
  returned: always
  type: float
  sample: 0.34
filter_warnings:
  description: One text per value of O(users), O(systemd_units) or O(containers) that names nothing on the host
    (no such user, no unit matches, no process runs in such a container), so that a typo that releases
    nothing says so. Also given as warnings.
  returned: always
  type: list
  elements: str
  sample: ["users: nosuchuser is not a user on this host; no holder can match it"]
nvml_available:
  description: Whether NVML could be used for discovery.
  returned: always
  type: bool
  sample: true
uid:
  description: The effective user id the module runs as, also when it fails.
  returned: always
  type: int
  sample: 0
lock_waited_seconds:
  description: Seconds the run waited for the host lock (0 when it took none, in check mode or not as root).
  returned: success
  type: float
  sample: 0.0
lock_holder_pid:
  description: When the host lock was not free within O(lock_timeout), the PID of the run that holds it.
  returned: when the lock could not be taken
  type: int
  sample: 48213
proof:
  description:
    - With O(prove), the proof after the release, in the shape of M(gpuops.reclaim.gpu_assert_free)'s result; V(null)
      without O(prove), in check mode, and when O(only_if_busy) found the GPUs free at the start.
    - Its C(free), C(gpus), C(holders), C(msg) and C(nvml_available) mean what they mean in RV(before), as seen at
      the end of the wait; the wait adds its own seconds.
  returned: always
  type: dict
  contains:
    waited_seconds:
      description: Seconds waited until the GPUs read free, or until the deadline.
      type: float
      returned: always
    time_to_free_seconds:
      description: Seconds until the GPUs first read free, or V(null).
      type: float
      returned: always
    settle_seconds_observed:
      description: Seconds the GPUs were watched after they first read free.
      type: float
      returned: always
  sample:
    free: true
    gpus: []
    holders: []
    waited_seconds: 0.05
    time_to_free_seconds: 0.05
    settle_seconds_observed: 2.0
    msg: "GPU 0 free, and stayed free for 2.00 s"
    nvml_available: true
free_at_start:
  description: With O(only_if_busy), whether every selected GPU was already free, so that nothing was done; else
    V(null).
  returned: always
  type: bool
  sample: false
before:
  description: With O(only_if_busy), the selected GPUs as M(gpuops.reclaim.gpu_assert_free) would have judged them
    before the release, in its result's shape.
  returned: when O(only_if_busy) is true
  type: dict
  contains:
    free:
      description: Whether every selected GPU was free.
      type: bool
      returned: always
    gpus:
      description: One entry per selected GPU, as M(gpuops.reclaim.gpu_assert_free) returns them.
      type: list
      elements: dict
      returned: always
    holders:
      description: The holders that kept a selected GPU busy.
      type: list
      elements: dict
      returned: always
    msg:
      description: One line per busy GPU, with its holders and the next steps, or which GPUs were free.
      type: str
      returned: always
    nvml_available:
      description: Whether NVML could be used for that picture.
      type: bool
      returned: always
  sample:
    free: false
    gpus:
      - index: 0
        uuid: GPU-8cdf1234-0000-4000-8000-000000000000
        memory_used_mib: 41570
        memory_total_mib: 143771
        limit_mib: 64
        free: false
        holder_pids: [654]
        allowed_pids: []
        reasons: ["held by 1 process", "41570 MiB used, more than 64 MiB"]
    holders:
      - pid: 654
        ppid: 1
        name: VLLM::Worker_TP
        title: VLLM::Worker_TP0
        kind: compute
        gpus: [0]
        gpu_memory_mib: {"0": 41570}
    msg: "GPU 0 (GPU-8cdf\u2026) busy: 41570 MiB used; holders: pid 654 VLLM::Worker_TP0 (orphaned, parent 1, state S)"
    nvml_available: true
'''

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import answer, argument_spec, missing_library
from ansible_collections.gpuops.reclaim.plugins.module_utils._host.lock import DEFAULT_LOCK_TIMEOUT
from ansible_collections.gpuops.reclaim.plugins.module_utils._base.checks import DEFAULT_POLL_INTERVAL, seconds_spec
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import DEFAULT_GRACE_SECONDS, DEFAULT_KILL_SECONDS
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import ON_SHARED_HOLDER
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.reclaim import reclaim


def main():
    options = dict(
        on_shared_holder=dict(type='str', choices=list(ON_SHARED_HOLDER), default='release'),
        grace_seconds=seconds_spec(DEFAULT_GRACE_SECONDS),
        kill_seconds=seconds_spec(DEFAULT_KILL_SECONDS),
        ladder=dict(type='list', elements='dict'),
        poll_interval=seconds_spec(DEFAULT_POLL_INTERVAL),
        fail_on_survivors=dict(type='bool', default=True),
        release_pods=dict(type='bool', default=False),
        only_if_busy=dict(type='bool', default=False),
        max_used_mib=dict(type='int'),
        allow=dict(type='list', elements='str', default=[]),
        prove=dict(type='bool', default=False),
        proof_timeout_seconds=dict(type='raw'),
        settle_seconds=dict(type='raw'),
        require_root=dict(type='bool', default=False),
        lock_timeout=seconds_spec(DEFAULT_LOCK_TIMEOUT),
    )
    module = AnsibleModule(argument_spec=argument_spec(options, protection=True, scope=True), supports_check_mode=True)
    missing = missing_library(module.params['require_nvml'])
    if missing:
        module.fail_json(msg=missing_required_lib(missing[0]), exception=missing[1], uid=os.geteuid())
    answer(module, reclaim, diff=module._diff)


if __name__ == '__main__':
    main()
