# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._failure_reason import failure_reason

PY = '/opt/gpuops-reclaim/bin/python'
VENV = '/opt/gpuops-reclaim'


def reason(failed, needs_root=True):
    return failure_reason(failed, 'gpu07', PY, VENV, needs_root)


def test_not_root_where_root_is_needed():
    text = reason({'msg': 'require_root: the module runs as uid 1001, not root', 'uid': 1001})
    assert text.startswith('gpu07: the role runs as uid 1001, not root, and needs root to release')
    assert 'Run the playbook with -b (--become)' in text


def test_not_root_is_no_reason_when_root_is_not_needed():
    assert reason({'msg': 'GPU 0 busy', 'uid': 1001}, needs_root=False) == 'GPU 0 busy'


def test_a_missing_library_is_named_with_where_to_install_it():
    psutil = reason({'msg': 'Failed to import the required Python library (psutil) on gpu07\'s Python', 'uid': 0})
    assert psutil.startswith('gpu07: the Python library psutil is missing from the target\'s Python (%s)' % PY)
    assert 'into the virtualenv %s' % VENV in psutil and 'require_nvml' not in psutil
    nvml = reason({'msg': 'Failed to import the required Python library (nvidia-ml-py) on x', 'uid': 0})
    assert nvml.endswith('set gpu_reclaim_require_nvml: false to go on without NVML.')


def test_nvml_that_cannot_be_used():
    text = reason({'msg': 'NVML cannot be used and require_nvml is true: Driver Not Loaded', 'uid': 0,
                   'nvml_available': False})
    assert text.startswith('gpu07: NVML cannot be used, so GPU memory cannot be read')
    assert 'require_nvml is true: Driver Not Loaded Only for a host whose driver is hung' in text


def test_any_other_failure_keeps_its_message():
    assert reason({'msg': 'GPUs of gpu07 are not free.', 'nvml_available': True}) == 'GPUs of gpu07 are not free.'
    assert reason({}) == 'gpu07: a stage failed; see the task above'
