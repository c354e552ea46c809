# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.failure_reason import FilterModule, failure_reason


def test_reads_a_failed_result():
    assert failure_reason({'uid': 5}, 'gpu07', needs_root=True).startswith('gpu07: the role runs as uid 5')
    assert FilterModule().filters()['failure_reason'] is failure_reason


@pytest.mark.parametrize('args, message', [
    (('failed', 'gpu07'), 'failure_reason: the failed result must be a module result (a mapping); got: str'),
    (({}, 'gpu07', '', '', 'yes'), "failure_reason: needs_root must be a boolean; got: 'yes'"),
])
def test_bad_input_names_the_argument(args, message):
    with pytest.raises(TypeError) as error:
        failure_reason(*args)
    assert str(error.value) == message
