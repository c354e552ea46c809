# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What is never signalled, and why: the one place that says so.

Three lists live here and nowhere else:

* ``DEFAULT_PROTECTED_EXECUTABLES``: programs that serve the GPUs rather
  than use them (persistence, DCGM, its exporter, fabric manager, Kubernetes'
  device plugin, the display server). Stopping one breaks monitoring, the
  fabric or the display, and frees nothing a model needs.
* ``DEFAULT_PROTECTED_UNITS``: the systemd units those programs usually run
  in. A process in one of them is protected whatever its executable is
  called, so a daemon run by an interpreter (``python3 /usr/bin/dcgm-exporter``)
  or whose executable cannot be read is still recognised.
* ``NEVER_SUPERVISORS``: parents that started a workload rather than being
  part of it (shells, session managers, launchers, init systems, container
  runtimes). The release never freezes or kills one as a respawner.

A default protection counts only on facts an ordinary user cannot forge,
never on a name alone (``judge``):

* a default protected executable: the basename of ``/proc/PID/exe``, and the
  file the process runs is root's, in a directory chain no other user can
  write (``untrusted_file``, seen from the process's own root directory);
* for an interpreter (``python3``, ``bash``, ...), the script it runs, when
  the kernel started that script: the command line still starts with an
  interpreter (a retitle, as setproctitle does, no longer does), the script
  is an absolute path that passes the same file test, its first line
  (``#!``) names the very interpreter the process runs, ``comm`` is the
  script's name (the kernel sets it so when it runs a ``#!`` script), and the
  process runs as root or a system account. ``python3 /usr/bin/x`` typed out
  (``comm`` stays ``python3``) is protected by its unit, not by its script;
* a default protected unit: only a unit of the system manager, never one
  under ``user@UID.service`` (any user can name a unit of their own so).
  ``protect_units`` likewise;
* and in every case, NVML does not list the process as a compute process:
  the GPU services hold no model memory. One that does is ``suspicious``
  (named in a warning) and not protected.

A default name that fails these tests is not protected, and ``judge`` says
why (``suspicious``). The names the user adds (``protect``) keep working as
written: on the executable's basename, the script's, and, where the
executable cannot be read, the first word of the command line and ``comm``
(``comm`` is cut at 15 characters by the kernel).

The doc fragment ``gpuops.reclaim.protection`` lists the defaults; a unit
test checks that it lists exactly these.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fnmatch
import os
import re
import stat

from .._host.safe_file import untrusted_reason

DEFAULT_PROTECTED_EXECUTABLES = (
    'nvidia-persistenced',
    'nv-hostengine',
    'dcgm-exporter',
    'nv-fabricmanager',
    'nvidia-fabricmanager',
    'nvidia-device-plugin',
    'gpu-feature-discovery',
    'Xorg',
    'Xwayland',
)

DEFAULT_PROTECTED_UNITS = (
    'nvidia-persistenced.service',
    'nvidia-dcgm.service',
    'dcgm.service',
    'nv-hostengine.service',
    'dcgm-exporter.service',
    'nvidia-dcgm-exporter.service',
    'nvidia-fabricmanager.service',
    'nvidia-fabric-manager.service',
    'nv-fabricmanager.service',
)

# Options shared by every module that may act on holders; documented by the
# doc fragment gpuops.reclaim.protection.
PROTECTION_ARGUMENT_SPEC = dict(
    protect=dict(type='list', elements='str', default=[]),
    protect_units=dict(type='list', elements='str', default=[]),
    unprotect=dict(type='list', elements='str', default=[]),
    unprotect_all_confirmed=dict(type='bool', default=False),
)

GLOB_CHARACTERS = '*?['

REASON_PID_1 = 'pid 1'
REASON_KERNEL_THREAD = 'kernel thread'
REASON_SELF = 'self or ancestor of this module'

# The kernel keeps TASK_COMM_LEN - 1 characters of a name in comm.
COMM_LENGTH = 15

PROC_ROOT = '/proc'

# Accounts of people start here (login.defs' UID_MIN); below are root and the system's accounts.
FIRST_PERSON_UID = 1000

# Symbolic links followed in one path, as the kernel allows (MAXSYMLINKS).
MAX_LINKS = 40

# The first line of a script the kernel runs (#! and its interpreter): the kernel reads at most 256 bytes.
SHEBANG_BYTES = 256

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)

# Programs that run another program's code: the script they run names the process.
INTERPRETER = re.compile(r'^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|'
                         r'bash|sh|dash|java)$')

# Interpreter options followed by a value, and those followed by code (no script then).
VALUE_OPTIONS = ('-X', '-W', '-Q', '-I', '-r', '--require', '-cp', '-classpath')
CODE_OPTIONS = ('-c', '-e', '-E', '--eval')

# Parents never treated as supervisors: whoever started the workload, not the
# workload. Killing a login shell, a session, an init or a container runtime is
# too much, and a launcher (su, sudo, runuser, setsid) only stands between them.
NEVER_SUPERVISORS = frozenset((
    # shells
    'sh', 'bash', 'dash', 'zsh', 'ksh', 'mksh', 'fish', 'csh', 'tcsh', 'busybox',
    # sessions and logins (OpenSSH 9.8 and later run each connection as sshd-session)
    'login', 'sshd', 'sshd-session', 'sshd-auth', 'mosh-server', 'agetty',
    'tmux', 'tmux: server', 'screen', 'SCREEN', 'byobu', 'zellij', 'script',
    # launchers that run a command as another user or in another context
    'su', 'sudo', 'sudo-rs', 'su-rs', 'runuser', 'pkexec', 'doas', 'run0', 'systemd-run',
    'nsenter', 'unshare', 'chroot', 'setpriv', 'env', 'nohup', 'setsid', 'timeout',
    'nice', 'ionice', 'taskset', 'numactl', 'stdbuf', 'flock', 'xargs', 'chrt',
    # init systems and service managers
    'systemd', 'init', '(sd-pam)',
    # container runtimes and their shims
    'containerd', 'containerd-shim', 'containerd-shim-runc-v2', 'conmon', 'runc', 'crun',
    'dockerd', 'docker', 'docker-init', 'docker-proxy', 'podman', 'tini', 'dumb-init', 'catatonit',
    'kubelet', 'crio', 'cri-o',
    # batch schedulers
    'slurmstepd', 'slurmd', 'srun',
    # the controller that runs this module
    'ansible',
))


def _matches(name, patterns):
    for pattern in patterns:
        if name == pattern or fnmatch.fnmatchcase(name, pattern):
            return pattern
    return None


def script_argument(title):
    """``(word, how)``: what an interpreter's command line says it runs, or ``(None, None)``.

    ``how`` is ``script`` (the first argument that is no option: a path) or
    ``module`` (``-m NAME``). Code given on the command line (``-c``) names
    nothing.
    """
    words = (title or '').split()
    position = 1
    while position < len(words):
        word = words[position]
        if word in CODE_OPTIONS:
            return None, None
        if word == '-m' and position + 1 < len(words):
            return words[position + 1], 'module'
        if word in VALUE_OPTIONS:
            position += 2
            continue
        if word.startswith('-'):
            position += 1
            continue
        return word, 'script'
    return None, None


def script_of(title):
    """Basename of the script an interpreter runs, from its command line, or None.

    ``python3 -u /usr/bin/dcgm-exporter --port 9400`` gives ``dcgm-exporter``;
    ``python3 -m dcgm_exporter`` gives ``dcgm_exporter``.
    """
    word, how = script_argument(title)
    if how == 'module':
        return word
    return (os.path.basename(word) or None) if word else None


def names_of(exe=None, comm=None, title=None):
    """The names a process is known by for protection: ``[(name, how)]``.

    ``how`` is ``executable``, ``script`` (the script of an interpreter),
    ``command`` (the first word of the command line, only where the
    executable cannot be read) or ``comm`` (likewise).
    """
    names = []
    executable = os.path.basename(exe) if exe else None
    if executable:
        names.append((executable, 'executable'))
    else:
        first = (title or '').split()[:1]
        if first and os.path.basename(first[0]):
            names.append((os.path.basename(first[0]), 'command'))
        if comm:
            names.append((comm, 'comm'))
    # The script counts only while the command line still starts with the
    # interpreter: a process that retitled itself (setproctitle) names no script.
    interpreter = executable or (names[0][0] if names else None)
    first = os.path.basename(((title or '').split() or [''])[0])
    if interpreter and INTERPRETER.match(interpreter) and INTERPRETER.match(first):
        script = script_of(title)
        if script:
            names.append((script, 'script'))
    return names


def _default_executable(name, how, unprotect):
    if how == 'comm' and len(name) >= COMM_LENGTH:
        candidates = [default for default in DEFAULT_PROTECTED_EXECUTABLES if default.startswith(name)]
    else:
        candidates = [name] if name in DEFAULT_PROTECTED_EXECUTABLES else []
    for default in candidates:
        if not _matches(default, unprotect):
            return default
    return None


def never_signalled(pid, kernel_thread=False, ppid=None):
    """Why ``pid`` is never signalled whatever the options say (PID 1, a kernel thread), or None.

    A kernel thread is one flagged so in ``/proc/PID/stat``, or kthreadd
    (PID 2) and its children. A PID that is not a positive number counts as
    PID 1: nothing is sent to a process group or to every process.
    """
    if not isinstance(pid, int) or pid <= 1:
        return REASON_PID_1
    if kernel_thread or pid == 2 or ppid == 2:
        return REASON_KERNEL_THREAD
    return None


def protection(pid, executable=None, kernel_thread=False, is_self=False, protect=(), unprotect=(),
               unit=None, protect_units=(), names=None, unit_manager=None):
    """``(protected, reason)`` for a process; ``judge`` without its third value."""
    return judge(pid, executable, kernel_thread, is_self, protect, unprotect, unit, protect_units, names,
                 unit_manager)[:2]


def judge(pid, executable=None, kernel_thread=False, is_self=False, protect=(), unprotect=(),
          unit=None, protect_units=(), names=None, unit_manager=None, doubt=None, compute_mib=None):
    """``(protected, reason, suspicious)`` for a process.

    ``names`` is what ``names_of`` returns; without it ``executable`` (an
    executable's basename) is the only name. ``unit`` is the process's
    systemd unit and ``unit_manager`` the manager it belongs to (``system``
    or ``user``): a unit counts only when it is ``system``. ``protect`` adds
    executable names or globs, ``protect_units`` unit names or globs;
    ``unprotect`` removes default names of either kind. Nothing removes the
    protection of PID 1, kernel threads, or this module and its ancestors.

    ``doubt(name, how)`` says why a default name cannot be trusted for this
    process, or None (``doubts_of`` reads the facts; without ``doubt`` the
    names are taken as facts the caller established). ``compute_mib`` is the
    memory NVML lists the process with as a compute process, None when it
    does not list it so: a default protection does not hold then.
    ``suspicious`` says why a process named like a default was not protected.
    """
    fixed = never_signalled(pid, kernel_thread) or (REASON_SELF if is_self else None)
    if fixed:
        return True, fixed, None
    if names is None:
        names = [(executable, 'executable')] if executable else []
    protect = tuple(protect or ())
    unprotect = tuple(unprotect or ())
    doubts = []
    default = None
    for name, how in names:
        candidate = _default_executable(name, how, unprotect)
        if candidate:
            why_not = doubt(name, how) if doubt is not None else None
            if why_not:
                doubts.append('named like the protected %s%s, but %s' % (candidate, _how(how, name), why_not))
                continue
            default = 'default protected executable %s%s' % (candidate, _how(how, name))
            break
    if default is None and unit and unit in DEFAULT_PROTECTED_UNITS and not _matches(unit, unprotect):
        if unit_manager == 'system':
            default = 'default protected unit %s' % unit
        else:
            doubts.append(_user_unit_doubt(unit, unit_manager))
    if default is not None:
        if compute_mib is None:
            return True, default, None
        doubts.append('it would be protected (%s), but NVML lists it as a compute process holding %d MiB, which '
                      'the GPU services never do' % (default, compute_mib))
    for name, how in names:
        if _matches(name, protect):
            return True, 'user protected executable %s%s' % (name, _how(how, name)), None
    if unit and _matches(unit, tuple(protect_units or ())):
        if unit_manager == 'system':
            return True, 'user protected unit %s' % unit, None
        doubts.append(_user_unit_doubt(unit, unit_manager, 'protect_units names'))
    suspicious = '; '.join(doubts) + ': not protected' if doubts else None
    return False, None, suspicious


def _user_unit_doubt(unit, unit_manager, what='named like the protected unit'):
    if unit_manager == 'user':
        return '%s %s, but it is a unit of a user manager (under user@UID.service), which any user can name ' \
               'so' % (what, unit)
    return '%s %s, but it cannot be told whether the system manager runs it' % (what, unit)


def _how(how, name):
    if how == 'script':
        return ' (the script an interpreter runs)'
    if how == 'comm':
        return ' (from comm %s; the executable cannot be read)' % name
    if how == 'command':
        return ' (from the command line; the executable cannot be read)'
    return ''


def protection_of(record, protect=(), unprotect=(), protect_units=(), is_self=False, proc_root=PROC_ROOT):
    """``(protected, reason)`` for a holder or process record; ``judge_record`` without its third value."""
    return judge_record(record, protect, unprotect, protect_units, is_self, proc_root)[:2]


def judge_record(record, protect=(), unprotect=(), protect_units=(), is_self=False, proc_root=PROC_ROOT):
    """``judge`` for a holder or process record (``pid``, ``exe``, ``name``, ``title``, ``uid``,
    ``systemd_unit``, ``unit_manager``, ``nvml_types``, ``gpu_memory_mib``; a kernel thread has
    ``kernel_thread`` true or ``ppid`` 2), with the facts read from ``proc_root``."""
    kernel_thread = never_signalled(record.get('pid'), record.get('kernel_thread'), record.get('ppid')) \
        == REASON_KERNEL_THREAD
    compute_mib = None
    if 'compute' in (record.get('nvml_types') or ()):
        compute_mib = sum((record.get('gpu_memory_mib') or {}).values()) or 0
    return judge(record.get('pid'), kernel_thread=kernel_thread, is_self=is_self, protect=protect,
                 unprotect=unprotect, unit=record.get('systemd_unit'), protect_units=protect_units,
                 names=names_of(record.get('exe'), record.get('name'), record.get('title')),
                 unit_manager=record.get('unit_manager'), doubt=doubts_of(record, proc_root),
                 compute_mib=compute_mib)


# --- the facts ----------------------------------------------------------------------

def doubts_of(record, proc_root=PROC_ROOT):
    """``doubt(name, how)`` for ``judge``: why a process's name cannot be trusted, read once from ``proc_root``."""
    found = {}

    def doubt(name, how):
        if how not in found:
            if how == 'executable':
                found[how] = executable_doubt(record.get('pid'), record.get('exe'), proc_root)
            elif how == 'script':
                found[how] = script_doubt(record, proc_root)
            else:
                found[how] = 'its executable cannot be read, so nothing shows that it runs that program'
        return found[how]
    return doubt


def executable_doubt(pid, exe, proc_root=PROC_ROOT):
    """Why the executable ``pid`` runs is not one only root could have put at ``exe``, or None."""
    if not exe:
        return 'its executable cannot be read'
    try:
        running = os.stat('%s/%d/exe' % (proc_root, pid))
    except (OSError, TypeError) as exc:
        return 'its executable cannot be read (%s)' % getattr(exc, 'strerror', exc)
    return untrusted_file(exe, '%s/%d/root' % (proc_root, pid), running)


def script_doubt(record, proc_root=PROC_ROOT):
    """Why the script an interpreter's command line names is not shown to be what the kernel started, or None."""
    pid, title, comm = record.get('pid'), record.get('title') or '', record.get('name') or ''
    words = title.split()
    first = os.path.basename(words[0]) if words else ''
    if not INTERPRETER.match(first):
        return 'its command line does not start with an interpreter (it was retitled)'
    word, how = script_argument(title)
    if how != 'script':
        return 'it runs no script file (%s)' % ('a module, -m %s' % word if how == 'module' else 'code')
    if not word.startswith('/'):
        return 'its script %s is no absolute path' % word
    if comm != os.path.basename(word)[:COMM_LENGTH]:
        return ('its comm is %s, not %s: the kernel did not start %s as a #! script, so its command line may be '
                'a title' % (comm, os.path.basename(word)[:COMM_LENGTH], word))
    uid = record.get('uid')
    if not isinstance(uid, int) or uid >= FIRST_PERSON_UID:
        return 'it runs as uid %s, not as root or a system account' % uid
    interpreter = executable_doubt(pid, record.get('exe'), proc_root)
    if interpreter:
        return 'its interpreter %s: %s' % (record.get('exe'), interpreter)
    root = '%s/%d/root' % (proc_root, pid)
    found = untrusted_file(word, root)
    if found:
        return found
    try:
        with open(root + word, 'rb') as handle:
            line = handle.read(SHEBANG_BYTES).split(b'\n')[0]
        program = line[2:].split()[0].decode('utf-8', 'replace') if line.startswith(b'#!') and line[2:].split() \
            else None
        if program is None:
            return '%s is no #! script, so the kernel cannot have started an interpreter for it' % word
        named, running = os.stat(root + program), os.stat('%s/%d/exe' % (proc_root, pid))
    except OSError as exc:
        return '%s cannot be read (%s)' % (word, exc.strerror)
    if (named.st_dev, named.st_ino) != (running.st_dev, running.st_ino):
        return 'the first line of %s names %s, not the interpreter it runs' % (word, program)
    return None


def untrusted_file(path, root='/', running=None):
    """Why another user than root could have put (or changed) the file at ``path``, or None.

    ``path`` is walked from ``root`` (a process's ``/proc/PID/root``: its own
    view of the files), one directory at a time without following a link a
    directory another user can write holds: each directory must be root's and
    writable by nobody else, or sticky and root's (``/tmp``) except the
    file's own directory, where anyone could add a name for a file of root's;
    the file must be a regular file of root's that only root can write.
    ``running`` is the ``os.stat`` of the file a process runs
    (``/proc/PID/exe``), which decides instead of the name's entry: the name
    may have been replaced since (a package upgrade).
    """
    if not isinstance(path, str) or not path.startswith('/'):
        return 'its path %r is not absolute' % (path,)
    pending = [part for part in path.split('/') if part and part != '.']
    walked = []
    links = 0
    try:
        current = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))
    except OSError as exc:
        return 'its root directory cannot be read (%s)' % exc.strerror
    try:
        while True:
            folder = os.fstat(current)
            reason = untrusted_reason(folder, euid=0)
            if reason:
                return '%s is %s' % ('/' + '/'.join(walked), reason)
            if not pending:
                return '%s is a directory' % path
            name = pending.pop(0)
            if name == '..':
                # Walked again from the root, so that no directory above the root is ever reached.
                pending = walked[:-1] + pending
                walked = []
                following = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))
                os.close(current)
                current = following
                continue
            if not pending and running is not None:
                entry = running
            else:
                entry = os.stat(name, dir_fd=current, follow_symlinks=False)
            if stat.S_ISLNK(entry.st_mode):
                # Its directory passed the test: only root could have made it. Its target by the same rule.
                links += 1
                if links > MAX_LINKS:
                    return 'too many symbolic links in %s' % path
                target = os.readlink(name, dir_fd=current)
                pending = [part for part in target.split('/') if part and part != '.'] + pending
                if target.startswith('/'):
                    walked = []
                    following = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))
                    os.close(current)
                    current = following
                continue
            if not pending:
                here = '/' + '/'.join(walked + [name])
                if folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    return '%s is in a directory others can write (mode %04o)' % (here, stat.S_IMODE(folder.st_mode))
                if not stat.S_ISREG(entry.st_mode):
                    return '%s is not a regular file' % here
                if entry.st_uid != 0:
                    return '%s is owned by uid %d, not by root' % (here, entry.st_uid)
                if entry.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    return '%s is writable by others (mode %04o)' % (here, stat.S_IMODE(entry.st_mode))
                return None
            if not stat.S_ISDIR(entry.st_mode):
                return '%s is not a directory' % ('/' + '/'.join(walked + [name]))
            following = os.open(name, _DIRECTORY_FLAGS, dir_fd=current)
            os.close(current)
            current = following
            walked.append(name)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return '%s does not exist' % path
        return '%s cannot be checked (%s)' % (path, exc.strerror)
    finally:
        os.close(current)


