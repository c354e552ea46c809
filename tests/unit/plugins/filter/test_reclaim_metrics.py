# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter.reclaim_metrics import FilterModule, reclaim_metrics


def test_the_filter_is_registered():
    assert FilterModule().filters() == {'reclaim_metrics': reclaim_metrics}


def test_renders_one_host_s_summary(summaries):
    text = reclaim_metrics(summaries.ORPHANS, 1767225600)
    assert 'gpu_reclaim_last_run_success 1\n' in text
    assert 'gpu_reclaim_last_run_timestamp_seconds 1767225600.0\n' in text


@pytest.mark.parametrize('summary, timestamp, error, message', [
    ([], 1, TypeError, 'reclaim_metrics expects the role summary of one host (a mapping); got: list'),
    ({}, 'soon', ValueError, "reclaim_metrics: timestamp must be a number of seconds; got: 'soon'"),
])
def test_bad_input(summary, timestamp, error, message):
    with pytest.raises(error) as caught:
        reclaim_metrics(summary, timestamp)
    assert str(caught.value) == message
