# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Source kind ``container``: a docker, podman or containerd (``nerdctl``) container with a restart policy.

Never the one this module runs in. A cgroup path only names a candidate (and never one under a user manager
or a user slice, where any user names scopes as they like: ``_host.cgroup.container_from_path``): before
anything is done, the runtime itself must confirm that the container exists and that the holder is one of its
processes (the container's main process or a descendant of it, or in the runtime's own list of its processes,
``top``; ``_discover.containers.Inspector``). Otherwise the entry's action is ``UNCONFIRMED``, with the reason,
and nothing is asked of the runtime again. In scope (``containers`` empty or matching) it is stopped through its
runtime, docker's and nerdctl's restart policy cleared first; otherwise named.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .._discover.containers import Inspector
from .._host.commands import RUNTIME_CLIS, container_no_restart, container_stop
from .kind import LEAVE, STOP, SourceKind, entry, pid_list

NAME = 'container'
# A cgroup path named a container, and its runtime did not confirm it.
UNCONFIRMED = 'not a container source'
NO_RESTART = ('', 'no', 'none')


def confirm_container(cli, container, pids, run, ancestors):
    """``(policy, None)`` when the runtime confirms that every holder in ``pids`` is one of its
    container's processes, else ``(None, why)`` (``_discover.containers.Inspector``)."""
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
    return entry(NAME, container=container, holder_pids=holder_pids, action=action, reason=reason)


def unconfirmed(found, pids, why):
    return entry(NAME, container=found, holder_pids=pids, action=UNCONFIRMED,
                 reason=why + ': not stopped, and nothing else asked of the runtime')


def stop(item, run, stop_seconds):
    """Stop the container of ``item`` through its runtime; ``(rc, err)`` of the stop."""
    container = item['container']
    cli = RUNTIME_CLIS[container['runtime']]
    no_restart = container_no_restart(cli, container['id'])
    if no_restart:
        # A failure here still leaves the stop to do, and the stop's own result is its action; the entry's
        # reason then says that the policy stays, so that the daemon can start the container again.
        rc, dummy, err = run(no_restart)
        if rc != 0:
            item['reason'] = '%s; but its restart policy could not be taken away (%s), so %s can start it again' % (
                item.get('reason') or 'stopped', err.strip() or 'rc %d' % rc, cli)
    rc, dummy, err = run(container_stop(cli, container['id'], stop_seconds))
    return rc, err


def leftover(item):
    action = item.get('action') or ''
    if not action.startswith(('left alone', 'stop failed')):
        return None
    what = '%s container %s' % (item['container'].get('runtime'), item['container'].get('id', '')[:12])
    return '%s can start pid %s again: %s' % (
        what, pid_list(item), item.get('reason') if action == 'left alone' else action)


def row_name(item):
    """The first 12 characters of its id, as the runtimes show it."""
    container = item.get('container') or {}
    return str(container.get('id') or '' if isinstance(container, dict) else container)[:12]


# The containers the role's own stop stage stopped count as this kind too.
KIND = SourceKind(NAME, label='container', metric='container', leftover=leftover, stop=stop,
                  row_name=row_name, role_stopped='stopped_containers', older_list=None)
