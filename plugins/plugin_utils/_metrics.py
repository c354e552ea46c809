# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The last run of the role on a host, in the Prometheus text format, for node_exporter's textfile collector.

Names follow Prometheus conventions: one prefix, base units in the name (seconds, bytes), gauges only (each
value describes the last run, so none of them only grows), a HELP and a TYPE line before each family's samples.
A series with a fixed set of labels (signals, source kinds, reasons) is written for every label value, zeros
included, so that a query or an alert finds it after any run. Per GPU, the labels are ``gpu`` (NVML's index)
and ``uuid``. Controller side only; the module metrics_textfile writes the text atomically.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import LEFT_REASONS
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._outcome import (
    FAILURE_REASONS,
    MIB,
    SUCCEEDED,
    host_outcome,
    source_metrics,
)

PREFIX = 'gpu_reclaim_last_run_'
# Always written, so that a dashboard finds each series even after a run that signalled nothing.
SIGNALS = ('SIGTERM', 'SIGKILL')

HELP = {
    'timestamp_seconds': 'Unix time at which the last gpu_reclaim run on this host ended.',
    'success': ('1 when the last gpu_reclaim run proved the selected GPUs free, or found them held only by the '
                'units kept running, else 0.'),
    'gpus_freed': 'GPUs busy at the first look that the last gpu_reclaim run proved free.',
    'memory_reclaimed_bytes': 'GPU memory that came back during the last gpu_reclaim run.',
    'holders_released': 'Holder processes the last gpu_reclaim run released, by the last signal each was sent.',
    'sources_stopped': 'What would have restarted holders that the last gpu_reclaim run stopped, by kind.',
    'duration_seconds': 'How long the last gpu_reclaim run took on this host.',
    'failure': ('1 for each reason the last gpu_reclaim run failed: %s; all 0 after a run that succeeded or '
                'proved nothing.' % ', '.join('%s (%s)' % item for item in FAILURE_REASONS.items())),
    'gpu_memory_used_before_bytes': ('GPU memory used (reserved memory excluded) at the first look of the last '
                                     'gpu_reclaim run, per GPU.'),
    'gpu_memory_used_after_bytes': ('GPU memory used (reserved memory excluded) at the proof of the last gpu_reclaim '
                                    'run, per GPU; absent when nothing was proven (check mode, a failed stage).'),
    'gpu_holders_left': ('Processes still holding the GPU after the last gpu_reclaim run, per GPU, by reason: '
                         'unkillable, survived, skipped, protected, kept, came_back, not_released.'),
}


class MetricsError(ValueError):
    pass


def _label_value(value):
    return str(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _number(value):
    if isinstance(value, bool):
        return '1' if value else '0'
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _family(lines, name, samples):
    """Append one gauge: HELP, TYPE, then each (labels, value) sample; nothing when it has no sample."""
    if not samples:
        return
    full = PREFIX + name
    lines.append('# HELP %s %s' % (full, HELP[name]))
    lines.append('# TYPE %s gauge' % full)
    for labels, value in samples:
        text = ','.join('%s="%s"' % (key, _label_value(val)) for key, val in labels)
        lines.append('%s%s %s' % (full, '{%s}' % text if text else '', _number(value)))


def _gpu_labels(row):
    return (('gpu', row.get('index')), ('uuid', row.get('uuid') or ''))


def _gpu_families(lines, rows):
    """Per GPU: memory used before and after (MiB in the summary, bytes here), and the holders left by reason."""
    _family(lines, 'gpu_memory_used_before_bytes',
            [(_gpu_labels(row), row['memory_used_mib_before'] * MIB)
             for row in rows if row.get('memory_used_mib_before') is not None])
    _family(lines, 'gpu_memory_used_after_bytes',
            [(_gpu_labels(row), row['memory_used_mib_after'] * MIB)
             for row in rows if row.get('memory_used_mib_after') is not None])
    samples = []
    for row in rows:
        reasons = list(row.get('left_reasons') or [])
        samples.extend((_gpu_labels(row) + (('reason', reason),), reasons.count(reason)) for reason in LEFT_REASONS)
    _family(lines, 'gpu_holders_left', samples)


def render(summary, timestamp, host=None):
    """The textfile content for one host's summary, run ending at ``timestamp`` (Unix seconds)."""
    try:
        timestamp = float(timestamp)
    except (TypeError, ValueError):
        raise MetricsError('timestamp must be a number of seconds; got: %r' % (timestamp,))
    outcome = host_outcome(host or (summary or {}).get('host') or '', summary)
    by_signal = dict((signal, 0) for signal in SIGNALS)
    by_signal.update(outcome['released_by_signal'])
    lines = []
    _family(lines, 'timestamp_seconds', [((), timestamp)])
    _family(lines, 'success', [((), outcome['state'] in SUCCEEDED)])
    _family(lines, 'gpus_freed', [((), outcome['gpus_freed'])])
    _family(lines, 'memory_reclaimed_bytes', [((), outcome['memory_reclaimed_mib'] * MIB)])
    _family(lines, 'holders_released', [((('signal', signal),), by_signal[signal]) for signal in sorted(by_signal)])
    _family(lines, 'sources_stopped', [((('kind', kind),), outcome['sources_stopped'].get(kind, 0))
                                       for kind in source_metrics()])
    _family(lines, 'duration_seconds', [((), outcome['duration_seconds'] or 0.0)])
    _family(lines, 'failure', [((('reason', reason),), reason in outcome['failure_reasons'])
                               for reason in FAILURE_REASONS])
    _gpu_families(lines, (summary or {}).get('gpus') or [])
    return '\n'.join(lines) + '\n'
