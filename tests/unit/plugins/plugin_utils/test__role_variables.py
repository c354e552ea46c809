# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The role's variables checked before its first task reaches a host, against the role's real spec and defaults."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._role_variables import (
    known_variables,
    list_variables,
    unknown_variables,
    value_errors,
    variable_errors,
)

ROLE = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'gpu_reclaim')


def _load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


SPECS = _load('meta', 'argument_specs.yml')
DEFAULTS = _load('defaults', 'main.yml')


def defaults(**changes):
    values = dict(DEFAULTS)
    values.update(changes)
    return values


def test_the_defaults_are_known_and_pass():
    assert set(DEFAULTS) <= known_variables(SPECS)
    assert variable_errors(DEFAULTS, SPECS) == []


def test_every_documented_variable_has_a_default_and_back():
    assert known_variables(SPECS) - set(DEFAULTS) == {'gpu_reclaim_summary'}


def test_the_known_names_come_from_every_entry_point():
    assert known_variables({'argument_specs': {'main': {'options': {'gpu_reclaim_a': {}}},
                                               'fleet': {'options': {'gpu_reclaim_b': {}}}}}) == {
        'gpu_reclaim_a', 'gpu_reclaim_b', 'gpu_reclaim_summary'}
    assert 'gpu_reclaim_scope_users' in known_variables(SPECS['argument_specs'])


# Security: a typo must not quietly widen the scope.
@pytest.mark.parametrize('name, message', [
    ('gpu_reclaim_scope_user', 'gpu_reclaim_scope_user: not a variable of the role gpu_reclaim; did you mean '
                               'gpu_reclaim_scope_users?'),
    ('gpu_reclaim_settle_second', 'did you mean gpu_reclaim_settle_seconds?'),
    ('gpu_reclaim_unprotect_all_confirm', 'did you mean gpu_reclaim_unprotect_all_confirmed?'),
    ('gpu_reclaim_grace', 'did you mean gpu_reclaim_grace_seconds?'),
    ('gpu_reclaim_scope_container', 'did you mean gpu_reclaim_scope_containers?'),
    ('gpu_reclaim_protect_unit', 'did you mean gpu_reclaim_protect_units?'),
    ('gpu_reclaim_zzzzzzzzzzzzzzzzzzzz', "the role's variables are in its meta/argument_specs.yml"),
])
def test_an_unknown_variable_names_the_nearest_known_one(name, message):
    errors = variable_errors(defaults(**{name: ['alice']}), SPECS)
    assert len(errors) == 1 and message in errors[0], errors


def test_only_the_role_prefix_is_checked():
    assert unknown_variables(['ansible_host', '_gpu_reclaim_start', 'gpu_reclaim_summary', 'my_gpu_reclaim_x'],
                             known_variables(SPECS)) == []


