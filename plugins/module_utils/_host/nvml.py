# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVML access under a deadline: inventory, memory (v2 struct), process lists.

Every NVML call runs under a deadline (``_base.deadline.call_with_deadline``). When
a call overruns, the session is marked dead and makes no further NVML call:
the library may hold an internal lock in the stuck thread, so a second call
could hang too. Callers then fall back to the ``/proc`` view.

Memory is read with ``nvmlDeviceGetMemoryInfo(handle, version=nvmlMemory_v2)``:
the v1 struct counts the driver's reserved memory as used, so a free GPU would
never read 0 MiB.

Process lists come from the plain (v3) names, falling back to ``_v2`` where the
driver lacks them. A list the GPU does not support is treated as empty and not
asked for again.

This file imports nothing from Ansible. ``pynvml`` (package nvidia-ml-py) is
imported guarded; tests pass a fake module object as ``nvml_module``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import traceback

from .._base.deadline import (
    DeadlineExceeded,
    call_with_deadline,
)

try:
    import pynvml
except ImportError:
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMP_ERR = traceback.format_exc()
else:
    HAS_PYNVML = True
    PYNVML_IMP_ERR = None

MIB = 1024 * 1024

DEFAULT_TIMEOUT = 5.0

# The three NVML process lists, in the order they are read. Each entry names
# the functions to try, newest first.
PROCESS_LIST_FUNCTIONS = (
    ('compute', ('nvmlDeviceGetComputeRunningProcesses',
                 'nvmlDeviceGetComputeRunningProcesses_v2')),
    ('graphics', ('nvmlDeviceGetGraphicsRunningProcesses',
                  'nvmlDeviceGetGraphicsRunningProcesses_v2')),
    ('mps', ('nvmlDeviceGetMPSComputeRunningProcesses',
             'nvmlDeviceGetMPSComputeRunningProcesses_v2')),
)

# Options shared by every module that reads NVML; documented by the doc
# fragment gpuops.reclaim.nvml.
NVML_ARGUMENT_SPEC = dict(
    # raw, converted by _input.convert_seconds: Ansible's float type would take true for 1 second.
    nvml_timeout=dict(type='raw', default=DEFAULT_TIMEOUT),
    require_nvml=dict(type='bool', default=False),
)


def _text(value):
    if isinstance(value, bytes):
        return value.decode('utf-8', 'replace')
    return value


def _to_mib(value):
    if value is None:
        return None
    return int(value) // MIB


