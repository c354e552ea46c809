# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

import pytest
import yaml

from ansible_collections.gpuops.reclaim.plugins.doc_fragments.protection import ModuleDocFragment
from ansible_collections.gpuops.reclaim.plugins.module_utils import _protection
from ansible_collections.gpuops.reclaim.plugins.module_utils._protection import (
    DEFAULT_PROTECTED_EXECUTABLES,
    DEFAULT_PROTECTED_UNITS,
    PROTECTION_ARGUMENT_SPEC,
    ProtectionError,
    check_protection_options,
    is_protected_unit,
    names_of,
    never_supervisor,
    protection,
    protection_of,
    script_of,
    unknown_unprotect,
)


# --- the doc fragment says what the code does ------------------------------------

def _fragment():
    return yaml.safe_load(ModuleDocFragment.DOCUMENTATION)['options']


def _defaults_listed(option):
    lines = [line for line in _fragment()[option]['description'] if line.startswith('Protected by default are')]
    assert len(lines) == 1
    return re.findall(r'C\(([^)]+)\)', lines[0])


def test_fragment_lists_exactly_the_default_executables():
    assert _defaults_listed('protect') == list(DEFAULT_PROTECTED_EXECUTABLES)


def test_fragment_lists_exactly_the_default_units():
    assert _defaults_listed('protect_units') == list(DEFAULT_PROTECTED_UNITS)


def test_fragment_documents_every_option_of_the_spec():
    options = _fragment()
    assert set(options) == set(PROTECTION_ARGUMENT_SPEC)
    for name, spec in PROTECTION_ARGUMENT_SPEC.items():
        assert options[name]['type'] == spec['type']
        assert options[name].get('elements') == spec.get('elements')
        assert options[name]['default'] == spec['default']


def test_the_usual_unit_names_are_protected():
    for unit in ('nvidia-persistenced.service', 'nvidia-dcgm.service', 'dcgm-exporter.service',
                 'nvidia-fabricmanager.service'):
        assert unit in DEFAULT_PROTECTED_UNITS


# --- names ------------------------------------------------------------------------

@pytest.mark.parametrize('title, expected', [
    ('python3 /usr/bin/dcgm-exporter --port 9400', 'dcgm-exporter'),
    ('python3 -u -X dev /opt/exporter/dcgm-exporter', 'dcgm-exporter'),
    ('python3 -m dcgm_exporter', 'dcgm_exporter'),
    ("python3 -c 'import x'", None),
    ('python3', None),
    ('', None),
    (None, None),
])
def test_script_of(title, expected):
    assert script_of(title) == expected


@pytest.mark.parametrize('exe, comm, title, expected', [
    # The executable decides; the title is not a name.
    ('/usr/bin/nv-hostengine', 'nv-hostengine', 'VLLM::Worker_TP0', [('nv-hostengine', 'executable')]),
    # An interpreter adds its script.
    ('/usr/bin/python3.11', 'python3', 'python3 /usr/bin/dcgm-exporter',
     [('python3.11', 'executable'), ('dcgm-exporter', 'script')]),
    # Unreadable executable: the command's first word and comm.
    (None, 'nvidia-persiste', '/usr/bin/nvidia-persistenced --user nvidia-persistenced',
     [('nvidia-persistenced', 'command'), ('nvidia-persiste', 'comm')]),
    (None, 'python3', 'python3 /usr/bin/dcgm-exporter',
     [('python3', 'command'), ('python3', 'comm'), ('dcgm-exporter', 'script')]),
])
def test_names_of(exe, comm, title, expected):
    assert names_of(exe, comm, title) == expected


# --- protection ---------------------------------------------------------------------

def _record(**fields):
    record = {'pid': 4000, 'ppid': 1, 'exe': None, 'name': None, 'title': '', 'systemd_unit': None}
    record.update(fields)
    return record


@pytest.mark.parametrize('record, options, expected', [
    # A daemon run by an interpreter: protected by its script.
    (_record(exe='/usr/bin/python3.11', name='python3', title='python3 /usr/bin/dcgm-exporter'), {},
     (True, 'default protected executable dcgm-exporter (the script an interpreter runs)')),
    # The executable cannot be read and comm is cut at 15 characters: still recognised.
    (_record(name='nvidia-persiste', title=''), {},
     (True, 'default protected executable nvidia-persistenced (from comm nvidia-persiste; '
            'the executable cannot be read)')),
    (_record(name='nvidia-fabricma', title=''), {},
     (True, 'default protected executable nvidia-fabricmanager (from comm nvidia-fabricma; '
            'the executable cannot be read)')),
    (_record(name='gpu-feature-dis', title=''), {},
     (True, 'default protected executable gpu-feature-discovery (from comm gpu-feature-dis; '
            'the executable cannot be read)')),
    (_record(name='nvidia-device-p', title='/usr/bin/nvidia-device-plugin'), {},
     (True, 'default protected executable nvidia-device-plugin (from the command line; '
            'the executable cannot be read)')),
    # A short comm that is not a prefix of a default name is nothing.
    (_record(name='nvidia', title=''), {}, (False, None)),
    # A title alone never protects: the executable is readable and is a workload's.
    (_record(exe='/usr/bin/python3', name='VLLM::Worker_TP', title='VLLM::Worker_TP0 nv-hostengine'), {},
     (False, None)),
    # By unit: whatever the executable.
    (_record(exe='/opt/bin/exporter', name='exporter', systemd_unit='dcgm-exporter.service'), {},
     (True, 'default protected unit dcgm-exporter.service')),
    (_record(exe='/opt/bin/exporter', name='exporter', systemd_unit='dcgm-exporter.service'),
     {'unprotect': ['dcgm-exporter.service']}, (False, None)),
    (_record(exe='/opt/bin/top', name='top', systemd_unit='gpu-top.service'), {'protect_units': ['gpu-*']},
     (True, 'user protected unit gpu-top.service')),
    # User names: the script too.
    (_record(exe='/usr/bin/python3', name='python3', title='python3 /srv/metrics.py'), {'protect': ['metrics.py']},
     (True, 'user protected executable metrics.py (the script an interpreter runs)')),
    # Unprotect a default executable.
    (_record(exe='/usr/bin/Xorg', name='Xorg'), {'unprotect': ['Xorg']}, (False, None)),
    # Kernel threads and PID 1 whatever the options.
    (_record(pid=2, ppid=0, name='kthreadd', kernel_thread=True), {'unprotect': ['*']}, (True, 'kernel thread')),
    (_record(pid=1, exe='/usr/lib/systemd/systemd'), {'unprotect': ['*']}, (True, 'pid 1')),
])
def test_protection_of(record, options, expected):
    assert protection_of(record, **options) == expected