# Security: every bound a module applies, applied before the first task reaches a host.
@pytest.mark.parametrize('changes, message', [
    ({'gpu_reclaim_settle_seconds': 100000}, 'gpu_reclaim_settle_seconds: must be a number of seconds from 0 to 600; '
                                             'got: 100000'),
    ({'gpu_reclaim_assert_timeout': 5000}, 'gpu_reclaim_assert_timeout: must be a number of seconds from 0 to 3600'),
    ({'gpu_reclaim_lock_timeout': 4000}, 'gpu_reclaim_lock_timeout: must be a number of seconds from 0 to 3600'),
    ({'gpu_reclaim_grace_seconds': -1}, 'gpu_reclaim_grace_seconds: must be a number of seconds from 0 to 3600'),
    ({'gpu_reclaim_grace_seconds': 3601}, 'gpu_reclaim_grace_seconds: must be a number of seconds from 0 to 3600'),
    ({'gpu_reclaim_kill_seconds': 0}, 'gpu_reclaim_kill_seconds: must be more than 0 seconds; got: 0'),
    ({'gpu_reclaim_kill_seconds': 4000}, 'gpu_reclaim_kill_seconds: must be a number of seconds from 0 to 3600'),
    ({'gpu_reclaim_poll_interval': 0}, 'gpu_reclaim_poll_interval: must be a number of seconds from 0.005 to 5'),
    ({'gpu_reclaim_poll_interval': 6}, 'gpu_reclaim_poll_interval: must be a number of seconds from 0.005 to 5'),
    ({'gpu_reclaim_nvml_timeout': 0}, 'gpu_reclaim_nvml_timeout must be greater than 0 and at most 600 seconds'),
    ({'gpu_reclaim_nvml_timeout': 601}, 'gpu_reclaim_nvml_timeout must be greater than 0 and at most 600 seconds'),
    ({'gpu_reclaim_reset_timeout': 0}, 'gpu_reclaim_reset_timeout: must be more than 0 seconds'),
    ({'gpu_reclaim_reset_timeout': 2.5}, 'gpu_reclaim_reset_timeout: must be a whole number of seconds; got: 2.5'),
    ({'gpu_reclaim_container_stop_seconds': -5}, 'gpu_reclaim_container_stop_seconds: must be a number of seconds'),
    ({'gpu_reclaim_harden_timeout_stop_seconds': 0}, 'gpu_reclaim_harden_timeout_stop_seconds: must be more than 0'),
    ({'gpu_reclaim_max_used_mib': -1}, 'gpu_reclaim_max_used_mib: must be 0 or more; got: -1'),
    ({'gpu_reclaim_max_used_mib': 'lots'}, "gpu_reclaim_max_used_mib: must be a whole number of MiB; got: 'lots'"),
    ({'gpu_reclaim_max_used_mib': True}, 'gpu_reclaim_max_used_mib: must be a whole number of MiB; got: True'),
    ({'gpu_reclaim_grace_seconds': True}, 'gpu_reclaim_grace_seconds: must be a number of seconds, not a boolean; '
                                          'got: True'),
    ({'gpu_reclaim_settle_seconds': 'nan'}, 'gpu_reclaim_settle_seconds: must be a finite number of seconds'),
    ({'gpu_reclaim_assert_timeout': 'soon'}, "gpu_reclaim_assert_timeout: must be a number of seconds; got: 'soon'"),
    ({'gpu_reclaim_ladder': [{'signal': 'SIGKILL'}, {'signal': 'SIGTERM'}]},
     'gpu_reclaim_ladder[1]: comes after the SIGKILL of ladder[0]'),
    ({'gpu_reclaim_ladder': [{'signal': 'SIGSTOP'}]}, "gpu_reclaim_ladder[0].signal: signal 'SIGSTOP' is not allowed"),
    ({'gpu_reclaim_ladder': [{'signal': 'SIGTERM', 'wait': 9999}]}, 'gpu_reclaim_ladder[0].wait: must be a number'),
    ({'gpu_reclaim_scope_match': '('}, "gpu_reclaim_scope_match: invalid regular expression '('"),
    ({'gpu_reclaim_scope_kinds': ['monitor']}, "gpu_reclaim_scope_kinds[0]: must be one of compute, client"),
    ({'gpu_reclaim_scope_kinds': []}, 'gpu_reclaim_scope_kinds: must name at least one of compute, client'),
    ({'gpu_reclaim_on_shared_holder': 'ask'}, 'gpu_reclaim_on_shared_holder: must be one of release, fail'),
    ({'gpu_reclaim_scope_users': ['']}, "gpu_reclaim_scope_users[0]: must not be empty; got: ''"),
    ({'gpu_reclaim_allow_holders': ['']}, "gpu_reclaim_allow_holders[0]: must not be empty; got: ''"),
    ({'gpu_reclaim_gpus': ['0', ' ']}, "gpu_reclaim_gpus[1]: must not be empty; got: ' '"),
    ({'gpu_reclaim_stop_containers': ['']}, "gpu_reclaim_stop_containers[0]: must not be empty"),
    ({'gpu_reclaim_protect': ['[']}, "gpu_reclaim_protect[0]: the glob '[' opens a '[' at 0 that is never closed"),
    ({'gpu_reclaim_stop_units': ['vllm-[.service']}, "gpu_reclaim_stop_units[0]: the glob 'vllm-[.service' opens"),
    ({'gpu_reclaim_harden_units': ['']}, "gpu_reclaim_harden_units[0]: must not be empty"),
    ({'gpu_reclaim_keep_units': ['vllm-*.service']}, "gpu_reclaim_keep_units[0]: must be a full unit name such as "
                                                     "vllm.service, without globs; got: 'vllm-*.service'"),
    ({'gpu_reclaim_keep_units': ['vllm.service', 'llama']}, "gpu_reclaim_keep_units[1]: must be a full unit name"),
    ({'gpu_reclaim_metrics_textfile_dir': 'textfile'}, "gpu_reclaim_metrics_textfile_dir: must be an absolute path"),
    ({'gpu_reclaim_protect': ['Xorg'], 'gpu_reclaim_unprotect': ['Xorg']},
     "gpu_reclaim_protect[0] and gpu_reclaim_unprotect[0] both name 'Xorg'"),
    ({'gpu_reclaim_unprotect': ['*']}, "gpu_reclaim_unprotect: ['*'] removes the protection of every default "
                                       "protected executable"),
    ({'gpu_reclaim_unprotect': ['*'], 'gpu_reclaim_unprotect_all_confirmed': 'no'},
     "gpu_reclaim_unprotect: ['*'] removes"),
])
def test_a_bad_value_names_the_variable_and_the_value(changes, message):
    errors = value_errors(defaults(**changes))
    assert len(errors) == 1 and errors[0].startswith(message), errors


