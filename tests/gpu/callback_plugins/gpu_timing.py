# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Record when each task starts and ends, and what the collection's modules return.

Used by the real-GPU acceptance harness (tests/gpu): it needs the wall-clock
moment at which the release task started on the host, to time the GPUs'
release from there, and the modules' own results. Enabled with
``ANSIBLE_CALLBACKS_ENABLED=gpu_timing``; writes one JSON object per line to
the file named by ``GPU_TIMING_FILE``.
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: gpu_timing
type: aggregate
short_description: record task timings and gpuops.reclaim results as JSON lines
description:
  - Writes task start and end times and the results of gpuops.reclaim modules to GPU_TIMING_FILE.
requirements:
  - enable in configuration
'''


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'gpu_timing'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = os.environ.get('GPU_TIMING_FILE')

    def _write(self, event, task=None, host=None, result=None):
        if not self._path:
            return
        record = {'event': event, 'time': time.time()}
        if task is not None:
            record['task'] = task.get_name()
            record['action'] = task.action
        if host is not None:
            record['host'] = host.get_name()
        if result is not None:
            record['result'] = result
        with open(self._path, 'a') as handle:
            handle.write(json.dumps(record, default=str) + '\n')

    def _result(self, event, result):
        task = getattr(result, 'task', None) or result._task  # pylint: disable=protected-access
        host = getattr(result, 'host', None) or result._host  # pylint: disable=protected-access
        payload = None
        if (task.action or '').startswith('gpuops.reclaim.'):
            payload = dict(getattr(result, 'result', None) or result._result)  # pylint: disable=protected-access
        self._write(event, task=task, host=host, result=payload)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._write('task_start', task=task)

    def v2_runner_on_start(self, host, task):
        self._write('runner_start', task=task, host=host)

    def v2_runner_on_ok(self, result):
        self._result('ok', result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result('failed', result)

    def v2_runner_on_skipped(self, result):
        self._result('skipped', result)

    def v2_playbook_on_stats(self, stats):
        self._write('stats')