def unknown_unprotect(unprotect):
    """Names in ``unprotect`` that match no default executable or unit."""
    defaults = DEFAULT_PROTECTED_EXECUTABLES + DEFAULT_PROTECTED_UNITS
    return [name for name in unprotect or ()
            if not any(fnmatch.fnmatchcase(default, name) for default in defaults)]


def is_protected_unit(unit, protect_units=(), unprotect=()):
    """Whether a systemd unit of the system manager is protected (the defaults and ``protect_units``).

    For a unit systemctl lists (the role's stop and harden stages ask the
    system manager); a process's unit is judged with its manager (``judge``).
    """
    if unit in DEFAULT_PROTECTED_UNITS and not _matches(unit, tuple(unprotect or ())):
        return True
    return bool(_matches(unit, tuple(protect_units or ())))


def never_supervisor(process, names=NEVER_SUPERVISORS):
    """Whether a parent process is a shell, launcher, session, init or runtime (never a supervisor).

    Compared on ``comm`` and on the executable's basename: a launcher whose
    executable is a symlink (``runuser`` to ``su``, say) is caught either way.
    ``names`` replaces ``NEVER_SUPERVISORS`` (``_parents`` judges shells itself).
    """
    exe = process.get('exe')
    for name in (process.get('name'), os.path.basename(exe) if exe else None):
        if name and name in names:
            return True
    return False


