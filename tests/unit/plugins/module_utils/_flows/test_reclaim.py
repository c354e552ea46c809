# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_reclaim's flow (``_flows.reclaim``): its input checks and the bounded commands it runs.

The whole flow runs in tests/unit/plugins/modules/test_gpu_reclaim.py, through the module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import reclaim as _reclaim
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import Failure


class Host:
    """The part of a module that ``_flows.reclaim`` uses for commands, with answers given by the test."""

    def __init__(self, answers=None, binaries=('systemctl', 'timeout')):
        self.answers = list(answers or [])
        self.binaries = binaries
        self.ran = []
        self.warnings = []

    def get_bin_path(self, name):
        return '/usr/bin/%s' % name if name in self.binaries else None

    def run_command(self, argv, environ_update=None):
        self.ran.append((argv, environ_update))
        return self.answers.pop(0)

    def warn(self, text):
        self.warnings.append(text)


def params(**extra):
    values = {'ladder': None, 'grace_seconds': 10.0, 'kill_seconds': 10.0, 'poll_interval': 0.05,
              'nvml_timeout': 5.0, 'users': [], 'match': None, 'systemd_units': [], 'containers': [],
              'kinds': ['compute'], 'on_shared_holder': 'release', 'max_used_mib': None,
              'only_if_busy': False, 'prove': False, 'proof_timeout_seconds': None, 'settle_seconds': None}
    values.update(extra)
    return values


def test_good_input_gives_the_ladder_and_the_poll_interval():
    ladder, poll_interval = _reclaim.check_input(params(grace_seconds='3', poll_interval=0.5))
    assert [(step['name'], step['wait']) for step in ladder] == [('SIGTERM', 3.0), ('freeze', 0.0), ('SIGKILL', 10.0)]
    assert poll_interval == 0.5


def test_the_proof_takes_its_defaults_only_with_prove():
    given = params(prove=True, settle_seconds='2')
    _reclaim.check_input(given)
    assert (given['proof_timeout_seconds'], given['settle_seconds']) == (60.0, 2.0)
    given = params()
    _reclaim.check_input(given)
    assert (given['proof_timeout_seconds'], given['settle_seconds']) == (60.0, 0.0)


@pytest.mark.parametrize('values, message', [
    ({'ladder': [{'signal': 'SIGSTOP'}]}, "ladder[0].signal: signal 'SIGSTOP' is not allowed in a ladder"),
    ({'poll_interval': 9}, 'poll_interval: must be a number of seconds from 0.005 to 5; got: 9'),
    ({'match': '('}, "match: invalid regular expression '('"),
    ({'kill_seconds': True}, 'kill_seconds'),
    ({'max_used_mib': -1, 'only_if_busy': True}, 'max_used_mib: must be 0 or more; got: -1'),
    # Security: each is a clear error before anything is looked at.
    ({'max_used_mib': 64}, 'max_used_mib: only judges the GPUs with only_if_busy: true or prove: true; got: '
                           'max_used_mib=64 with only_if_busy=False and prove=False'),
    ({'settle_seconds': 2}, 'settle_seconds: only applies with prove: true; got: settle_seconds=2 with prove=False'),
    ({'proof_timeout_seconds': 30}, 'proof_timeout_seconds: only applies with prove: true; got: '
                                    'proof_timeout_seconds=30 with prove=False'),
    ({'prove': True, 'settle_seconds': 601}, 'settle_seconds: must be a number of seconds from 0 to 600; got: 601'),
    ({'prove': True, 'proof_timeout_seconds': 'soon'}, 'proof_timeout_seconds'),
    ({'prove': True, 'proof_timeout_seconds': True}, 'proof_timeout_seconds'),
    ({'prove': True, 'max_used_mib': -1}, 'max_used_mib: must be 0 or more; got: -1'),
    ({'ladder': [{'signal': 'SIGKILL'}, {'signal': 'SIGTERM'}]}, 'ladder[1]: comes after the SIGKILL of ladder[0]'),
    ({'protect': ['[']}, "protect[0]: the glob '[' opens a '[' at 0 that is never closed"),
    ({'protect': ['Xorg'], 'unprotect': ['Xorg']}, "protect[0] and unprotect[0] both name 'Xorg'"),
    ({'allow': ['']}, "allow[0]: must not be empty; got: ''"),
    ({'unprotect': ['*']}, "unprotect: ['*'] removes the protection of every default protected executable"),
    ({'systemd_units': ['vllm-[.service']}, "systemd_units[0]: the glob 'vllm-[.service' opens a '['"),
])
def test_bad_input_fails_naming_the_option(values, message):
    with pytest.raises(Failure) as caught:
        _reclaim.check_input(params(**values))
    assert message in str(caught.value)


def test_commands_are_bounded_by_timeout():
    host = Host(answers=[(0, 'out', ''), (124, '', '')])
    run = _reclaim.command_runner(host, extra_seconds=10)
    assert run(['systemctl', 'stop', 'a.service']) == (0, 'out', '')
    assert host.ran[0][0] == ['/usr/bin/timeout', '--kill-after=5', '40', 'systemctl', 'stop', 'a.service']
    assert host.ran[0][1] == {'LC_ALL': 'C', 'SYSTEMD_PAGER': ''}
    assert run(['docker', 'stop', 'c']) == (124, '', 'docker stop c did not answer within 40 s')


def test_known_units_from_systemctl():
    listing = 'vllm.service loaded active running vLLM\n'
    host = Host(answers=[(0, listing, ''), (1, '', '')])
    assert _reclaim.known_units(host, ['vllm*']) == ['vllm.service']
    assert [argv[3:5] for argv, dummy in host.ran] == [['/usr/bin/systemctl', 'list-units'],
                                                       ['/usr/bin/systemctl', 'list-unit-files']]


def test_known_units_cannot_tell_without_systemctl_or_on_error():
    host = Host(binaries=())
    assert _reclaim.known_units(host, ['vllm*']) is None
    assert host.warnings == ['systemd_units: systemctl is not installed here, so the unit names were not checked']
    host = Host(answers=[(3, '', 'Failed to connect to bus')])
    assert _reclaim.known_units(host, ['vllm*']) is None
    assert host.warnings == ['systemd_units: the unit names were not checked (systemctl list-units: rc=3 '
                             'Failed to connect to bus)']


def test_read_cgroup_text_of_this_process():
    with open('/proc/self/cgroup') as handle:
        assert _reclaim.read_cgroup_text(os.getpid()) == handle.read()
