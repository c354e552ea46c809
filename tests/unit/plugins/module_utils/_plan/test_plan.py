# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
import yaml

from ansible_collections.gpuops.reclaim.plugins.doc_fragments.scope import ModuleDocFragment
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import keepers as _keepers
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import plan as _plan
from ansible_collections.gpuops.reclaim.plugins.module_utils._release import report as _report
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import EscalationError
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import (
    SCOPE_ARGUMENT_SPEC,
    SharedHolderError,
    build_scope,
    plan_release,
)
from ansible_collections.gpuops.reclaim.tests.unit.plugins.module_utils.escalation_harness import holder


# -- scope and plan ----------------------------------------------------------

@pytest.mark.parametrize('kwargs, message', [
    ({'match': '('}, "match: invalid regular expression '('"),
    ({'kinds': ['compute', 'daemon']}, "kinds[1]: must be one of compute, client; got: 'daemon'"),
    ({'on_shared_holder': 'ask'}, "on_shared_holder: must be one of release, fail; got: 'ask'"),
    ({'users': ['']}, "users[0]: must not be empty; got: ''"),
])
def test_bad_scope(kwargs, message):
    with pytest.raises(EscalationError) as info:
        build_scope([0], **kwargs)
    assert str(info.value).startswith(message)


def test_the_scope_fragment_documents_every_option_of_the_spec():
    options = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)['options']
    assert set(options) == set(SCOPE_ARGUMENT_SPEC)
    for name, spec in SCOPE_ARGUMENT_SPEC.items():
        assert options[name]['type'] == spec['type']
        assert options[name].get('elements') == spec.get('elements')
        assert options[name].get('default') == spec.get('default')
        assert options[name].get('choices') == spec.get('choices')


def reasons(plan):
    found = dict((e['pid'], e['reason']) for e in plan.skipped)
    found.update((e['pid'], e['reason']) for e in plan.protected)
    found.update((r['pid'], 'target') for r in plan.targets)
    return found


def test_plan_scope_protection_and_kinds():
    holders = [
        holder(10, gpus=[0]),
        holder(11, gpus=[1]),
        holder(12, gpus=[4]),
        holder(13, gpus=[0], kind='client', memory_mib=0, gpu_memory_mib={}),
        holder(14, gpus=[0, 1], name='nv-hostengine', protected=True, protected_reason='GPU client nv-hostengine'),
        holder(15, gpus=[0], is_self=True, protected=True, protected_reason='self'),
        holder(16, gpus=[1], state='zombie'),
    ]
    plan = plan_release(holders, build_scope([0, 1]))
    assert reasons(plan) == {
        10: 'target', 11: 'target', 12: 'out of scope', 13: 'kind compute not selected'.replace('compute', 'client'),
        14: 'GPU client nv-hostengine', 15: 'self or ancestor of this module', 16: 'already exited',
    }
    assert plan.changes
    # The module's own process is protected, and says so, so a summary can leave it out.
    assert {entry['pid']: entry['is_self'] for entry in plan.protected} == {14: False, 15: True}
    # ... and the message counts the protected holders without it.
    gpus = [{'index': 0, 'uuid': 'GPU-0', 'memory_used_mib': 100}, {'index': 1, 'uuid': 'GPU-1', 'memory_used_mib': 0}]
    message = _report.shape_result(gpus, holders, plan, check_mode=True)['msg']
    assert message.startswith('would release 2 holders of GPU 0, 1') and '; 1 protected, 3 skipped' in message
    clients = plan_release(holders, build_scope([0, 1], kinds=['compute', 'client']))
    assert 13 in clients.target_pids
    assert 14 not in clients.target_pids and 15 not in clients.target_pids


