# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.gpuops.reclaim.plugins.doc_fragments.protection import ModuleDocFragment
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import cgroup as _cgroup
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import procfs as _procfs
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import slow_reads as _procread
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import protection as _protection
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.protection import (
    DEFAULT_PROTECTED_EXECUTABLES,
    DEFAULT_PROTECTED_UNITS,
    PROTECTION_ARGUMENT_SPEC,
    ProtectionError,
    check_protection_options,
    is_protected_unit,
    judge,
    judge_record,
    never_supervisor,
    protection,
    protection_of,
    unknown_unprotect,
)


# --- the doc fragment says what the code does ------------------------------------

def _fragment():
    return yaml.safe_load(ModuleDocFragment.DOCUMENTATION)['options']


def _defaults_listed(option):
    notes = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)['notes']
    lines = [line for line in notes if line.startswith('Protected by default, as %s (O(%s)), are' % (
        {'protect': 'executables', 'protect_units': 'systemd units'}[option], option))]
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


# --- protection ---------------------------------------------------------------------

def _record(**fields):
    record = {'pid': 4000, 'ppid': 1, 'exe': None, 'name': None, 'title': '', 'systemd_unit': None,
              'unit_manager': None}
    record.update(fields)
    return record


NO_FACTS = 'its executable cannot be read, so nothing shows that it runs that program'


# No /proc to read facts from (proc_root is an empty folder): a default name alone protects nothing.
@pytest.mark.parametrize('record, options, expected, suspicious', [
    # A daemon's name, as an interpreter's script, with nothing to show it: not protected.
    (_record(exe='/usr/bin/python3.11', name='dcgm-exporter', uid=0, title='python3 /usr/bin/dcgm-exporter'), {},
     (False, None), 'named like the protected dcgm-exporter (the script an interpreter runs), but its interpreter '
                    '/usr/bin/python3.11: its executable cannot be read'),
    # The interpreter typed out: the kernel started python3, not the script (comm python3).
    (_record(exe='/usr/bin/python3.11', name='python3', uid=0, title='python3 /usr/bin/dcgm-exporter'), {},
     (False, None), 'its comm is python3, not dcgm-exporter: the kernel did not start /usr/bin/dcgm-exporter as a '
                    '#! script, so its command line may be a title'),
    # Security: a person's account; a module (-m) or a relative path, which the environment resolves.
    (_record(exe='/usr/bin/python3.11', name='dcgm-exporter', uid=1000, title='python3 /usr/bin/dcgm-exporter'), {},
     (False, None), 'it runs as uid 1000, not as root or a system account'),
    (_record(exe='/usr/bin/python3.11', name='python3', uid=0, title='python3 -m dcgm_exporter'),
     {'unprotect': ['Xorg']}, (False, None), None),
    (_record(exe='/usr/bin/python3.11', name='dcgm-exporter', uid=0, title='python3 dcgm-exporter'), {},
     (False, None), 'its script dcgm-exporter is no absolute path'),
    # Security: retitled (setproctitle): the command line no longer starts with an interpreter.
    (_record(exe='/usr/bin/python3.11', name='nv-hostengine', uid=0, title='/usr/bin/nv-hostengine -n'), {},
     (False, None), None),
    # The executable cannot be read: comm and the command line are names anyone can give.
    (_record(name='nvidia-persiste', title=''), {}, (False, None),
     'named like the protected nvidia-persistenced (from comm nvidia-persiste; the executable cannot be read), '
     'but ' + NO_FACTS + ': not protected'),
    (_record(name='nvidia-device-p', title='/usr/bin/nvidia-device-plugin'), {}, (False, None),
     'named like the protected nvidia-device-plugin (from the command line; the executable cannot be read), but '
     + NO_FACTS),
    # A short comm that is not a prefix of a default name is nothing.
    (_record(name='nvidia', title=''), {}, (False, None), None),
    # A title alone never protects: the executable is readable and is a workload's.
    (_record(exe='/usr/bin/python3', name='VLLM::Worker_TP', title='VLLM::Worker_TP0 nv-hostengine'), {},
     (False, None), None),
    # By unit: whatever the executable, when the system manager runs it.
    (_record(exe='/opt/bin/exporter', name='exporter', systemd_unit='dcgm-exporter.service', unit_manager='system'),
     {}, (True, 'default protected unit dcgm-exporter.service'), None),
    (_record(exe='/opt/bin/exporter', name='exporter', systemd_unit='dcgm-exporter.service', unit_manager='system'),
     {'unprotect': ['dcgm-exporter.service']}, (False, None), None),
    (_record(exe='/opt/bin/top', name='top', systemd_unit='gpu-top.service', unit_manager='system'),
     {'protect_units': ['gpu-*']}, (True, 'user protected unit gpu-top.service'), None),
    # Security: a user's own unit named like a protected one (systemd-run --user --unit=nvidia-persistenced).
    (_record(exe='/usr/bin/python3', name='python3', systemd_unit='nvidia-persistenced.service',
             unit_manager='user'), {}, (False, None),
     'named like the protected unit nvidia-persistenced.service, but it is a unit of a user manager (under '
     'user@UID.service), which any user can name so: not protected'),
    (_record(exe='/opt/bin/top', name='top', systemd_unit='gpu-top.service', unit_manager='user'),
     {'protect_units': ['gpu-*']}, (False, None), 'protect_units names gpu-top.service, but it is a unit of a user'),
    (_record(exe='/opt/bin/top', name='top', systemd_unit='dcgm.service'), {}, (False, None),
     'but it cannot be told whether the system manager runs it'),
    # Security: a default unit whose process NVML lists with compute memory.
    (_record(exe='/opt/bin/x', name='x', systemd_unit='dcgm.service', unit_manager='system',
             nvml_types=['compute'], gpu_memory_mib={'0': 20480, '1': 10240}), {}, (False, None),
     'it would be protected (default protected unit dcgm.service), but NVML lists it as a compute process holding '
     '30720 MiB, which the GPU services never do: not protected'),
    # A display server's graphics memory is no compute memory.
    (_record(exe='/opt/bin/x', name='x', systemd_unit='dcgm.service', unit_manager='system',
             nvml_types=['graphics'], gpu_memory_mib={'0': 300}), {}, (True, 'default protected unit dcgm.service'),
     None),
    # User names work as written: the script, comm, a name that a default has too.
    (_record(exe='/usr/bin/python3', name='python3', title='python3 /srv/metrics.py'), {'protect': ['metrics.py']},
     (True, 'user protected executable metrics.py (the script an interpreter runs)'), None),
    (_record(name='VLLM::Engine', title=''), {'protect': ['VLLM::*']},
     (True, 'user protected executable VLLM::Engine (from comm VLLM::Engine; the executable cannot be read)'),
     None),
    (_record(exe='/tmp/nvidia-persistenced', name='nvidia-persiste'), {'protect': ['nvidia-persistenced']},
     (True, 'user protected executable nvidia-persistenced'), None),
    # Unprotect a default executable.
    (_record(exe='/usr/bin/Xorg', name='Xorg'), {'unprotect': ['Xorg']}, (False, None), None),
    # Kernel threads and PID 1 whatever the options.
    (_record(pid=2, ppid=0, name='kthreadd', kernel_thread=True), {'unprotect': ['*']}, (True, 'kernel thread'),
     None),
    (_record(pid=1, exe='/usr/lib/systemd/systemd'), {'unprotect': ['*']}, (True, 'pid 1'), None),
])
def test_protection_of(tmp_path, record, options, expected, suspicious):
    assert protection_of(record, proc_root=str(tmp_path), **options) == expected
    found = judge_record(record, proc_root=str(tmp_path), **options)[2]
    if suspicious is None:
        assert found is None
    else:
        assert suspicious in found and found.endswith(': not protected')


