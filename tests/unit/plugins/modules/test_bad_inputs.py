# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The bad-input table: every module given inputs a user gets wrong.

Each row is an input tried: the module, its arguments, and either the option
the failure must name (with the value received, where it has one) or, for a
documented acceptance, ``None``. Every case runs the module's real ``main()``
in check mode against stand-in device nodes and an NVML that is not there, so
that a case which wrongly passed could signal nothing; and a real holder
started by the test must still be alive after every case.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.modules import (
    gpu_assert_free,
    gpu_reclaim,
    gpu_unit_audit,
    nvidia_holders,
)

MODULES = {'gpu_reclaim': gpu_reclaim, 'gpu_assert_free': gpu_assert_free, 'nvidia_holders': nvidia_holders,
           'gpu_unit_audit': gpu_unit_audit}

# Bad values of the options every module shares, and of the protection options.
SHARED = [
    ('nvml_timeout', -1), ('nvml_timeout', 0), ('nvml_timeout', 3601), ('nvml_timeout', True), ('nvml_timeout', 'soon'),
    ('nvml_timeout', 'nan'), ('nvml_timeout', 'inf'),
]
SELECTION = [('gpus', ['']), ('gpus', ['99']), ('gpus', ['GPU-nope']), ('gpus', ['0000:FF:00.0']), ('gpus', ['-1'])]
PROTECTION = [
    ('protect', ['']), ('protect', ['[']), ('protect', ['nvidia-[']), ('protect_units', ['']),
    ('protect_units', ['vllm-[.service']), ('unprotect', ['']), ('unprotect', ['*']), ('unprotect', ['*.service']),
    ('unprotect', ['[']),
]
# Bad values of the scope options (gpu_reclaim's, which nvidia_holders judges each holder by).
SCOPE = [
    ('match', '(', 'match'), ('match', '[unclosed', 'match'), ('kinds', [], 'kinds'), ('kinds', ['worker'], 'kinds'),
    ('users', [''], 'users[0]'), ('users', ['  '], 'users[0]'), ('systemd_units', [''], 'systemd_units[0]'),
    ('systemd_units', ['vllm-[.service'], 'systemd_units[0]'), ('containers', [''], 'containers[0]'),
]
SECONDS = ['-1', -0.5, True, False, 'later', 'nan', 'inf', 1e9]

CASES = []
for module in ('gpu_reclaim', 'gpu_assert_free', 'nvidia_holders', 'gpu_unit_audit'):
    CASES += [(module, {option: value}, option) for option, value in SHARED]
for module in ('gpu_reclaim', 'gpu_assert_free', 'nvidia_holders'):
    # Without NVML, GPUs are selected among the device nodes (gpu_assert_free must be told to accept that).
    extra = {'require_nvml': False} if module == 'gpu_assert_free' else {}
    CASES += [(module, dict(extra, **{option: value}), option) for option, value in SELECTION]
for module in ('gpu_reclaim', 'nvidia_holders'):
    CASES += [(module, {option: value}, option) for option, value in PROTECTION]
    CASES += [(module, {'protect': ['Xorg'], 'unprotect': ['Xorg']}, 'protect[0] and unprotect[0]')]
for module in ('gpu_reclaim', 'nvidia_holders'):
    CASES += [(module, {option: value}, message) for option, value, message in SCOPE]
for option in ('grace_seconds', 'kill_seconds', 'poll_interval', 'lock_timeout'):
    CASES += [('gpu_reclaim', {option: value}, option) for value in SECONDS]
for option in ('timeout_seconds', 'poll_interval', 'settle_seconds'):
    CASES += [('gpu_assert_free', {option: value}, option) for value in SECONDS]
