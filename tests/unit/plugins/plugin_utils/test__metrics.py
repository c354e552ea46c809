# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

import re

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import LEFT_REASONS, host_summary
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._metrics import MetricsError, render
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._outcome import FAILURE_REASONS

prometheus_parser = pytest.importorskip('prometheus_client.parser')

MIB = 1024 * 1024


def gpu_labels(index, **more):
    labels = {'gpu': str(index), 'uuid': 'GPU-%08d' % index}
    labels.update(more)
    return frozenset(labels.items())


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
    rest = dict((key, value) for key, value in values.items()
                if key[0] in ('gpu_reclaim_last_run_failure', 'gpu_reclaim_last_run_gpu_holders_left'))
    assert len(rest) == len(FAILURE_REASONS) + 2 * len(LEFT_REASONS)
    values = dict((key, value) for key, value in values.items() if key not in rest)
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
        ('gpu_reclaim_last_run_gpu_memory_used_before_bytes', gpu_labels(0)): float(88473 * MIB),
        ('gpu_reclaim_last_run_gpu_memory_used_before_bytes', gpu_labels(1)): float(88473 * MIB),
        ('gpu_reclaim_last_run_gpu_memory_used_after_bytes', gpu_labels(0)): 0.0,
        ('gpu_reclaim_last_run_gpu_memory_used_after_bytes', gpu_labels(1)): float(12 * MIB),
    }
    # The fixed label sets: every value written, zeros included.
    values.update(dict(((name, labels), 0.0) for (name, labels) in rest))
    assert rest == dict(((name, labels), 0.0) for (name, labels) in rest)


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


def test_a_stuck_gpu_is_the_failure_reason_and_its_memory_stays(summaries):
    values, dummy = samples(render(summaries.STUCK, 10))
    failure = dict((dict(labels)['reason'], value) for (name, labels), value in values.items()
                   if name == 'gpu_reclaim_last_run_failure')
    assert failure == {'holders_left': 0.0, 'survivors': 0.0, 'stuck_gpus': 1.0, 'reset': 0.0, 'other': 0.0}
    assert values[('gpu_reclaim_last_run_gpu_memory_used_after_bytes', gpu_labels(1))] == float(30720 * MIB)


def test_holders_left_are_counted_per_gpu_and_reason(summaries):
    gpus = [summaries.gpu(0, 1000, 1000, left_reasons=['survived', 'survived', 'protected']),
            summaries.gpu(1, 1000, 0)]
    summary = summaries.summary('gpu01', gpus, False, error='GPUs of gpu01 are not free.')
    values, dummy = samples(render(summary, 10))
    assert values[('gpu_reclaim_last_run_gpu_holders_left', gpu_labels(0, reason='survived'))] == 2.0
    assert values[('gpu_reclaim_last_run_gpu_holders_left', gpu_labels(0, reason='protected'))] == 1.0
    assert values[('gpu_reclaim_last_run_gpu_holders_left', gpu_labels(0, reason='skipped'))] == 0.0
    assert values[('gpu_reclaim_last_run_gpu_holders_left', gpu_labels(1, reason='survived'))] == 0.0
    assert values[('gpu_reclaim_last_run_failure', frozenset({('reason', 'survivors')}))] == 1.0
    assert values[('gpu_reclaim_last_run_failure', frozenset({('reason', 'holders_left')}))] == 1.0


def test_check_mode_has_no_after_series_and_no_failure(summaries):
    values, types = samples(render(summaries.CHECK, 10))
    assert 'gpu_reclaim_last_run_gpu_memory_used_after_bytes' not in types
    assert values[('gpu_reclaim_last_run_gpu_memory_used_before_bytes', gpu_labels(1))] == float(88473 * MIB)
    assert set(value for (name, labels), value in values.items() if name == 'gpu_reclaim_last_run_failure') == {0.0}


def test_a_gpu_without_a_uuid_has_an_empty_uuid_label(summaries):
    row = summaries.gpu(4, 10, 0)
    row['uuid'] = None
    values, dummy = samples(render(summaries.summary('gpu01', [row], True), 10))
    assert values[('gpu_reclaim_last_run_gpu_memory_used_before_bytes',
                   frozenset({('gpu', '4'), ('uuid', '')}))] == float(10 * MIB)


