# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.unit_patterns import FilterModule, unit_patterns, unit_warnings


def test_sorts_the_listing():
    listing = 'nvidia-persistenced.service loaded active running x\nvllm-sim.service loaded active running y\n'
    assert unit_patterns(listing, ['nvidia-*', 'vllm-*', 'ghost']) == {
        'units': ['nvidia-persistenced.service', 'vllm-sim.service'],
        'protected': ['nvidia-persistenced.service'],
        'unprotected': ['vllm-sim.service'],
        'running': ['vllm-sim.service'],
        'unmatched': ['ghost'],
        'nearest': {'ghost': None},
    }


@pytest.mark.parametrize('args, message', [
    ((['not text'], ['vllm']), 'unit_patterns expects the text systemctl printed; got: list'),
    (('', 'vllm-*'), "unit_patterns: patterns must be a list of unit names or globs; got: 'vllm-*'"),
    (('', ['vllm'], [3]), 'unit_patterns: protect_units must be a list of unit names or globs; got: [3]'),
    (('', ['vllm'], [], 'x'), "unit_patterns: unprotect must be a list of unit names or globs; got: 'x'"),
])
def test_bad_input_names_the_argument(args, message):
    with pytest.raises(TypeError) as error:
        unit_patterns(*args)
    assert str(error.value) == message


def test_registered():
    assert FilterModule().filters() == {'unit_patterns': unit_patterns, 'unit_warnings': unit_warnings}
