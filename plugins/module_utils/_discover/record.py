# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One process's record: the holder record, for discovery's holders and the release's newcomers alike.

``read_process`` makes the reads every record of a process starts with, a
parent's too (``_release.prober.describe_process``): ``stat`` and ``status``,
the title (``cmdline``, read within the read timeout by ``_host.slow_reads``;
when the leader has exited, a live thread's), the cgroup (unit, manager,
container), the executable, the start time and the user.

``build_holder`` adds what makes a holder (docs/architecture.md, "Holder
record"): the GPUs, from NVML's lists first and the device nodes for what NVML
does not list, the memory, the kind, the protection (``_discover.protection``)
and the visibility (``_discover.visibility``).

``HolderBuilder`` keeps what one discovery builds its records with (the GPUs,
the protection options, this module and its ancestors, the PID namespace, the
device folder, the read timeout), so that a process that newly holds a
targeted GPU during the release gets the very same record
(``HolderBuilder.newcomer``), plus ``adopted``.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd
import traceback

from .._host import cgroup as _cgroup
from .._host import procfs as _procfs
from .._host import slow_reads as _procread
from . import visibility as _visibility
from .protection import judge_record

try:
    import psutil
except ImportError:
    psutil = None
    HAS_PSUTIL = False
    PSUTIL_IMP_ERR = traceback.format_exc()
else:
    HAS_PSUTIL = True
    PSUTIL_IMP_ERR = None

# Parents that adopt orphans besides PID 1 (user managers are subreapers).
SUBREAPER_NAMES = ('systemd',)

NO_CGROUP = {'systemd_unit': None, 'unit_manager': None, 'container': None}


def classify_kind(nvml_types, memory_mib, holds_uvm, nvml_available=False):
    """``compute`` for a process with a GPU context or memory; else ``client``.

    With NVML, a context shows in NVML's process lists: that alone decides.
    Holding ``/dev/nvidia-uvm`` is no proof of one, since current drivers
    open it for a process that only initialised NVML (a monitor such as
    nv-hostengine, or this module). It is used only when NVML cannot be read.
    """
    if nvml_types or memory_mib:
        return 'compute'
    if holds_uvm and not nvml_available:
        return 'compute'
    return 'client'


def _user_name(uid):
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _create_time(pid, stat, proc_root):
    if psutil is not None and proc_root == _procfs.PROC_ROOT:
        try:
            return psutil.Process(pid).create_time()
        except psutil.Error:
            pass
    # Without psutil (or on a captured /proc), the same formula psutil uses.
    try:
        with open('%s/stat' % proc_root) as handle:
            for line in handle:
                if line.startswith('btime '):
                    boot_time = float(line.split()[1])
                    break
            else:
                return None
        return boot_time + stat['starttime'] / float(os.sysconf('SC_CLK_TCK'))
    except (OSError, ValueError):
        return None


def _read_title(pid, proc_root, read_timeout):
    """``(title, unreadable)``: the title read within ``read_timeout``, or why it was not."""
    try:
        title = _procread.read_title(pid, read_timeout, proc_root)
    except PermissionError:
        return '', None
    except _procread.NoThread as exc:
        return '', str(exc)
    if title is None:
        return '', _procread.stuck_reason(pid, read_timeout, proc_root=proc_root)
    return title, None


def _thread_title(pid, proc_root, read_timeout):
    thread = _procfs.live_thread(pid, proc_root)
    if thread is None:
        return ''
    try:
        return _procread.read_title(thread[0], read_timeout, '%s/%d/task' % (proc_root, pid)) or ''
    except (OSError, _procread.NoThread):
        return ''


def read_process(pid, proc_root=_procfs.PROC_ROOT, read_timeout=_procread.DEFAULT_TIMEOUT, title=None,
                 unreadable=None):
    """``(facts, stat, status)`` of ``pid``, or raise OSError (or ValueError) if it vanished.

    ``facts`` has ``pid``, ``ppid``, ``pgrp``, ``session``, ``user``, ``uid``,
    ``name`` (comm), ``title``, ``exe``, ``create_time``, ``state``,
    ``leader_exited``, ``systemd_unit``, ``unit_manager``, ``container`` and
    ``unreadable``; ``stat`` and ``status`` are the parsed files (``status``
    empty when it may not be read). ``title`` is the title when the caller
    read it already (``discover`` reads every holder's at once); otherwise it
    is read here, within ``read_timeout`` seconds. ``unreadable`` says why the
    title could not be read, if it could not. Nothing here reads ``cmdline``
    but through ``_host.slow_reads``.
    """
    stat = _procfs.read_stat(pid, proc_root)
    state, leader_exited = _procfs.process_state(stat, proc_root)
    try:
        status = _procfs.read_status(pid, proc_root)
    except PermissionError:
        status = {}
    if title is None and unreadable is None:
        title, unreadable = _read_title(pid, proc_root, read_timeout)
    if leader_exited and not title and not unreadable:
        # The leader's cmdline is gone with its memory map; a live thread's shows the same title.
        title = _thread_title(pid, proc_root, read_timeout)
    try:
        cgroup = _cgroup.read_cgroup(pid, proc_root)
    except PermissionError:
        cgroup = dict(NO_CGROUP)
    exe = _procfs.read_exe(pid, proc_root)
    uid = _procfs.status_uid(status)
    facts = {
        'pid': pid,
        'ppid': stat['ppid'],
        'pgrp': stat['pgrp'],
        'session': stat['session'],
        'user': _user_name(uid),
        'uid': uid,
        'name': stat['comm'],
        'title': title or '',
        'exe': exe,
        'create_time': _create_time(pid, stat, proc_root),
        'state': _procfs.STATE_NAMES.get(state, state),
        # The main thread has exited while another thread lives on (and holds what the process holds).
        'leader_exited': leader_exited,
        'systemd_unit': cgroup['systemd_unit'],
        'unit_manager': cgroup['unit_manager'],
        'container': cgroup['container'],
        'unreadable': unreadable,
    }
    return facts, stat, status


def build_holder(pid, device_paths, nvml_entries, minor_to_index, gpus_by_index, ancestors,
                 protect, unprotect, proc_root=_procfs.PROC_ROOT, dev_dir=_procfs.DEV_DIR, nvml_available=False,
                 protect_units=(), shares_namespace=True,
                 title=None, unreadable=None, read_timeout=_procread.DEFAULT_TIMEOUT, gpus=None):
    """One holder record (see docs/architecture.md), or raise OSError if ``pid`` vanished.

    ``nvml_entries`` maps a GPU index to ``{"memory_mib", "types"}`` for this PID.
    ``title`` and ``unreadable`` are as for ``read_process``. ``gpus``, when
    given, are the GPUs the record names as held instead of NVML's lists or
    the device nodes: a newcomer holds, for the release, the targeted GPUs it
    was seen on.
    """
    facts, stat, status = read_process(pid, proc_root, read_timeout, title, unreadable)
    wchan = _procfs.read_wchan(pid, proc_root)

    node_indices = set()
    holds_uvm = False
    for path in device_paths:
        kind = _procfs.classify_device_path(path, dev_dir)
        if kind is None:
            continue
        if kind[0] == 'gpu' and kind[1] in minor_to_index:
            node_indices.add(minor_to_index[kind[1]])
        elif kind[0] == 'uvm':
            holds_uvm = True
    # A CUDA process opens the device node of every GPU it can see, but holds
    # a context only where it computes. Where NVML lists the process, those
    # GPUs are the ones it holds: a worker of GPU 5 does not hold GPU 0 just
    # because /dev/nvidia0 is open. The device nodes decide only for what NVML
    # does not list (monitors, and everything when NVML cannot be read).
    indices = set(gpus) if gpus is not None else set(nvml_entries) or node_indices

    nvml_types = set()
    gpu_memory = {}
    for index, entry in nvml_entries.items():
        nvml_types |= entry['types']
        gpu_memory[str(index)] = entry['memory_mib'] or 0
    memory_mib = sum(gpu_memory.values())

    uid = facts['uid']
    is_self = pid in ancestors
    protected, reason, suspicious = judge_record(
        {'pid': pid, 'exe': facts['exe'], 'name': facts['name'], 'title': facts['title'],
         'kernel_thread': stat['kernel_thread'], 'systemd_unit': facts['systemd_unit'],
         'unit_manager': facts['unit_manager'], 'uid': uid, 'nvml_types': nvml_types, 'gpu_memory_mib': gpu_memory},
        protect, unprotect, protect_units, is_self=is_self, proc_root=proc_root)
    ppid = facts['ppid']
    orphaned = ppid == 1
    if not orphaned and ppid > 1:
        try:
            orphaned = _procfs.read_stat(ppid, proc_root)['comm'] in SUBREAPER_NAMES
        except (OSError, ValueError, IndexError):
            orphaned = False
    ordered = sorted(indices)
    return {
        'pid': pid,
        'ppid': ppid,
        'pgrp': facts['pgrp'],
        'session': facts['session'],
        'user': facts['user'],
        'uid': uid,
        'name': facts['name'],
        'title': facts['title'],
        'exe': facts['exe'],
        'create_time': facts['create_time'],
        'state': facts['state'],
        'leader_exited': facts['leader_exited'],
        'wchan': wchan,
        'gpus': ordered,
        # The GPUs whose device node the process holds, listed by NVML there or not.
        'node_gpus': sorted(node_indices),
        'gpu_uuids': [gpus_by_index[index].get('uuid') for index in ordered if index in gpus_by_index],
        'gpu_memory_mib': gpu_memory,
        'memory_mib': memory_mib,
        'nvml_types': sorted(nvml_types),
        'device_paths': sorted(device_paths),
        'kind': classify_kind(nvml_types, memory_mib, holds_uvm, nvml_available),
        'systemd_unit': facts['systemd_unit'],
        'unit_manager': facts['unit_manager'],
        'container': facts['container'],
        'protected': protected,
        'protected_reason': reason,
        # Why a process named like a protected daemon is not protected (``_discover.protection.judge``).
        'suspicious': suspicious,
        'is_self': is_self,
        'sigterm_ignored': _procfs.sigterm_ignored(status),
        'orphaned': orphaned,
        # False for a PID NVML lists whose process here holds no NVIDIA device node, seen from
        # another PID namespace than the host's: NVML's PID may name some other process.
        'visible': _visibility.visible(bool(nvml_entries), device_paths, shares_namespace, dev_dir),
        'unreadable': facts['unreadable'],
    }


class HolderBuilder:
    """How one discovery builds its holder records, kept for the processes that appear later.

    ``gpus``: the GPU records (their minors map ``/dev/nvidiaN`` to an index,
    their UUIDs name them; None: a node's minor number is its index);
    ``protect``, ``unprotect``, ``protect_units``: the protection options;
    ``ancestors``: this module and its ancestors (``is_self``);
    ``shares_namespace``: whether NVML's PIDs are this process's (None: asked
    of ``_discover.visibility`` when first needed). ``proc_root``,
    ``dev_dir`` and ``read_timeout`` are as for ``discover``.
    """

    def __init__(self, gpus=None, protect=(), unprotect=(), protect_units=(), ancestors=(), shares_namespace=None,
                 proc_root=_procfs.PROC_ROOT, dev_dir=_procfs.DEV_DIR, read_timeout=_procread.DEFAULT_TIMEOUT):
        self.gpus_by_index = dict((gpu['index'], gpu) for gpu in gpus or ())
        self.minor_to_index = None if gpus is None else dict(
            (gpu['minor'], gpu['index']) for gpu in gpus if gpu.get('minor') is not None)
        self.protect = tuple(protect or ())
        self.unprotect = tuple(unprotect or ())
        self.protect_units = tuple(protect_units or ())
        self.ancestors = set(ancestors)
        self.shares_namespace = shares_namespace
        self.proc_root = proc_root
        self.dev_dir = dev_dir
        self.read_timeout = read_timeout

    def in_host_namespace(self):
        """Whether NVML's PIDs are this process's (``_discover.visibility``)."""
        if self.shares_namespace is None:
            self.shares_namespace = _visibility.in_initial_pid_namespace()
        return self.shares_namespace

    def protection(self, record):
        """``(protected, reason)`` for any process record, as the holder records are judged."""
        return judge_record(record, self.protect, self.unprotect, self.protect_units,
                            is_self=record.get('pid') in self.ancestors, proc_root=self.proc_root)[:2]

    def build(self, pid, device_paths, nvml_entries, nvml_available, title=None, unreadable=None, ancestors=None,
              gpus=None):
        """``build_holder`` with what this builder keeps; raises OSError if ``pid`` vanished."""
        minor_to_index = self.minor_to_index
        if minor_to_index is None:
            minor_to_index = _identity_minors(device_paths, self.dev_dir)
        return build_holder(pid, device_paths, nvml_entries, minor_to_index, self.gpus_by_index,
                            self.ancestors if ancestors is None else ancestors, self.protect, self.unprotect,
                            self.proc_root, self.dev_dir, nvml_available=nvml_available,
                            protect_units=self.protect_units, shares_namespace=self.in_host_namespace(),
                            title=title, unreadable=unreadable, read_timeout=self.read_timeout, gpus=gpus)

    def newcomer(self, pid, gpus, nvml_entries=None, own_pids=()):
        """The holder record of a process that newly holds ``gpus`` during a release, with ``adopted``.

        None when it is gone or cannot be read. ``nvml_entries`` is what NVML
        lists it with on those GPUs (``{index: {"memory_mib", "types"}}``), None
        when NVML is not read (then, as for discovery without NVML, holding
        ``/dev/nvidia-uvm`` makes it ``compute``). ``own_pids`` are this module
        and its ancestors as the release knows them (``is_self``).

        The reads are discovery's: the device nodes from the fds; for a
        process NVML lists whose fds show none, its maps within the read
        timeout, and when those did not come, its title is not read behind the
        same lock; the rest as ``read_process`` reads it.
        """
        prefix = self.dev_dir.rstrip('/') + '/nvidia'
        try:
            paths = set(_procfs.fd_device_paths(pid, prefix, self.proc_root))
        except PermissionError:
            paths = set()
        except OSError:
            return None
        title = unreadable = None
        if nvml_entries and not paths:
            mapped, dummy, stuck = _procread.read_maps([pid], prefix, self.read_timeout, self.proc_root)
            paths = set(mapped.get(pid) or ())
            if stuck:
                title, unreadable = '', _procread.stuck_reason(pid, self.read_timeout, proc_root=self.proc_root)
        try:
            record = self.build(pid, paths, dict(nvml_entries or {}), nvml_entries is not None, title, unreadable,
                                ancestors=self.ancestors | set(own_pids), gpus=gpus)
        except (OSError, ValueError, IndexError):
            return None
        record['adopted'] = True
        return record


def _identity_minors(device_paths, dev_dir):
    """``{minor: minor}`` for the GPU nodes among ``device_paths``: without GPU records, a minor is the index."""
    minors = {}
    for path in device_paths:
        kind = _procfs.classify_device_path(path, dev_dir)
        if kind and kind[0] == 'gpu':
            minors[kind[1]] = kind[1]
    return minors
