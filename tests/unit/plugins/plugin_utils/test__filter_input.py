# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import names, records, result


def test_none_is_empty_and_tuples_are_lists():
    assert names('f', 'units', None) == []
    assert names('f', 'units', ('a.service',)) == ['a.service']
    assert records('f', 'gpus', None) == []
    assert records('f', 'gpus', ({'index': 0},)) == [{'index': 0}]
    assert result('f', 'release', None) == {}


@pytest.mark.parametrize('call, message', [
    (lambda: names('f', 'units', 'a.service'), "f: units must be a list of unit names; got: 'a.service'"),
    (lambda: names('f', 'ids', [1], 'container ids'), 'f: ids must be a list of container ids; got: [1]'),
    (lambda: records('f', 'gpus', [0]), 'f: gpus must be a list of records; got: [0]'),
    (lambda: result('f', 'release', 'ok'), 'f: release must be a module result (a mapping); got: str'),
])
def test_bad_input_names_the_filter_the_argument_and_the_value(call, message):
    with pytest.raises(TypeError) as error:
        call()
    assert str(error.value) == message