CASES += [
    ('gpu_reclaim', {'poll_interval': 0.001}, 'poll_interval'),
    ('gpu_reclaim', {'poll_interval': 6}, 'poll_interval'),
    ('gpu_reclaim', {'ladder': []}, 'ladder'),
    ('gpu_reclaim', {'ladder': [{'signal': 'SIGKILL'}, {'signal': 'SIGTERM'}]}, 'ladder[1]'),
    ('gpu_reclaim', {'ladder': [{'signal': 'SIGNOPE'}]}, 'ladder[0].signal'),
    ('gpu_reclaim', {'ladder': [{'signal': 'SIGTERM', 'wait': -1}]}, 'ladder[0].wait'),
    ('gpu_reclaim', {'ladder': [{'signal': 'SIGTERM', 'wait': True}]}, 'ladder[0].wait'),
    ('gpu_reclaim', {'ladder': [{'signal': 'SIGTERM', 'after': 3}]}, 'ladder[0]'),
    ('gpu_reclaim', {'ladder': [{'action': 'freeze'}]}, 'ladder[0]'),
    ('gpu_reclaim', {'ladder': [{'action': 'thaw'}, {'signal': 'SIGKILL'}]}, 'ladder[0].action'),
    ('gpu_reclaim', {'ladder': [{'action': 'freeze', 'signal': 'SIGTERM'}, {'signal': 'SIGKILL'}]}, 'ladder[0]'),
    ('gpu_reclaim', {'ladder': [{'wait': 3}]}, 'ladder[0]'),
    ('gpu_reclaim', {'ladder': ['SIGTERM']}, "option 'ladder'"),
    ('gpu_reclaim', {'ladder': [{'signal': 'SIGKILL'}, {'signal': 'SIGKILL'}]}, 'ladder[1]'),
    ('gpu_reclaim', {'on_shared_holder': 'maybe'}, 'on_shared_holder'),
    ('gpu_reclaim', {'max_used_mib': 64}, 'max_used_mib'),
    ('gpu_reclaim', {'only_if_busy': True, 'max_used_mib': -5}, 'max_used_mib'),
    ('gpu_reclaim', {'allow': ['']}, 'allow[0]'),
    ('gpu_reclaim', {'fail_on_survivors': 'perhaps'}, 'fail_on_survivors'),
    ('gpu_reclaim', {'release_pods': 'perhaps'}, 'release_pods'),
    ('gpu_reclaim', {'grace_seconds': 3601}, 'grace_seconds'),
    ('gpu_reclaim', {'kill_seconds': 3601}, 'kill_seconds'),
    ('gpu_reclaim', {'no_such_option': 1}, 'no_such_option'),
    ('gpu_assert_free', {'max_used_mib': -1}, 'max_used_mib'),
    ('gpu_assert_free', {'max_used_percent': 101.0}, 'max_used_percent'),
    ('gpu_assert_free', {'max_used_percent': -1.0}, 'max_used_percent'),
    ('gpu_assert_free', {'max_used_mib': 1, 'max_used_percent': 1.0}, 'max_used_mib'),
    ('gpu_assert_free', {'settle_seconds': 601}, 'settle_seconds'),
    ('gpu_assert_free', {'timeout_seconds': 3601}, 'timeout_seconds'),
    ('gpu_assert_free', {'poll_interval': 0.001}, 'poll_interval'),
    ('gpu_assert_free', {'allow': ['']}, 'allow[0]'),
    ('gpu_assert_free', {'left_alone': [{'reason': 'x'}]}, 'left_alone[0]'),
    ('gpu_assert_free', {'left_alone': [{'pid': -3}]}, 'left_alone[0]'),
    ('gpu_assert_free', {'left_alone': [{'pid': 'abc'}]}, 'left_alone[0]'),
    ('gpu_assert_free', {'released_gpus': ['x']}, 'released_gpus'),
    ('gpu_assert_free', {'no_such_option': 1}, 'no_such_option'),
    ('nvidia_holders', {'no_such_option': 1}, 'no_such_option'),
    ('gpu_unit_audit', {'units': ['']}, 'units[0]'),
    ('gpu_unit_audit', {'fail_on_orphaning': 'perhaps'}, 'fail_on_orphaning'),
    ('gpu_unit_audit', {'no_such_option': 1}, 'no_such_option'),
]
# Documented acceptances: inputs that look odd and are fine, as the options' documentation says.
ACCEPTED = [
    ('gpu_assert_free', {'max_used_mib': 0}),
    ('gpu_assert_free', {'timeout_seconds': 0}),
    ('gpu_assert_free', {'settle_seconds': '0.5'}),
    ('gpu_assert_free', {'left_alone': []}),
    ('gpu_reclaim', {'grace_seconds': '2.5'}),
    ('gpu_reclaim', {'unprotect': ['*'], 'unprotect_all_confirmed': True}),
    ('gpu_reclaim', {'only_if_busy': True, 'max_used_mib': 0}),
    ('nvidia_holders', {'nvml_timeout': '1.5'}),
]


def test_the_table_has_at_least_120_inputs():
    assert len(CASES) + len(ACCEPTED) >= 120


@pytest.fixture
def guarded(module_runner, no_library, point_discovery, spawn_holder):
    """Run a module in check mode over stand-in nodes, a real holder of which must outlive the case."""
    devices = point_discovery(None)
    holder = spawn_holder([os.path.join(devices, 'nvidia0'), os.path.join(devices, 'nvidia-uvm')])

    def run(module, args):
        result = module_runner(MODULES[module])(dict(args, _ansible_check_mode=True))
        assert holder.poll() is None, 'a case signalled the test holder'
        return result
    return run


@pytest.mark.parametrize('module, args, option', CASES,
                         ids=['%s-%s' % (case[0], '-'.join('%s=%r' % item for item in sorted(case[1].items())))
                              for case in CASES])
def test_a_bad_input_fails_naming_the_option_and_the_value(guarded, module, args, option):
    result = guarded(module, args)
    assert result.get('failed'), result
    assert option in result['msg'], result['msg']
    assert not result.get('changed'), result


@pytest.mark.parametrize('module, args', ACCEPTED,
                         ids=['%s-%s' % (case[0], '-'.join('%s=%r' % item for item in sorted(case[1].items())))
                              for case in ACCEPTED])
def test_a_documented_acceptance_passes_the_checks(guarded, module, args):
    result = guarded(module, args)
    # Without NVML the modules may still fail for that reason, never for the input.
    if result.get('failed'):
        assert 'NVML' in result['msg'] or 'nvidia-ml' in result['msg'] or 'libnvidia-ml' in result['msg'], result
