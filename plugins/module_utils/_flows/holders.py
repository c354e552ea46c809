# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discover + classify: the whole of ``nvidia_holders`` but its argument spec.

``holders(host, params)`` checks the input, takes one look (``module_harness.look``) and returns the
snapshot as the module's result. It only reads.

``host`` is the module (an ``AnsibleModule``): ``warn``, ``get_bin_path`` and ``run_command`` are used.
This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .module_harness import check_options, look

WITHOUT_NVML = ('NVML cannot be used (%s). Showing the /proc view only: no GPU memory figures, GPU indices '
                'are /dev/nvidiaN minor numbers, and processes that hold no device node open are not seen.')


def holders(host, params):
    """``(result, failed)``: who holds the selected GPUs; never failed (bad input raises ``Failure``)."""
    check_options(params)
    snapshot = look(host, params, WITHOUT_NVML).snapshot
    return dict(
        changed=False,
        msg=snapshot.summary(),
        gpus=snapshot.gpus,
        holders=snapshot.holders,
        nvml_available=snapshot.nvml_available,
        driver_version=snapshot.driver_version,
        unreadable_processes=snapshot.unreadable,
    ), False
