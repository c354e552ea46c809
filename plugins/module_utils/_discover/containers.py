# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A holder's container, as its runtime confirms it.

A cgroup path names a candidate only (``_host.cgroup.container_from_path``): any
root process can create a scope called ``docker-<id>.scope``. A container is
identified when its runtime, asked within a deadline, knows the id, runs it,
and counts the holder among its processes: the container's main process, a
descendant of it, or in the runtime's own list of its processes (``top``).
Only then does a holder record carry the container's ``name``, ``image`` and
restart policy, with ``confirmed: true``; otherwise ``confirmed`` is false and
``reason`` says why.

``PODMAN_SYSTEMD_UNIT`` (the label Quadlet and ``podman generate systemd``
set) is a label anyone who runs the container can set. It names the unit in
charge (``systemd_unit``) only when the holder's cgroup lies under that very
unit of the system manager, which only root and systemd can arrange.

Commands go through an injected ``run(argv) -> (rc, out, err)`` that bounds
each call with a deadline. This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .._host.commands import RUNTIME_CLIS, container_inspect, container_top

SYSTEMD_UNIT_LABEL = 'PODMAN_SYSTEMD_UNIT'
# One line, tab-separated: the same Go template for docker, podman and nerdctl.
INSPECT_FORMAT = '\t'.join((
    '{{.Id}}', '{{.Name}}', '{{.Config.Image}}', '{{.State.Pid}}', '{{.HostConfig.RestartPolicy.Name}}',
    '{{index .Config.Labels "%s"}}' % SYSTEMD_UNIT_LABEL, '{{.HostConfig.PidMode}}'))
INSPECT_FIELDS = ('id', 'name', 'image', 'main_pid', 'restart_policy', 'label_unit', 'pid_mode')


def _int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def parse_inspect(out):
    """A dict of ``INSPECT_FIELDS`` from ``container inspect``'s output (``INSPECT_FORMAT``) (``main_pid`` None when no number)."""
    line = (out or '').strip('\n').split('\n')[0]
    values = line.split('\t')
    values += [''] * (len(INSPECT_FIELDS) - len(values))
    info = dict(zip(INSPECT_FIELDS, (value.strip() for value in values)))
    # docker names a container "/name"; "<no value>" is Go's word for a missing label.
    info['name'] = info['name'].lstrip('/')
    info['main_pid'] = _int(info['main_pid']) or None
    if info['label_unit'] == '<no value>':
        info['label_unit'] = ''
    return info


def parse_top(out):
    """The PIDs of ``container top``'s output (the header and anything else that is no number skipped)."""
    return set(pid for pid in (_int(line.strip()) for line in (out or '').splitlines()) if pid)


def _safe_ancestors(ancestors, pid):
    try:
        return ancestors(pid)
    except (OSError, ValueError):
        return []


