# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Scope filters that name nothing on this host.

A release filtered by ``users: [nosuchuser]`` finds no holder, signals
nothing and succeeds: a typo would look like a host with nothing to release.
These checks say so instead, as warnings the module returns in
``filter_warnings`` and the role shows in its summary:

* a user name with no passwd entry (a numeric UID is taken as given: a
  container's processes may run under a UID the host does not name);
* a unit name or glob that matches no unit, loaded or installed
  (``systemctl list-units --all`` and ``list-unit-files``, read by the module);
* a container selector that matches no process's control group here.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import pwd

from .plan import container_matches
from .._host.cgroup import read_cgroup
from .._host.procfs import PROC_ROOT, iter_pids


def unknown_users(users, getpwnam=pwd.getpwnam):
    """The names in ``users`` with no passwd entry (numeric UIDs are never unknown)."""
    unknown = []
    for user in users or ():
        text = str(user)
        if text.isdigit():
            continue
        try:
            getpwnam(text)
        except KeyError:
            unknown.append(text)
    return unknown


def unmatched_units(patterns, loaded):
    """The unit names or globs in ``patterns`` that match none of the ``loaded`` unit names."""
    return [pattern for pattern in patterns or ()
            if not any(name == pattern or fnmatch.fnmatchcase(name, pattern) for name in loaded)]


def containers_here(proc_root=PROC_ROOT):
    """The container of every process here, as ``_host.cgroup.parse_cgroup`` gives it (each one once)."""
    found = {}
    for pid in iter_pids(proc_root):
        try:
            container = read_cgroup(pid, proc_root).get('container')
        except (OSError, ValueError):
            continue
        if container:
            key = (container.get('runtime'), container.get('id'), container.get('pod_uid'))
            found.setdefault(key, container)
    return list(found.values())


def unmatched_containers(selectors, containers):
    """The selectors that match none of ``containers`` (see ``containers_here``)."""
    unmatched = []
    for selector in selectors or ():
        if not any(container_matches({'container': container}, [selector]) for container in containers):
            unmatched.append(selector)
    return unmatched


def filter_warnings(users=(), units=(), containers=(), loaded_units=None, host_containers=None):
    """Warning texts for the filters that name nothing here.

    ``loaded_units`` is the list of known unit names (None: not known, no
    unit warning); ``host_containers`` what ``containers_here`` returned
    (None: not looked at).
    """
    warnings = []
    for user in unknown_users(users):
        warnings.append('users: %s is not a user on this host; no holder can match it' % user)
    if loaded_units is not None:
        for pattern in unmatched_units(units, loaded_units):
            warnings.append('systemd_units: %s matches no unit on this host; no holder can match it' % pattern)
    if host_containers is not None:
        for selector in unmatched_containers(containers, host_containers):
            warnings.append('containers: %s matches no container that a process on this host runs in; '
                            'no holder can match it' % selector)
    return warnings
