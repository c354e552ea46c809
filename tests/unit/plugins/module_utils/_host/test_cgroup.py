# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host import cgroup as _cgroup

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'proc')

ID = '3f5e8d2c1b0a99887766554433221100ffeeddccbbaa00112233445566778899'
POD = '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0'
POD_SLICE = POD.replace('-', '_')


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts), 'rb') as handle:
        return handle.read().decode('utf-8')


# --- cgroup -----------------------------------------------------------------------

CGROUP_CASES = [
    # This host's own layout (cgroups v1 hybrid, no systemd): nothing to report.
    ('captured hybrid, no systemd', None, None, None),
    ('1:name=systemd:/system.slice/vllm.service\n0::/system.slice/vllm.service\n',
     'vllm.service', None, None),
    ('0::/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service\n',
     'vllm.service', None, None),
    ('0::/user.slice/user-1000.slice/session-3.scope\n', 'session-3.scope', None, None),
    # docker, cgroupfs driver (v1) and systemd driver (v2)
    ('12:memory:/docker/%s\n1:name=systemd:/docker/%s\n' % (ID, ID), None, 'docker', None),
    ('0::/system.slice/docker-%s.scope\n' % ID, 'docker-%s.scope' % ID, 'docker', None),
    ('11:devices:/system.slice/docker-%s.scope\n1:name=systemd:/system.slice/docker-%s.scope\n0::/\n' % (ID, ID),
     'docker-%s.scope' % ID, 'docker', None),
    # containerd through CRI, systemd driver, burstable and guaranteed pods
    ('0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope\n'
     % (POD_SLICE, ID), 'cri-containerd-%s.scope' % ID, 'containerd', POD),
    ('0::/kubepods.slice/kubepods-pod%s.slice/cri-containerd-%s.scope\n' % (POD_SLICE, ID),
     'cri-containerd-%s.scope' % ID, 'containerd', POD),
    # docker through dockershim, systemd driver
    ('0::/kubepods.slice/kubepods-pod%s.slice/docker-%s.scope\n' % (POD_SLICE, ID),
     'docker-%s.scope' % ID, 'docker', POD),
    # containerd, cgroupfs driver, CRI namespace
    ('0::/k8s.io/%s\n' % ID, None, 'containerd', None),
    # cri-o, container and its conmon
    ('0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/crio-%s.scope\n'
     % (POD_SLICE, ID), 'crio-%s.scope' % ID, 'cri-o', POD),
    ('0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/crio-conmon-%s.scope\n'
     % (POD_SLICE, ID), 'crio-conmon-%s.scope' % ID, 'cri-o', POD),
    # podman: root (with the systemd-mode inner group), rootless, conmon, cgroupfs manager
    ('0::/machine.slice/libpod-%s.scope/container\n' % ID, 'libpod-%s.scope' % ID, 'podman', None),
    # Security: a user's tree names any scope it likes, so it is never a container (rootless podman included:
    # root's runtime does not know it).
    ('0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-%s.scope\n' % ID,
     'libpod-%s.scope' % ID, None, None),
    ('0::/user.slice/user-1000.slice/user@1000.service/app.slice/docker-%s.scope\n' % ID,
     'docker-%s.scope' % ID, None, None),
    ('1:name=systemd:/user.slice/user-1000.slice/session-4.scope\n4:memory:/docker/%s\n' % ID,
     'session-4.scope', None, None),
    ('0::/user.slice/user-1000.slice/cri-containerd-%s.scope\n' % ID, 'cri-containerd-%s.scope' % ID, None, None),
    ('0::/machine.slice/libpod-conmon-%s.scope\n' % ID, 'libpod-conmon-%s.scope' % ID, 'podman', None),
    # podman run --cgroups=split (a Quadlet unit): the payload under the unit that runs podman
    ('1:name=systemd:/system.slice/serve.service/libpod-payload-%s\n' % ID, 'serve.service', 'podman', None),
    ('4:memory:/libpod_parent/libpod-%s\n1:name=systemd:/libpod_parent/libpod-%s\n' % (ID, ID),
     None, 'podman', None),
    # kubepods, cgroupfs driver: the runtime cannot be told from the path
    ('4:memory:/kubepods/besteffort/pod%s/%s\n1:name=systemd:/kubepods/besteffort/pod%s/%s\n' % (POD, ID, POD, ID),
     None, 'kubepods', POD),
    ('0::/kubepods/pod%s/%s\n' % (POD, ID), None, 'kubepods', POD),
    # only the pod is known
    ('0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice\n' % POD_SLICE,
     None, 'kubepods', POD),
]


@pytest.mark.parametrize('text, unit, runtime, pod_uid', CGROUP_CASES)
def test_parse_cgroup(text, unit, runtime, pod_uid):
    if text == 'captured hybrid, no systemd':
        text = fixture('sigterm_ignored', 'cgroup')
    parsed = _cgroup.parse_cgroup(text)
    assert parsed['systemd_unit'] == unit
    if runtime is None:
        assert parsed['container'] is None
        return
    container = parsed['container']
    assert container['runtime'] == runtime
    if runtime == 'kubepods' and ID not in text:
        assert container['id'] == POD
    else:
        assert container['id'] == ID
    assert container.get('pod_uid') == pod_uid


def test_parse_cgroup_captured_podman_cgroupfs():
    parsed = _cgroup.parse_cgroup(fixture('podman_cgroupfs', 'cgroup'))
    assert parsed == {'systemd_unit': 'systemd-journald.service', 'unit_manager': 'system', 'container': {
        'runtime': 'podman', 'id': '65d7bc3b0ad8ad3c5a16652522257a21c3e12ce87df96c6681418681d10ba713'}}


def test_parse_cgroup_ignores_short_ids():
    assert _cgroup.parse_cgroup('0::/system.slice/docker-abc.scope\n') == {
        'systemd_unit': 'docker-abc.scope', 'unit_manager': 'system', 'container': None}


def test_read_cgroup_of_this_process():
    parsed = _cgroup.read_cgroup(os.getpid())
    assert set(parsed) == {'systemd_unit', 'unit_manager', 'container'}


@pytest.mark.parametrize('path, manager', [
    ('/system.slice/nvidia-persistenced.service', 'system'),
    ('/user.slice/user-1000.slice/session-3.scope', 'system'),
    # Security: a user's own unit is the user manager's, whatever it is called.
    ('/user.slice/user-1000.slice/user@1000.service/app.slice/nvidia-persistenced.service', 'user'),
    ('/user.slice/user-1000.slice/user@1000.service/init.scope', 'user'),
    ('/', None),
    ('/docker/%s' % ID, None),
])
def test_unit_manager(path, manager):
    assert _cgroup.unit_manager(path) == manager