def test_judge_takes_names_as_facts_when_told_no_doubt():
    assert judge(55, 'nv-hostengine') == (True, 'default protected executable nv-hostengine', None)
    assert judge(55, 'nv-hostengine', compute_mib=0) == (
        False, None, 'it would be protected (default protected executable nv-hostengine), but NVML lists it as a '
                     'compute process holding 0 MiB, which the GPU services never do: not protected')
    assert judge(55, 'nv-hostengine', doubt=lambda name, how: 'x is owned by uid 1000, not by root') == (
        False, None, 'named like the protected nv-hostengine, but x is owned by uid 1000, not by root: not protected')
    # A user name is kept whatever the doubts and the memory.
    assert judge(55, 'nv-hostengine', protect=['nv-*'], compute_mib=100,
                 doubt=lambda name, how: 'doubt')[:2] == (True, 'user protected executable nv-hostengine')


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


# --- protection from facts: real files and the processes the test starts ---------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason='files of root and of another user need root')
NOBODY = 65534
PYTHON = os.path.realpath(sys.executable)

# Rewrites its own argument area in place, as setproctitle does, and optionally its comm.
RETITLE = r'''
import sys, time
fields = open('/proc/self/stat').read().rsplit(')', 1)[1].split()
start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49
title = sys.argv[1].replace(' ', '\0').encode()
with open('/proc/self/mem', 'r+b', buffering=0) as memory:
    memory.seek(start)
    memory.write(title.ljust(end - start - 1, b'\0'))
if sys.argv[2]:
    with open('/proc/self/comm', 'w') as comm:
        comm.write(sys.argv[2])
sys.stdout.write('ready\n')
sys.stdout.flush()
time.sleep(60)
'''