def test_protection_keeps_its_positional_form():
    assert protection(55, 'nv-hostengine') == (True, 'default protected executable nv-hostengine')
    assert protection(55, 'python3', False, True) == (True, 'self or ancestor of this module')
    assert protection(55, 'trainer', False, False, ('train*',), ()) == (True, 'user protected executable trainer')


def test_is_protected_unit():
    assert is_protected_unit('nvidia-dcgm.service')
    assert not is_protected_unit('nvidia-dcgm.service', unprotect=['nvidia-dcgm*'])
    assert is_protected_unit('exporter.service', protect_units=['exporter.service'])
    assert not is_protected_unit('vllm.service')


def test_unknown_unprotect_knows_units_too():
    assert unknown_unprotect(['Xorg', 'dcgm-exporter.service', 'nvidia-*', 'nosuch']) == ['nosuch']


# --- never a supervisor ---------------------------------------------------------

@pytest.mark.parametrize('process, expected', [
    ({'name': 'sshd-session', 'exe': '/usr/lib/openssh/sshd-session'}, True),
    ({'name': 'runuser', 'exe': '/usr/sbin/runuser'}, True),
    # comm and exe disagree (a symlinked launcher): either one is enough.
    ({'name': 'launcher', 'exe': '/usr/bin/sudo'}, True),
    ({'name': 'bash', 'exe': None}, True),
    ({'name': 'systemd-run', 'exe': None}, True),
    ({'name': 'python3', 'exe': '/usr/bin/python3.11'}, False),
    ({'name': 'gpu-supervisor', 'exe': '/usr/bin/python3.11'}, False),
])
def test_never_supervisor(process, expected):
    assert never_supervisor(process) is expected


def test_launchers_of_the_issue_are_listed():
    assert {'sshd-session', 'runuser', 'su', 'sudo', 'sshd'} <= _protection.NEVER_SUPERVISORS


@pytest.mark.parametrize('pid, kernel_thread, ppid, expected', [
    (1, False, 0, 'pid 1'),
    (0, False, None, 'pid 1'),
    (None, False, None, 'pid 1'),
    (2, False, 0, 'kernel thread'),
    (77, False, 2, 'kernel thread'),
    (77, True, 1, 'kernel thread'),
    (77, False, 1, None),
])
def test_never_signalled_whatever_the_options(pid, kernel_thread, ppid, expected):
    assert _protection.never_signalled(pid, kernel_thread, ppid) == expected


# Security: protection options that contradict each other, or remove every default, fail before anything is done.
@pytest.mark.parametrize('options, message', [
    (dict(protect=['Xorg'], unprotect=['Xorg']),
     "protect[0] and unprotect[0] both name 'Xorg': a name is protected or it is not"),
    (dict(protect_units=['a.service', 'nvidia-dcgm.service'], unprotect=['x', 'nvidia-dcgm.service']),
     "protect_units[1] and unprotect[1] both name 'nvidia-dcgm.service'"),
    (dict(unprotect=['*']), "unprotect: ['*'] removes the protection of every default protected executable"),
    (dict(unprotect=['*.service']), "unprotect: ['*.service'] removes the protection of every default protected unit"),
    (dict(unprotect=['n*', 'd*', 'g*', 'X*']), 'removes the protection of every default protected executable'),
    (dict(unprotect=['?*']), 'set unprotect_all_confirmed: true if that is what you mean'),
])
def test_contradicting_protection_options_are_errors(options, message):
    with pytest.raises(ProtectionError) as caught:
        check_protection_options(**options)
    assert message in str(caught.value)


@pytest.mark.parametrize('options', [
    dict(),
    dict(protect=['vllm'], unprotect=['Xorg']),
    dict(unprotect=['nvidia-*', 'Xorg', 'dcgm*']),
    # Confirmed, every default may go.
    dict(unprotect=['*'], unprotect_all_confirmed=True),
])
def test_protection_options_that_say_one_thing_pass(options):
    check_protection_options(**options)


def test_protection_errors_use_the_names_they_are_given():
    with pytest.raises(ProtectionError) as caught:
        check_protection_options(unprotect=['*'], names={'unprotect': 'gpu_reclaim_unprotect',
                                                         'unprotect_all_confirmed': 'gpu_reclaim_unprotect_all_confirmed'})
    assert str(caught.value).startswith("gpu_reclaim_unprotect: ['*'] removes")
    assert 'set gpu_reclaim_unprotect_all_confirmed: true' in str(caught.value)
