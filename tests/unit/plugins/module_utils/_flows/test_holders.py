# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import holders as _holders_flow
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import module_harness as _discovery
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import Failure
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope, plan_release


def params(**given):
    values = {'nvml_timeout': 5.0, 'gpus': [], 'users': [], 'match': None, 'systemd_units': [], 'containers': [],
              'kinds': ['compute']}
    values.update(given)
    return values


class Snapshot:
    gpus = [{'index': 0}]
    holders = [{'pid': 42, 'gpus': [0], 'kind': 'compute'}]
    nvml_available = True
    driver_version = '580.1'
    unreadable = 2

    def summary(self):
        return '1 GPU, 1 holder'


def test_one_look_is_the_result(monkeypatch):
    seen = []

    def look(host, values, without_nvml, select=True, session=None):
        seen.append((without_nvml, select))
        return _discovery.Look(None, [0], Snapshot())
    monkeypatch.setattr(_holders_flow, 'look', look)
    result, failed = _holders_flow.holders(None, params())
    assert failed is False
    assert result == dict(changed=False, msg='1 GPU, 1 holder', gpus=[{'index': 0}],
                          holders=[{'pid': 42, 'gpus': [0], 'kind': 'compute', 'in_scope': True}],
                          nvml_available=True, driver_version='580.1', unreadable_processes=2)
    assert seen == [(_holders_flow.WITHOUT_NVML, True)]


@pytest.mark.parametrize('given, message', [
    ({'nvml_timeout': True}, 'nvml_timeout: must be a number of seconds, not a boolean; got: True'),
    ({'match': '('}, "match: invalid regular expression '('"),
    ({'kinds': []}, 'kinds: must name at least one of compute, client; got: []'),
    ({'kinds': ['worker']}, "kinds[0]: must be one of compute, client; got: 'worker'"),
    ({'users': [' ']}, "users[0]: must not be empty; got: ' '"),
    ({'containers': ['']}, 'containers[0]'),
    ({'systemd_units': ['vllm-[.service']}, 'systemd_units[0]'),
])
def test_bad_input_fails_before_the_look(monkeypatch, given, message):
    monkeypatch.setattr(_holders_flow, 'look', lambda *args, **kwargs: pytest.fail('looked'))
    with pytest.raises(Failure) as failure:
        _holders_flow.holders(None, params(**given))
    assert str(failure.value).startswith(message)


def record(pid, kind='client', **fields):
    return dict({'pid': pid, 'ppid': 1, 'gpus': [0], 'kind': kind, 'user': 'svc', 'uid': 1000, 'title': 'proc-%d' % pid,
                 'name': 'proc', 'state': 'sleeping', 'systemd_unit': None, 'container': None, 'protected': False}, **fields)


def test_each_holder_says_whether_the_release_would_signal_it(monkeypatch):
    holders = [record(10, systemd_unit='gpu-top.service'), record(11, systemd_unit='exporter.service'),
               record(12, protected=True, systemd_unit='gpu-top.service'), record(13, kind='compute'),
               record(14, gpus=[1], systemd_unit='gpu-top.service'), record(15, state='zombie'),
               record(16, container={'runtime': 'kubepods', 'id': 'p', 'pod_uid': 'p'}, systemd_unit='gpu-top.service'),
               record(17, visible=False, systemd_unit='gpu-top.service'), record(18, is_self=True)]

    class Found(Snapshot):
        pass
    Found.holders = holders
    monkeypatch.setattr(_holders_flow, 'look', lambda *args, **kwargs: _discovery.Look(None, [0], Found()))
    given = params(kinds=['client'], systemd_units=['gpu-*.service'])
    result, dummy = _holders_flow.holders(None, given)
    assert [h['pid'] for h in result['holders'] if h['in_scope']] == [10]
    # The release's own plan for the same scope, on the same records: one decision.
    planned = plan_release(holders, build_scope([0], kinds=['client'], systemd_units=['gpu-*.service']))
    assert planned.planned_pids == [10]
    assert [dict(h, in_scope=False) for h in result['holders']] == [dict(h, in_scope=False) for h in holders]


def test_an_unprivileged_look_leaves_other_users_holders_out_of_the_scope(monkeypatch):
    class Found(Snapshot):
        holders = [record(20, uid=0, user='root'), record(21, uid=4242)]
    monkeypatch.setattr(_holders_flow, 'look', lambda *args, **kwargs: _discovery.Look(None, [0], Found()))
    monkeypatch.setattr(_holders_flow.os, 'geteuid', lambda: 4242)
    result, dummy = _holders_flow.holders(None, params(kinds=['client']))
    assert [h['in_scope'] for h in result['holders']] == [False, True]
