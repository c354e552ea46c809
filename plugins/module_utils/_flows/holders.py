# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discover + classify: the whole of ``nvidia_holders`` but its argument spec.

``holders(host, params)`` checks the input, takes one look (``module_harness.look``) and returns the
snapshot as the module's result, each holder marked ``in_scope`` when the release's own plan
(``_plan.plan.plan_release``) for the scope options would signal it. It only reads.

``host`` is the module (an ``AnsibleModule``): ``warn``, ``get_bin_path`` and ``run_command`` are used.
This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from .module_harness import check_options, look, scope_of
from .._plan.plan import plan_release

WITHOUT_NVML = ('NVML cannot be used (%s). Showing the /proc view only: no GPU memory figures, GPU indices '
                'are /dev/nvidiaN minor numbers, and processes that hold no device node open are not seen.')


def holders(host, params):
    """``(result, failed)``: who holds the selected GPUs; never failed (bad input raises ``Failure``)."""
    check_options(params)
    scope_of(params)
    found = look(host, params, WITHOUT_NVML)
    snapshot = found.snapshot
    return dict(
        changed=False,
        msg=snapshot.summary(),
        gpus=snapshot.gpus,
        holders=judged(snapshot.holders, scope_of(params, found.indices, euid=os.geteuid())),
        nvml_available=snapshot.nvml_available,
        driver_version=snapshot.driver_version,
        unreadable_processes=snapshot.unreadable,
    ), False


def judged(records, scope):
    """Each holder record with ``in_scope``: whether the release's plan for ``scope`` would signal it (a target,
    or a keeper held back for a later round), as ``gpu_reclaim`` plans it (pods left alone)."""
    planned = set(plan_release(records, scope).planned_pids)
    return [dict(record, in_scope=record['pid'] in planned) for record in records]