@pytest.mark.parametrize('scope, expected', [
    ({'users': ['alice']}, [20]),
    ({'users': ['1001']}, [20]),
    ({'match': r'^VLLM::'}, [20, 21]),
    ({'match': 'Engine'}, [21]),
    ({'systemd_units': ['vllm*.service']}, [20]),
    ({'containers': ['docker']}, [22]),
    ({'containers': ['abc1']}, [22]),
    ({'containers': ['podman']}, []),
    ({'users': ['root'], 'match': 'train'}, [22]),
])
def test_plan_filters(scope, expected):
    holders = [
        holder(20, user='alice', uid=1001, systemd_unit='vllm-sim.service'),
        holder(21, title='VLLM::EngineCore'),
        holder(22, title='python train.py', container={'runtime': 'docker', 'id': 'abc123'}),
    ]
    plan = plan_release(holders, build_scope([0], **scope))
    assert plan.target_pids == expected
    for entry in plan.skipped:
        assert entry['reason'] in ('user not selected', 'title does not match', 'systemd unit not selected',
                                   'container not selected')


def test_non_root_skips_other_users_before_signalling():
    holders = [holder(30, user='bob', uid=1002), holder(31, user='alice', uid=1001)]
    plan = plan_release(holders, build_scope([0], euid=1001))
    assert plan.target_pids == [31]
    assert plan.skipped[0]['reason'] == 'permission denied (owned by user bob)'


def test_shared_holders_released_by_default_or_refused():
    holders = [holder(40, gpus=[0, 5]), holder(41, gpus=[0])]
    plan = plan_release(holders, build_scope([0]))
    assert plan.target_pids == [40, 41]
    assert [e['pid'] for e in plan.shared] == [40]
    assert plan.shared[0]['outside_gpus'] == [5]
    with pytest.raises(SharedHolderError) as info:
        plan_release(holders, build_scope([0], on_shared_holder='fail'))
    assert str(info.value) == ('on_shared_holder is fail and pid 40 (VLLM::Worker_TP40) also holds GPU 5 '
                               'outside the selected GPUs 0; nothing was signalled')


def process(pid, children, **extra):
    entry = {'pid': pid, 'ppid': 1, 'name': 'python3', 'title': 'python3 supervisor.py', 'user': 'root',
             'uid': 0, 'create_time': 500.0 + pid, 'systemd_unit': None, 'container': None,
             'children': list(children)}
    entry.update(extra)
    return entry


@pytest.mark.parametrize('parent, scope, expected_reason', [
    (process(100, [50, 51]), {}, 'parent whose children are all targeted holders: it could respawn them'),
    (process(100, [50, 51, 52]), {}, None),  # 52 is no target: a real parent, not a supervisor
    # A shell loop is a respawner; an interactive shell on a terminal is only frozen and thawed.
    (process(100, [50, 51], name='bash', title="bash -c while true; do worker; done"), {},
     'parent whose children are all targeted holders: it could respawn them'),
    (process(100, [50, 51], name='bash', title='-bash', tty='/dev/pts/0'), {}, None),
    (process(100, [50, 51], name='containerd-shim-runc-v2'), {}, None),
    (process(100, [50, 51], protected=True), {}, None),
    (process(100, [50, 51], user='bob', uid=1002), {'users': ['root']}, None),
    (process(100, [50, 51], user='bob', uid=1002), {'euid': 1001}, None),
    (process(100, [50, 51, 52], systemd_unit='vllm.service'), {'systemd_units': ['vllm.service']},
     'parent of targeted holders, within the selected filters'),
    (process(100, [50, 51, 52], systemd_unit='other.service'), {'systemd_units': ['vllm.service']}, None),
])
def test_supervisor_rule(parent, scope, expected_reason):
    unit = scope.get('systemd_units', [None])[0]
    holders = [holder(50, ppid=100, systemd_unit=unit), holder(51, ppid=100, systemd_unit=unit)]
    plan = plan_release(holders, build_scope([0], **scope), processes={100: parent})
    if expected_reason is None:
        assert plan.supervisors == []
    else:
        assert plan.supervisors == [{
            'pid': 100, 'ppid': 1, 'name': parent['name'], 'title': parent['title'], 'user': parent['user'],
            'create_time': parent['create_time'], 'children': [50, 51], 'reason': expected_reason}]
        assert plan.changes


@pytest.mark.parametrize('ppid, own', [(1, ()), (2, ()), (100, (100,))])
def test_supervisor_never_init_kernel_or_self(ppid, own):
    holders = [holder(50, ppid=ppid)]
    plan = plan_release(holders, build_scope([0], own_pids=own), processes={ppid: process(ppid, [50])})
    assert plan.supervisors == []


