# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):

    # Matches PROTECTION_ARGUMENT_SPEC and DEFAULT_PROTECTED_EXECUTABLES in
    # plugins/module_utils/_holders.py.
    DOCUMENTATION = r'''
options:
  protect:
    description:
      - Executable names to protect in addition to the defaults. A protected holder is reported
        but never signalled.
      - Names are compared with the basename of the process's executable (C(/proc/PID/exe), or
        its C(comm) when the executable cannot be read), never with its title, which any process
        can set. Shell-style globs such as V(dcgm*) are allowed.
      - Protected by default are C(nvidia-persistenced), C(nv-hostengine), C(dcgm-exporter),
        C(nv-fabricmanager), C(nvidia-fabricmanager), C(nvidia-device-plugin),
        C(gpu-feature-discovery), C(Xorg) and C(Xwayland).
      - Always protected, whatever the options say, are PID 1, kernel threads, and the module's
        own process with all its ancestors.
    type: list
    elements: str
    default: []
  unprotect:
    description:
      - Default protected executable names to protect no longer, for example V(Xorg) on a host
        whose display server may be stopped. Globs are allowed.
      - This cannot unprotect PID 1, kernel threads, or the module's own process and its
        ancestors.
      - A name that is not among the defaults has no effect and is reported in the warnings.
    type: list
    elements: str
    default: []
'''
