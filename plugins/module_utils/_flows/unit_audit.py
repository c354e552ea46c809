# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discover -> the unit audit: the whole of ``gpu_unit_audit`` but its argument spec.

``audit(host, params)`` checks the input, looks at the holders (``module_harness.look``, every GPU), expands
the unit names and globs of ``units`` through systemctl, reads each unit's stop settings and judges what its
stop would leave behind (``_plan.unit_audit``). Every systemctl call goes through the one command runner
(``_host.commands``); one that fails or does not answer fails the flow, naming it.

``host`` is the module (an ``AnsibleModule``): ``warn``, ``get_bin_path`` and ``run_command`` are used.
This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from .module_harness import Failure, check_options, look
from .._host.commands import TIMED_OUT, command_runner, systemctl_list_unit_files, systemctl_list_units, systemctl_show
from .._host.proctree import parent_map
from .._plan import unit_audit as _units

WITHOUT_NVML = 'NVML cannot be used (%s); GPU holders are found from /proc alone.'


def check_units(patterns):
    """Raise ``Failure`` for an entry of ``units`` that is no unit name or glob."""
    for index, pattern in enumerate(patterns):
        if not pattern or pattern.startswith('-') or os.sep in pattern:
            raise Failure('units[%d] must be a unit name or glob; got: %r' % (index, pattern))


def systemctl_caller(host):
    """``systemctl(argv) -> out``: the command's output, or a ``Failure`` naming the command that failed."""
    run = command_runner(host)

    def systemctl(argv):
        rc, out, err = run(argv)
        if rc in TIMED_OUT and 'did not answer within' in err:
            raise Failure(err, rc=rc)
        if rc != 0:
            raise Failure('%s failed (rc=%d): %s' % (' '.join(argv), rc, err.strip()), rc=rc, stderr=err)
        return out
    return systemctl


def expand(systemctl, pattern):
    """The units a name or glob names (loaded, or installed: a stopped unit may be unloaded)."""
    if not _units.is_glob(pattern):
        return [pattern]
    return _units.parse_list_units(systemctl(systemctl_list_units([pattern]))
                                   + systemctl(systemctl_list_unit_files([pattern])))


def audit(host, params):
    """``(result, failed)`` of the audit of the units that hold a GPU and of those ``units`` names."""
    check_options(params)
    check_units(params['units'])
    snapshot = look(host, params, WITHOUT_NVML, select=False).snapshot
    systemctl = systemctl_caller(host)

    names = _units.units_of_holders(snapshot.holders)
    missing = []
    for pattern in params['units']:
        matched = expand(systemctl, pattern)
        if not matched:
            missing.append(pattern)
        names.extend(name for name in matched if name not in names)
    records = []
    if names:
        parents = parent_map()
        for properties in _units.parse_show(systemctl(systemctl_show(names, _units.SHOW_PROPERTIES))):
            if properties.get('LoadState') == 'not-found' and properties.get('Id') in params['units']:
                missing.append(properties['Id'])
                continue
            records.append(_units.audit_unit(properties, snapshot.holders, parents))
    if missing:
        # Installed units too: a stopped unit may be unloaded.
        text = _units.missing_units_message(missing, expand(systemctl, '*'))
        if not params['ignore_missing']:
            raise Failure(text + '; nothing was audited (ignore_missing: true makes this a warning)',
                          missing_units=missing)
        host.warn(text)
    msg = _units.summarize(records)
    failed = params['fail_on_orphaning'] and any(record['leaves_orphans'] for record in records)
    return dict(changed=False, msg=msg, units=records, nvml_available=snapshot.nvml_available), bool(failed)