# What the modules return on a host whose stuck context on GPU 1 outlived the release, as the role passes
# them to host_summary: the text is rendered from the summary the role really keeps.
def busy_run():
    first_look = {'free': False, 'nvml_available': True, 'holders': [], 'gpus': [
        {'index': 0, 'uuid': 'GPU-2e6f1134-0000', 'memory_total_mib': 98304, 'memory_used_mib': 87858},
        {'index': 1, 'uuid': 'GPU-924b3510-0001', 'memory_total_mib': 98304, 'memory_used_mib': 61440}]}
    release = {'released': [{'pid': 65, 'gpus': [0], 'gpu_memory_mib': {'0': 87858}, 'title': 'VLLM::Worker_TP0',
                             'last_signal': 'SIGTERM', 'outcome': 'zombie'}],
               'protected': [{'pid': 2, 'gpus': [0, 1], 'exe': '/usr/bin/nvidia-persistenced'}],
               'survivors': [{'pid': 70, 'state': 'disk-sleep', 'wchan': 'uvm_spin_loop', 'last_signal': 'SIGKILL'}],
               'skipped_holders': [{'pid': 80, 'reason': 'outside the scope (users)'}],
               'supervisors': [], 'sources': []}
    proof = {'free': False, 'holders': [{'pid': 70, 'title': 'python3 train.py'}, {'pid': 80, 'title': 'job'}],
             'gpus': [{'index': 0, 'memory_used_mib': 0, 'free': True, 'holder_pids': []},
                      {'index': 1, 'memory_used_mib': 61440, 'free': False, 'holder_pids': [70, 80]}]}
    return {'host': 'gpu07', 'check_mode': False, 'max_used_mib': 64, 'first_look': first_look,
            'free_at_start': False, 'release': release, 'proof': proof, 'stopped_units': ['vllm.service'],
            'stopped_containers': [], 'reset_gpus': [], 'reset_errors': [],
            'error': 'GPUs of gpu07 are not free.', 'stages': {'release': 10.5, 'prove': 30.1},
            'start': 1000.0, 'now': 1041.5}


def test_the_summary_of_a_failed_run_renders_what_stayed():
    values, dummy = samples(render(host_summary(busy_run()), 1041.5))
    gpu1 = {'gpu': '1', 'uuid': 'GPU-924b3510-0001'}
    assert values[('gpu_reclaim_last_run_gpu_memory_used_before_bytes', frozenset(gpu1.items()))] == 61440.0 * MIB
    assert values[('gpu_reclaim_last_run_gpu_memory_used_after_bytes', frozenset(gpu1.items()))] == 61440.0 * MIB
    left = dict((dict(labels)['reason'], value) for (name, labels), value in values.items()
                if name == 'gpu_reclaim_last_run_gpu_holders_left' and dict(labels)['gpu'] == '1' and value)
    assert left == {'unkillable': 1.0, 'skipped': 1.0}
    failure = sorted(dict(labels)['reason'] for (name, labels), value in values.items()
                     if name == 'gpu_reclaim_last_run_failure' and value)
    assert failure == ['holders_left', 'survivors']
    assert values[('gpu_reclaim_last_run_success', frozenset())] == 0.0
    assert values[('gpu_reclaim_last_run_gpus_freed', frozenset())] == 1.0


METRIC_NAME = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*$')


@pytest.mark.parametrize('which', ['ORPHANS', 'FREE', 'STUCK', 'CHECK', 'busy'])
def test_the_text_follows_the_textfile_collector_conventions(summaries, which):
    """HELP then TYPE before a family's samples, each family once, base units last in the name, no sample twice."""
    summary = host_summary(busy_run()) if which == 'busy' else getattr(summaries, which)
    text = render(summary, 1041.5)
    assert text.endswith('\n') and '\n\n' not in text
    seen_families, seen_samples, current = set(), set(), None
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith('# HELP '):
            name = line.split(' ')[2]
            assert METRIC_NAME.match(name) and name not in seen_families
            assert lines[number + 1] == '# TYPE %s gauge' % name
            seen_families.add(name)
            current = name
        elif line.startswith('# TYPE '):
            assert line.split(' ')[2] == current
        else:
            name = re.split(r'[{ ]', line, maxsplit=1)[0]
            assert name == current, line
            assert line.rsplit(' ', 1)[0] not in seen_samples, line
            seen_samples.add(line.rsplit(' ', 1)[0])
    for name in seen_families:
        assert name.startswith('gpu_reclaim_last_run_')
        if 'memory' in name or name.endswith('_seconds'):
            assert name.endswith(('_bytes', '_seconds')), name
    values, types = samples(text)
    assert set(types) == seen_families
    assert len(values) == len(seen_samples)