class ProtectionError(ValueError):
    """Protection options that contradict each other: the message names the options and the values."""


def check_protection_options(protect=(), protect_units=(), unprotect=(), unprotect_all_confirmed=False,
                             names=None):
    """Raise ``ProtectionError`` for protection options that cannot mean what they say.

    A name in both ``protect`` (or ``protect_units``) and ``unprotect`` is
    both protected and not. Wildcards in ``unprotect`` that together remove
    every default protected executable, or every default protected unit
    (``unprotect: ['*']``), need ``unprotect_all_confirmed``: a stray ``*``
    must not leave the GPU services open to the release. ``names`` maps each
    option to the name the message uses for it (the role's variables).
    """
    names = dict(dict((option, option) for option in PROTECTION_ARGUMENT_SPEC), **(names or {}))
    unprotect = [str(entry) for entry in unprotect or ()]
    for option in ('protect', 'protect_units'):
        entries = [str(entry) for entry in (protect if option == 'protect' else protect_units) or ()]
        for position, entry in enumerate(entries):
            if entry in unprotect:
                raise ProtectionError('%s[%d] and %s[%d] both name %r: a name is protected or it is not'
                                      % (names[option], position, names['unprotect'], unprotect.index(entry), entry))
    if unprotect_all_confirmed:
        return
    wildcards = [entry for entry in unprotect if any(character in entry for character in GLOB_CHARACTERS)]
    for what, defaults in (('executable', DEFAULT_PROTECTED_EXECUTABLES), ('unit', DEFAULT_PROTECTED_UNITS)):
        if wildcards and all(_matches(default, tuple(wildcards)) for default in defaults):
            raise ProtectionError(
                '%s: %r removes the protection of every default protected %s (%s); set %s: true if that is '
                'what you mean' % (names['unprotect'], wildcards, what, ', '.join(defaults),
                                   names['unprotect_all_confirmed']))
