# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import truth
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._role_plan import (
    RESULTS, role_plan, role_settings, role_summary_run)

DEFAULTS = {
    'require_root': False, 'install_dependencies': False, 'allow_reset': False, 'harden_units': [],
    'stop_units': [], 'stop_containers': [], 'stop_ignore_missing': False, 'container_runtime': 'podman',
    'keep_units': [], 'protect_units': [], 'unprotect': [], 'allow_holders': [], 'max_used_mib': 64,
    'require_nvml': True, 'venv': '/opt/gpuops-reclaim/venv', 'pip_find_links': '', 'pip_index_url': '',
    'report_dir': '', 'metrics_textfile_dir': '',
}
GPUS = [{'index': 0, 'memory_used_mib': 40960}, {'index': 1, 'memory_used_mib': 0}]
FREE_GPUS = [{'index': 0, 'memory_used_mib': 0}, {'index': 1, 'memory_used_mib': 0}]
LISTING = ('vllm.service loaded active running vLLM\n'
           'nvidia-persistenced.service loaded active running NVIDIA Persistence Daemon\n')


def state(check_mode=False, run_tags=('all',), skip_tags=(), error='', **values):
    results = dict((name, values.pop(name)) for name in RESULTS if name in values)
    variables = dict(DEFAULTS, **values)
    return {'host': 'gpu07', 'check_mode': check_mode, 'run_tags': list(run_tags), 'skip_tags': list(skip_tags),
            'variables': variables, 'error': error, 'results': results,
            'settings': role_settings(variables, list(run_tags), list(skip_tags), check_mode, '/usr/bin/python3')}


def release(free, released=(), **more):
    result = {'free_at_start': free, 'released': list(released), 'survivors': [], 'protected': [],
              'skipped_holders': [], 'before': {'free': free, 'nvml_available': True,
                                                'gpus': FREE_GPUS if free else GPUS, 'holders': []}}
    result.update(more)
    return result


def stages(plan):
    return [name for name in plan['look_files'] + plan['stage_files'] if name not in plan['summary_files']]


@pytest.mark.parametrize('value, expected', [('false', False), ('True', True), ('yes', True), (0, False), ([1], True)])
def test_truth_reads_variables_as_the_bool_filter(value, expected):
    assert truth(value) is expected


def test_settings_from_the_variables_alone():
    settings = role_settings(dict(DEFAULTS), interpreter='/usr/bin/python3')
    assert settings['look_in_release'] and not settings['needs_root'] and settings['python'] == '/usr/bin/python3'
    assert settings['stages'] == ['release', 'prove']
    installing = role_settings(dict(DEFAULTS, install_dependencies='true', pip_find_links='/w', pip_index_url='u',
                                    stop_units=['v.service'], allow_reset=True), check_mode=True)
    assert installing['python'] == '/opt/gpuops-reclaim/venv/bin/python' and installing['needs_root']
    assert not installing['look_in_release']
    assert installing['pip_environment'] == {'PIP_NO_INDEX': '1', 'PIP_FIND_LINKS': '/w', 'PIP_INDEX_URL': 'u'}
    # Check mode proves nothing; the stop runs as a plain task.
    assert installing['stages'] == ['stop_units', 'release', 'reset']
    assert installing['waits']['stop_units']['async'] == 0


@pytest.mark.parametrize('run_tags, skip_tags, look_in_release', [
    (['all'], [], True), (['gpu_reclaim_release'], [], True), (['gpu_reclaim_prove'], [], False),
    (['all'], ['gpu_reclaim_release'], False), (['all'], ['tagged'], False),
])
def test_the_release_is_the_first_look_only_when_the_tags_select_it(run_tags, skip_tags, look_in_release):
    assert role_settings(dict(DEFAULTS), run_tags, skip_tags)['look_in_release'] is look_in_release


def test_before_the_first_look_the_release_is_the_look():
    plan = role_plan(state())
    # Nothing can follow it: the look's loop keeps the summary too, and the stage loop has nothing.
    assert plan['look_files'] == ['release', 'summary_keep'] and plan['summary_in_look']
    assert plan['summary_files'] == ['summary_keep'] and plan['run_files'] == []
    assert not plan['look_failed'] and plan['error'] == '' and plan['run_error'] == ''
    # The release proves the GPUs free itself.
    assert not plan['stages']['prove']
    assert role_plan(state(allow_reset=True))['stages']['prove']


def test_a_free_host_needs_nothing_after_the_release_as_the_look():
    plan = role_plan(state(release=release(True)))
    assert plan['free_at_start'] and plan['look']['gpus'] == FREE_GPUS
    assert stages(plan) == ['release']
    assert not plan['reset']['look']


def test_a_busy_host_is_proven_after_its_release():
    plan = role_plan(state(allow_reset=True, release=release(False, [{'pid': 5, 'gpus': [0, 1]}, {'pid': 6, 'gpus': [1]}])))
    assert plan['stage_files'] == ['reset', 'prove'] and plan['stages']['prove']
    assert plan['proof_released_gpus'] == [0, 1] and not plan['proof_anywhere']
    # The first look was over the limit: the reset stage looks at the holders.
    assert plan['reset']['look']


