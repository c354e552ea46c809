# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.protected_units import FilterModule, protected_units

# What `systemctl list-units -- 'nvidia-*'` finds on a GPU host.
NVIDIA_STAR = ['nvidia-persistenced.service', 'nvidia-dcgm.service', 'nvidia-fabricmanager.service',
               'nvidia-vllm.service']


def test_a_glob_over_nvidia_units_keeps_the_daemons_protected():
    assert protected_units(NVIDIA_STAR) == NVIDIA_STAR[:3]


def test_protect_units_and_unprotect():
    assert protected_units(NVIDIA_STAR, ['nvidia-vllm*']) == NVIDIA_STAR
    assert protected_units(NVIDIA_STAR, [], ['nvidia-dcgm.service']) == [NVIDIA_STAR[0], NVIDIA_STAR[2]]


@pytest.mark.parametrize('args', [('vllm.service',), (['a.service'], 'b.service'), (['a.service'], [], [3])])
def test_bad_input_names_the_argument(args):
    with pytest.raises(TypeError, match='protected_units: '):
        protected_units(*args)


def test_registered():
    assert FilterModule().filters()['protected_units'] is protected_units
