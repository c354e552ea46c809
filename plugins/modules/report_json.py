#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
module: report_json
short_description: Save a report as JSON on the controller
version_added: 0.1.0
description:
  - Writes O(content) as indented JSON, keys sorted, to O(dest) on the controller. The folder is created when
    missing (mode C(0755)); the file (mode C(0644)) is written under a random name beside its final name and
    renamed into place, so a reader sees the old report or the new one, never half of one.
  - No link is followed that another user could have planted. Every directory of O(dest) is opened without
    following a link, and one that another user can write (owned by anyone but root or the user Ansible runs as,
    or group or world writable unless it is sticky and root's, as C(/tmp)) fails the task before anything is
    written in it. A link on the way is followed only when it sits in a directory that passed that test; a link
    planted at O(dest) is replaced, never followed.
  - An action that runs entirely on the controller, in Ansible's own process. Nothing is sent to the managed
    host, and the controller is never escalated, whatever become asks of the hosts.
  - The gpuops.reclaim.gpu_reclaim role saves its per-host and fleet summaries with it
    (C(gpu_reclaim_report_dir)).
author:
  - gpuops.reclaim contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.reclaim.attributes
attributes:
  action:
    support: full
    description: Runs on the controller as an action plugin.
  check_mode:
    support: none
    details:
      - The report describes the run, check mode included, so it is written in check mode too.
  diff_mode:
    support: none
    details:
      - No diff is shown.
  idempotent:
    support: full
    details:
      - Always reports no change; writing the same report again leaves the same file.
options:
  content:
    description:
      - The data to save. Anything JSON can represent.
    type: raw
    required: true
  dest:
    description:
      - The report's path on the controller.
    type: path
    required: true
'''

EXAMPLES = r'''
- name: Save the fleet summary beside the per-host reports
  gpuops.reclaim.report_json:
    content: "{{ hostvars | gpuops.reclaim.fleet_summary }}"
    dest: /var/log/gpu-reclaim/fleet.json
  run_once: true
'''

RETURN = r'''
dest:
  description: The path written.
  returned: success
  type: str
  sample: /var/log/gpu-reclaim/fleet.json
'''
