# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discover -> plan -> escalate: the whole of ``gpu_reclaim`` but its argument spec.

``reclaim(host, params)`` checks the input, looks at the host
(``_flows.module_harness``), judges the GPUs as ``gpu_assert_free`` would when asked to
release only busy GPUs (``_proof.verdict``), plans the release (``_plan.plan``) and its
sources (``_sources.registry``), runs it (``_release.escalation``) unless in check mode,
shapes the result (``_release.report``) and, with ``prove``, proves the GPUs free as
``gpu_assert_free`` does (``_flows.assert_free.wait_free``), on the same NVML session. Bad input, or ``require_root`` without root,
raises ``_flows.module_harness.Failure`` before anything is signalled; every result and
failure carries the module's ``uid``.

``host`` is the module (an ``AnsibleModule``): ``warn``, ``log``,
``run_command``, ``get_bin_path`` and ``check_mode`` are all that is used.
This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from .assert_free import wait_free
from .module_harness import (
    Failure,
    check_options,
    container_identifier,
    find_holders,
    open_view,
    read_cgroup_text,
    scope_of,
    select_gpus,
)
from .._host.commands import RUNTIME_CLIS, command_runner, systemctl_list_unit_files, systemctl_list_units
from .._host.controller import ControllerWatch
from .._release.escalation import Escalation
from .._host.lock import DEFAULT_LOCK_TIMEOUT, LockError, host_lock
from .._base.checks import EscalationError, SettleError, check_poll_interval, check_seconds, check_settle_seconds
from .._plan.ladder import longest_wait, parse_ladder
from .._host.nvml import NvmlSession
from .._plan.plan import SharedHolderError, baseline_memory, container_matches, plan_release
from .._proof.verdict import DEFAULT_MAX_USED_MIB, ProofError, check_left_alone, check_limits, evaluate, verdict_message
from .._release.prober import ProcProber, parent_processes
from .._host.proctree import self_and_ancestors
from .._release.report import shape_result
from .._sources.parent import parent_entries
from .._sources.pod import pod_entries, pod_reason
from .._sources.registry import find_sources, leftover_lines, planned_actions, stop_sources
from .._plan.unit_audit import parse_list_units
from .._plan.filter_warnings import containers_here, filter_warnings

WITHOUT_NVML = 'NVML cannot be used (%s): release is judged from /proc alone, without GPU memory figures.'
PROOF_WITHOUT_NVML = ('Cannot prove the GPUs free: NVML could not be used for the release (see its warning), and '
                      'only its memory figures prove a GPU free. Prove them with gpuops.reclaim.gpu_assert_free once '
                      'NVML answers.')
SECONDS_OPTIONS = ('grace_seconds', 'kill_seconds', 'poll_interval', 'nvml_timeout', 'lock_timeout',
                   'proof_timeout_seconds', 'settle_seconds')
# The proof's options, each with its value when ``prove`` is on and the option is not set.
PROOF_OPTIONS = (('proof_timeout_seconds', 60.0), ('settle_seconds', 0.0))


def known_units(host, patterns):
    """Names of the units (loaded, or installed) matching ``patterns``, or None (with a warning) when
    systemctl cannot tell."""
    systemctl = host.get_bin_path('systemctl')
    if not systemctl:
        host.warn('systemd_units: systemctl is not installed here, so the unit names were not checked')
        return None
    run = command_runner(host)
    names = []
    # list-unit-files exits with 1 when nothing matches.
    for command, good in ((systemctl_list_units(patterns), (0,)), (systemctl_list_unit_files(patterns), (0, 1))):
        rc, out, err = run([systemctl] + command[1:])
        if rc not in good:
            host.warn('systemd_units: the unit names were not checked (%s: rc=%d %s)'
                      % (' '.join(command[:2]), rc, err.strip()))
            return None
        names.extend(parse_list_units(out))
    return names


