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

import gc
from contextlib import contextmanager

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._heartbeat import Heartbeat

display = Display()


def _to_stderr(line):
    display.display(line, stderr=True)


@contextmanager
def frozen_heap():
    """Python's cyclic collector leaves what already exists alone for the block: it collects only what the block makes.

    A task's process is a fork of Ansible's main process and inherits its whole heap. Building a module's
    payload allocates many objects (AnsiballZ parses every module_utils file it packs), which starts the
    collector again and again, and each full pass walks that inherited heap. On a 2-core machine that is
    about half of the time building gpu_reclaim's payload takes; freezing that heap makes a no-op run of the role
    0.2 s shorter (bench: role_noop_vs_one_task). ``gc.freeze`` moves what exists
    into a generation that is never scanned; ``gc.unfreeze`` gives it back afterwards, for the next item
    of a loop and for any caller that is not a task's short-lived process. What was frozen before (by
    Ansible, say) stays frozen.
    """
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


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
