# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which GPUs the role's reset stage resets, and which GPU clients block that reset.

Reads an ``nvidia_holders`` result as the module returns it. A GPU is stuck
when it holds more memory than the proof allows and no compute holder is left
on it: the memory outlived every process (a stuck context). Any process that
still holds a stuck GPU as a client, or a protected process on it, blocks the
reset; the module's own processes never do. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _on(holder, index):
    return index in (holder.get('gpus') or ())


def stuck_gpus(holders_result, max_used_mib):
    """The GPU records of ``holders_result`` whose memory outlived every compute holder."""
    holders = holders_result.get('holders') or []
    return [gpu for gpu in holders_result.get('gpus') or []
            if gpu.get('memory_used_mib', 0) > max_used_mib
            and not any(holder.get('kind') == 'compute' and _on(holder, gpu['index']) for holder in holders)]


def reset_plan(holders_result, max_used_mib):
    """``stuck`` GPU records, their ``indices``, and the ``blockers`` (holder records) of their reset."""
    stuck = stuck_gpus(holders_result, max_used_mib)
    indices = [gpu['index'] for gpu in stuck]
    blockers = [holder for holder in holders_result.get('holders') or []
                if (holder.get('protected') or holder.get('kind') == 'client') and not holder.get('is_self')
                and any(_on(holder, index) for index in indices)]
    return {'stuck': stuck, 'indices': indices, 'blockers': blockers}
