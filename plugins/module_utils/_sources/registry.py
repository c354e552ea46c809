# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What can start a released holder again, and what the release does about it.

Releasing a holder without what restarts it is no release: the GPU is taken
back a few seconds after it was proven free. For every targeted holder this
file finds its sources besides its parent (``_parents``):

``systemd``
    the system manager's ``.service`` that owns the holder (its cgroup) and
    is still active, activating or waiting to auto-restart. Never a login
    session's scope, ``user@.service`` or anything under it, nor a unit that
    holds this module's own lineage. In scope (``systemd_units`` empty or
    matching), it is stopped through systemd (``systemctl stop --no-block``,
    while its parents are frozen and before any holder is signalled), so
    that ``Restart=`` cannot bring it back; otherwise it is named.

``container``
    a docker, podman or containerd (``nerdctl``) container with a restart
    policy, never the one this module runs in. A cgroup path only names a
    candidate (and never one under a user manager or a user slice, where any
    user names scopes as they like: ``_host.cgroup.container_from_path``): before
    anything is done, the runtime itself must confirm that the container
    exists and that the holder is one of its processes (the container's main
    process or a descendant of it, or in the runtime's own list of its
    processes, ``top``). Otherwise the entry's action is ``not a container
    source``, with the reason, and nothing is asked of the runtime again. In
    scope (``containers`` empty or matching) it is stopped through its
    runtime; otherwise named.

``pod``
    a Kubernetes pod: kubelet restarts it whatever is done on the host. Its
    holders are skipped unless ``release_pods`` is set (``_escalation``);
    when they are released, the entry says that kubelet will restart it.

Each entry of the ``sources`` list has ``kind`` (``parent``, ``systemd``,
``container``, ``pod``), ``pid``, ``title``, ``unit``, ``container``,
``pod``, ``holder_pids``, ``action`` and ``reason``. Deciding is pure; the
commands go through an injected ``run(argv) -> (rc, out, err)``.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os

from .._discover.containers import Inspector
from .._host.commands import RUNTIME_CLIS, container_no_restart, container_stop, systemctl_show, systemctl_stop
from .._host.proctree import ancestors as live_ancestors
from .._plan.unit_audit import parse_show

try:
    from .._host.cgroup import parse_cgroup
except ImportError:  # pragma: no cover
    parse_cgroup = None

KIND_PARENT = 'parent'
KIND_UNIT = 'systemd'
KIND_CONTAINER = 'container'
KIND_POD = 'pod'

STOP = 'stop'
LEAVE = 'leave'
# A cgroup path named a container, and its runtime did not confirm it.
UNCONFIRMED = 'not a container source'

UNIT_PROPERTIES = ('Id', 'LoadState', 'ActiveState', 'SubState', 'Restart', 'MainPID')
# A unit in one of these states can still start (or keeps) a holder.
LIVE_STATES = ('active', 'activating', 'reloading')

NO_RESTART = ('', 'no', 'none')

PODS_LOG_DIR = '/var/log/pods'


def pod_reason(pod_uid, pods_dir=PODS_LOG_DIR):
    """Why a pod's holder is left alone, with its namespace and name where the host can tell."""
    reason = 'managed by Kubernetes pod %s: drain the node' % pod_uid
    named = pod_names(pods_dir).get(pod_uid)
    if named:
        reason += ' (namespace %s, pod %s)' % named
    return reason


def pod_names(pods_dir=PODS_LOG_DIR):
    """``{uid: (namespace, name)}`` from kubelet's log directories ``<namespace>_<name>_<uid>``."""
    names = {}
    try:
        entries = os.listdir(pods_dir)
    except OSError:
        return names
    for entry in entries:
        parts = entry.split('_')
        if len(parts) >= 3:
            names[parts[-1]] = (parts[0], '_'.join(parts[1:-1]))
    return names


# -- systemd -------------------------------------------------------------------

def system_service(cgroup_text):
    """The system manager's ``.service`` a process runs in, from /proc/PID/cgroup, or None.

    The last ``.service`` of the systemd hierarchy's path; None under a user
    manager (``user@UID.service``) or when the nearest unit is a scope.
    """
    path = None
    for line in (cgroup_text or '').splitlines():
        parts = line.split(':', 2)
        if len(parts) != 3:
            continue
        if 'name=systemd' in parts[1].split(','):
            path = parts[2]
            break
        if parts[0] == '0' and parts[1] == '' and path is None:
            path = parts[2]
    if not path:
        return None
    components = [part for part in path.split('/') if part]
    if any(part.startswith('user@') for part in components):
        return None
    for part in reversed(components):
        if part.endswith('.scope'):
            return None
        if part.endswith('.service'):
            return part
    return None


def unit_is_live(properties):
    return (properties.get('LoadState') == 'loaded'
            and (properties.get('ActiveState') in LIVE_STATES or properties.get('SubState') == 'auto-restart'))


