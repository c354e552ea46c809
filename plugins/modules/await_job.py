#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: await_job
short_description: Wait a few seconds, quietly, for an async job, then answer as async_status
version_added: 0.1.0
description:
  - Asks M(ansible.builtin.async_status) about the job O(jid) every O(poll_interval) seconds until the job has
    ended or O(wait_seconds) have passed, and returns its last answer, so that C(until) and C(retries) print one
    line per O(wait_seconds) while the job runs, and nothing extra when it ends within the first try.
  - M(ansible.builtin.async_status) alone answers at once, so a job of a second would print a retry line and then
    sleep for the whole C(delay).
  - The gpu_reclaim role awaits its long waits with it (the release, the proof, C(systemctl stop)).
extends_documentation_fragment:
  - gpuops.reclaim.attributes
  - gpuops.reclaim.attributes.read_only
attributes:
  action:
    support: full
    description: An action plugin that runs M(ansible.builtin.async_status) on the host.
options:
  jid:
    description: The C(ansible_job_id) of the task started with C(async) and C(poll=0).
    type: str
    required: true
  wait_seconds:
    description: How long to wait for the job before answering that it still runs. More than 0, at most 60.
    type: float
    default: 4.5
  poll_interval:
    description: How often to ask about the job within O(wait_seconds). More than 0, at most O(wait_seconds).
    type: float
    default: 0.5
notes:
  - Like M(ansible.builtin.async_status), it does not remove the job's file once the job has ended.
seealso:
  - module: ansible.builtin.async_status
'''

EXAMPLES = r'''
- name: Start the release as a job
  gpuops.reclaim.gpu_reclaim:
    grace_seconds: 30
  async: 120
  poll: 0
  register: __release

- name: Wait for the release (a line every 4.5 s while it runs)
  gpuops.reclaim.await_job:
    jid: "{{ __release.ansible_job_id }}"
  register: __release
  until: __release.finished
  retries: 30
  delay: 0
'''

RETURN = r'''
finished:
  description: Whether the job has ended. The job's own result keys come with it once it has.
  returned: always
  type: bool
  sample: true
started:
  description: Whether the job has started.
  returned: always
  type: bool
  sample: true
ansible_job_id:
  description: The job's id.
  returned: always
  type: str
  sample: j123456789.4242
'''
