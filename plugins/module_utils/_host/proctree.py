# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The process tree: children, descendants, ancestors, and this module's own lineage.

Every walk of the tree in the collection goes through these functions: the
freeze step's rescans, check mode's prediction, the unit audit (which walks
a ``{pid: ppid}`` map it read once) and the list of PIDs never signalled
because they are this module or one of its ancestors.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from .procfs import PROC_ROOT, iter_pids, read_stat


def child_pids(pid, proc_root=PROC_ROOT):
    """PIDs of the children of ``pid``, from ``/proc/PID/task/*/children``.

    That file costs one read per thread of ``pid``, where psutil's
    ``children()`` reads the stat file of every process on the host (hundreds
    of milliseconds with ten thousand processes). The kernel documents it as
    exact for a stopped process, which is when the freeze step reads it.
    Falls back to psutil where the kernel lacks the file.
    """
    task_dir = '%s/%d/task' % (proc_root, pid)
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return []
    children = []
    for tid in tids:
        try:
            with open('%s/%s/children' % (task_dir, tid)) as handle:
                children.extend(int(field) for field in handle.read().split())
        except FileNotFoundError:
            if os.path.exists('%s/%s' % (task_dir, tid)):
                # No CONFIG_PROC_CHILDREN: ask psutil, the slow way. Imported here: the controller's filters
                # import this file's pure helpers, and psutil is no business of theirs.
                try:
                    import psutil  # pylint: disable=import-outside-toplevel
                    return [child.pid for child in psutil.Process(pid).children()]
                except Exception:  # pylint: disable=broad-except
                    return []
        except (OSError, ValueError):
            continue
    return sorted(set(children))


def descendant_pids(pid, children=None):
    """PIDs of every descendant of ``pid``, parents before children.

    ``children(pid)`` lists the children of a PID; the default reads the
    live ``/proc`` (``child_pids``). ``children_from_map`` turns a
    ``{pid: ppid}`` map into one.
    """
    children = child_pids if children is None else children
    found, frontier, seen = [], [pid], set([pid])
    while frontier:
        parent = frontier.pop(0)
        for child in children(parent):
            if child not in seen:
                seen.add(child)
                found.append(child)
                frontier.append(child)
    return found


def parent_map(proc_root=PROC_ROOT):
    """``{pid: ppid}`` of every process that can be read: the whole tree in one pass."""
    parents = {}
    for pid in iter_pids(proc_root):
        try:
            parents[pid] = read_stat(pid, proc_root)['ppid']
        except (OSError, KeyError, ValueError):
            continue
    return parents


def children_from_map(parent_of):
    """``children(pid)`` for ``descendant_pids`` from a ``{pid: ppid}`` map."""
    by_parent = {}
    for child, parent in parent_of.items():
        by_parent.setdefault(parent, []).append(child)
    return lambda pid: sorted(by_parent.get(pid, ()))


def ancestors(pid, proc_root=PROC_ROOT):
    """PIDs of the ancestors of ``pid``, nearest first, up to PID 1 (from ``/proc/PID/stat``)."""
    chain = []
    seen = set([pid])
    while True:
        try:
            pid = read_stat(pid, proc_root)['ppid']
        except (OSError, ValueError, IndexError):
            break
        if not pid or pid in seen:
            break
        seen.add(pid)
        chain.append(pid)
    return chain


def self_and_ancestors(pid=None, proc_root=PROC_ROOT):
    """PIDs of ``pid`` (default: this process) and every ancestor up to PID 1: never signalled."""
    if pid is None:
        pid = os.getpid()
    return set([pid] + ancestors(pid, proc_root))
