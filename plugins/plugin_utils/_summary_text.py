# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The text the role prints: the per-host summary's lines and the fleet's.

Every line is worked out here from the summary (``_host_summary.host_summary``)
or the fleet roll-up (``_outcome.fleet_outcome``); the role shows them as they
come. No line ends in a space, so that result_format=yaml shows the text as one
block. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.module_utils._base.text import ELLIPSIS, truncate
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources.registry import KINDS

# The per-GPU row: index, UUID, memory before and after, what was released, what was left.
ROW = '%3s  %-10s %10s %10s  %-34s %s'
STAGES = ('preflight', 'stop_units', 'release', 'reset', 'prove')
FLEET_HEADER = '%-24s %-8s %5s %6s %14s %9s %8s'
FLEET_ROW = '%-24s %-8s %5d %6d %14.1f %9d %8s'


def _dash(value):
    return '-' if value is None else value


def _join(values, separator=', '):
    return separator.join(str(value) for value in values or [])


def source_label(source):
    """What names a source in the summary, as its kind's ``row_name`` says (``_sources.registry.KINDS``): its
    unit, its pod, a parent's pid and title, a container's id; its pid for a kind the registry does not know."""
    kind = KINDS.get(source.get('kind'))
    if kind is None:
        return str(_dash(source.get('pid')))
    return kind.row_name(source)


def headline(summary):
    """The summary's first line: counts, what the run did and the verdict."""
    check = summary.get('check_mode')
    text = '%s: %d GPU(s), %s %d, survivors %d' % (
        summary.get('host'), len(summary.get('gpus') or []), 'would release' if check else 'released',
        len(summary.get('released') or []), len(summary.get('survivors') or []))
    if summary.get('reset_gpus'):
        text += ', reset GPU(s) ' + _join(summary['reset_gpus'], ',')
    if check:
        text += ' (check mode: nothing was signalled)'
    if summary.get('kept_units'):
        text += ', kept running: ' + _join(summary['kept_units'])
    if summary.get('free') is not None:
        text += ', free' if summary['free'] else ', NOT FREE'
    return '%s in %s s' % (text, summary.get('total_seconds'))


def gpu_row(gpu):
    """One GPU's row of the table, as ROW lays it out."""
    return (ROW % (gpu.get('index'), (gpu.get('uuid') or '')[:8] + ELLIPSIS, gpu.get('memory_used_mib_before'),
                   _dash(gpu.get('memory_used_mib_after')), truncate(_join(gpu.get('released_names')), 34) or '-',
                   _join(gpu.get('left'), '; ') or '-')).rstrip()


def stages_line(summary):
    """Seconds per stage, ``-`` for a stage that did not run, and the settle window when there was one."""
    seconds = summary.get('stage_seconds') or {}
    text = 'stages (s): ' + ' | '.join('%s %s' % (name, seconds.get(name, '-')) for name in STAGES)
    if summary.get('settle_seconds'):
        text += ' | settle %s' % summary['settle_seconds']
    return text


def summary_lines(summary):
    """The per-host summary as the role shows it, one string per line."""
    check = summary.get('check_mode')
    lines = [headline(summary),
             (ROW % ('GPU', 'UUID', 'BEFORE MiB', 'AFTER MiB', 'WOULD RELEASE' if check else 'RELEASED',
                     'LEFT')).rstrip()]
    lines.extend(gpu_row(gpu) for gpu in summary.get('gpus') or [])
    if summary.get('protected_names'):
        lines.append('protected, never signalled: ' + _join(summary['protected_names']))
    if summary.get('kept_units'):
        lines.append('kept running: %s (pid %s): they alone hold the selected GPUs'
                     % (_join(summary['kept_units']), _join(summary.get('kept_pids'))))
    for name, left in (summary.get('left_behind') or {}).items():
        lines.append('%s %s; %d process(es) of it %s a GPU%s' % (
            name, 'would be stopped' if check else 'stopped', len(left), 'hold' if check else 'still held',
            (': ' + _join(holder.get('title') for holder in left)) if left else ''))
    for source in summary.get('sources') or []:
        lines.append('source %s %s: %s' % (source.get('kind'), source_label(source), source.get('action')))
    lines.append(stages_line(summary))
    lines.extend('reset: %s' % text for text in summary.get('reset_errors') or [])
    lines.extend('warning: %s' % text for text in list(summary.get('unit_warnings') or [])
                 + list(summary.get('filter_warnings') or []))
    return lines


def summary_view(summary, result_format='json'):
    """What the role's last task shows: ``passed`` (no error), ``error`` and ``message``.

    ``message`` is the summary's text, one block with result_format=yaml, else one string per line so that
    each line reads as a row; empty for a host that stopped before its summary.
    """
    summary = summary or {}
    lines = summary_lines(summary) if 'host' in summary else []
    error = summary.get('error') or ''
    return {'passed': not error, 'error': error,
            'message': '\n'.join(lines) if result_format == 'yaml' else lines}


def fleet_lines(fleet):
    """The fleet roll-up (``_outcome.fleet_outcome``) as the role shows it, one string per line."""
    head = 'fleet: %s host(s), %d free, ' % (fleet.get('host_count'), len(fleet.get('free') or []))
    if fleet.get('kept'):
        head += '%d kept running, ' % len(fleet['kept'])
    head += '%d failed' % len(fleet.get('failed') or [])
    if fleet.get('unproven'):
        head += ', %d not proven (check mode)' % len(fleet['unproven'])
    head += '; %s of %s GPU(s) freed, %.1f GiB reclaimed, %s holder(s) released' % (
        fleet.get('gpus_freed'), fleet.get('gpus'), (fleet.get('memory_reclaimed_mib') or 0) / 1024.0,
        fleet.get('released'))
    lines = [head, FLEET_HEADER % ('HOST', 'STATE', 'GPUS', 'FREED', 'RECLAIMED GiB', 'RELEASED', 'SECONDS')]
    for host in fleet.get('hosts') or []:
        lines.append(FLEET_ROW % (host['host'], host['state'], host['gpus'], host['gpus_freed'],
                                  host['memory_reclaimed_mib'] / 1024.0, host['released'],
                                  _dash(host.get('duration_seconds'))))
    lines.extend('failed %s: %s' % (failed.get('host'), failed.get('why')) for failed in fleet.get('failed') or [])
    return lines