@pytest.mark.parametrize('values, check_mode, run_tags, proves', [
    ({}, False, ['all'], True),
    ({}, True, ['all'], False),
    ({'allow_reset': True}, False, ['all'], False),
    ({'stop_units': ['vllm.service']}, False, ['all'], False),
    ({}, False, ['gpu_reclaim_release'], False),
])
def test_the_release_proves_itself_with_nothing_between_them(values, check_mode, run_tags, proves):
    settings = role_settings(dict(DEFAULTS, **values), run_tags, [], check_mode)
    assert settings['prove_in_release'] is proves


def test_a_release_that_proved_the_gpus_free_needs_no_proof_task():
    proof = {'free': True, 'gpus': FREE_GPUS, 'holders': [], 'waited_seconds': 0.1, 'settle_seconds_observed': 2.0,
             'msg': '2 GPUs free (0, 1), and stayed free for 2.00 s'}
    done = release(False, [{'pid': 5, 'gpus': [0]}], proof=proof, elapsed_seconds=0.3)
    plan = role_plan(state(release=done))
    assert stages(plan) == ['release'] and not plan['stages']['prove']
    assert plan['proof'] == proof and not plan['proof_failed'] and plan['run_error'] == ''
    # The summary reads the release's proof as the proof's.
    run = role_summary_run(state(release=done), plan, 0.0, 3.0)
    assert run['proof'] == proof
    failed = role_plan(state(release=dict(done, proof=dict(proof, free=False, msg='GPU 0 busy'))))
    assert failed['proof_failed'] and failed['run_error'] == 'GPUs of gpu07 are not free. GPU 0 busy'


def test_a_variable_error_runs_no_stage():
    plan = role_plan(state(error='gpu_reclaim_scope_user: unknown'))
    assert stages(plan) == [] and plan['run_error'] == 'gpu_reclaim_scope_user: unknown'
    # No look: the stage loop keeps the summary.
    assert plan['summary_files'] == plan['run_files'] == ['summary_keep'] and not plan['summary_in_look']


def test_a_release_that_looked_and_failed_is_the_preflight_error():
    plan = role_plan(state(release={'failed': True, 'msg': 'the lock is held by pid 7'}))
    assert plan['look_failed'] and plan['error'] == plan['run_error'] == 'the lock is held by pid 7'
    # The release was the look: nothing after it runs.
    assert plan['stage_files'] == []


def test_a_first_look_without_root_fails_preflight():
    look = {'free': False, 'uid': 1000, 'nvml_available': True, 'gpus': GPUS, 'holders': []}
    plan = role_plan(state(stop_units=['vllm.service'], first_look=look))
    assert plan['look_failed'] and 'uid 1000' in plan['run_error'] and stages(plan) == ['first_look']
    assert not plan['stages']['keep_found']


def test_the_stop_stage_stops_the_running_unprotected_units_and_warns_of_the_rest():
    look = {'free': False, 'nvml_available': True, 'gpus': GPUS, 'holders': []}
    found = {'stdout': LISTING}
    plan = role_plan(state(stop_units=['vllm.service', 'nvidia-*', 'lama'], first_look=look, units_found=found))
    assert stages(plan) == ['first_look', 'stop_units', 'stop_units_wait', 'release', 'prove']
    assert plan['units_to_stop'] == ['vllm.service'] and plan['stop_units_now']
    assert plan['stopped_units'] == [] and not plan['stop_job']
    assert any('lama' in line for line in plan['unit_warnings'])
    stopped = role_plan(state(stop_units=['vllm.service'], first_look=look, units_found=found,
                              units_stopped={'changed': True, 'ansible_job_id': 'j1'}))
    assert stopped['stopped_units'] == ['vllm.service'] and stopped['stop_job'] and stopped['proof_anywhere']


def test_check_mode_plans_the_stop_it_skips():
    look = {'free': True, 'nvml_available': True, 'gpus': FREE_GPUS, 'holders': []}
    plan = role_plan(state(check_mode=True, stop_units=['vllm.service'], first_look=look,
                           units_found={'stdout': LISTING}, units_stopped={'skipped': True}))
    assert plan['stopped_units'] == ['vllm.service'] and 'prove' not in plan['stage_files']


def test_a_unit_kept_running_is_never_stopped():
    look = {'free': False, 'nvml_available': True,
            'gpus': [{'index': 0, 'memory_used_mib': 40960, 'free': False, 'holder_pids': [40]}],
            'holders': [{'pid': 40, 'kind': 'compute', 'gpus': [0], 'systemd_unit': 'vllm.service'}]}
    show = 'Id=vllm.service\nActiveState=active\nSubState=running\nMainPID=40\n'
    plan = role_plan(state(stop_units=['vllm.service'], keep_units=['vllm.service'], first_look=look,
                           keep_found={'stdout': show}, units_found={'stdout': LISTING}))
    assert plan['keep']['kept'] == ['vllm.service'] and plan['free_at_start']
    assert plan['units_to_stop'] == [] and plan['proof_allow'] == ['40']