@pytest.mark.parametrize('changes', [
    # Values as -e gives them: text.
    {'gpu_reclaim_grace_seconds': '2.5', 'gpu_reclaim_settle_seconds': '600', 'gpu_reclaim_max_used_mib': '128'},
    {'gpu_reclaim_assert_timeout': 3600, 'gpu_reclaim_settle_seconds': 0, 'gpu_reclaim_grace_seconds': 0},
    {'gpu_reclaim_unprotect': ['*'], 'gpu_reclaim_unprotect_all_confirmed': True},
    {'gpu_reclaim_unprotect': ['Xorg'], 'gpu_reclaim_protect': ['vllm*']},
    {'gpu_reclaim_ladder': [{'signal': 'SIGINT', 'wait': 5}, {'action': 'freeze'}, {'signal': 'SIGKILL'}]},
    {'gpu_reclaim_scope_match': 'VLLM::Worker', 'gpu_reclaim_scope_users': ['alice']},
    {'gpu_reclaim_keep_units': ['vllm.service', 'llama@0.service']},
])
def test_good_values_pass(changes):
    assert value_errors(defaults(**changes)) == []


def test_every_error_is_reported_at_once():
    errors = variable_errors(defaults(gpu_reclaim_scope_user=['x'], gpu_reclaim_settle_seconds=100000,
                                      gpu_reclaim_allow_holders=['']), SPECS)
    assert [error.split(':')[0].split('[')[0] for error in errors] == [
        'gpu_reclaim_scope_user', 'gpu_reclaim_settle_seconds', 'gpu_reclaim_allow_holders']


class Tagged(str):
    """As Ansible hands a string on: a subclass of str."""


@pytest.mark.parametrize('name, value, kind', [
    ('gpu_reclaim_stop_units', Tagged('vllm-*.service'), 'string'),
    ('gpu_reclaim_stop_units', '["vllm-*.service"]', 'string'),
    ('gpu_reclaim_protect_units', 'dcgm.service', 'string'),
    ('gpu_reclaim_stop_containers', 'vllm', 'string'),
    ('gpu_reclaim_gpus', 0, 'number'),
    ('gpu_reclaim_harden_units', True, 'boolean'),
    ('gpu_reclaim_keep_units', {'vllm.service': True}, 'mapping'),
])
def test_a_list_given_as_anything_else_is_refused_with_its_json_form(name, value, kind):
    # As -e name=value gives it: a string, whose characters the role would otherwise read as patterns.
    errors = variable_errors(defaults(**{name: value}), SPECS)
    plain = str(value) if isinstance(value, str) else value
    assert errors == ['%s: must be a list, such as ["vllm.service"]; got the %s %r. On the command line, give it as '
                      'JSON: -e \'{"%s": [...]}\'' % (name, kind, plain, name)]


def test_every_list_variable_of_the_role_is_checked_as_one():
    names = list_variables(SPECS)
    assert {'gpu_reclaim_stop_units', 'gpu_reclaim_harden_units', 'gpu_reclaim_keep_units', 'gpu_reclaim_unprotect',
            'gpu_reclaim_protect_units', 'gpu_reclaim_stop_containers', 'gpu_reclaim_gpus'} <= names
    assert variable_errors(defaults(**dict((name, None) for name in names)), SPECS) == []


@pytest.mark.parametrize('values, specs, message', [
    (['gpu_reclaim_gpus'], SPECS, 'role_variable_errors: the input must map the role'),
    ({}, ['main'], 'role_variable_errors: argument_specs must be the mapping of meta/argument_specs.yml; got: list'),
])
def test_bad_arguments_name_the_filter(values, specs, message):
    with pytest.raises(TypeError) as caught:
        variable_errors(values, specs)
    assert str(caught.value).startswith(message)


def test_the_role_checks_its_variables_in_its_first_task():
    tasks = _load('tasks', 'preflight.yml')
    first = tasks[0]
    assert first['name'].startswith("Check the role's variables and start the clock; stages as needed: {{")
    # A bad variable becomes the run's error, which skips every task that would reach the host.
    assert first['ansible.builtin.set_fact']['_gpu_reclaim_error'] == "{{ _gpu_reclaim_variable_errors | join('\n') }}"
    assert 'gpuops.reclaim.role_variable_errors' in first['vars']['_gpu_reclaim_variable_errors']
    assert "varnames', '^gpu_reclaim_'" in first['vars']['_gpu_reclaim_variable_names']
    assert _load('tasks', 'main.yml')[0]['ansible.builtin.import_tasks'] == 'preflight.yml'
