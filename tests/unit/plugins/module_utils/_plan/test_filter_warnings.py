# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import filter_warnings as _unmatched

DOCKER_ID = 'a' * 64
POD_UID = '1f0e2d3c-4b5a-6978-8796-a5b4c3d2e1f0'


def _fake_proc(tmp_path, cgroups):
    for pid, text in cgroups.items():
        folder = tmp_path / str(pid)
        folder.mkdir()
        (folder / 'cgroup').write_text(text)
    return str(tmp_path)


def test_unknown_users_are_names_without_a_passwd_entry():
    assert _unmatched.unknown_users(['root', 'nosuchuser-gpuops', '4242', 0]) == ['nosuchuser-gpuops']


def test_unmatched_units_takes_globs():
    loaded = ['vllm.service', 'vllm-7b.service', 'ssh.service']
    assert _unmatched.unmatched_units(['vllm.service', 'vllm-*.service', 'vlm.service', 'sglang-*'], loaded) == [
        'vlm.service', 'sglang-*']


def test_containers_here_reads_every_cgroup(tmp_path):
    proc_root = _fake_proc(tmp_path, {
        100: '0::/system.slice/docker-%s.scope\n' % DOCKER_ID,
        101: '0::/system.slice/docker-%s.scope\n' % DOCKER_ID,
        200: '0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/'
             'cri-containerd-%s.scope\n' % (POD_UID.replace('-', '_'), 'b' * 64),
        300: '0::/user.slice/user-0.slice/session-1.scope\n',
    })
    containers = _unmatched.containers_here(proc_root)
    assert len(containers) == 2
    assert _unmatched.unmatched_containers(
        ['docker', 'aaaa', 'kubepods', POD_UID[:8], 'podman', 'cccc'], containers) == ['podman', 'cccc']


def test_containers_here_of_this_host_does_not_fail():
    assert isinstance(_unmatched.containers_here(), list)
    assert os.path.isdir('/proc/self')


def test_filter_warnings_name_the_option_and_value():
    warnings = _unmatched.filter_warnings(
        users=['nosuchuser-gpuops'], units=['vlm.service'], containers=['cccc'],
        loaded_units=['vllm.service'], host_containers=[])
    assert warnings == [
        'users: nosuchuser-gpuops is not a user on this host; no holder can match it',
        'systemd_units: vlm.service matches no unit on this host; no holder can match it',
        'containers: cccc matches no container that a process on this host runs in; no holder can match it',
    ]


def test_filter_warnings_without_a_look_say_nothing_of_units_and_containers():
    assert _unmatched.filter_warnings(units=['x.service'], containers=['c'], loaded_units=None,
                                      host_containers=None) == []
