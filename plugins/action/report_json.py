# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Save a report as JSON on the controller, in the action itself.

The role's reports (one per host, and the fleet's) describe the run and are
read on the controller. Writing them with the file and copy modules runs
three modules on the controller for each report; this action writes the file
in Ansible's own process: the folder is created when missing, and the report
is written under a random name beside its final name and renamed into place,
so a reader never sees half of one. No link is followed that another user
could have planted, and a directory on the way that another user can write is
refused (``module_utils._safe_file``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._report_file import write_json


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('content', 'dest'))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        dest = self._task.args.get('dest')
        if not isinstance(dest, str) or not dest.strip():
            raise AnsibleActionFail('dest must be a path on the controller, got %r' % (dest,))
        if 'content' not in self._task.args:
            raise AnsibleActionFail('content is required: the data to save as JSON in %s' % dest)
        try:
            write_json(os.path.expanduser(dest), self._task.args['content'])
        except (OSError, TypeError, ValueError) as exc:
            raise AnsibleActionFail('could not save the report %s: %s'
                                    % (dest, exc.strerror if isinstance(exc, OSError) and exc.strerror else exc))
        # The report describes this run; rewriting it is not a change to any host.
        result.update(changed=False, dest=dest)
        return result