def check_input(params):
    """The ladder and poll interval of valid options; raise ``Failure`` naming a bad option and its value."""
    for option, default in PROOF_OPTIONS:
        if params.get(option) is None:
            params[option] = default
        elif not params.get('prove'):
            # Without prove nothing waits: a value given there was meant for something else.
            raise Failure('%s: only applies with prove: true; got: %s=%r with prove=%r'
                          % (option, option, params[option], params.get('prove')))
    check_options(params, SECONDS_OPTIONS)
    if params.get('max_used_mib') is not None and not (params.get('only_if_busy') or params.get('prove')):
        # Without only_if_busy or prove nothing judges the GPUs' memory: a limit given there was meant for
        # something else.
        raise Failure('max_used_mib: only judges the GPUs with only_if_busy: true or prove: true; got: '
                      'max_used_mib=%r with only_if_busy=%r and prove=%r'
                      % (params['max_used_mib'], params.get('only_if_busy'), params.get('prove')))
    try:
        ladder = parse_ladder(params['ladder'], params['grace_seconds'], params['kill_seconds'])
        poll_interval = check_poll_interval(params['poll_interval'])
        scope_of(params, on_shared_holder=params['on_shared_holder'])
        check_limits(params['max_used_mib'], poll_interval=poll_interval)
        if params.get('lock_timeout') is not None:
            check_seconds('lock_timeout', params['lock_timeout'])
        check_seconds('proof_timeout_seconds', params['proof_timeout_seconds'], error=ProofError)
        check_settle_seconds(params['settle_seconds'])
    except (EscalationError, ProofError, SettleError) as exc:
        raise Failure(str(exc))
    return ladder, poll_interval


def judge_at_start(snapshot, indices, params, nvml_available):
    """``gpu_assert_free``'s verdict on what discovery found, without waiting: the result's ``before``."""
    max_used_mib = DEFAULT_MAX_USED_MIB if params['max_used_mib'] is None else params['max_used_mib']
    verdict = evaluate(snapshot.gpus, snapshot.holders, selected=indices, max_used_mib=max_used_mib,
                       allow=params['allow'], nvml_available=nvml_available)
    return dict(free=verdict['free'], gpus=verdict['gpus'], holders=verdict['holders'], msg=verdict_message(verdict),
                nvml_available=nvml_available)


def reclaim(host, params, diff=False):
    """Release the selected GPUs' holders; return ``(result, failed)``. See the module's documentation."""
    uid = os.geteuid()
    try:
        result, failed = _reclaim(host, params, uid, diff)
    except Failure as exc:
        exc.fields.setdefault('uid', uid)
        raise
    result['uid'] = uid
    return result, failed


def _reclaim(host, params, uid, diff):
    started = time.monotonic()
    # The parent as the module started: a change later means the controller went away.
    controller = ControllerWatch()
    # Everything that can be wrong with the input fails here, before discovery.
    ladder, poll_interval = check_input(params)
    if params['require_root'] and uid != 0:
        raise Failure('require_root: the module runs as uid %d, not root; nothing was looked at or signalled' % uid)

    # One release at a time per host, from before the first look to the end of the release (not of its proof):
    # a second run waits, then looks.
    lock = host_lock(params.get('lock_timeout', DEFAULT_LOCK_TIMEOUT), check_mode=host.check_mode, euid=uid)
    try:
        lock.acquire()
    except LockError as exc:
        raise Failure(str(exc), lock_holder_pid=exc.holder_pid)
    session = NvmlSession(timeout=params['nvml_timeout'])
    try:
        try:
            result, failed, indices = _release(host, params, diff, started, ladder, poll_interval, controller,
                                               session)
        finally:
            # The proof signals nothing: another release may start while it waits.
            lock.release()
        result['lock_waited_seconds'] = round(lock.waited, 3)
        result['proof'] = None
        if params['prove'] and not host.check_mode and not result['free_at_start']:
            result['proof'], proof_failed = _prove(host, params, session, indices, result)
            failed = failed or proof_failed
            result['msg'] += '\n%s: %s' % ('Not proven free' if proof_failed else 'Proven free', result['proof']['msg'])
    finally:
        session.close()
    return result, failed


def not_proven(msg, nvml_available=True):
    """The proof that ``prove`` returns when it cannot say the GPUs are free, in ``gpu_assert_free``'s shape."""
    return dict(changed=False, free=False, gpus=[], holders=[], waited_seconds=0.0, time_to_free_seconds=None,
                settle_seconds_observed=0.0, nvml_available=nvml_available, msg=msg)


def _prove(host, params, session, indices, result):
    """``gpu_assert_free``'s proof after the release: what it left alone on purpose fails the proof at once,
    and memory may still be on its way back only where it released a holder. Only NVML's memory figures
    prove a GPU free; whatever goes wrong here fails the proof, and the release's result stays whole."""
    if not result['nvml_available']:
        return not_proven(PROOF_WITHOUT_NVML, nvml_available=False), True
    released_gpus = []
    for holder in result['released']:
        released_gpus.extend(gpu for gpu in holder.get('gpus') or [] if gpu not in released_gpus)
    proof_params = dict(params, timeout_seconds=params['proof_timeout_seconds'], max_used_percent=None,
                        max_used_mib=DEFAULT_MAX_USED_MIB if params['max_used_mib'] is None else params['max_used_mib'])
    # A call that hung during the release left its session dead: the proof asks NVML afresh.
    own = NvmlSession(timeout=params['nvml_timeout']) if session.dead else None
    try:
        left_alone = check_left_alone(list(result['skipped_holders']) + list(result['protected']))
        return wait_free(host, proof_params, own or session, indices, True, left_alone=left_alone,
                         released_gpus=released_gpus)
    except Exception as exc:  # pylint: disable=broad-except
        # The holders were signalled already: their report must not be lost to the proof's failure.
        return not_proven('the proof could not run: %s' % exc), True
    finally:
        if own is not None:
            own.close()