def test_containers_the_runtime_does_not_know_are_refused_unless_ignored():
    inspections = {'results': [{'item': 'web', 'rc': 0, 'stdout': 'true ' + 'a' * 64},
                               {'item': 'idle', 'rc': 0, 'stdout': 'false ' + 'b' * 64},
                               {'item': 'gone', 'rc': 125, 'stderr': 'Error: no such container gone'}]}
    plan = role_plan(state(stop_containers=['web', 'idle', 'gone'], containers_state=inspections))
    assert plan['refuse_missing_containers'] and 'gone' in plan['missing_containers_message']
    assert [entry['item'] for entry in plan['containers_to_stop']] == ['web']
    ignored = role_plan(state(stop_containers=['web', 'gone'], stop_ignore_missing=True, containers_state=inspections,
                              containers_stopped={'results': [{'item': inspections['results'][0]}]}))
    assert not ignored['refuse_missing_containers'] and any('gone' in line for line in ignored['unit_warnings'])
    assert ignored['stopped_containers'] == ['a' * 64]


def test_a_failed_release_after_a_stop_skips_the_proof_and_is_the_error():
    look = {'free': False, 'nvml_available': True, 'gpus': GPUS, 'holders': []}
    plan = role_plan(state(stop_units=['v.service'], first_look=look, release={'failed': True, 'msg': 'locked'}))
    assert plan['release_failed'] and not plan['stages']['prove'] and plan['run_error'] == 'locked'
    assert plan['stage_files'] == ['stop_units', 'stop_units_wait', 'release', 'prove']


def test_a_failed_proof_is_the_error():
    plan = role_plan(state(release=release(False, [{'pid': 5, 'gpus': [0]}]),
                           proof={'free': False, 'msg': 'GPU 0 busy'}))
    assert plan['proof_failed'] and plan['run_error'] == 'GPUs of gpu07 are not free. GPU 0 busy'
    skipped = role_plan(state(release=release(False), proof={'skipped': True}))
    assert skipped['proof'] == {} and not skipped['proof_failed']


def test_outputs_follow_their_variables():
    plan = role_plan(state(report_dir='/r', metrics_textfile_dir='/m'))
    assert plan['summary_files'] == ['summary_keep', 'report', 'metrics']
    assert plan['look_files'] == ['release', 'summary_keep', 'report', 'metrics'] and plan['run_files'] == []
    stopping = role_plan(state(report_dir='/r', stop_units=['vllm.service']))
    assert not stopping['summary_in_look'] and stopping['run_files'][-2:] == ['summary_keep', 'report']
    assert stopping['run_files'] == stopping['stage_files'] + stopping['summary_files']
    assert role_plan(state(check_mode=True, metrics_textfile_dir='/m'))['summary_files'] == ['summary_keep']


@pytest.mark.parametrize('values', [{}, {'allow_reset': True}, {'report_dir': '/r', 'metrics_textfile_dir': '/m'},
                                    {'install_dependencies': True}, {'stop_units': ['vllm.service']}])
@pytest.mark.parametrize('check_mode', [False, True])
@pytest.mark.parametrize('run_tags, skip_tags', [(['all'], []), (['gpu_reclaim_release'], []), (['all'], ['gpu_reclaim_prove'])])
def test_the_summary_is_kept_once_by_one_of_the_loops_whatever_the_look_found(values, check_mode, run_tags, skip_tags):
    before = role_plan(state(check_mode, run_tags, skip_tags, **values))
    for found in ({'release': release(True)}, {'release': release(False, [{'pid': 5, 'gpus': [0]}])},
                  {'release': {'failed': True, 'msg': 'the lock is held by pid 7'}},
                  {'first_look': {'free': False, 'nvml_available': True, 'gpus': GPUS, 'holders': []}}):
        after = role_plan(state(check_mode, run_tags, skip_tags, **dict(values, **found)))
        # The look's loop is worked out before the look, the stage loop after it: together, the summary once,
        # after every stage.
        files = before['look_files'] + after['run_files']
        assert [name for name in files if name in after['summary_files']] == after['summary_files']
        assert files[-len(after['summary_files']):] == after['summary_files']
        assert after['summary_in_look'] is before['summary_in_look']


def test_without_preflight_there_is_nothing_to_do():
    plan = role_plan(dict(state(), settings={}))
    assert plan['look_files'] == plan['stage_files'] == plan['summary_files'] == []


def test_the_look_installs_first_and_looks_at_the_units_to_keep():
    plan = role_plan(state(install_dependencies=True, keep_units=['vllm.service']))
    assert plan['look_files'] == ['dependencies', 'first_look', 'keep_found']


def test_the_summary_run_reads_the_plan():
    current = state(release=release(False, [{'pid': 5, 'gpus': [0]}]), proof={'free': True, 'msg': 'free'})
    run = role_summary_run(current, role_plan(current), 10.0, 12.5)
    assert run['first_look']['gpus'] == GPUS and run['proof'] == {'free': True, 'msg': 'free'}
    assert run['error'] == '' and (run['start'], run['now']) == (10.0, 12.5) and run['reset_gpus'] == []
