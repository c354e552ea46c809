# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One look at the host, the way every module starts.

The libraries, the options in seconds, NVML's view (or why there is none),
the GPU selectors resolved against this host, and the holders of the GPUs
(``_discover.holders.discover``). A module calls ``missing_library`` and ``look`` (or
its parts, where it needs something between them) and turns a ``Failure``
into ``fail_json``: the message names the option and the value, and nothing
has been signalled yet.

``host`` is what the module passes for itself: anything with ``warn(text)``
(an ``AnsibleModule``). This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

from .._discover import containers as _containers
from .._discover import visibility as _visibility
from .._discover.holders import discover, host_gpus
from .._discover.record import HAS_PSUTIL, PSUTIL_IMP_ERR
from .._host.proctree import ancestors as live_ancestors
from .._base.checks import EscalationError, check_lists, check_timeout, convert_seconds
from .._host.commands import RUNTIME_CLIS, command_runner
from .._host.nvml import HAS_PYNVML, NVML_ARGUMENT_SPEC, PYNVML_IMP_ERR, read_inventory
from .._discover.protection import PROTECTION_ARGUMENT_SPEC, ProtectionError, check_protection_options
from .._discover.selectors import GPU_SELECTION_ARGUMENT_SPEC, SelectorError, resolve_gpus
from .._plan.plan import SCOPE_ARGUMENT_SPEC, build_scope
from .._sources.systemd_unit import system_service

NVML_REQUIRED = 'NVML cannot be used and require_nvml is true: %s'

# A systemctl or container runtime call that takes longer than this (a wedged
# PID 1 or daemon) is cut short; a container stop gets its grace on top.

# List options whose entries are shell-style globs, in every module that has them.
GLOB_OPTIONS = ('protect', 'protect_units', 'unprotect', 'systemd_units', 'units')


class Failure(Exception):
    """What the module fails with: the message, and the result keys that go with it."""

    def __init__(self, msg, **fields):
        Exception.__init__(self, msg)
        self.fields = fields


Look = namedtuple('Look', ['view', 'indices', 'snapshot'])


def argument_spec(options=None, gpus=True, protection=False, scope=False):
    """A module's own ``options`` and the shared ones: ``gpus``, the NVML options, with ``protection`` those of
    ``_discover.protection`` and with ``scope`` those of ``_plan.plan`` (documented by the doc fragments
    ``gpu_selection``, ``nvml``, ``protection`` and ``scope``)."""
    spec = dict(options or {})
    if gpus:
        spec.update(GPU_SELECTION_ARGUMENT_SPEC)
    spec.update(NVML_ARGUMENT_SPEC)
    if protection:
        spec.update(PROTECTION_ARGUMENT_SPEC)
    if scope:
        spec.update(SCOPE_ARGUMENT_SPEC)
    return spec


def missing_library(require_nvml=True):
    """``(name, traceback)`` of the first library the module needs and cannot import, or None."""
    if not HAS_PSUTIL:
        return 'psutil', PSUTIL_IMP_ERR
    if require_nvml and not HAS_PYNVML:
        return 'nvidia-ml-py', PYNVML_IMP_ERR
    return None


def check_seconds_options(params, options=('nvml_timeout',)):
    """Convert the options in seconds (``nvml_timeout`` among them) in place; raise ``Failure`` for a bad one."""
    error = convert_seconds(params, options) or check_timeout(params['nvml_timeout'])
    if error:
        raise Failure(error)


def check_options(params, seconds=('nvml_timeout',)):
    """Every option checked before anything is looked at; raise ``Failure`` naming the first bad one.

    The options in ``seconds`` (converted in place, as ``check_seconds_options``), every list option (no
    empty entry, and the globs of ``GLOB_OPTIONS`` compile), and the protection options against each other
    (``_discover.protection.check_protection_options``).
    """
    check_seconds_options(params, seconds)
    error = check_lists(params, GLOB_OPTIONS)
    if error:
        raise Failure(error)
    if 'unprotect' in params:
        try:
            check_protection_options(params.get('protect'), params.get('protect_units'), params.get('unprotect'),
                                     params.get('unprotect_all_confirmed'))
        except ProtectionError as exc:
            raise Failure(str(exc))


def scope_of(params, indices=(), **extra):
    """The release's ``Scope`` of the GPU ``indices`` from the scope options of ``params`` (``_plan.plan.build_scope``,
    which checks them, with ``extra``); raise ``Failure`` naming a bad option and its value."""
    try:
        return build_scope(indices, users=params['users'], match=params['match'], systemd_units=params['systemd_units'],
                           containers=params['containers'], kinds=params['kinds'], **extra)
    except EscalationError as exc:
        raise Failure(str(exc))