def judge_unit(unit, properties, holder_pids, scope_units):
    """The source entry for a unit, or None when it can start nothing any more. Pure."""
    if not unit_is_live(properties):
        return None
    state = '%s/%s' % (properties.get('ActiveState'), properties.get('SubState'))
    restart = properties.get('Restart') or 'no'
    if scope_units and not any(fnmatch.fnmatchcase(unit, pattern) for pattern in scope_units):
        action = LEAVE
        reason = ('%s (Restart=%s) owns the holders and is outside systemd_units: never stopped; stop it '
                  '(systemctl stop %s) or add it to the scope' % (state, restart, unit))
    else:
        action = STOP
        reason = '%s (Restart=%s) owns the holders: stopped through systemd so that it cannot start them again' % (
            state, restart)
    return entry(KIND_UNIT, unit=unit, holder_pids=holder_pids, action=action, reason=reason,
                 pid=_int(properties.get('MainPID')) or None)


# -- containers ----------------------------------------------------------------

def confirm_container(cli, container, pids, run, ancestors):
    """``(policy, None)`` when the runtime confirms that every holder in ``pids`` is one of its
    container's processes, else ``(None, why)`` (``_containers.Inspector``)."""
    runtime = container.get('runtime') or cli
    found = Inspector(run, {runtime: cli}, ancestors).confirm(dict(container, runtime=runtime), pids)
    if not found['confirmed']:
        return None, found['reason']
    return found['restart_policy'], None


def judge_container(container, policy, holder_pids, scope_containers, matches):
    """The source entry for a container with ``policy``, or None without a restart policy. Pure.

    ``matches(record, selectors)`` is the scope's container filter.
    """
    policy = (policy or '').strip()
    if policy.lower() in NO_RESTART:
        return None
    if scope_containers and not matches({'container': container}, scope_containers):
        action = LEAVE
        reason = ('restart policy %s, outside containers: never stopped; stop it (%s stop %s) or add it to '
                  'the scope' % (policy, RUNTIME_CLIS.get(container.get('runtime'), container.get('runtime')),
                                 container.get('id', '')[:12]))
    else:
        action = STOP
        reason = 'restart policy %s: stopped through its runtime so that it cannot start them again' % policy
    return entry(KIND_CONTAINER, container=container, holder_pids=holder_pids, action=action, reason=reason)


# -- entries -------------------------------------------------------------------

def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def entry(kind, pid=None, title=None, unit=None, container=None, pod=None, holder_pids=(), action=None,
          reason=None):
    return {'kind': kind, 'pid': pid, 'title': title, 'unit': unit, 'container': container, 'pod': pod,
            'holder_pids': sorted(holder_pids), 'action': action, 'reason': reason}


def parent_entries(parents):
    """Source entries for ``_escalation``'s parent results (``outcome`` is the action taken)."""
    found = []
    for parent in parents:
        container = parent.get('container')
        found.append(entry(KIND_PARENT, pid=parent['pid'], title=parent.get('title'),
                           unit=parent.get('systemd_unit'), container=container,
                           pod=(container or {}).get('pod_uid'), holder_pids=parent.get('children') or [],
                           action=parent.get('outcome'), reason=parent.get('reason')))
    return found


def pod_entries(targets):
    """One entry per pod whose holders are released anyway (``release_pods``)."""
    pods = {}
    for record in targets:
        pod = (record.get('container') or {}).get('pod_uid')
        if pod:
            pods.setdefault(pod, []).append(record['pid'])
    return [entry(KIND_POD, pod=pod, holder_pids=pids, action='left alone',
                  reason='released with release_pods: kubelet will restart it; drain the node to keep it away')
            for pod, pids in sorted(pods.items())]


class SourcePlan:
    """The units and containers to stop (or name) for a release's targets."""

    def __init__(self):
        self.entries = []
        self.warnings = []

    def to_stop(self):
        return [item for item in self.entries if item['action'] == STOP]


