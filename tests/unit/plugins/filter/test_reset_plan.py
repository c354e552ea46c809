# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.reset_plan import FilterModule, reset_plan


def test_plans_from_a_holders_result_and_a_limit_given_as_text():
    result = {'gpus': [{'index': 0, 'memory_used_mib': 500}], 'holders': []}
    assert reset_plan(result, '64')['indices'] == [0]
    assert reset_plan(result, 500)['indices'] == []


@pytest.mark.parametrize('args, message', [
    (([], 64), 'reset_plan: the result of gpuops.reclaim.nvidia_holders must be a module result (a mapping); '
               'got: list'),
    (({}, 'lots'), "reset_plan: max_used_mib must be a number of MiB; got: 'lots'"),
    (({}, None), 'reset_plan: max_used_mib must be a number of MiB; got: None'),
])
def test_bad_input_names_the_argument(args, message):
    with pytest.raises(TypeError) as error:
        reset_plan(*args)
    assert str(error.value) == message


def test_registered():
    assert FilterModule().filters() == {'reset_plan': reset_plan}
