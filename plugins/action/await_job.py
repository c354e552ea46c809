# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ansible.builtin.async_status that waits quietly, a few seconds at most, for the job to end.

Awaited with ``until: result.finished`` and ``retries``, a job shows one
retry line per try, each after ``wait_seconds`` of silence; a job that ends
within the first try shows nothing but its task. ``async_status`` alone
answers at once, so a job that takes a second would print a retry line and
then sleep the whole ``delay``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash

MAX_WAIT_SECONDS = 60.0


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('jid', 'wait_seconds', 'poll_interval'))

    def _number(self, name, default, low, high):
        value = self._task.args.get(name, default)
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
        if isinstance(value, bool) or number is None or not low < number <= high:
            raise AnsibleActionFail('%s must be a number of seconds above %g and at most %g; got: %r'
                                    % (name, low, high, value))
        return number

    def _status(self, jid, task_vars):
        # As ansible.builtin.async_status finds the job's file.
        async_dir = self._remote_expand_user(self.get_shell_option('async_dir', default='~/.ansible_async'))
        answer = self._execute_module(module_name='ansible.legacy.async_status', task_vars=task_vars,
                                      module_args={'jid': jid, 'mode': 'status', '_async_dir': async_dir})
        for key in ('started', 'finished'):
            answer[key] = bool(answer.get(key))
        return answer

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        jid = self._task.args.get('jid')
        if not isinstance(jid, str) or not jid.strip():
            raise AnsibleActionFail('jid must be the ansible_job_id of an async task; got: %r' % (jid,))
        wait_seconds = self._number('wait_seconds', 4.5, 0, MAX_WAIT_SECONDS)
        poll_interval = self._number('poll_interval', 0.5, 0, wait_seconds)
        deadline = time.monotonic() + wait_seconds
        while True:
            answer = self._status(jid, task_vars)
            if answer['finished'] or answer.get('failed') or time.monotonic() + poll_interval > deadline:
                break
            time.sleep(poll_interval)
        result = merge_hash(result, answer)
        result['ansible_job_id'] = jid
        return result
