# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._base.deadline import (
    DeadlineExceeded,
    call_with_deadline,
)


def test_returns_the_result():
    assert call_with_deadline(lambda a, b=0: a + b, 1.0, 2, b=3) == 5


def test_reraises_the_error_of_the_call():
    def broken():
        raise KeyError('boom')

    with pytest.raises(KeyError, match='boom'):
        call_with_deadline(broken, 1.0)


def test_overrun_raises_within_the_deadline():
    release = threading.Event()

    def hangs():
        release.wait(10)

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as info:
        call_with_deadline(hangs, 0.1)
    elapsed = time.monotonic() - started
    release.set()
    assert 0.09 <= elapsed < 1.0
    assert info.value.what == 'hangs'
    assert 'hangs did not return within 0.1 seconds' == str(info.value)


def test_none_timeout_calls_directly_in_this_thread():
    assert call_with_deadline(threading.current_thread, None) is threading.current_thread()


def test_runs_in_a_daemon_thread():
    thread = call_with_deadline(threading.current_thread, 1.0)
    assert thread is not threading.current_thread()
    assert thread.daemon


@pytest.mark.parametrize('timeout', [0, -1])
def test_rejects_a_timeout_that_is_not_positive(timeout):
    with pytest.raises(ValueError, match='timeout must be greater than 0'):
        call_with_deadline(lambda: None, timeout)
