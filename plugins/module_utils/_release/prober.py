# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the release asks of the live system: process records, parents, and the prober.

``describe_process`` and ``parent_processes`` read the parents that
``_plan.plan.plan_release`` judges; ``ProcProber`` is everything the loop
(``_release.escalation``) asks of ``/proc`` while it runs, injected so that unit
tests can pass a fake. A process that newly holds a GPU gets discovery's own
holder record (``_discover.record.HolderBuilder.newcomer``). Every read of
another process's ``cmdline`` has a deadline (``_host.slow_reads``).

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal

from .grace import grace_case
from .identity import DENIED, ProcessRef, identity_status, process_status
from .._host.procfs import (
    DEV_DIR,
    PROC_ROOT,
    classify_device_path,
    read_stat,
    read_status,
    read_wchan,
    scan_device_holders,
    signal_mask,
)
from .._host.slow_reads import DEFAULT_TIMEOUT as DEFAULT_READ_TIMEOUT
from .._host.slow_reads import read_maps
from .._host.proctree import ancestors, child_pids, descendant_pids
from .._discover.record import HolderBuilder, read_process

try:
    import psutil
except ImportError:  # pragma: no cover - reported by the modules
    psutil = None

# What a parent's record keeps of ``_discover.record.read_process``.
PARENT_FACTS = ('pid', 'ppid', 'name', 'create_time', 'uid', 'pgrp', 'session', 'user', 'exe', 'title',
                'systemd_unit', 'unit_manager', 'container', 'unreadable')


def describe_process(pid, read_timeout=DEFAULT_READ_TIMEOUT):
    """A process dict as ``plan_release`` wants for ``processes``, or None if gone.

    The reads of a holder record (``_discover.record.read_process``): the
    name is ``comm`` from ``/proc/PID/stat``, the title is read within
    ``read_timeout`` seconds, and when it does not come, ``unreadable`` says
    so and the title is the name. Besides, ``tty`` (an interactive shell has
    one) and the live ``children``.
    """
    try:
        facts, stat, dummy = read_process(pid, read_timeout=read_timeout)
        info = dict((key, facts[key]) for key in PARENT_FACTS)
        # The controlling terminal tells an interactive shell.
        info['tty'] = stat['tty_nr'] or None
        info['children'] = [child for child in child_pids(pid)
                            if process_status(child) not in ('zombie', 'gone')]
    except Exception:  # pylint: disable=broad-except
        return None
    info['title'] = info['title'] or info['name']
    return info


def parent_processes(holders, protection=None, read_timeout=DEFAULT_READ_TIMEOUT):
    """``{ppid: process dict}`` for the parents of ``holders`` (edge of ``plan_release``).

    ``protection(info)`` returns ``(protected, reason)`` for a process dict;
    the modules pass ``_discover.protection.protection_of`` so that a supervisor is never a
    process the holder records would call protected. Each title is read
    within ``read_timeout`` seconds.
    """
    processes = {}
    for record in holders:
        ppid = record.get('ppid')
        if ppid and ppid > 1 and ppid not in processes:
            info = describe_process(ppid, read_timeout)
            if info is None:
                continue
            if protection is not None:
                info['protected'], info['protected_reason'] = protection(info)
            processes[ppid] = info
    return processes


