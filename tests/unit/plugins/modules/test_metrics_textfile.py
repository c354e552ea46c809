# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.modules import metrics_textfile


@pytest.fixture
def run_module(module_runner):
    return module_runner(metrics_textfile)


def test_writes_the_metrics(run_module, tmp_path):
    path = str(tmp_path / 'gpu_reclaim.prom')
    result = run_module({'path': path, 'content': 'gpu_reclaim_last_run_success 1\n'})
    assert result['changed'] is False and result['path'] == path
    assert open(path).read() == 'gpu_reclaim_last_run_success 1\n'


def test_check_mode_writes_nothing_but_checks_the_directory(run_module, tmp_path):
    result = run_module({'path': str(tmp_path / 'gpu_reclaim.prom'), 'content': 'x\n', '_ansible_check_mode': True})
    assert 'failed' not in result and os.listdir(str(tmp_path)) == []
    os.chmod(str(tmp_path), 0o777)
    result = run_module({'path': str(tmp_path / 'gpu_reclaim.prom'), 'content': 'x\n', '_ansible_check_mode': True})
    assert result['failed'] and 'another user can change it' in result['msg']


# Security: the metrics directory is a link planted in a directory others can write.
def test_a_planted_link_fails_naming_the_directory(run_module, tmp_path):
    target = tmp_path / 'target'
    target.mkdir()
    drop = tmp_path / 'drop'
    drop.mkdir()
    os.symlink(str(target), str(drop / 'textfile'))
    os.chmod(str(drop), 0o777)
    result = run_module({'path': str(drop / 'textfile' / 'gpu_reclaim.prom'), 'content': 'x\n'})
    assert result['failed']
    assert result['msg'].startswith('path: could not write %s: %s: another user can change it (writable by others'
                                    % (drop / 'textfile' / 'gpu_reclaim.prom', drop))
    assert os.listdir(str(target)) == []
