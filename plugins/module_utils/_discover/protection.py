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

The facts themselves (a process's names, and why one cannot be trusted) are read in ``trust``.

The doc fragment ``gpuops.reclaim.protection`` lists the defaults; a unit
test checks that it lists exactly these.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os

from .trust import COMM_LENGTH, PROC_ROOT, doubts_of, names_of

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
    ``names`` replaces ``NEVER_SUPERVISORS`` (``_plan.parents`` judges shells itself).
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