def test_supervisor_that_is_a_holder_is_not_planned_twice():
    holders = [holder(50, ppid=60), holder(60, gpus=[3], ppid=1)]
    plan = plan_release(holders, build_scope([0]), processes={60: process(60, [50])})
    assert plan.supervisors == []


# -- holders that appear during the release: the pure decisions ----------------

@pytest.mark.parametrize('extra, scope, expected', [
    ({}, {}, ('target', None)),
    ({'pid': 1}, {}, ('protected', 'pid 1')),
    ({'ppid': 2}, {}, ('protected', 'kernel thread')),
    ({'pid': 4242}, {'own_pids': [4242]}, ('protected', 'self or ancestor of this module')),
    ({'is_self': True}, {}, ('protected', 'self or ancestor of this module')),
    ({'protected': True, 'protected_reason': 'default protected executable nv-hostengine'}, {},
     ('protected', 'default protected executable nv-hostengine')),
    ({'kind': 'client'}, {}, ('skipped', 'kind client not selected')),
    ({'kind': 'client'}, {'kinds': ['compute', 'client']}, ('target', None)),
    ({'state': 'zombie'}, {}, ('skipped', 'already exited')),
    ({'user': 'alice', 'uid': 1000}, {'users': ['bob']}, ('skipped', 'user not selected')),
    ({'title': 'python train.py'}, {'match': '^VLLM::'}, ('skipped', 'title does not match')),
    ({'systemd_unit': 'train.service'}, {'systemd_units': ['vllm-*.service']},
     ('skipped', 'systemd unit not selected')),
    ({}, {'containers': ['docker']}, ('skipped', 'container not selected')),
    ({'uid': 0, 'user': 'root'}, {'euid': 1000}, ('skipped', 'permission denied (owned by user root)')),
    ({'gpus': [3]}, {}, ('skipped', 'out of scope')),
])
def test_newcomer_verdict_is_the_discovery_decision(extra, scope, expected):
    record = holder(extra.pop('pid', 4242), **extra)
    assert _plan.newcomer_verdict(record, build_scope([0, 1], **scope)) == expected


def test_newcomer_verdict_own_pids_argument():
    assert _plan.newcomer_verdict(holder(4242), build_scope([0]), own_pids={4242})[0] == 'protected'


@pytest.mark.parametrize('container, selectors, expected', [
    ({'runtime': 'containerd', 'id': 'ab' * 32, 'pod_uid': '7c5f0a3e-1d2b-4c6a-9e8f-0123456789ab'}, ['kubepods'], True),
    ({'runtime': 'cri-o', 'id': 'cd' * 32, 'pod_uid': '7c5f0a3e-1d2b-4c6a-9e8f-0123456789ab'}, ['7c5f0a3e'], True),
    ({'runtime': 'containerd', 'id': 'ab' * 32, 'pod_uid': '7c5f0a3e-1d2b-4c6a-9e8f-0123456789ab'}, ['abab'], True),
    ({'runtime': 'docker', 'id': 'ef' * 32}, ['kubepods'], False),
    ({'runtime': 'docker', 'id': 'ef' * 32}, ['docker'], True),
    (None, ['kubepods'], False),
])
def test_container_selectors_cover_kubernetes_pods(container, selectors, expected):
    assert _plan.container_matches({"container": container}, selectors) is expected


# --- keepers of a context whose creator is gone -----------------------------------

def _keeper(pid, rank, gpu=0, creators=(41,), kind='compute'):
    evidence = {1: ['mapped'], 2: ['session'], 3: ['received'], 4: ['client']}[rank]
    return dict(holder(pid, gpus=(gpu,), kind=kind, nvml_types=[], gpu_memory_mib={}, memory_mib=0),
                keeps=[{'gpu': gpu, 'creator_pids': list(creators), 'memory_mib': 6144, 'evidence': evidence,
                        'rank': rank}])


