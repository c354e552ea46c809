# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host import commands as _commands
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import unit_audit as _units

# Captured from systemd 252 (`systemctl show --property=... a.service b.service`).
SHOW_TWO_UNITS = """Id=vllm-sim.service
LoadState=loaded
ActiveState=inactive
KillMode=process
TimeoutStopUSec=10s
SendSIGKILL=yes
ControlGroup=
MainPID=0

Id=vllm.service
LoadState=loaded
ActiveState=active
KillMode=control-group
TimeoutStopUSec=1min 30s
SendSIGKILL=yes
ControlGroup=/system.slice/vllm.service
MainPID=4240
"""


def holder(pid, unit=None, kind='compute'):
    return {'pid': pid, 'systemd_unit': unit, 'kind': kind}


def test_show_command_names_every_property():
    argv = _commands.systemctl_show(['a.service'], _units.SHOW_PROPERTIES)
    assert argv[:2] == ['systemctl', 'show']
    assert argv[-2:] == ['--', 'a.service']
    for name in ('KillMode', 'TimeoutStopUSec', 'SendSIGKILL', 'MainPID', 'ControlGroup'):
        assert name in argv[2]


def test_parse_show_splits_units():
    units = _units.parse_show(SHOW_TWO_UNITS)
    assert [unit['Id'] for unit in units] == ['vllm-sim.service', 'vllm.service']
    assert units[1]['TimeoutStopUSec'] == '1min 30s'
    assert units[0]['ControlGroup'] == ''


@pytest.mark.parametrize('text, seconds', [
    ('10s', 10.0),
    ('1min 30s', 90.0),
    ('1min 30.5s', 90.5),
    ('500ms', 0.5),
    ('2h', 7200.0),
    ('90000000', 90.0),
    ('infinity', None),
])
def test_parse_timespan(text, seconds):
    assert _units.parse_timespan(text) == seconds


@pytest.mark.parametrize('text', ['10 parsecs', 'soon', '5s later'])
def test_parse_timespan_rejects_garbage(text):
    with pytest.raises(ValueError):
        _units.parse_timespan(text)


def test_parse_list_units_takes_first_column_once():
    text = ('vllm-a.service loaded active running vLLM A\n'
            'vllm-b.service loaded inactive dead vLLM B\n'
            'vllm-a.service loaded active running vLLM A\n')
    assert _units.parse_list_units(text) == ['vllm-a.service', 'vllm-b.service']


def test_kill_mode_process_with_orphans_is_flagged():
    props = _units.parse_show(SHOW_TWO_UNITS)[0]
    record = _units.audit_unit(props, [holder(50, 'vllm-sim.service'), holder(51, 'vllm-sim.service')], {})
    assert record['leaves_orphans'] is True
    assert record['kill_mode'] == 'process'
    assert record['holder_pids'] == [50, 51]
    assert record['timeout_stop_seconds'] == 10.0
    assert record['findings'][0].startswith('KillMode=process:')
    assert 'orphans of an earlier stop' in record['findings'][1]


def test_hardened_unit_with_its_workers_inside_is_clean():
    props = _units.parse_show(SHOW_TWO_UNITS)[1]
    parents = {4240: 1, 4241: 4240, 4242: 4241}
    record = _units.audit_unit(props, [holder(4242, 'vllm.service')], parents)
    assert record['leaves_orphans'] is False
    assert record['findings'] == []
    assert record['holders_inside_control_group'] is True
    assert record['main_pid'] == 4240


def test_holder_started_by_the_unit_in_another_cgroup_escapes():
    props = _units.parse_show(SHOW_TWO_UNITS)[1]
    parents = {4240: 1, 4241: 4240, 4300: 4241}
    record = _units.audit_unit(props, [holder(4300, 'run-r1234.scope')], parents)
    assert record['escaped_holder_pids'] == [4300]
    assert record['holders_inside_control_group'] is False
    assert record['leaves_orphans'] is True


@pytest.mark.parametrize('overrides, finding', [
    ({'SendSIGKILL': 'no'}, 'SendSIGKILL=no'),
    ({'TimeoutStopUSec': 'infinity'}, 'TimeoutStopSec=infinity'),
    ({'KillMode': 'none'}, 'KillMode=none'),
])
def test_each_risky_setting_has_its_finding(overrides, finding):
    props = dict(_units.parse_show(SHOW_TWO_UNITS)[1])
    props.update(overrides)
    record = _units.audit_unit(props, [], {})
    assert any(text.startswith(finding) for text in record['findings'])