def find_sources(targets, read_cgroup, run, scope_units=(), scope_containers=(), container_matches=None,
                 own_pids=(), runtimes=None, ancestors=live_ancestors):
    """A ``SourcePlan`` for the targets' units and containers.

    ``read_cgroup(pid)`` returns the text of /proc/PID/cgroup (raises
    OSError for a vanished process); ``run(argv)`` returns ``(rc, out,
    err)``; ``runtimes`` maps a runtime to its command line tool, or None
    where the tool is not installed (default: every one in
    ``RUNTIME_CLIS``); ``ancestors(pid)`` gives a process's ancestors
    (``_proctree.ancestors``), which confirm a container's processes.
    """
    plan = SourcePlan()
    runtimes = RUNTIME_CLIS if runtimes is None else runtimes
    own_units, own_containers = set(), set()
    for pid in own_pids:
        try:
            text = read_cgroup(pid)
        except (OSError, ValueError):
            continue
        unit = system_service(text)
        if unit:
            own_units.add(unit)
        own = (parse_cgroup(text) if parse_cgroup else {}).get('container')
        if own and own.get('id'):
            own_containers.add(own['id'])
    units, containers = {}, {}
    for record in targets:
        container = record.get('container')
        if container and container.get('pod_uid'):
            continue
        if container and container.get('runtime') in RUNTIME_CLIS:
            key = (container['runtime'], container.get('id'))
            containers.setdefault(key, (container, []))[1].append(record['pid'])
            continue
        try:
            unit = system_service(read_cgroup(record['pid']))
        except (OSError, ValueError):
            continue
        if unit and unit not in own_units:
            units.setdefault(unit, []).append(record['pid'])
    inspector = Inspector(run, runtimes, ancestors)
    confirmed = []
    for (runtime, container_id), (container, pids) in sorted(containers.items(), key=lambda item: item[0]):
        if container_id in own_containers:
            continue
        if not runtimes.get(runtime):
            plan.warnings.append('%s container %s: %s is not installed, so its restart policy is unknown'
                                 % (runtime, (container_id or '')[:12], RUNTIME_CLIS[runtime]))
            continue
        try:
            cgroup_units = set(system_service(read_cgroup(pid)) for pid in pids)
        except (OSError, ValueError):
            cgroup_units = set()
        found = inspector.confirm(container, pids, cgroup_unit=cgroup_units.pop() if len(cgroup_units) == 1
                                  else None)
        if not found['confirmed']:
            why = found['reason']
            plan.entries.append(entry(KIND_CONTAINER, container=found, holder_pids=pids, action=UNCONFIRMED,
                                      reason=why + ': not stopped, and nothing else asked of the runtime'))
            plan.warnings.append('%s container %s is not a source of pid %s: %s' % (
                runtime, (container_id or '')[:12], ', '.join(str(pid) for pid in sorted(pids)), why))
            continue
        if found['systemd_unit'] and found['systemd_unit'] not in own_units:
            # A Quadlet-style unit runs the container, and its Restart= is in charge: stopped through systemd.
            units.setdefault(found['systemd_unit'], []).extend(pids)
            continue
        confirmed.append((found, pids))
    if units:
        rc, out, err = run(systemctl_show(sorted(units), UNIT_PROPERTIES))
        if rc != 0:
            plan.warnings.append('cannot read the units of the holders (%s): they are not stopped'
                                 % (err.strip() or 'rc %d' % rc))
        else:
            for properties in parse_show(out):
                unit = properties.get('Id')
                if unit in units:
                    found = judge_unit(unit, properties, units[unit], list(scope_units))
                    if found:
                        plan.entries.append(found)
    for found, pids in confirmed:
        judged = judge_container(found, found['restart_policy'], pids, list(scope_containers), container_matches)
        if judged:
            plan.entries.append(judged)
    return plan


def stop_sources(plan, run, stop_seconds=10.0):
    """Stop every in-scope unit and container of ``plan``; record the outcome in each entry's ``action``."""
    for item in plan.to_stop():
        if item['kind'] == KIND_UNIT:
            argv = systemctl_stop(item['unit'])
        else:
            container = item['container']
            cli = RUNTIME_CLIS[container['runtime']]
            no_restart = container_no_restart(cli, container['id'])
            if no_restart:
                # A failure here still leaves the stop to do; the stop's own result is what counts.
                run(no_restart)
            argv = container_stop(cli, container['id'], stop_seconds)
        rc, dummy, err = run(argv)
        item['action'] = 'stopped' if rc == 0 else 'stop failed: %s' % (err.strip() or 'rc %d' % rc)


def planned_actions(plan, check_mode):
    """What each entry's ``action`` says when nothing was run (check mode, or no release)."""
    for item in plan.entries:
        if item['action'] == STOP:
            item['action'] = 'would be stopped' if check_mode else 'left alone'
        elif item['action'] == LEAVE:
            item['action'] = 'left alone'


def leftover_lines(sources):
    """One line per source that can still start a holder, with the next step."""
    lines = []
    for item in sources:
        action = item.get('action') or ''
        if item['kind'] == KIND_PARENT and action == 'left alone':
            lines.append('pid %s (%s), parent of pid %s, was left running (%s); next step: stop it, then run again'
                         % (item['pid'], item.get('title'), ', '.join(str(p) for p in item['holder_pids']),
                            item.get('reason')))
        elif item['kind'] in (KIND_UNIT, KIND_CONTAINER) and action.startswith(('left alone', 'stop failed')):
            what = item['unit'] if item['kind'] == KIND_UNIT else '%s container %s' % (
                item['container'].get('runtime'), item['container'].get('id', '')[:12])
            lines.append('%s can start pid %s again: %s' % (
                what, ', '.join(str(p) for p in item['holder_pids']), item.get('reason') if action == 'left alone'
                else action))
    return lines
