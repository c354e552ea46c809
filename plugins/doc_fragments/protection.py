# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.module_utils._protection import (
    DEFAULT_PROTECTED_EXECUTABLES,
    DEFAULT_PROTECTED_UNITS,
)


def _listed(names):
    """``C(a), C(b) and C(c)``."""
    named = ['C(%s)' % name for name in names]
    return '%s and %s' % (', '.join(named[:-1]), named[-1])


class ModuleDocFragment(object):

    # Matches PROTECTION_ARGUMENT_SPEC in plugins/module_utils/_protection.py. The default
    # names are filled in below from its lists; a unit test checks the rendered lists.
    DOCUMENTATION = r'''
options:
  protect:
    description:
      - Executable names to protect in addition to the defaults. A protected holder is reported
        but never signalled.
      - Names are compared with the basename of the process's executable (C(/proc/PID/exe)) and,
        for an interpreter such as C(python3), with the basename of the script it runs
        (C(python3 /usr/bin/dcgm-exporter) is C(dcgm-exporter)). Where the executable cannot be
        read, the first word of the command line and C(comm) are used; C(comm) is cut at 15
        characters by the kernel. Names given here work as written. Shell-style globs such as
        V(dcgm*) are allowed.
      - Protected by default are %(executables)s.
      - A default name counts only with facts no other user can forge. The file the process runs is owned by root and writable by root only, in a
        directory chain that only root can write (sticky directories such as C(/tmp) are allowed
        above the file's own directory, never as it). For an interpreter, the script must pass the
        same test and be what the kernel started. The command line starts with the interpreter,
        the script is an absolute path whose C(#!) line names that interpreter, C(comm) is the
        script's name, and the process runs as root or a system account (uid below 1000). A
        title or C(comm) alone never protects.
      - A process the defaults would protect, but which NVML lists as a compute process, is not
        protected and is named in the warnings as suspicious. The GPU services hold no model memory.
      - Always protected, whatever the options say, are PID 1, kernel threads, and the module's
        own process with all its ancestors.
    type: list
    elements: str
    default: []
  protect_units:
    description:
      - Systemd units whose processes are protected, in addition to the defaults. A process is
        in a unit when its control group says so, whatever its executable or title. Only units of
        the system manager count, never one under a user manager (C(user@UID.service)), where any
        user can name a unit as they like. Globs are allowed.
      - Protected by default are %(units)s.
    type: list
    elements: str
    default: []
  unprotect:
    description:
      - Default protected executable or unit names to protect no longer, for example V(Xorg) on a
        host whose display server may be stopped. Globs are allowed.
      - This cannot unprotect PID 1, kernel threads, or the module's own process and its
        ancestors.
      - A name that is not among the defaults has no effect and is reported in the warnings.
      - A name also in O(protect) or O(protect_units) is an error, and so are wildcards that together
        remove every default protected executable or every default protected unit (V(*) for example),
        unless O(unprotect_all_confirmed) is set.
    type: list
    elements: str
    default: []
  unprotect_all_confirmed:
    description:
      - Confirms wildcards in O(unprotect) that remove every default protected executable or every
        default protected unit. Without it such an O(unprotect) fails the task before anything is
        looked at.
    type: bool
    default: false
'''


# The lists of defaults are _protection's, so that a protected name is added there only.
ModuleDocFragment.DOCUMENTATION = ModuleDocFragment.DOCUMENTATION % dict(
    executables=_listed(DEFAULT_PROTECTED_EXECUTABLES), units=_listed(DEFAULT_PROTECTED_UNITS))
