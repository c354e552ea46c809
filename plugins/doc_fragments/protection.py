# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.protection import (
    DEFAULT_PROTECTED_EXECUTABLES,
    DEFAULT_PROTECTED_UNITS,
)


def _listed(names):
    """``C(a), C(b) and C(c)``."""
    named = ['C(%s)' % name for name in names]
    return '%s and %s' % (', '.join(named[:-1]), named[-1])


class ModuleDocFragment(object):

    # Matches PROTECTION_ARGUMENT_SPEC in plugins/module_utils/_discover/protection.py. The default
    # names (in the notes) are filled in below from its lists; a unit test checks the rendered lists.
    DOCUMENTATION = r'''
options:
  protect:
    description:
      - Executable names (globs allowed) to protect in addition to the defaults (see the notes); a protected holder is
        reported but never signalled.
    type: list
    elements: str
    default: []
  protect_units:
    description:
      - Systemd units (globs allowed) whose processes are protected, in addition to the defaults (see the notes).
    type: list
    elements: str
    default: []
  unprotect:
    description:
      - Default protected executable or unit names to protect no longer, for example V(Xorg) on a host whose display
        server may be stopped. Globs are allowed.
    type: list
    elements: str
    default: []
  unprotect_all_confirmed:
    description:
      - Confirms wildcards in O(unprotect) that remove every default protected executable or every default protected
        unit; without it such an O(unprotect) fails.
    type: bool
    default: false
notes:
  - Protected by default, as executables (O(protect)), are %(executables)s.
  - Protected by default, as systemd units (O(protect_units)), are %(units)s.
'''


# The lists of defaults are _protection's, so that a protected name is added there only.
ModuleDocFragment.DOCUMENTATION = ModuleDocFragment.DOCUMENTATION % dict(
    executables=_listed(DEFAULT_PROTECTED_EXECUTABLES), units=_listed(DEFAULT_PROTECTED_UNITS))
