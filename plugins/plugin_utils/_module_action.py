# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The action behind a module that may wait long: it runs the module as Ansible would, with a heartbeat.

Check mode, diff mode and ``async`` (when a task sets it) behave as for any
module. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._frozen_heap import frozen_heap
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._heartbeat import Heartbeat

display = Display()


def _to_stderr(line):
    display.display(line, stderr=True)


class WaitingModuleAction(ActionBase):
    """Subclasses set ``what``: a function of the task's arguments that says what the module waits for."""

    what = None

    def run(self, tmp=None, task_vars=None):
        self._supports_check_mode = True
        self._supports_async = True
        result = super(WaitingModuleAction, self).run(tmp, task_vars)
        del tmp
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        host = (task_vars or {}).get('inventory_hostname') or self._play_context.remote_addr
        what = self.what(self._task.args or {})
        # On stderr, as Ansible's warnings: a callback that writes results to stdout stays readable.
        with frozen_heap(), Heartbeat(_to_stderr, host, what):
            result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