def _error_names(nvml, *names):
    found = []
    for name in names:
        cls = getattr(nvml, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def describe_error(error):
    """A short text for an NVML failure, naming its class when that helps."""
    text = str(error) or error.__class__.__name__
    name = error.__class__.__name__
    if name.startswith('NVMLError_') and name[len('NVMLError_'):] not in text.replace(' ', ''):
        text = '%s (%s)' % (text, name)
    return text


class NvmlView:
    """What NVML said about the host, or why it could not say anything.

    ``gpus`` is a list of GPU records (see docs/architecture.md) ordered by
    index. ``processes`` maps a GPU index to
    ``{pid: {"memory_mib": int or None, "types": set of "compute"/"graphics"/"mps"}}``.
    """

    def __init__(self, available, error=None, driver_version=None, gpus=None,
                 processes=None, warnings=None):
        self.available = available
        self.error = error
        self.driver_version = driver_version
        self.gpus = gpus or []
        self.processes = processes or {}
        self.warnings = warnings or []

    @classmethod
    def unavailable(cls, error, warnings=None):
        return cls(False, error=error, warnings=warnings)

    def __repr__(self):
        return 'NvmlView(available=%r, error=%r, gpus=%d)' % (
            self.available, self.error, len(self.gpus))


class _Tracked:
    """The NVML module, noting which of its functions is running.

    A step runs many NVML functions under one deadline. When the step
    overruns, the error names the function that did not return
    (``nvmlDeviceGetCount``, ``nvmlDeviceGetComputeRunningProcesses``, ...),
    not just the step.
    """

    def __init__(self, module):
        self._module = module
        self.running = None

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if not callable(value) or isinstance(value, type):
            return value

        def call(*args, **kwargs):
            self.running = name
            try:
                return value(*args, **kwargs)
            finally:
                self.running = None
        return call


class NvmlSession:
    """One NVML initialisation, with device handles cached for cheap polling.

    ``open()`` initialises NVML and reads the device handles and minor numbers.
    ``inventory()`` reads every GPU once: identity, memory and process lists.
    ``poll(indices, timeout)`` reads, per GPU, one memory struct and each
    supported process list, all in one deadline-bounded call. It is meant for
    waiting loops that poll every few tens of milliseconds.

    A call that overruns its deadline makes the session ``dead``; every later
    call raises ``NvmlUnavailable`` at once instead of risking another hang.
    """

    def __init__(self, timeout=DEFAULT_TIMEOUT, nvml_module=None):
        self.timeout = timeout
        module = nvml_module if nvml_module is not None else pynvml
        self._nvml = _Tracked(module) if module is not None else None
        self._lock = threading.Lock()
        self._handles = {}
        self._minors = {}
        self._unsupported = set()  # (index, list type) pairs not to ask again
        self._list_function = {}  # list type -> function name that worked
        self._memory_v2 = True
        self.initialised = False
        self.dead = False
        self.error = None
        self.warnings = []

    # -- lifecycle: open() on first use, close() in the caller's finally ---------

    @property
    def available(self):
        return self.initialised and not self.dead

    @property
    def indices(self):
        return sorted(self._handles)

    def _warn(self, text):
        if text not in self.warnings:
            self.warnings.append(text)

    def _call(self, func, what, timeout=None, *args):
        if self.dead:
            raise NvmlUnavailable(self.error)
        try:
            return call_with_deadline(func, timeout or self.timeout, *args)
        except DeadlineExceeded as exc:
            self.dead = True
            self.error = 'NVML call %s did not return within %.3g seconds; NVML is no longer used' % (
                self._nvml.running or what, exc.timeout)
            raise NvmlUnavailable(self.error)

    def open(self):
        """Initialise NVML and cache the device handles. Return True on success.

        On failure ``error`` says why and the session stays unusable.
        """
        if self.initialised:
            return not self.dead
        if self._nvml is None:
            self.error = 'the Python library nvidia-ml-py (pynvml) is not installed'
            return False
        try:
            self._call(self._open_unbounded, 'nvmlInit')
        except NvmlUnavailable:
            return False
        except Exception as exc:  # pylint: disable=broad-except
            self.error = 'NVML could not be initialised: %s' % describe_error(exc)
            return False
        return True

    def _open_unbounded(self):
        nvml = self._nvml
        nvml.nvmlInit()
        self.initialised = True
        count = nvml.nvmlDeviceGetCount()
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            self._handles[index] = handle
            try:
                self._minors[index] = int(nvml.nvmlDeviceGetMinorNumber(handle))
            except Exception as exc:  # pylint: disable=broad-except
                self._minors[index] = None
                self._warn('GPU %d: NVML gives no minor number (%s); its /dev node cannot be matched'
                           % (index, describe_error(exc)))

    def close(self):
        """Shut NVML down, unless a call is stuck in it."""
        if self.initialised and not self.dead:
            try:
                self._call(self._nvml.nvmlShutdown, 'nvmlShutdown')
            except Exception:  # pylint: disable=broad-except
                pass
        self.initialised = False

    # -- single reads ------------------------------------------------------

    def _optional(self, index, what, func, *args):
        """Value of an NVML getter, or None when the GPU does not support it."""
        try:
            return func(*args)
        except Exception as exc:  # pylint: disable=broad-except
            if not isinstance(exc, _error_names(self._nvml, 'NVMLError_NotSupported')):
                self._warn('GPU %d: NVML could not read %s: %s' % (index, what, describe_error(exc)))
            return None

    def _memory(self, index, handle):
        """(used_mib, reserved_mib, total_mib) with reserved memory not counted as used."""
        nvml = self._nvml
        if self._memory_v2:
            version = getattr(nvml, 'nvmlMemory_v2', None)
            if version is not None:
                try:
                    info = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
                    return _to_mib(info.used), _to_mib(info.reserved), _to_mib(info.total)
                except TypeError:
                    pass
                except _error_names(nvml, 'NVMLError_FunctionNotFound', 'NVMLError_NotSupported'):
                    pass
            self._memory_v2 = False
            self._warn('NVML has no v2 memory struct on this driver; used memory includes the '
                       'memory the driver reserves, so a free GPU does not read 0 MiB')
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return _to_mib(info.used), None, _to_mib(info.total)

    def _process_list(self, index, handle, list_type, names):
        """[(pid, memory_mib or None)] for one list type, [] when unsupported."""
        if (index, list_type) in self._unsupported:
            return []
        nvml = self._nvml
        mismatch = _error_names(nvml, 'NVMLError_FunctionNotFound', 'NVMLLibraryMismatchError')
        not_supported = _error_names(nvml, 'NVMLError_NotSupported')
        preferred = self._list_function.get(list_type)
        candidates = (preferred,) if preferred else names
        for name in candidates:
            func = getattr(nvml, name, None)
            if func is None:
                continue
            try:
                entries = func(handle)
            except mismatch:
                continue
            except not_supported:
                self._unsupported.add((index, list_type))
                return []
            self._list_function[list_type] = name
            return [(int(entry.pid), _to_mib(getattr(entry, 'usedGpuMemory', None)))
                    for entry in entries]
        self._unsupported.add((index, list_type))
        self._warn('NVML on this driver has no %s process list; %s processes are seen only in /proc'
                   % (list_type, list_type))
        return []

    def _processes(self, index, handle):
        """{pid: {"memory_mib": int or None, "types": set}} for one GPU."""
        found = {}
        for list_type, names in PROCESS_LIST_FUNCTIONS:
            for pid, memory in self._process_list(index, handle, list_type, names):
                entry = found.setdefault(pid, {'memory_mib': None, 'types': set()})
                entry['types'].add(list_type)
                # A process in two lists shows the same allocation twice.
                if memory is not None and (entry['memory_mib'] is None or memory > entry['memory_mib']):
                    entry['memory_mib'] = memory
        return found

    # -- inventory ---------------------------------------------------------

    def inventory(self, timeout=None):
        """Read every GPU once and return an ``NvmlView``."""
        if not self.open():
            return NvmlView.unavailable(self.error, warnings=list(self.warnings))
        try:
            driver_version, gpus, processes = self._call(
                self._inventory_unbounded, 'inventory', timeout)
        except NvmlUnavailable as exc:
            return NvmlView.unavailable(str(exc), warnings=list(self.warnings))
        except Exception as exc:  # pylint: disable=broad-except
            return NvmlView.unavailable('NVML could not read the GPUs: %s' % describe_error(exc),
                                        warnings=list(self.warnings))
        return NvmlView(True, driver_version=driver_version, gpus=gpus, processes=processes,
                        warnings=list(self.warnings))

    def _inventory_unbounded(self):
        nvml = self._nvml
        driver_version = None
        try:
            driver_version = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception as exc:  # pylint: disable=broad-except
            self._warn('NVML could not read the driver version: %s' % describe_error(exc))
        gpus = []
        processes = {}
        for index in sorted(self._handles):
            handle = self._handles[index]
            pci = self._optional(index, 'the PCI bus id', nvml.nvmlDeviceGetPciInfo, handle)
            persistence = self._optional(index, 'the persistence mode',
                                         nvml.nvmlDeviceGetPersistenceMode, handle)
            display = self._optional(index, 'whether a display is active',
                                     nvml.nvmlDeviceGetDisplayActive, handle)
            used, reserved, total = self._memory(index, handle)
            processes[index] = self._processes(index, handle)
            gpus.append({
                'index': index,
                'uuid': _text(self._optional(index, 'the UUID', nvml.nvmlDeviceGetUUID, handle)),
                'name': _text(self._optional(index, 'the name', nvml.nvmlDeviceGetName, handle)),
                'minor': self._minors.get(index),
                'pci_bus_id': _text(getattr(pci, 'busId', None)) if pci is not None else None,
                'memory_total_mib': total,
                'memory_used_mib': used,
                'memory_reserved_mib': reserved,
                'persistence_mode': None if persistence is None else bool(persistence),
                'display_active': None if display is None else bool(display),
                'holder_pids': sorted(processes[index]),
            })
        return driver_version, gpus, processes

    # -- polling -----------------------------------------------------------

    def poll(self, indices=None, timeout=None):
        """``{index: {"memory_used_mib": int, "pids": set, "processes": dict}}`` for the given GPUs.

        ``processes`` maps each PID of ``pids`` to what the inventory says of
        it (``{"memory_mib": int or None, "types": set}``).

        One memory read and one query per supported process list per GPU, all
        under one deadline. Raises ``NvmlUnavailable`` when NVML cannot be used
        (never opened, failed, or a call overran its deadline).
        """
        if not self.open():
            raise NvmlUnavailable(self.error)
        if indices is None:
            indices = self.indices
        unknown = [index for index in indices if index not in self._handles]
        if unknown:
            raise ValueError('no GPU with index %s' % ', '.join(str(i) for i in unknown))
        try:
            return self._call(self._poll_unbounded, 'poll', timeout, list(indices))
        except NvmlUnavailable:
            raise
        except Exception as exc:  # pylint: disable=broad-except
            raise NvmlUnavailable('NVML could not be polled: %s' % describe_error(exc))

    def _poll_unbounded(self, indices):
        result = {}
        with self._lock:
            for index in indices:
                handle = self._handles[index]
                used = self._memory(index, handle)[0]
                processes = self._processes(index, handle)
                result[index] = {'memory_used_mib': used, 'pids': set(processes), 'processes': processes}
        return result


class NvmlUnavailable(Exception):
    """NVML cannot be used (any more) in this session."""


def read_inventory(timeout=DEFAULT_TIMEOUT, nvml_module=None, session=None):
    """Open NVML, read every GPU once, and close it again.

    Pass an open ``session`` to keep it for later polling; it is then left open.
    Never raises for NVML trouble: the returned view says ``available`` False
    and why in ``error``.
    """
    if session is not None:
        return session.inventory(timeout)
    session = NvmlSession(timeout=timeout, nvml_module=nvml_module)
    try:
        return session.inventory()
    finally:
        session.close()
