# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a release reports (``_release.report``): entries, stuck GPUs, steps and the operator's next steps. Pure."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from types import SimpleNamespace

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import report as _report


def target(**extra):
    record = {'pid': 40, 'ppid': 1, 'name': 'python3', 'title': 'VLLM::Worker_TP0', 'user': 'root', 'kind': 'compute',
              'state': 'sleeping', 'gpus': [0], 'gpu_memory_mib': {'0': 1000}, 'memory_mib': 1000,
              'systemd_unit': None, 'container': None, 'shared': False}
    values = dict(record=record, last_signal='SIGTERM', released_at=0.41234, release_outcome='exited',
                  skipped_steps=[], killed=[43, 42], adopted=False, state='disk-sleep', reason=None)
    values.update(extra)
    return SimpleNamespace(**values)


def test_released_entry():
    entry = _report.released_entry(target())
    assert entry['pid'] == 40 and entry['seconds_to_release'] == 0.412 and entry['outcome'] == 'exited'
    assert entry['descendants_killed'] == [42, 43] and entry['shared'] is False and entry['adopted'] is False


def test_survivor_entry_says_why():
    entry = _report.survivor_entry(target(last_signal='SIGKILL'), wchan='uvm_va_space_destroy')
    assert entry['reason'] == 'still alive after SIGKILL and its wait'
    assert entry['wchan'] == 'uvm_va_space_destroy' and entry['state'] == 'disk-sleep'
    assert _report.survivor_entry(target(reason='permission denied'))['reason'] == 'permission denied'


def test_unexamined_entries_only_for_pids_still_holding_and_bounded():
    entries, warning = _report.unexamined_entries({70: {0}, 71: {1}, 72: {0}}, holding={70, 71, 72, 5}, limit=2)
    assert [entry['pid'] for entry in entries] == [70, 71]
    assert entries[0]['reason'] == _report.UNEXAMINED % 2 and entries[0]['adopted'] is True
    assert warning.startswith('1 more processes appeared on the GPUs during the release')
    entries, warning = _report.unexamined_entries({70: {0}}, holding={5}, limit=2)
    assert entries == [] and warning is None


def test_stuck_gpus_are_those_no_survivor_explains():
    released = {0: (False, '2048 MiB used'), 1: (False, 'pid 9 still listed by NVML'), 2: (True, None)}
    stuck = _report.stuck_gpus([0, 1, 2, 3], released, [{'gpus': [1]}], {0: 2048, 1: 100})
    assert stuck == [{'index': 0, 'memory_used_mib': 2048, 'reason': '2048 MiB used'}]


def test_steps_start_with_the_parents_freeze():
    parents = [{'pid': 100, 'action': 'kill'}, {'pid': 200, 'action': 'thaw'}, {'pid': 300, 'action': 'leave'}]
    log = [{'name': 'SIGTERM', 'signal': 'SIGTERM', 'pids': [1], 'skipped': [], 'started_at': 0.01, '_ended': 0.5},
           {'name': 'freeze', 'signal': 'SIGSTOP', 'pids': [], 'skipped': [], 'started_at': None, '_ended': None},
           {'name': 'SIGKILL', 'signal': 'SIGKILL', 'pids': [1], 'skipped': [], 'started_at': 0.5, '_ended': None}]
    steps = _report.step_entries(parents, log, 0.0042, 0.75)
    expected = [('freeze supervisors', [100, 200]), ('SIGTERM', [1]), ('SIGKILL', [1])]
    assert [(s['name'], s['pids']) for s in steps] == expected
    assert steps[0]['seconds'] == 0.004 and steps[1]['seconds'] == 0.49 and steps[2]['seconds'] == 0.25
    assert _report.step_entries([parents[2]], log[1:2], 0.0, 1.0) == []


def test_parent_lists_hide_private_keys():
    entry = {'pid': 100, 'action': 'kill', 'systemd_unit': None, 'container': None, 'outcome': 'frozen', '_ref': 1}
    supervisors, parents = _report.parent_lists([entry], [entry])
    assert supervisors == [{'pid': 100, 'outcome': 'frozen'}]
    assert parents == [{'pid': 100, 'action': 'kill', 'systemd_unit': None, 'container': None, 'outcome': 'frozen'}]


def test_failure_lines_end_with_the_next_step():
    result = {'survivors': [_report.survivor_entry(target(last_signal='SIGKILL'), wchan='uvm')],
              'stuck_gpus': [{'index': 1, 'memory_used_mib': 512, 'reason': '512 MiB used'}]}
    lines = _report.failure_lines(result, [{'index': 1, 'uuid': 'GPU-1'}])
    assert lines[0].endswith('next step: ' + _report.RESET_STEP % 0)
    assert lines[1].startswith('GPU 1 (GPU-1) still has 512 MiB used after every targeted holder is gone')
    assert lines[1].endswith(_report.RESET_STEP % 1)


class _Target:
    def __init__(self, gpus):
        self.record = {'gpus': gpus}


def test_a_gpu_is_released_when_nothing_of_the_release_holds_it_and_its_memory_is_back():
    targets = {10: _Target([0]), 11: _Target([1])}
    result = _report.gpus_released(
        [0, 1, 2, 3], targets, pids_after={0: {10}, 1: set(), 3: {99}}, memory_after={1: 900, 2: 5000, 3: 10},
        known_pids={10, 11}, left_alone={}, over_limit={}, baseline_mib={1: 100}, threshold_mib=64)
    assert result == {0: (False, 'pid 10 still listed by NVML'), 1: (False, '900 MiB used'),
                      2: (True, None), 3: (True, None)}
    # Memory a process left alone holds is its own; a newcomer not examined keeps its GPU busy.
    targets = {10: _Target([0, 1])}
    result = _report.gpus_released(
        [0, 1], targets, pids_after={0: {50}, 1: {60}}, memory_after={0: 900, 1: 900}, known_pids={10, 50, 60},
        left_alone={50: 'out of scope'}, over_limit={60: {1}}, baseline_mib={})
    assert result == {0: (True, None), 1: (False, 'pid 60 appeared during the release and was not examined')}
