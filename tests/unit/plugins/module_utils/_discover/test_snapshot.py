# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import snapshot as _snapshot


@pytest.mark.parametrize('mib, text', [(0, '0 MiB'), (615, '615 MiB'), (1024, '1 GiB'), (1536, '1.5 GiB'),
                                       (786432, '768 GiB')])
def test_format_mib(mib, text):
    assert _snapshot.format_mib(mib) == text


def test_the_summary_counts_the_selected_gpus_only():
    holders = [{'kind': 'compute', 'gpu_memory_mib': {'0': 1024, '1': 512}},
               {'kind': 'client', 'gpu_memory_mib': {}}]
    contexts = [{'gpu': 0, 'memory_mib': 512, 'keepers': [7]}, {'gpu': 0, 'memory_mib': 100, 'keepers': []}]
    snapshot = _snapshot.Snapshot([{'index': 0}], holders, [3, 1], [], True, contexts=contexts)
    assert snapshot.summary() == '1 GPU, 2 holders (1 compute, 1 client), 1.5 GiB held'
    assert snapshot.unreadable == 2 and snapshot.unreadable_pids == [1, 3]