def _release(host, params, diff, started, ladder, poll_interval, controller, session):
    view = open_view(host, params, WITHOUT_NVML, session=session)
    indices = select_gpus(view, params)

    scope_warnings = filter_warnings(
        params['users'], params['systemd_units'], params['containers'],
        loaded_units=known_units(host, params['systemd_units']) if params['systemd_units'] else None,
        host_containers=containers_here() if params['containers'] else None)
    for warning in scope_warnings:
        host.warn(warning)

    own = self_and_ancestors()
    snapshot = find_holders(host.warn, view, params, identify=container_identifier(host))
    before = judge_at_start(snapshot, indices, params, view.available) if params['only_if_busy'] else None
    # Free only as NVML tells it: without memory figures nothing is proven free.
    free_at_start = bool(before and before['free'] and view.available)
    # GPUs already free: nothing to plan, so nothing is signalled or stopped, allowed holders included.
    holders = [] if free_at_start else snapshot.holders
    scope = scope_of(params, indices, on_shared_holder=params['on_shared_holder'], euid=os.geteuid(), own_pids=own,
                     release_pods=params['release_pods'], pod_reason=pod_reason)

    # Discovery's own judgement and record builder, for the parents and every process the release meets.
    protected = snapshot.builder.protection
    prober = ProcProber(read_timeout=params['nvml_timeout'], builder=snapshot.builder)

    try:
        parents = parent_processes(holders, protection=protected, read_timeout=params['nvml_timeout'])
        plan = plan_release(holders, scope, processes=parents)
    except SharedHolderError as exc:
        raise Failure(str(exc), nvml_available=view.available)

    run = command_runner(host, extra_seconds=longest_wait(ladder))
    runtimes = dict((runtime, cli if host.get_bin_path(cli) else None) for runtime, cli in RUNTIME_CLIS.items())
    sources = find_sources(plan.targets, read_cgroup_text, run, scope_units=params['systemd_units'],
                           scope_containers=params['containers'], container_matches=container_matches,
                           own_pids=own, runtimes=runtimes)
    for warning in sources.warnings:
        host.warn(warning)

    outcome = None
    predicted_trees = None
    if plan.changes:
        escalation = Escalation(
            plan, ladder, nvml=session if view.available else None, log=host.log,
            on_frozen=lambda: stop_sources(sources, run, stop_seconds=params['grace_seconds']),
            poll_interval=poll_interval, nvml_timeout=params['nvml_timeout'],
            known_pids=[h['pid'] for h in snapshot.holders],
            baseline_mib=baseline_memory(snapshot.holders, plan),
            prober=prober, protection=protected, own_pids=own, should_stop=controller.gone,
            minor_to_index=dict((gpu['minor'], gpu['index']) for gpu in snapshot.gpus
                                if gpu.get('minor') is not None))
        if host.check_mode:
            # Plan, then stop: the trees the real run would freeze and kill, read the same way.
            predicted_trees = escalation.predict_trees()
        else:
            outcome = escalation.run()
            for warning in outcome['warnings']:
                host.warn(warning)

    if outcome is None:
        planned_actions(sources, host.check_mode)
    result = shape_result(snapshot.gpus, snapshot.holders, plan, outcome=outcome, check_mode=host.check_mode,
                          elapsed=time.monotonic() - started, predicted_trees=predicted_trees)
    result['sources'] = (parent_entries(result.pop('parents')) + sources.entries
                         + (pod_entries(plan.targets) if params['release_pods'] else []))
    if any(item['action'] == 'stopped' for item in sources.entries):
        result['changed'] = True
    leftovers = leftover_lines(result['sources'])
    if leftovers:
        result['msg'] += '\n' + '\n'.join(['Sources that can start a holder again:'] + leftovers)
    result['nvml_available'] = view.available
    result['filter_warnings'] = scope_warnings
    result['free_at_start'] = free_at_start if before else None
    if before:
        result['before'] = before
        if free_at_start:
            result['msg'] = 'nothing to release: %s at the start' % before['msg']
    failed = result.pop('failed_release') and params['fail_on_survivors']
    if not diff:
        result.pop('diff')
    return result, failed, indices