@pytest.fixture
def started():
    """Start a process (one that says ready, with ``ready``); every one is killed afterwards."""
    children = []

    def start(argv, ready=False):
        # Popen returns once the program is executed (or raises when it cannot be).
        child = subprocess.Popen(argv, stdout=subprocess.PIPE if ready else subprocess.DEVNULL)
        children.append(child)
        if ready:
            assert child.stdout.readline() == b'ready\n'
        return child

    yield start
    for child in children:
        child.kill()
        child.wait()
        if child.stdout:
            child.stdout.close()


def live_record(pid, **fields):
    """The fields of a holder record that protection reads, from the live /proc."""
    stat_fields = _procfs.read_stat(pid)
    record = {'pid': pid, 'ppid': stat_fields['ppid'], 'exe': _procfs.read_exe(pid), 'name': stat_fields['comm'],
              'title': _procread.read_title(pid, 2.0), 'uid': _procfs.status_uid(_procfs.read_status(pid)),
              'kernel_thread': False}
    record.update(_cgroup.read_cgroup(pid))
    record.update(fields)
    return record


def root_folder(path, mode=0o755, owner=0):
    os.makedirs(path)
    os.chmod(path, mode)
    os.chown(path, owner, owner)
    return path


def program(folder, name, source='/bin/sleep', mode=0o755, owner=0):
    """A copy of ``source`` (a compiled program, like the simulated hosts' daemons) at folder/name."""
    path = os.path.join(folder, name)
    shutil.copyfile(source, path)
    os.chmod(path, mode)
    os.chown(path, owner, owner)
    return path


def script(folder, name, interpreter=PYTHON, owner=0, mode=0o755, ready=False):
    path = os.path.join(folder, name)
    with open(path, 'w') as handle:
        handle.write('#!%s\nimport sys, time\n%stime.sleep(60)\n'
                     % (interpreter, 'sys.stdout.write("ready\\n"); sys.stdout.flush()\n' if ready else ''))
    os.chmod(path, mode)
    os.chown(path, owner, owner)
    return path


@needs_root
def test_a_root_program_in_a_root_only_folder_is_protected(tmp_path, started):
    folder = root_folder(str(tmp_path / 'usr' / 'bin'))
    child = started([program(folder, 'nvidia-persistenced'), '60'])
    record = live_record(child.pid)
    assert record['name'] == 'nvidia-persiste'
    assert judge_record(record) == (True, 'default protected executable nvidia-persistenced', None)


@needs_root
def test_a_protected_program_replaced_by_an_upgrade_stays_protected(tmp_path, started):
    folder = root_folder(str(tmp_path / 'usr' / 'bin'))
    path = program(folder, 'nv-hostengine')
    child = started([path, '60'])
    os.unlink(path)
    record = live_record(child.pid)
    assert record['exe'] == path  # ' (deleted)' cut off: the file it runs decides
    assert protection_of(record) == (True, 'default protected executable nv-hostengine')


# Security: copies of a program under a protected name, where another user could have put them.
@needs_root
@pytest.mark.parametrize('layout, doubt', [
    ('owned by nobody', 'nvidia-persistenced is owned by uid 65534, not by root'),
    ('writable by others', 'nvidia-persistenced is writable by others (mode 0757)'),
    ('folder writable by others', 'bin is writable by others (mode 0777)'),
    # /tmp-like: anyone may add a name there, a hard link to a file of root's included.
    ('sticky folder', 'nvidia-persistenced is in a directory others can write (mode 1777)'),
    ('folder of nobody above', 'is owned by uid 65534, not by root'),
    ('folder writable by its group above', 'is writable by its group (mode 0775)'),
])
def test_a_copy_another_user_could_have_made_is_not_protected(tmp_path, started, layout, doubt):
    if layout == 'folder of nobody above':
        folder = root_folder(str(tmp_path / 'home'), owner=NOBODY)
        folder = root_folder(os.path.join(folder, 'bin'))
    elif layout == 'folder writable by its group above':
        folder = root_folder(str(tmp_path / 'opt'), mode=0o775)
        folder = root_folder(os.path.join(folder, 'bin'))
    else:
        mode = {'folder writable by others': 0o777, 'sticky folder': 0o1777}.get(layout, 0o755)
        folder = root_folder(str(tmp_path / 'bin'), mode=mode)
    path = program(folder, 'nvidia-persistenced', owner=NOBODY if layout == 'owned by nobody' else 0,
                   mode=0o757 if layout == 'writable by others' else 0o755)
    child = started([path, '60'])
    protected, reason, suspicious = judge_record(live_record(child.pid))
    assert (protected, reason) == (False, None)
    assert suspicious.startswith('named like the protected nvidia-persistenced, but ')
    assert doubt in suspicious and suspicious.endswith(': not protected')
    # What the user protects by name stays protected, as written.
    assert protection_of(live_record(child.pid), protect=['nvidia-persistenced']) == (
        True, 'user protected executable nvidia-persistenced')


