# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._metrics import MetricsError, render

prometheus_parser = pytest.importorskip('prometheus_client.parser')


def samples(text):
    """{(name, frozenset(labels)): value} and {name: type}, as Prometheus' own parser reads the text."""
    values, types = {}, {}
    for family in prometheus_parser.text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            values[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return values, types


def test_a_released_host(summaries):
    values, types = samples(render(summaries.ORPHANS, 1767225600.5))
    assert set(types.values()) == {'gauge'}
    assert values == {
        ('gpu_reclaim_last_run_timestamp_seconds', frozenset()): 1767225600.5,
        ('gpu_reclaim_last_run_success', frozenset()): 1.0,
        ('gpu_reclaim_last_run_gpus_freed', frozenset()): 2.0,
        ('gpu_reclaim_last_run_memory_reclaimed_bytes', frozenset()): float((88473 + 88461) * 1024 * 1024),
        ('gpu_reclaim_last_run_holders_released', frozenset({('signal', 'SIGTERM')})): 2.0,
        ('gpu_reclaim_last_run_holders_released', frozenset({('signal', 'SIGKILL')})): 1.0,
        ('gpu_reclaim_last_run_sources_stopped', frozenset({('kind', 'systemd_unit')})): 2.0,
        ('gpu_reclaim_last_run_sources_stopped', frozenset({('kind', 'container')})): 0.0,
        ('gpu_reclaim_last_run_sources_stopped', frozenset({('kind', 'pod')})): 0.0,
        ('gpu_reclaim_last_run_sources_stopped', frozenset({('kind', 'parent')})): 1.0,
        ('gpu_reclaim_last_run_duration_seconds', frozenset()): 4.25,
    }


def test_a_failed_host_reports_no_success(summaries):
    values, dummy = samples(render(summaries.STUCK, 1767225600))
    assert values[('gpu_reclaim_last_run_success', frozenset())] == 0.0
    assert values[('gpu_reclaim_last_run_gpus_freed', frozenset())] == 0.0
    # Every series is there even when nothing was signalled.
    assert values[('gpu_reclaim_last_run_holders_released', frozenset({('signal', 'SIGKILL')}))] == 0.0


def test_a_host_without_a_summary_reports_a_failed_run():
    values, dummy = samples(render({}, 10, host='gpu09'))
    assert values[('gpu_reclaim_last_run_success', frozenset())] == 0.0
    assert values[('gpu_reclaim_last_run_duration_seconds', frozenset())] == 0.0


def test_a_signal_beyond_the_usual_two_gets_its_own_series(summaries):
    summary = summaries.summary('gpu01', [summaries.gpu(0, 1000, 0)], True,
                                released=[summaries.holder(5, 'SIGINT')])
    values, dummy = samples(render(summary, 10))
    assert values[('gpu_reclaim_last_run_holders_released', frozenset({('signal', 'SIGINT')}))] == 1.0


def test_every_line_is_help_type_or_a_sample_and_the_text_ends_with_a_newline(summaries):
    text = render(summaries.FREE, 10)
    assert text.endswith('\n')
    for line in text.splitlines():
        assert line.startswith(('# HELP gpu_reclaim_last_run_', '# TYPE gpu_reclaim_last_run_',
                                'gpu_reclaim_last_run_'))


@pytest.mark.parametrize('timestamp', [None, 'soon'])
def test_a_timestamp_that_is_not_a_number(summaries, timestamp):
    with pytest.raises(MetricsError, match='timestamp must be a number of seconds; got: '):
        render(summaries.FREE, timestamp)
