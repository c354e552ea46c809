# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._reset_plan import (
    failure_text, needs_look, reset_plan, reset_stage, restore_errors, stuck_gpus)


def gpu(index, used, **more):
    record = {'index': index, 'uuid': 'GPU-%d' % index, 'memory_used_mib': used, 'persistence_mode': True,
              'display_active': False}
    record.update(more)
    return record


def holder(pid, gpus, kind='compute', protected=False, is_self=False, unit=None, in_scope=False, manager='system'):
    return {'pid': pid, 'gpus': gpus, 'kind': kind, 'protected': protected, 'is_self': is_self,
            'systemd_unit': unit, 'unit_manager': manager if unit else None, 'title': 'proc-%d' % pid,
            'in_scope': in_scope}


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


def before(*holders, **gpus):
    return {'gpus': [gpu(0, 30720, display_active=gpus.get('display', False)), gpu(1, 0)], 'holders': list(holders)}


def test_the_reset_stage_looks_when_a_gpu_stayed_over_the_limit():
    assert needs_look([{'index': 0, 'memory_used_mib_after': 900}], [gpu(0, 0)], 64)
    assert needs_look(None, [gpu(0, 900)], 64)
    assert not needs_look([{'index': 0}], [gpu(0, 64)], 64)


def test_blockers_within_scope_are_stopped_through_their_units():
    results = {'before_reset': before(holder(5, [0], 'client', protected=True, unit='dcgm.service'),
                                      holder(6, [0], 'client', unit='exporter.service', in_scope=True))}
    stage = reset_stage('h', 64, None, [], results)
    assert stage['run'] and not stage['refused'] and stage['out_of_scope'] == []
    assert stage['units'] == ['dcgm.service', 'exporter.service'] and stage['persistent'] == [0]
    assert stage['reset_gpus'] == [] and not stage['failed']


@pytest.mark.parametrize('results, refusal', [
    ({'before_reset': before(display=True)}, 'GPU(s) 0 drive a display and are never reset. Free them with a reboot.'),
    ({'before_reset': before(holder(6, [0], 'client', unit='exporter.service'))},
     "The reset of GPU(s) 0 is blocked by pid 6 (proc-6), GPU client(s) outside the release's scope "
     "(gpu_reclaim_scope_users, gpu_reclaim_scope_match, gpu_reclaim_scope_systemd_units, "
     "gpu_reclaim_scope_containers). Stop them by hand, or widen the scope."),
    ({'before_reset': before(holder(7, [0], 'client', protected=True))},
     'The reset of GPU(s) 0 is blocked by pid 7 (proc-7), which run outside any system service that could be '
     'stopped and started again. Stop them by hand, or reboot.'),
    # Security: a unit a user's own manager runs is named by that user; root stops no system unit of that name.
    ({'before_reset': before(holder(9, [0], 'client', unit='postgresql.service', manager='user', in_scope=True))},
     'The reset of GPU(s) 0 is blocked by pid 9 (proc-9), which run outside any system service that could be '
     'stopped and started again. Stop them by hand, or reboot.'),
    # A scope (a session, a container's) cannot be started again.
    ({'before_reset': before(holder(10, [0], 'client', unit='session-3.scope', in_scope=True))},
     'The reset of GPU(s) 0 is blocked by pid 10 (proc-10), which run outside any system service that could be '
     'stopped and started again. Stop them by hand, or reboot.'),
])
def test_a_reset_that_cannot_be_done_safely_is_refused(results, refusal):
    stage = reset_stage('h', 64, None, [], results)
    assert stage['refused'] and stage['refusal'] == refusal


def test_only_the_unprotected_clients_out_of_the_scope_refuse_the_reset():
    # The look's in_scope is the release's own plan: a protected blocker is stopped through its unit whatever it says.
    inside = holder(6, [0], 'client', unit='exporter.service', in_scope=True)
    outside = holder(8, [0], 'client', unit='gpu-top.service')
    protected = holder(5, [0], 'client', protected=True, unit='dcgm.service')
    stage = reset_stage('h', 64, None, [], {'before_reset': before(protected, inside, outside)})
    assert stage['out_of_scope'] == [outside] and stage['blockers'] == [protected, inside]
    assert stage['refused'] and stage['refusal'].startswith('The reset of GPU(s) 0 is blocked by pid 8 (proc-8), GPU client')
    # A look without in_scope (an older result) keeps every unprotected client out, as nothing said it is in.
    bare = dict(inside)
    del bare['in_scope']
    assert reset_stage('h', 64, None, [], {'before_reset': before(bare)})['out_of_scope'] == [bare]


def test_what_went_wrong_is_reported_together():
    results = {'before_reset': before(),
               'reset_failure': {'msg': 'One or more items failed', 'results': [
                   {'failed': True, 'stderr': 'GPU busy'}, {'failed': False, 'stderr': 'ignored'}]},
               'restore_persistence': {'results': [{'item': 0, 'failed': True, 'stderr': '', 'msg': 'rc 3 '}]},
               'restore_clients': {'results': [{'item': 'dcgm.service', 'failed': True, 'msg': 'no unit'}]}}
    stage = reset_stage('h', 64, None, [], results)
    assert stage['error'] == 'One or more items failed GPU busy' and stage['reset_gpus'] == []
    assert stage['errors'] == ['the reset failed: One or more items failed GPU busy',
                               'persistence mode of GPU 0 was not restored: rc 3',
                               'dcgm.service was not started again: no unit']
    assert stage['failed'] and stage['failure_message'] == (
        'The reset stage on h: the reset of GPU(s) 0 failed: One or more items failed GPU busy. '
        'Not restored: persistence mode of GPU 0 was not restored: rc 3; dcgm.service was not started again: '
        'no unit. Restore them by hand (nvidia-smi -i N -pm 1, systemctl start UNIT). Next step: reboot the host.')


def test_a_reset_that_worked_resets_its_gpus():
    stage = reset_stage('h', 64, None, [], {'before_reset': before(), 'restore_persistence': {'results': []}})
    assert stage['reset_gpus'] == [0] and not stage['failed'] and stage['errors'] == []
    assert failure_text({}) == '' and failure_text({'results': []}) == 'nvidia-smi failed'
    assert restore_errors(None, None) == []