# Security: the issue's copy of python at /tmp/nvidia-persistenced (a sticky folder; the copy is the user's).
@needs_root
def test_a_copy_of_python_under_a_protected_name_is_not_protected(tmp_path, started):
    folder = root_folder(str(tmp_path / 'tmp'), mode=0o1777)
    path = program(folder, 'nvidia-persistenced', source=PYTHON, owner=NOBODY)
    child = started([path, '-S', '-c', 'import sys, time; sys.stdout.write("ready\\n"); sys.stdout.flush(); '
                                       'time.sleep(60)'], ready=True)
    protected, dummy, suspicious = judge_record(live_record(child.pid))
    assert not protected
    assert 'nvidia-persistenced is in a directory others can write (mode 1777)' in suspicious


@needs_root
def test_a_root_script_the_kernel_started_is_protected_by_its_name(tmp_path, started):
    folder = root_folder(str(tmp_path / 'usr' / 'bin'))
    child = started([script(folder, 'dcgm-exporter')])
    record = live_record(child.pid)
    path = os.path.join(folder, 'dcgm-exporter')
    # What the kernel makes of a #! script: comm is the script's name, the interpreter runs it.
    assert record['name'] == 'dcgm-exporter' and record['title'] == '%s %s' % (PYTHON, path)
    assert judge_record(record) == (
        True, 'default protected executable dcgm-exporter (the script an interpreter runs)', None)


@needs_root
def test_a_root_script_run_by_a_typed_out_interpreter_is_not_protected_by_its_name(tmp_path, started):
    folder = root_folder(str(tmp_path / 'usr' / 'bin'))
    # Read once the interpreter runs the script, not while it may still be starting.
    child = started([PYTHON, script(folder, 'dcgm-exporter', ready=True)], ready=True)
    protected, dummy, suspicious = judge_record(live_record(child.pid))
    assert not protected
    assert 'the kernel did not start %s as a #! script' % os.path.join(folder, 'dcgm-exporter') in suspicious


# Security: the issue's `python3 /tmp/x/dcgm-exporter`, a script of the user's in the user's folder.
@needs_root
@pytest.mark.parametrize('owner, folder_owner, doubt', [
    (NOBODY, NOBODY, 'x is owned by uid 65534, not by root'),
    (NOBODY, 0, 'dcgm-exporter is owned by uid 65534, not by root'),
])
def test_a_script_another_user_could_have_written_is_not_protected(tmp_path, started, owner, folder_owner, doubt):
    folder = root_folder(str(tmp_path / 'tmp'), mode=0o1777)
    folder = root_folder(os.path.join(folder, 'x'), owner=folder_owner)
    child = started([script(folder, 'dcgm-exporter', owner=owner)])
    protected, dummy, suspicious = judge_record(live_record(child.pid))
    assert not protected and doubt in suspicious


@needs_root
def test_a_script_whose_first_line_names_another_interpreter_is_not_protected(tmp_path, started):
    folder = root_folder(str(tmp_path / 'usr' / 'bin'))
    path = script(folder, 'dcgm-exporter')
    child = started([path])
    with open(path, 'w') as handle:
        handle.write('#!/bin/sh\nexit 0\n')
    protected, dummy, suspicious = judge_record(live_record(child.pid))
    assert not protected and 'names /bin/sh, not the interpreter it runs' in suspicious


# Security: the issue's title `python3 /usr/bin/nv-hostengine -n`, with comm forged too, naming a real program of root's.
@needs_root
@pytest.mark.parametrize('comm, doubt', [
    ('', 'the kernel did not start'),
    ('nv-hostengine', 'is no #! script, so the kernel cannot have started an interpreter for it'),
])
def test_a_title_naming_a_protected_program_protects_nothing(tmp_path, started, comm, doubt):
    folder = root_folder(str(tmp_path / 'usr' / 'bin'))
    real = program(folder, 'nv-hostengine')
    title = 'python3 %s -n' % real
    child = started([PYTHON, '-c', RETITLE, title, comm], ready=True)
    record = live_record(child.pid)
    assert record['title'] == title
    protected, dummy, suspicious = judge_record(record)
    assert not protected and doubt in suspicious


@needs_root
def test_a_protected_program_that_nvml_lists_with_compute_memory_is_suspicious(tmp_path, started):
    folder = root_folder(str(tmp_path / 'usr' / 'bin'))
    child = started([program(folder, 'nv-hostengine'), '60'])
    record = live_record(child.pid, nvml_types=['compute'], gpu_memory_mib={'0': 24576})
    assert judge_record(record) == (
        False, None, 'it would be protected (default protected executable nv-hostengine), but NVML lists it as a '
                     'compute process holding 24576 MiB, which the GPU services never do: not protected')
