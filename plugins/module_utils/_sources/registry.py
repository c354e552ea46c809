# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What can start a released holder again, and what the release does about it: the registry of source kinds.

Releasing a holder without what restarts it is no release: the GPU is taken back a few seconds after it was
proven free. Each kind of source is one file of this package, listed in ``KINDS``: ``systemd``
(``systemd_unit.py``), ``container`` (``container.py``), ``pod`` (``pod.py``) and ``parent``
(``parent.py``), each with its detection, its stop, its label, its metric name, its next step and how the
role's summary names and counts it. The controller takes every kind from ``KINDS``, in its order (the order of
the metrics' ``sources_stopped`` series).

``find_sources`` finds, for every targeted holder, its units and containers (its parent is the release's
business, ``_plan.parents``); ``stop_sources`` stops those in scope; ``leftover_lines`` says what can still
start a holder. Each entry of the ``sources`` list has ``kind``, ``pid``, ``title``, ``unit``, ``container``,
``pod``, ``holder_pids``, ``action`` and ``reason`` (``kind.entry``). Deciding is pure; the commands go through
an injected ``run(argv) -> (rc, out, err)``.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .._discover.containers import Inspector
from .._host.commands import RUNTIME_CLIS, systemctl_show
from .._plan.unit_audit import parse_show
from . import container as _container
from . import parent as _parent
from . import pod as _pod
from . import systemd_unit as _systemd_unit
from .kind import LEAVE, STOP

try:
    from .._host.cgroup import parse_cgroup
except ImportError:  # pragma: no cover
    parse_cgroup = None

# Every kind of source, by the ``kind`` of its entries, in the order the metrics list them.
KINDS = dict((kind.name, kind) for kind in (_systemd_unit.KIND, _container.KIND, _pod.KIND, _parent.KIND))


class SourcePlan:
    """The units and containers to stop (or name) for a release's targets."""

    def __init__(self):
        self.entries = []
        self.warnings = []

    def to_stop(self):
        return [item for item in self.entries if item['action'] == STOP]


def find_sources(targets, read_cgroup, run, scope_units=(), scope_containers=(), container_matches=None,
                 own_pids=(), runtimes=None, ancestors=None):
    """A ``SourcePlan`` for the targets' units and containers.

    ``read_cgroup(pid)`` returns the text of /proc/PID/cgroup (raises
    OSError for a vanished process); ``run(argv)`` returns ``(rc, out,
    err)``; ``runtimes`` maps a runtime to its command line tool, or None
    where the tool is not installed (default: every one in
    ``RUNTIME_CLIS``); ``ancestors(pid)`` gives a process's ancestors
    (default: ``_host.proctree.ancestors``), which confirm a container's processes.
    """
    system_service = _systemd_unit.system_service
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
    if ancestors is None:
        # Imported here, where a host is read: the controller takes only KINDS from this file, and the process
        # tree brings psutil, which the controller's filters do not need.
        from .._host.proctree import ancestors  # pylint: disable=import-outside-toplevel
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
            plan.entries.append(_container.unconfirmed(found, pids, why))
            plan.warnings.append('%s container %s is not a source of pid %s: %s' % (
                runtime, (container_id or '')[:12], ', '.join(str(pid) for pid in sorted(pids)), why))
            continue
        if found['systemd_unit'] and found['systemd_unit'] not in own_units:
            # A Quadlet-style unit runs the container, and its Restart= is in charge: stopped through systemd.
            units.setdefault(found['systemd_unit'], []).extend(pids)
            continue
        confirmed.append((found, pids))
    if units:
        rc, out, err = run(systemctl_show(sorted(units), _systemd_unit.UNIT_PROPERTIES))
        if rc != 0:
            plan.warnings.append('cannot read the units of the holders (%s): they are not stopped'
                                 % (err.strip() or 'rc %d' % rc))
        else:
            for properties in parse_show(out):
                unit = properties.get('Id')
                if unit in units:
                    found = _systemd_unit.judge_unit(unit, properties, units[unit], list(scope_units))
                    if found:
                        plan.entries.append(found)
    for found, pids in confirmed:
        judged = _container.judge_container(found, found['restart_policy'], pids, list(scope_containers),
                                            container_matches)
        if judged:
            plan.entries.append(judged)
    return plan


def stop_sources(plan, run, stop_seconds=10.0):
    """Stop every in-scope source of ``plan`` by its kind's stop; record the outcome in each entry's ``action``."""
    for item in plan.to_stop():
        rc, err = KINDS[item['kind']].stop(item, run, stop_seconds)
        item['action'] = 'stopped' if rc == 0 else 'stop failed: %s' % (err.strip() or 'rc %d' % rc)


def planned_actions(plan, check_mode):
    """What each entry's ``action`` says when nothing was run (check mode, or no release)."""
    for item in plan.entries:
        if item['action'] == STOP:
            item['action'] = 'would be stopped' if check_mode else 'left alone'
        elif item['action'] == LEAVE:
            item['action'] = 'left alone'


def leftover_lines(sources):
    """One line per source that can still start a holder, with the next step (its kind's ``leftover``)."""
    lines = []
    for item in sources:
        kind = KINDS.get(item['kind'])
        line = kind.leftover(item) if kind is not None else None
        if line:
            lines.append(line)
    return lines
