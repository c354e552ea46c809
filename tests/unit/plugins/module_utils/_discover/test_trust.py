# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import trust as _trust
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.trust import names_of, script_of


# --- names ------------------------------------------------------------------------

@pytest.mark.parametrize('title, expected', [
    ('python3 /usr/bin/dcgm-exporter --port 9400', 'dcgm-exporter'),
    ('python3 -u -X dev /opt/exporter/dcgm-exporter', 'dcgm-exporter'),
    ('python3 -m dcgm_exporter', 'dcgm_exporter'),
    ("python3 -c 'import x'", None),
    ('python3', None),
    ('', None),
    (None, None),
])
def test_script_of(title, expected):
    assert script_of(title) == expected


@pytest.mark.parametrize('exe, comm, title, expected', [
    # The executable decides; the title is not a name.
    ('/usr/bin/nv-hostengine', 'nv-hostengine', 'VLLM::Worker_TP0', [('nv-hostengine', 'executable')]),
    # An interpreter adds its script.
    ('/usr/bin/python3.11', 'python3', 'python3 /usr/bin/dcgm-exporter',
     [('python3.11', 'executable'), ('dcgm-exporter', 'script')]),
    # Unreadable executable: the command's first word and comm.
    (None, 'nvidia-persiste', '/usr/bin/nvidia-persistenced --user nvidia-persistenced',
     [('nvidia-persistenced', 'command'), ('nvidia-persiste', 'comm')]),
    (None, 'python3', 'python3 /usr/bin/dcgm-exporter',
     [('python3', 'command'), ('python3', 'comm'), ('dcgm-exporter', 'script')]),
])
def test_names_of(exe, comm, title, expected):
    assert names_of(exe, comm, title) == expected


def root_folder(path, mode=0o755, owner=0):
    os.makedirs(path)
    os.chmod(path, mode)
    os.chown(path, owner, owner)
    return path


def test_untrusted_file_follows_links_only_root_could_have_made(tmp_path):
    assert _trust.untrusted_file('/bin/sh') is None  # /bin is a link on merged-/usr systems
    assert 'does not exist' in _trust.untrusted_file('/nonexistent/program')
    assert 'is not absolute' in _trust.untrusted_file('bin/sh')
    if os.geteuid() == 0:
        folder = root_folder(str(tmp_path / 'open'), mode=0o777)
        os.symlink('/bin/sh', os.path.join(folder, 'sh'))
        assert 'open is writable by others (mode 0777)' in _trust.untrusted_file(os.path.join(folder, 'sh'))