def test_units_of_holders_keeps_services_of_compute_holders():
    holders = [holder(1, 'a.service'), holder(2, 'a.service'), holder(3, 'nvidia-dcgm.service', kind='client'),
               holder(4, 'run-r1.scope'), holder(5, None), holder(6, 'b.service')]
    assert _units.units_of_holders(holders) == ['a.service', 'b.service']


def test_summary_names_the_flagged_units():
    clean = {'unit': 'a.service', 'leaves_orphans': False, 'findings': []}
    flagged = {'unit': 'b.service', 'leaves_orphans': True, 'findings': ['KillMode=process: x']}
    assert _units.summarize([]) == 'no serving unit to audit'
    assert _units.summarize([clean]) == '1 unit(s) audited; a stop of each frees its GPUs'
    assert _units.summarize([clean, flagged]) == (
        '2 unit(s) audited; 1 leave(s) GPU holders behind on stop: b.service (KillMode=process)')


@pytest.mark.parametrize('pattern, expected', [
    ('vllm.service', False),
    ('vllm-*.service', True),
    ('vllm@?.service', True),
    ('vllm@[0-3].service', True),
])
def test_is_glob(pattern, expected):
    assert _units.is_glob(pattern) is expected


def test_unit_file_listing_is_parsed_like_unit_listing():
    text = 'vllm-a.service enabled enabled\nvllm-b.service disabled enabled\n'
    assert _units.parse_list_units(text) == ['vllm-a.service', 'vllm-b.service']


# A hardened unit that `systemctl edit` later put back to KillMode=process.
SHOW_OVERRIDDEN = """Id=vllm-sim.service
LoadState=loaded
ActiveState=active
KillMode=process
TimeoutStopUSec=30s
SendSIGKILL=yes
ControlGroup=/system.slice/vllm-sim.service
MainPID=4240
DropInPaths=/etc/systemd/system/vllm-sim.service.d/50-gpuops-reclaim.conf /etc/systemd/system/vllm-sim.service.d/override.conf
"""


def test_audit_notices_a_later_drop_in_that_undoes_the_hardening():
    record = _units.audit_unit(_units.parse_show(SHOW_OVERRIDDEN)[0], [], {})
    assert record['hardening_overridden'] is True and record['leaves_orphans'] is True
    assert record['drop_ins'][-1].endswith('/override.conf')
    assert ('drop-in /etc/systemd/system/vllm-sim.service.d/override.conf sorts after 50-gpuops-reclaim.conf and '
            'overrides its hardening: the effective settings are KillMode=process, SendSIGKILL=yes') in record['findings']


@pytest.mark.parametrize('drop_ins, expected', [
    (['/etc/systemd/system/a.service.d/50-gpuops-reclaim.conf'], []),
    (['/etc/systemd/system/a.service.d/10-site.conf', '/run/systemd/system/a.service.d/50-gpuops-reclaim.conf'], []),
    (['/etc/systemd/system/a.service.d/50-gpuops-reclaim.conf', '/run/systemd/system/a.service.d/90-local.conf'],
     ['/run/systemd/system/a.service.d/90-local.conf']),
    # without the hardening drop-in, nothing overrides it
    (['/etc/systemd/system/a.service.d/override.conf'], []),
])
def test_later_drop_ins(drop_ins, expected):
    assert _units.later_drop_ins(drop_ins) == expected


def test_a_later_drop_in_that_keeps_the_hardening_is_no_finding():
    properties = dict(_units.parse_show(SHOW_OVERRIDDEN)[0], KillMode='control-group')
    record = _units.audit_unit(properties, [], {})
    assert record['hardening_overridden'] is False and record['findings'] == []


def test_a_missing_unit_is_named_with_the_nearest_loaded_one():
    loaded = ['llama.service', 'vllm-sim.service', 'dbus.service']
    assert _units.missing_units_message(['llama', 'vlm-sim.service', 'zzz'], loaded) == (
        'units: no unit matches llama (did you mean llama.service?), vlm-sim.service (did you mean '
        'vllm-sim.service?), zzz')
