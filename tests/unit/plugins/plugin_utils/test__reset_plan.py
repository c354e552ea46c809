# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._reset_plan import reset_plan, stuck_gpus


def gpu(index, used, **more):
    record = {'index': index, 'uuid': 'GPU-%d' % index, 'memory_used_mib': used, 'persistence_mode': True,
              'display_active': False}
    record.update(more)
    return record


def holder(pid, gpus, kind='compute', protected=False, is_self=False, unit=None):
    return {'pid': pid, 'gpus': gpus, 'kind': kind, 'protected': protected, 'is_self': is_self,
            'systemd_unit': unit, 'title': 'proc-%d' % pid}


def test_memory_with_no_compute_holder_left_is_stuck():
    result = {'gpus': [gpu(0, 40000), gpu(1, 40000), gpu(2, 0)], 'holders': [holder(10, [1])]}
    assert [entry['index'] for entry in stuck_gpus(result, 64)] == [0]


def test_the_free_limit_is_inclusive():
    assert stuck_gpus({'gpus': [gpu(0, 64), gpu(1, 65)], 'holders': []}, 64) == [gpu(1, 65)]


def test_a_client_does_not_keep_a_gpu_from_being_stuck_but_blocks_its_reset():
    exporter = holder(20, [0, 1], kind='client', unit='dcgm-exporter.service', protected=True)
    monitor = holder(21, [0], kind='client')
    elsewhere = holder(22, [1], kind='client')
    result = {'gpus': [gpu(0, 40000), gpu(1, 0)], 'holders': [exporter, monitor, elsewhere]}
    plan = reset_plan(result, 64)
    assert plan['indices'] == [0]
    assert plan['stuck'] == [gpu(0, 40000)]
    assert plan['blockers'] == [exporter, monitor]


def test_a_protected_compute_holder_keeps_the_gpu_from_being_stuck():
    persistenced = holder(30, [0], protected=True)
    assert reset_plan({'gpus': [gpu(0, 40000)], 'holders': [persistenced]}, 64) == {
        'stuck': [], 'indices': [], 'blockers': []}


def test_the_modules_own_process_never_blocks():
    own = holder(40, [0], kind='client', is_self=True)
    assert reset_plan({'gpus': [gpu(0, 40000)], 'holders': [own]}, 64)['blockers'] == []


def test_a_skipped_look_plans_nothing():
    assert reset_plan({'skipped': True, 'changed': False}, 64) == {'stuck': [], 'indices': [], 'blockers': []}