def test_keeper_rounds_take_the_strongest_of_each_context_first():
    strong, weak, other_context, client = _keeper(50, 1), _keeper(51, 3), _keeper(60, 3, creators=(42,)), \
        _keeper(52, 4, kind='client')
    now, later = _keepers.keeper_rounds([strong, weak, other_context, client])
    assert [r['pid'] for r in now] == [50, 60]
    assert [r['pid'] for r in later] == [51, 52]
    # Once the first context is gone, its weaker keepers are in no round.
    now, later = _keepers.keeper_rounds([weak, client], contexts_alive=lambda entry: entry['creator_pids'] != [41])
    assert (now, later) == ([], [])


def test_plan_defers_weaker_keepers_and_judges_a_client_keeper_as_a_holder():
    holders = [_keeper(50, 1), _keeper(52, 4, kind='client'), holder(70, gpus=(0,))]
    plan = _plan.plan_release(holders, _plan.build_scope([0], kinds=['compute', 'client']))
    assert plan.target_pids == [50, 70]
    assert [r['pid'] for r in plan.deferred] == [52]
    # What the release plans to signal, now or in a later round (nvidia_holders' in_scope).
    assert plan.planned_pids == [50, 52, 70]
    # Without kinds client, an NVML client is named as a possible keeper, never signalled.
    plan = _plan.plan_release(holders, _plan.build_scope([0]))
    assert plan.target_pids == [50, 70] and plan.deferred == []
    assert [(e['pid'], e['reason']) for e in plan.skipped] == [
        (52, 'an NVML client that may keep the context of exited pid 41 on GPU 0: not signalled unless kinds '
             'includes client')]
    # Protected keepers are never deferred nor targeted.
    protected = dict(_keeper(53, 1), protected=True, protected_reason='protected executable')
    plan = _plan.plan_release([protected], _plan.build_scope([0]))
    assert plan.targets == [] and plan.deferred == [] and plan.protected[0]['pid'] == 53


def test_baseline_counts_a_context_only_left_alone_keepers_keep():
    alone = dict(_keeper(53, 1), protected=True)
    plan = _plan.plan_release([alone], _plan.build_scope([0]))
    assert _plan.baseline_memory([alone], plan) == {0: 6144}
    kept = _keeper(50, 1)
    plan = _plan.plan_release([kept, dict(_keeper(54, 4, kind='client'), protected=True)], _plan.build_scope([0]))
    assert _plan.baseline_memory([kept], plan) == {0: 0}


def test_weak_evidence_never_signals_a_service_and_a_stronger_left_alone_candidate_stops_the_weaker():
    receiver_in_service = dict(_keeper(60, 3), systemd_unit='dbus.service')
    receiver = _keeper(61, 3)
    plan = _plan.plan_release([receiver_in_service, receiver], _plan.build_scope([0]))
    # The receiver outside any service goes; the one in a service is named only.
    assert plan.target_pids == [61] and plan.deferred == []
    reasons = dict((e['pid'], e['reason']) for e in plan.skipped)
    assert reasons[60].startswith('holds the node of GPU 0 without having mapped it, in service dbus.service')
    # A weaker candidate of a context whose stronger one is left alone is not signalled either.
    protected = dict(_keeper(65, 1), protected=True, protected_reason='default protected executable nv-hostengine')
    client = _keeper(62, 4, kind='client')
    plan = _plan.plan_release([protected, receiver, client], _plan.build_scope([0], kinds=['compute', 'client']))
    assert plan.targets == [] and plan.deferred == []
    reasons = dict((e['pid'], e['reason']) for e in plan.skipped)
    assert reasons[61] == ('a stronger candidate keeper of the same context is left alone: pid 65 (default '
                           'protected executable nv-hostengine)')
    # Selected by its unit, it is released like the other.
    plan = _plan.plan_release([receiver_in_service, receiver],
                              _plan.build_scope([0], systemd_units=['dbus.service']))
    assert plan.target_pids == [60]


def test_memory_no_process_accounts_for_is_acted_on_only_where_the_node_is_mapped():
    mapped = _keeper(63, 1, creators=())
    received = _keeper(64, 3, creators=())
    plan = _plan.plan_release([mapped, received], _plan.build_scope([0]))
    assert plan.target_pids == [63]
    assert [e['pid'] for e in plan.skipped] == [64]
    assert 'only a mapped node would show that it does' in plan.skipped[0]['reason']
