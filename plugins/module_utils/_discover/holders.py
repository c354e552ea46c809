# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Holder records: the NVML and /proc views merged, with kind and protection.

How the two views are combined
------------------------------
* NVML lists compute, graphics and MPS processes with their memory.
* ``/proc/PID/fd`` of every process shows who holds ``/dev/nvidiaN`` open,
  including NVML-only clients (monitors, exporters, this module itself) that
  no NVML list shows. ``N`` is the device minor number, which NVML maps to a
  GPU index (``nvmlDeviceGetMinorNumber``); without NVML the index *is* the
  minor number.
* ``/proc/PID/maps`` is read only where it can add something: for processes
  NVML lists but whose fds show no GPU node. Reading the maps of every
  process costs more than the whole fd scan, and a process with a GPU
  context keeps its fds open, so by default (``maps="nvml"``) the full maps
  scan is not done; ``maps="all"`` does it and ``maps="none"`` never reads
  maps. A maps read takes the process's mmap lock, so the maps are read
  within ``read_timeout`` (``slow_reads.read_maps``), like the titles.

Full records (psutil's create_time, user, title, executable, cgroup) are built
only for the holders found, never for every process, by ``_discover.record``.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from . import keepers as _keepers
from .._host import procfs as _procfs
from .._host import slow_reads as _procread
from . import visibility as _visibility
from .._host.proctree import self_and_ancestors
from .record import HolderBuilder
from .snapshot import Snapshot
from .protection import (
    DEFAULT_PROTECTED_EXECUTABLES,
    DEFAULT_PROTECTED_UNITS,
    unknown_unprotect,
)

MAPS_MODES = ('none', 'nvml', 'all')


def _is_kernel_thread(pid, proc_root):
    """Kernel threads hold no files; an unreadable fd folder of one hides nothing."""
    try:
        return _procfs.read_stat(pid, proc_root)['kernel_thread']
    except (OSError, ValueError, IndexError):
        return False


def _gpu_from_dev(minor):
    return {
        'index': minor, 'uuid': None, 'name': None, 'minor': minor, 'pci_bus_id': None,
        'memory_total_mib': None, 'memory_used_mib': None, 'memory_reserved_mib': None,
        'persistence_mode': None, 'display_active': None, 'holder_pids': [],
    }


def _dev_minors(dev_dir):
    minors = set()
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return minors
    for name in names:
        kind = _procfs.classify_device_path(dev_dir.rstrip('/') + '/' + name, dev_dir)
        if kind and kind[0] == 'gpu':
            minors.add(kind[1])
    return minors


def host_gpus(nvml_view, dev_dir=_procfs.DEV_DIR):
    """The GPU records to resolve selectors against, before discovery.

    With NVML, its GPUs; without, one bare record per ``/dev/nvidiaN`` node,
    indexed by the node's minor number.
    """
    if nvml_view is not None and nvml_view.available:
        return [dict(gpu) for gpu in nvml_view.gpus]
    return [_gpu_from_dev(minor) for minor in sorted(_dev_minors(dev_dir))]


def without_own_process(records, own_pid):
    """``records`` without the one of ``own_pid``, the module's own process."""
    return [record for record in records if record['pid'] != own_pid]


def discover(nvml_view, protect=(), unprotect=(), proc_root=_procfs.PROC_ROOT, gpu_indices=None,
             dev_dir=_procfs.DEV_DIR, maps='nvml', self_pid=None, protect_units=(), shares_namespace=None,
             read_timeout=_procread.DEFAULT_TIMEOUT):
    """Every process that holds a selected GPU, merged from NVML and /proc.

    ``nvml_view`` is an ``_host.nvml.NvmlView`` (``available`` may be False: then
    the /proc view alone is used and GPU indices are device minor numbers).
    ``gpu_indices`` limits the result to those GPUs (None: all). ``dev_dir``
    and ``maps`` exist for tests and benchmarks; modules keep the defaults.
    ``shares_namespace`` says whether NVML's PIDs are this process's (None:
    true when it runs in the host's PID namespace); where they may not be, a
    PID NVML lists counts as a holder here only if it holds a device node
    (see ``_discover.visibility``).
    The titles of all candidates are read at once within ``read_timeout``
    seconds (see ``_host.slow_reads``): a holder whose title does not come in time
    is still a holder, with ``unreadable`` saying why.
    Returns a ``Snapshot``.
    """
    if maps not in MAPS_MODES:
        raise ValueError('maps must be one of %s; got: %r' % (', '.join(MAPS_MODES), maps))
    warnings = list(getattr(nvml_view, 'warnings', None) or [])
    protect = tuple(protect or ())
    unprotect = tuple(unprotect or ())
    protect_units = tuple(protect_units or ())

    unknown = unknown_unprotect(unprotect)
    if unknown:
        warnings.append('unprotect names no default protected executable or unit: %s (defaults: %s)' % (
            ', '.join(unknown), ', '.join(DEFAULT_PROTECTED_EXECUTABLES + DEFAULT_PROTECTED_UNITS)))

    # GPUs and the minor -> index map.
    gpus = host_gpus(nvml_view, dev_dir)
    nvml_processes = nvml_view.processes if nvml_view is not None and nvml_view.available else {}
    minor_to_index = dict((gpu['minor'], gpu['index']) for gpu in gpus if gpu.get('minor') is not None)

    # The /proc view: one pass over every process's fds.
    fd_holders, unreadable, vanished = _procfs.scan_device_holders(proc_root, dev_dir)
    unreadable = set(pid for pid in unreadable if not _is_kernel_thread(pid, proc_root))

    if not (nvml_view is not None and nvml_view.available):
        # Without NVML, every /dev/nvidiaN held is a GPU, even if its node is gone.
        for paths in fd_holders.values():
            for path in paths:
                kind = _procfs.classify_device_path(path, dev_dir)
                if kind and kind[0] == 'gpu' and kind[1] not in minor_to_index:
                    gpus.append(_gpu_from_dev(kind[1]))
                    minor_to_index[kind[1]] = kind[1]
        gpus.sort(key=lambda gpu: gpu['index'])

    # NVML entries per PID.
    per_pid = {}
    for index, processes in nvml_processes.items():
        for pid, entry in processes.items():
            per_pid.setdefault(pid, {})[index] = entry

    prefix = dev_dir.rstrip('/') + '/nvidia'
    maps_candidates = set()
    if maps == 'nvml':
        maps_candidates = set(per_pid) - set(fd_holders)
    elif maps == 'all':
        maps_candidates = set(_procfs.iter_pids(proc_root)) - set(fd_holders)
    mapped, map_errors, maps_stuck = _procread.read_maps(maps_candidates, prefix, read_timeout, proc_root)
    # The listed processes whose fds and maps were both read: what they hold is known.
    maps_read = set(pid for pid in maps_candidates if pid in per_pid) - set(map_errors) - set(maps_stuck)
    for pid, paths in mapped.items():
        if paths:
            fd_holders[pid] = paths
    # A process gone meanwhile is no holder; one whose maps are denied or stuck may be one.
    unreadable.update(pid for pid, error in map_errors.items() if isinstance(error, PermissionError))
    if maps_stuck:
        shown = ', '.join(str(pid) for pid in maps_stuck[:10]) + (
            ' and %d more' % (len(maps_stuck) - 10) if len(maps_stuck) > 10 else '')
        warnings.append('the memory maps of pid %s were not read within %g s (possibly stuck in the kernel); '
                        'only NVML tells which GPUs they hold' % (shown, read_timeout))

    unmatched_minors = set()
    for paths in fd_holders.values():
        for path in paths:
            kind = _procfs.classify_device_path(path, dev_dir)
            if kind and kind[0] == 'gpu' and kind[1] not in minor_to_index:
                unmatched_minors.add(kind[1])
    if unmatched_minors:
        warnings.append('processes hold %s, which match no GPU that NVML reports; those nodes are ignored'
                        % ', '.join('%s%d' % (prefix, minor) for minor in sorted(unmatched_minors)))

    # Candidate holders: whatever NVML lists, plus whoever holds a GPU node.
    candidates = set(per_pid)
    for pid, paths in fd_holders.items():
        for path in paths:
            kind = _procfs.classify_device_path(path, dev_dir)
            if kind and kind[0] == 'gpu' and kind[1] in minor_to_index:
                candidates.add(pid)
                break

    ancestors = self_and_ancestors(self_pid, proc_root if self_pid is not None else _procfs.PROC_ROOT)
    selected = set(gpu['index'] for gpu in gpus) if gpu_indices is None else set(gpu_indices)

    if shares_namespace is None:
        shares_namespace = _visibility.in_initial_pid_namespace()
    nvml_available = bool(nvml_view is not None and nvml_view.available)
    # How every record is built, kept for the processes that newly hold a GPU during a release.
    builder = HolderBuilder(gpus, protect, unprotect, protect_units, ancestors, shares_namespace, proc_root, dev_dir,
                            read_timeout)
    # A process whose maps did not answer holds its mmap lock too long for its cmdline as well: not read again.
    titles, title_errors, stuck = _procread.read_titles(candidates - set(maps_stuck), read_timeout, proc_root)
    stuck = set(stuck) | (set(maps_stuck) & candidates)
    records = []
    invisible = []
    for pid in sorted(candidates):
        unreadable_reason = None
        if pid in stuck:
            unreadable_reason = _procread.stuck_reason(pid, read_timeout, proc_root=proc_root)
        elif isinstance(title_errors.get(pid), _procread.NoThread):
            unreadable_reason = str(title_errors[pid])
        try:
            record = builder.build(pid, fd_holders.get(pid, set()), per_pid.get(pid, {}), nvml_available,
                                   title=titles.get(pid, ''), unreadable=unreadable_reason)
        except PermissionError:
            unreadable.add(pid)
            continue
        except (OSError, ValueError, IndexError):
            if pid in per_pid:
                invisible.append(pid)
            else:
                vanished += 1
            continue
        if shares_namespace and pid in maps_read and not record['device_paths']:
            # In the host's namespace a process that NVML lists holds its nodes: one that holds none is
            # not the listed process (its PID was reused, or it is exiting). The listed one is gone.
            invisible.append(pid)
            continue
        records.append(record)

    # Contexts whose creator is gone, and who keeps them. Outside the host's PID namespace an old
    # driver may name PIDs of another namespace: there, a mere NVML client is never taken for a keeper.
    contexts = []
    foreign = list(invisible)
    if nvml_view is not None and nvml_view.available:
        by_pid = dict((r['pid'], r) for r in records)
        gone = _keepers.gone_creators(nvml_processes, by_pid, set(invisible))
        unexplained = _keepers.unexplained_memory(gpus, nvml_processes, by_pid, gone)

        def maps_of(pids):
            mapped_now, dummy, dummy2 = _procread.read_maps(pids, prefix, read_timeout, proc_root)
            return dict((pid, mapped_now.get(pid)) for pid in pids)
        index_to_minor = dict((index, minor) for minor, index in minor_to_index.items())
        contexts = _keepers.attribute(records, gone, index_to_minor, maps_of,
                                      dict((index, set(processes)) for index, processes in nvml_processes.items()),
                                      clients_may_keep=shares_namespace, unexplained=unexplained,
                                      selected=selected)
        warnings.extend(_keepers.warnings_for(contexts))
        invisible = [pid for pid in invisible if not any(pid in c['creator_pids'] for c in contexts)]
        # A listed PID that no process here has is explained only by a keeper here.
        kept = set(pid for c in contexts if c.get('keepers') for pid in c['creator_pids'])
        foreign = [pid for pid in foreign if pid not in kept]
    # Only the selected GPUs are judged: a PID listed on another one decides nothing here.
    foreign = [pid for pid in foreign if selected.intersection(per_pid.get(pid, {}))]

    # The module's own process holds the device nodes while NVML is open: it is no holder of anyone's, and its PID
    # changes at every run, so the results and diff mode leave it out (its ancestors stay, marked is_self).
    own_pid = os.getpid() if self_pid is None else self_pid
    holders = []
    for record in without_own_process(records, own_pid):
        if selected.intersection(record['gpus']):
            holders.append(record)
            if record['unreadable']:
                warnings.append('pid %d (%s): %s' % (record['pid'], record['name'], record['unreadable']))
            if record['suspicious']:
                warnings.append('pid %d (%s) is suspicious: %s' % (record['pid'], record['name'], record['suspicious']))

    not_visible = [holder for holder in holders if not holder['visible']]
    if not_visible:
        warnings.append('NVML lists PID %s, but the process with that PID here holds no NVIDIA device node: %s. '
                        'It is not signalled, and its GPU does not count as free. Run the task in the host\'s '
                        'PID namespace to see who holds the GPU.'
                        % (', '.join(str(holder['pid']) for holder in not_visible), _visibility.NOT_VISIBLE))
    if invisible:
        warnings.append('NVML lists PID %s, but no such process is visible in %s (it exited, or it runs '
                        'in another PID namespace); its memory still counts on its GPU'
                        % (', '.join(str(pid) for pid in invisible), proc_root))
    if unreadable:
        shown = sorted(unreadable)
        warnings.append('%d processes could not be inspected (permission denied: PID %s%s); holders among '
                        'them are not reported. Run as root to see every holder.'
                        % (len(shown), ', '.join(str(pid) for pid in shown[:10]),
                           ', ...' if len(shown) > 10 else ''))

    for gpu in gpus:
        gpu['holder_pids'] = [holder['pid'] for holder in holders if gpu['index'] in holder['gpus']]
    scoped_gpus = [gpu for gpu in gpus if gpu['index'] in selected]

    return Snapshot(scoped_gpus, holders, unreadable, warnings, nvml_available=nvml_available,
                    driver_version=getattr(nvml_view, 'driver_version', None), vanished=vanished,
                    contexts=contexts, foreign_pids=foreign, builder=builder)
