# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_assert_free's flow (``_flows.assert_free``): its input checks and the parent's name it reports.

The whole flow runs in tests/unit/plugins/modules/test_gpu_assert_free.py, through the module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host import procfs as _procfs
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import assert_free as _prove
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import Failure


def params(**extra):
    values = {'max_used_mib': None, 'max_used_percent': None, 'timeout_seconds': 0, 'poll_interval': 0.05,
              'settle_seconds': 0, 'nvml_timeout': 5, 'left_alone': None}
    values.update(extra)
    return values


def test_good_input_is_converted():
    values = params(timeout_seconds='2.5', settle_seconds=1)
    _prove.check_input(values)
    assert values['timeout_seconds'] == 2.5 and values['settle_seconds'] == 1.0


@pytest.mark.parametrize('values, message', [
    ({'max_used_mib': -1}, 'max_used_mib: must be 0 or more; got: -1'),
    ({'max_used_percent': 101.0}, 'max_used_percent: must be from 0 to 100; got: 101.0'),
    ({'timeout_seconds': 3601}, 'timeout_seconds: must be a number of seconds from 0 to 3600; got: 3601'),
    ({'poll_interval': 0.001}, 'poll_interval: must be a number of seconds from 0.005 to 5; got: 0.001'),
    ({'settle_seconds': 601}, 'settle_seconds: must be a number of seconds from 0 to 600; got: 601'),
    ({'settle_seconds': True}, 'settle_seconds'),
])
def test_bad_input_fails_naming_the_option(values, message):
    with pytest.raises(Failure) as caught:
        _prove.check_input(params(**values))
    assert message in str(caught.value)


def test_parent_title_is_the_command_name():
    assert _prove.parent_title(os.getppid()) == _procfs.read_stat(os.getppid())['comm']
    assert _prove.parent_title(None) is None
    assert _prove.parent_title(2 ** 22 + 7) is None
