# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The flow of gpu_unit_audit: the look, the systemctl calls it expects (in order), and the result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import module_harness as _discovery
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import unit_audit as _audit
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import Failure
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.unit_audit import SHOW_PROPERTIES
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import TableRunner

SHOW = ['systemctl', 'show', '--property=' + ','.join(SHOW_PROPERTIES), '--']
LIST = ['systemctl', 'list-units', '--all', '--plain', '--no-legend', '--full', '--']
FILES = ['systemctl', 'list-unit-files', '--no-legend', '--full', '--']

ORPHANING = """Id=vllm.service
LoadState=loaded
ActiveState=active
KillMode=process
TimeoutStopUSec=10s
SendSIGKILL=yes
ControlGroup=/system.slice/vllm.service
MainPID=4240
"""

CLEAN = """Id=sglang.service
LoadState=loaded
ActiveState=active
KillMode=control-group
TimeoutStopUSec=10s
SendSIGKILL=yes
ControlGroup=/system.slice/sglang.service
MainPID=4300
"""

NOT_FOUND = """Id=vlm.service
LoadState=not-found
ActiveState=inactive
"""


class Host:
    def __init__(self):
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)


class Snapshot:
    nvml_available = True

    def __init__(self, holders):
        self.holders = holders


def params(**extra):
    values = dict(units=[], fail_on_orphaning=False, ignore_missing=False, nvml_timeout=5.0, require_nvml=False)
    values.update(extra)
    return values


@pytest.fixture
def host_with(monkeypatch):
    """``host_with(holders, expected)``: a host whose look finds ``holders`` and whose systemctl answers
    ``expected`` (``[(argv, (rc, out, err)), ...]``, in order)."""
    def make(holders, expected):
        runner = TableRunner(expected)
        looks = []

        def look(host, values, without_nvml, select=True, session=None):
            looks.append(select)
            return _discovery.Look(None, None, Snapshot(holders))
        monkeypatch.setattr(_audit, 'look', look)
        monkeypatch.setattr(_audit, 'command_runner', lambda host: runner)
        monkeypatch.setattr(_audit, 'parent_map', lambda: {4240: 1, 4241: 1, 4300: 1})
        host = Host()
        host.runner, host.looks = runner, looks
        return host
    return make


def test_the_units_of_the_holders_are_audited_on_every_gpu(host_with):
    holders = [{'pid': 4241, 'systemd_unit': 'vllm.service', 'kind': 'compute'}]
    host = host_with(holders, [(SHOW + ['vllm.service'], (0, ORPHANING, ''))])
    result, failed = _audit.audit(host, params())
    assert host.looks == [False]
    assert not failed and result['changed'] is False and result['nvml_available'] is True
    assert [record['unit'] for record in result['units']] == ['vllm.service']
    assert result['units'][0]['leaves_orphans'] is True
    assert result['msg'].startswith('1 unit(s) audited; 1 leave(s) GPU holders behind on stop: vllm.service')
    assert host.runner.expected == []


def test_fail_on_orphaning_fails_with_the_same_result(host_with):
    holders = [{'pid': 4241, 'systemd_unit': 'vllm.service', 'kind': 'compute'}]
    host = host_with(holders, [(SHOW + ['vllm.service'], (0, ORPHANING, ''))])
    result, failed = _audit.audit(host, params(fail_on_orphaning=True))
    assert failed is True and result['units'][0]['leaves_orphans']


def test_a_glob_is_expanded_through_loaded_and_installed_units(host_with):
    host = host_with([], [
        (LIST + ['sglang*'], (0, 'sglang.service loaded active running SGLang\n', '')),
        (FILES + ['sglang*'], (0, 'sglang.service enabled enabled\n', '')),
        (SHOW + ['sglang.service'], (0, CLEAN, '')),
    ])
    result, failed = _audit.audit(host, params(units=['sglang*']))
    assert not failed
    assert [(r['unit'], r['leaves_orphans']) for r in result['units']] == [('sglang.service', False)]
    assert result['msg'] == '1 unit(s) audited; a stop of each frees its GPUs'


def test_a_missing_unit_fails_naming_the_nearest_one(host_with):
    host = host_with([], [
        (SHOW + ['vlm.service'], (0, NOT_FOUND, '')),
        (LIST + ['*'], (0, 'vllm.service loaded active running vLLM\n', '')),
        (FILES + ['*'], (0, 'vllm.service enabled enabled\n', '')),
    ])
    with pytest.raises(Failure) as caught:
        _audit.audit(host, params(units=['vlm.service']))
    assert str(caught.value) == ('units: no unit matches vlm.service (did you mean vllm.service?); nothing was '
                                 'audited (ignore_missing: true makes this a warning)')
    assert caught.value.fields == {'missing_units': ['vlm.service']}


def test_a_missing_glob_is_a_warning_with_ignore_missing(host_with):
    host = host_with([], [
        (LIST + ['nothing-*'], (0, '', '')),
        (FILES + ['nothing-*'], (1, '', '')),
    ])
    # list-unit-files exits 1 when nothing matches: here that is a failure of the call, named.
    with pytest.raises(Failure, match=r'^systemctl list-unit-files --no-legend --full -- nothing-\* failed \(rc=1\)'):
        _audit.audit(host, params(units=['nothing-*'], ignore_missing=True))
    host = host_with([], [
        (LIST + ['nothing-*'], (0, '', '')),
        (FILES + ['nothing-*'], (0, '', '')),
        (LIST + ['*'], (0, 'vllm.service loaded active running vLLM\n', '')),
        (FILES + ['*'], (0, '', '')),
    ])
    result, failed = _audit.audit(host, params(units=['nothing-*'], ignore_missing=True))
    assert not failed and result['units'] == [] and result['msg'] == 'no serving unit to audit'
    assert host.warnings == ['units: no unit matches nothing-*']


@pytest.mark.parametrize('pattern, message', [
    ('', "units[0]: must not be empty; got: ''"),
    ('-x', "units[0] must be a unit name or glob; got: '-x'"),
    ('a/b.service', "units[0] must be a unit name or glob; got: 'a/b.service'"),
])
def test_a_bad_unit_name_fails_before_the_look(host_with, pattern, message):
    host = host_with([], [])
    with pytest.raises(Failure) as caught:
        _audit.audit(host, params(units=[pattern]))
    assert str(caught.value) == message
    assert host.looks == []


@pytest.mark.parametrize('answer, message, fields', [
    ((124, '', 'systemctl show --property=x did not answer within 30 s'),
     'systemctl show --property=x did not answer within 30 s', {'rc': 124}),
    ((1, '', 'Failed to connect to bus\n'),
     'systemctl show --property=x failed (rc=1): Failed to connect to bus',
     {'rc': 1, 'stderr': 'Failed to connect to bus\n'}),
])
def test_a_systemctl_that_fails_or_hangs_fails_the_flow_naming_it(monkeypatch, answer, message, fields):
    monkeypatch.setattr(_audit, 'command_runner', lambda host: (lambda argv: answer))
    systemctl = _audit.systemctl_caller(Host())
    with pytest.raises(Failure) as caught:
        systemctl(['systemctl', 'show', '--property=x'])
    assert str(caught.value) == message and caught.value.fields == fields