class Inspector:
    """Asks each runtime about each container once per module run.

    ``runtimes`` maps a runtime to its command line tool, or None where the
    tool is not installed; ``ancestors(pid)`` gives a process's ancestors.
    """

    def __init__(self, run, runtimes=None, ancestors=None):
        self.run = run
        self.runtimes = RUNTIME_CLIS if runtimes is None else runtimes
        self.ancestors = ancestors or (lambda pid: [])
        self._inspected = {}
        self._tops = {}

    def cli(self, runtime):
        return self.runtimes.get(runtime)

    def inspect(self, runtime, container_id):
        """``(info, None)`` for a running container the runtime knows, else ``(None, why)``."""
        key = (runtime, container_id)
        if key not in self._inspected:
            self._inspected[key] = self._inspect(runtime, container_id)
        return self._inspected[key]

    def _inspect(self, runtime, container_id):
        cli = self.cli(runtime)
        if not cli:
            return None, '%s is not installed, so the container cannot be confirmed' % RUNTIME_CLIS.get(
                runtime, runtime)
        rc, out, err = self.run(container_inspect(cli, container_id, INSPECT_FORMAT))
        if rc != 0:
            return None, '%s knows no container %s (%s)' % (cli, container_id[:12], err.strip() or 'rc %d' % rc)
        info = parse_inspect(out)
        if info['id'] and info['id'] != container_id:
            return None, '%s container %s has another id (%s)' % (cli, container_id[:12], info['id'][:12])
        if not info['main_pid']:
            return None, '%s container %s is not running' % (cli, container_id[:12])
        info['runtime'] = runtime
        info['id'] = container_id
        return info, None

    def members(self, runtime, container_id, info, pids):
        """``(True, None)`` when every pid is one of the container's processes, else ``(False, why)``."""
        cli = self.cli(runtime)
        main_pid = info['main_pid']
        outside = [pid for pid in pids
                   if pid != main_pid and main_pid not in _safe_ancestors(self.ancestors, pid)]
        if outside and info.get('pid_mode') == 'host':
            # In the host's PID namespace the runtime's list can be every process of the host: only the
            # container's own process tree counts.
            return False, ('pid %s: not in the process tree of %s container %s (its main process is %d), which '
                           'runs in the host\'s PID namespace, whatever its cgroup says' % (
                               ', '.join(str(pid) for pid in outside), cli, container_id[:12], main_pid))
        if outside:
            key = (runtime, container_id)
            if key not in self._tops:
                rc, out, err = self.run(container_top(cli, container_id))
                self._tops[key] = (parse_top(out), None) if rc == 0 else (
                    set(), '%s cannot list the processes of container %s (%s)' % (
                        cli, container_id[:12], err.strip() or 'rc %d' % rc))
            listed, why = self._tops[key]
            if why:
                return False, 'pid %s: %s' % (', '.join(str(pid) for pid in outside), why)
            outside = [pid for pid in outside if pid not in listed]
        if outside:
            return False, ('pid %s: not a process of %s container %s (its main process is %d), whatever its '
                           'cgroup says' % (', '.join(str(pid) for pid in outside), cli, container_id[:12], main_pid))
        return True, None

    def confirm(self, container, pids, cgroup_unit=None):
        """The container record for holders ``pids`` whose cgroup names ``container``.

        ``cgroup_unit`` is the system manager's ``.service`` the holders'
        cgroup lies under (``_sources.systemd_unit.system_service``), or None.
        """
        runtime, container_id = container.get('runtime'), container.get('id') or ''
        record = dict(container)
        record.update(name=None, image=None, restart_policy=None, systemd_unit=None, confirmed=False, reason=None)
        info, why = self.inspect(runtime, container_id)
        if info is not None:
            dummy, why = self.members(runtime, container_id, info, pids)
        if why:
            record['reason'] = why
            return record
        record.update(name=info['name'] or None, image=info['image'] or None,
                      restart_policy=info['restart_policy'] or 'no', confirmed=True)
        # Only podman's systemd integration sets the label, and only podman's stop goes through the unit.
        if runtime == 'podman' and info['label_unit'] and info['label_unit'] == cgroup_unit:
            record['systemd_unit'] = cgroup_unit
        return record


def identify(records, inspector, cgroup_unit_of=None):
    """Replace each record's cgroup-named ``container`` with what its runtime confirms (in place).

    Pods are left as the cgroup names them (kubelet is their source); a
    runtime without a command line tool here leaves ``confirmed`` false.
    ``cgroup_unit_of(pid)`` gives the ``.service`` a holder's cgroup lies under.
    """
    groups = {}
    for record in records:
        container = record.get('container')
        if not container or container.get('pod_uid') or container.get('runtime') not in RUNTIME_CLIS:
            continue
        groups.setdefault((container['runtime'], container.get('id')), []).append(record)
    for dummy, members in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1] or '')):
        pids = [record['pid'] for record in members]
        unit = None
        if cgroup_unit_of is not None:
            units = set(cgroup_unit_of(pid) for pid in pids)
            unit = units.pop() if len(units) == 1 else None
        confirmed = inspector.confirm(members[0]['container'], pids, cgroup_unit=unit)
        for record in members:
            record['container'] = dict(confirmed)
    return records


def describe(container):
    """``runtime container name (id12, image)`` for a message."""
    if not container:
        return ''
    text = '%s container %s' % (container.get('runtime'), container.get('name') or (container.get('id') or '')[:12])
    details = [(container.get('id') or '')[:12]] if container.get('name') else []
    if container.get('image'):
        details.append(container['image'])
    return text + (' (%s)' % ', '.join(details) if details else '')
