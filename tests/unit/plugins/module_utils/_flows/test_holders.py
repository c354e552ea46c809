# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import holders as _holders_flow
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import module_harness as _discovery
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import Failure


class Snapshot:
    gpus = [{'index': 0}]
    holders = [{'pid': 42}]
    nvml_available = True
    driver_version = '580.1'
    unreadable = 2

    def summary(self):
        return '1 GPU, 1 holder'


def test_one_look_is_the_result(monkeypatch):
    seen = []

    def look(host, values, without_nvml, select=True, session=None):
        seen.append((without_nvml, select))
        return _discovery.Look(None, [0], Snapshot())
    monkeypatch.setattr(_holders_flow, 'look', look)
    result, failed = _holders_flow.holders(None, {'nvml_timeout': 5.0, 'gpus': []})
    assert failed is False
    assert result == dict(changed=False, msg='1 GPU, 1 holder', gpus=[{'index': 0}], holders=[{'pid': 42}],
                          nvml_available=True, driver_version='580.1', unreadable_processes=2)
    assert seen == [(_holders_flow.WITHOUT_NVML, True)]


def test_bad_input_fails_before_the_look(monkeypatch):
    monkeypatch.setattr(_holders_flow, 'look', lambda *args, **kwargs: pytest.fail('looked'))
    with pytest.raises(Failure, match='nvml_timeout'):
        _holders_flow.holders(None, {'nvml_timeout': True, 'gpus': []})
