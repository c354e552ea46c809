# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A process's cgroup: the systemd unit (and its manager) and the container candidate it names.

``parse_cgroup`` reads cgroup v1, v2 and hybrid layouts. A container found here is a candidate only: the
runtime confirms it (``_discover.containers``), and a path in a user's own tree never names one.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

PROC_ROOT = '/proc'


# --- cgroup -> systemd unit and container ---------------------------------

_HEX64 = r'[0-9a-f]{64}'
_UNIT_SUFFIXES = ('.service', '.scope')

# Scope names that runtimes create under the systemd cgroup driver, and
# the runtime each belongs to. Conmon scopes name the container they watch.
_SCOPE_PATTERNS = (
    (re.compile(r'^docker-(' + _HEX64 + r')\.scope$'), 'docker'),
    (re.compile(r'^cri-containerd-(' + _HEX64 + r')\.scope$'), 'containerd'),
    (re.compile(r'^crio-conmon-(' + _HEX64 + r')\.scope$'), 'cri-o'),
    (re.compile(r'^crio-(' + _HEX64 + r')\.scope$'), 'cri-o'),
    (re.compile(r'^libpod-conmon-(' + _HEX64 + r')\.scope$'), 'podman'),
    (re.compile(r'^libpod-(' + _HEX64 + r')\.scope$'), 'podman'),
)
# Cgroupfs-driver directory layouts.
_DOCKER_DIR = re.compile(r'(?:^|/)docker/(' + _HEX64 + r')(?:/|$)')
_LIBPOD_DIR = re.compile(r'(?:^|/)libpod-(' + _HEX64 + r')(?:/|$)')
# podman run --cgroups=split (Quadlet): the payload under the unit that runs podman.
_LIBPOD_PAYLOAD_DIR = re.compile(r'(?:^|/)libpod-payload-(' + _HEX64 + r')(?:/|$)')
# containerd's own namespaces under the cgroupfs driver (k8s.io for CRI pods).
_CONTAINERD_DIR = re.compile(r'(?:^|/)k8s\.io/(' + _HEX64 + r')(?:/|$)')
_KUBEPODS_DIR = re.compile(
    r'(?:^|/)kubepods(?:/(?:besteffort|burstable|guaranteed))?/pod([0-9a-f-]{36})(?:/(' + _HEX64 + r'))?(?:/|$)')
_KUBEPODS_SLICE = re.compile(
    r'^kubepods(?:-(?:besteffort|burstable|guaranteed))?-pod([0-9a-f_]{36})\.slice$')


def parse_cgroup_lines(text):
    """[(hierarchy id, controllers, path)] from the text of /proc/PID/cgroup."""
    lines = []
    for line in text.splitlines():
        parts = line.split(':', 2)
        if len(parts) == 3:
            lines.append((parts[0], parts[1], parts[2]))
    return lines


def _systemd_path(lines):
    """The cgroup path that systemd manages: name=systemd (v1), else the v2 path."""
    for dummy, controllers, path in lines:
        if 'name=systemd' in controllers.split(','):
            return path
    for hierarchy, controllers, path in lines:
        if hierarchy == '0' and controllers == '':
            return path
    return None


# What a user's own systemd manager creates (user@UID.service and below) and the
# slices of users' sessions: an ordinary user names the scopes there as they like.
_USER_MANAGER = re.compile(r'^user@[0-9]+\.service$')
_USER_SLICE = re.compile(r'^user(?:-[0-9]+)?\.slice$')


def in_user_tree(path):
    """Whether a cgroup path lies under a user manager (``user@UID.service``) or a user slice."""
    return any(_USER_MANAGER.match(part) or _USER_SLICE.match(part) for part in (path or '').split('/'))


def unit_manager(path):
    """``user`` for a unit of a user manager (under ``user@UID.service``), ``system`` for one of the
    system manager, None for a path without a unit."""
    if systemd_unit_from_path(path) is None:
        return None
    return 'user' if any(_USER_MANAGER.match(part) for part in path.split('/')) else 'system'


def container_from_path(path):
    """``{"runtime", "id", ["pod_uid"]}`` for a cgroup path, or None.

    Never a container under a user manager or a user slice: any user can start
    a scope there and call it ``docker-<id>.scope`` (``systemd-run --user
    --scope --unit=...``), so the name there proves nothing.
    """
    if in_user_tree(path):
        return None
    components = [part for part in path.split('/') if part]
    container = None
    pod_uid = None
    for part in components:
        match = _KUBEPODS_SLICE.match(part)
        if match:
            pod_uid = match.group(1).replace('_', '-')
            continue
        for pattern, runtime in _SCOPE_PATTERNS:
            match = pattern.match(part)
            if match:
                container = {'runtime': runtime, 'id': match.group(1)}
                break
    if container is None:
        match = _KUBEPODS_DIR.search(path)
        if match:
            pod_uid = match.group(1)
            if match.group(2):
                container = {'runtime': 'kubepods', 'id': match.group(2)}
    if container is None:
        match = _DOCKER_DIR.search(path)
        if match:
            container = {'runtime': 'docker', 'id': match.group(1)}
    if container is None:
        match = _LIBPOD_DIR.search(path) or _LIBPOD_PAYLOAD_DIR.search(path)
        if match:
            container = {'runtime': 'podman', 'id': match.group(1)}
    if container is None:
        match = _CONTAINERD_DIR.search(path)
        if match:
            container = {'runtime': 'containerd', 'id': match.group(1)}
    if container is None and pod_uid is not None:
        container = {'runtime': 'kubepods', 'id': pod_uid}
    if container is not None and pod_uid is not None:
        container['pod_uid'] = pod_uid
    return container


def systemd_unit_from_path(path):
    """The last ``*.service`` or ``*.scope`` component of a cgroup path, or None."""
    if not path:
        return None
    for part in reversed([part for part in path.split('/') if part]):
        if part.endswith(_UNIT_SUFFIXES):
            return part
    return None


def parse_cgroup(text):
    """``{"systemd_unit": str or None, "unit_manager": str or None, "container": dict or None}``
    from /proc/PID/cgroup.

    Handles cgroup v1, v2 and hybrid layouts. The unit comes from the systemd
    hierarchy, with the manager it belongs to (``unit_manager``); the container
    from whichever hierarchy names one (v1 controllers may show it when
    name=systemd does not), never from a path in a user's tree.
    """
    lines = parse_cgroup_lines(text)
    systemd_path = _systemd_path(lines)
    container = container_from_path(systemd_path) if systemd_path else None
    # A process of a user's tree is no container, whatever another hierarchy says.
    if container is None and not in_user_tree(systemd_path):
        for dummy, dummy2, path in lines:
            container = container_from_path(path)
            if container is not None:
                break
    return {
        'systemd_unit': systemd_unit_from_path(systemd_path),
        'unit_manager': unit_manager(systemd_path) if systemd_path else None,
        'container': container,
    }


def read_cgroup(pid, proc_root=PROC_ROOT):
    with open('%s/%d/cgroup' % (proc_root, pid)) as handle:
        return parse_cgroup(handle.read())