def open_view(host, params, without_nvml, session=None, required=NVML_REQUIRED, **fields):
    """NVML's view of the GPUs, read within ``nvml_timeout``.

    When NVML cannot be used: a ``Failure`` (``required`` with the reason)
    if ``require_nvml`` is set, else the warning ``without_nvml`` (with the
    reason) and a view that says so. ``fields`` go with the failure.
    """
    view = read_inventory(params['nvml_timeout'], session=session)
    if not view.available:
        if params['require_nvml']:
            raise Failure(required % view.error, nvml_available=False, **fields)
        host.warn(without_nvml % view.error)
    return view


def select_gpus(view, params, **fields):
    """The indices of the GPUs the ``gpus`` option selects on this host; a ``Failure`` names a bad selector."""
    try:
        return resolve_gpus(params['gpus'], host_gpus(view), option='gpus')
    except SelectorError as exc:
        raise Failure(str(exc), nvml_available=view.available, **fields)


def read_cgroup_text(pid):
    with open('/proc/%d/cgroup' % pid) as handle:
        return handle.read()


def container_identifier(host, seconds_left=None):
    """``identify(records)``: each holder's container as its runtime confirms it (``_discover.containers``), each
    runtime asked within ``COMMAND_TIMEOUT`` (or the ``seconds_left()`` of the caller's deadline, if less)
    and about each container once per module run; a runtime not installed here confirms nothing."""
    inspectors = {}

    def identify(records):
        wanted = set((record.get('container') or {}).get('runtime') for record in records)
        if not wanted & set(RUNTIME_CLIS):
            return
        if 'inspector' not in inspectors:
            # One per module run: each container is asked about once, however often the GPUs are polled.
            runtimes = dict((runtime, cli if host.get_bin_path(cli) else None)
                            for runtime, cli in RUNTIME_CLIS.items())
            run = command_runner(host, seconds_left=seconds_left)
            inspectors['inspector'] = _containers.Inspector(run, runtimes, live_ancestors)
        inspector = inspectors['inspector']

        def unit_of(pid):
            try:
                return system_service(read_cgroup_text(pid))
            except (OSError, ValueError):
                return None
        _containers.identify(records, inspector, unit_of)
    return identify


def find_holders(warn, view, params, indices=None, identify=None, shares_namespace=None):
    """``_discover.holders.discover`` with the module's protection options and deadline; ``warn(text)`` gets its warnings.

    ``identify(records)`` (``container_identifier``) confirms the holders' containers. A ``Failure`` when
    this module cannot see the processes NVML names (``_discover.visibility.namespace_refusal``): nothing is judged
    or signalled from a PID namespace that is not the host's. A process that NVML listed and that exited
    before its ``/proc`` entry was read looks the same for one look, so a second look decides: only a PID
    that NVML lists and this namespace lacks both times is refused.
    """
    def look():
        return discover(view, protect=params.get('protect') or (), unprotect=params.get('unprotect') or (),
                        protect_units=params.get('protect_units') or (), gpu_indices=indices,
                        read_timeout=params['nvml_timeout'], shares_namespace=shares_namespace)
    snapshot = look()
    if _visibility.namespace_refusal(snapshot.foreign_pids, shares_namespace):
        first = set(snapshot.foreign_pids)
        snapshot = look()
        foreign = sorted(first & set(snapshot.foreign_pids))
        refusal = _visibility.namespace_refusal(foreign, shares_namespace)
        if refusal:
            raise Failure(refusal, foreign_pids=foreign)
    if identify is not None:
        identify(snapshot.holders)
    for warning in snapshot.warnings:
        warn(warning)
    return snapshot


def answer(module, flow, *args, **kwargs):
    """End ``module`` with what ``flow(module, module.params, ...)`` returns, ``(result, failed)``.

    ``exit_json`` with the result, or ``fail_json`` when it failed or raised a ``Failure``.
    """
    try:
        result, failed = flow(module, module.params, *args, **kwargs)
    except Failure as exc:
        module.fail_json(msg=str(exc), **exc.fields)
    if failed:
        module.fail_json(**result)
    module.exit_json(**result)


def look(host, params, without_nvml, select=True, session=None):
    """``open_view``, ``select_gpus`` (when ``select``) and ``find_holders`` of the selected GPUs."""
    view = open_view(host, params, without_nvml, session=session)
    indices = select_gpus(view, params) if select else None
    return Look(view, indices, find_holders(host.warn, view, params, indices, identify=container_identifier(host)))