class ProcProber:
    """What the loop asks of the live system; unit tests pass a fake.

    ``proc_root`` and ``dev_dir`` serve ``device_holders`` (default: this
    file's ``PROC_ROOT`` and ``DEV_DIR``, read when the prober is made, so
    that tests can point them at stand-in device nodes); everything else
    reads the live ``/proc``. ``builder`` is the
    ``_discover.record.HolderBuilder`` of the discovery the release started
    from (``Snapshot.builder``), which builds a newcomer's record; without
    one, a builder with no protection options, these folders and this
    ``read_timeout``.
    """

    def __init__(self, proc_root=None, dev_dir=None, read_timeout=DEFAULT_READ_TIMEOUT, builder=None):
        self.proc_root = PROC_ROOT if proc_root is None else proc_root
        self.dev_dir = DEV_DIR if dev_dir is None else dev_dir
        self.read_timeout = read_timeout
        if builder is None:
            builder = HolderBuilder(proc_root=self.proc_root, dev_dir=self.dev_dir, read_timeout=read_timeout)
        self.builder = builder

    def device_holders(self):
        """``{pid: {"minors": set, "uvm": bool}}`` of every process with a GPU node open.

        One pass over every ``/proc/PID/fd`` (``_host.procfs.scan_device_holders``);
        ``minors`` are the ``/dev/nvidiaN`` numbers held, ``uvm`` whether
        ``/dev/nvidia-uvm`` is held too.
        """
        holders = scan_device_holders(self.proc_root, self.dev_dir)[0]
        found = {}
        for pid, paths in holders.items():
            minors, uvm = set(), False
            for path in paths:
                kind = classify_device_path(path, self.dev_dir)
                if kind is None:
                    continue
                if kind[0] == 'gpu':
                    minors.add(kind[1])
                elif kind[0] == 'uvm':
                    uvm = True
            if minors:
                found[pid] = {'minors': minors, 'uvm': uvm}
        return found

    def status(self, ref):
        """``gone``, ``reused``, ``zombie``, or psutil's status of the live process."""
        status = identity_status(ref)
        return 'unknown' if status == DENIED else status

    def wchan(self, pid):
        try:
            return read_wchan(pid)
        except Exception:  # pylint: disable=broad-except
            return None

    def ignored_signals(self, pid):
        """The set of signals ``pid`` ignores, or None if unreadable."""
        try:
            return signal_mask(read_status(pid), 'SigIgn')
        except Exception:  # pylint: disable=broad-except
            return None

    def grace_case(self, pid, signum):
        """``(case, reason)`` when ``signum`` cannot reach ``pid``'s code (``_release.grace``), or None."""
        try:
            return grace_case(read_status(pid), signum)
        except Exception:  # pylint: disable=broad-except
            return None

    def mapped(self, pids):
        """``{pid: set of mapped NVIDIA paths, or None when unread}``, each read within ``read_timeout``."""
        prefix = self.dev_dir.rstrip('/') + '/nvidia'
        found = read_maps(pids, prefix, self.read_timeout, self.proc_root)[0]
        return dict((pid, found.get(pid)) for pid in pids)

    def in_host_namespace(self):
        """Whether NVML's PIDs are this process's (``_discover.visibility``)."""
        return self.builder.in_host_namespace()

    def descendants(self, pid):
        """``ProcessRef`` of every live descendant of ``pid``."""
        refs = []
        for child in descendant_pids(pid):
            try:
                refs.append(ProcessRef(child, psutil.Process(child).create_time()))
            except Exception:  # pylint: disable=broad-except
                continue
        return refs

    def listing_mark(self):
        """Now, in clock ticks since boot (``/proc/uptime``), taken right before a listing."""
        try:
            with open('%s/uptime' % self.proc_root) as handle:
                return float(handle.read().split()[0]) * os.sysconf('SC_CLK_TCK')
        except (OSError, ValueError, IndexError):
            return None

    def born_after(self, pid, mark):
        """Whether ``pid`` now names a process started after ``mark`` (a ``listing_mark``).

        Such a process cannot be the one a listing taken after ``mark`` showed:
        the PID was reused in between. Start times are in ticks since boot on
        both sides, so no wall clock is involved.
        """
        try:
            started = read_stat(pid, self.proc_root)['starttime']
        except (OSError, ValueError, IndexError):
            return False
        return started > mark + 1

    def ancestors(self, pid):
        """PIDs of the ancestors of ``pid``, nearest first (``_host.proctree.ancestors``)."""
        return ancestors(pid)

    def newcomer(self, pid, gpus, nvml_entries=None, own_pids=()):
        """The holder record of a process that newly holds ``gpus``, with ``adopted``, or None when gone.

        ``_discover.record.HolderBuilder.newcomer``: ``nvml_entries`` is what
        NVML lists it with there (None when NVML is not read), ``own_pids``
        this module and its ancestors.
        """
        return self.builder.newcomer(pid, gpus, nvml_entries, own_pids)

    def describe(self, pid):
        """A process record for a descendant of a target or a keeper found during the run, or None.

        ``describe_process`` with what the loop adds: ``state``, ``sigterm_ignored``, and holder keys
        the keeper rounds fill in (``gpus``, ``kind``).
        """
        info = describe_process(pid, self.read_timeout)
        if info is None:
            return None
        status = process_status(pid)
        info.update({'state': None if status == 'gone' else status, 'kind': 'compute', 'gpus': [], 'gpu_memory_mib': {},
                     'memory_mib': 0, 'protected': False, 'is_self': False})
        ignored = self.ignored_signals(pid)
        info['sigterm_ignored'] = bool(ignored and signal.SIGTERM in ignored)
        return info
