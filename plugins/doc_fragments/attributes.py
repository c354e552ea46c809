# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # What every module's attributes mean, and who answers for every module. A module adds its own
    # support and details, or uses READ_ONLY.
    DOCUMENTATION = r'''
author:
  - gpuops.reclaim contributors (@gpuops)
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation
      indicates no change.
'''

    # A module that only reads.
    READ_ONLY = r'''
attributes:
  check_mode:
    support: full
    details:
      - The module only reads, so check mode behaves exactly as a normal run, failing included.
  diff_mode:
    support: N/A
    details:
      - The module never changes anything, so there is no diff.
  idempotent:
    support: full
    details:
      - The module never changes anything.
'''
