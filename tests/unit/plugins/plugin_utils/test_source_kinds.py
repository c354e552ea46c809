# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A kind of source added to the registry alone is counted, named and measured on the controller with no change
there: the outcome, the metrics and the summary's text take every kind from ``_sources.registry.KINDS``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import registry
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources.kind import SourceKind
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._metrics import render
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._outcome import fleet_outcome, host_outcome
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._summary_text import fleet_lines, summary_lines

# A batch job that a scheduler would start again, as one new file of _sources/ would declare it.
SLURM = SourceKind('slurm', label='Slurm job', metric='slurm_job', leftover=lambda item: None,
                   stop=lambda item, run, stop_seconds: (0, ''), row_name=lambda item: 'job %s' % item.get('job'),
                   role_stopped=None, older_list=None)


@pytest.fixture
def slurm(monkeypatch):
    monkeypatch.setitem(registry.KINDS, SLURM.name, SLURM)
    return SLURM


@pytest.fixture
def with_jobs(summaries):
    summary = summaries.ORPHANS
    summary['sources'] += [{'kind': 'slurm', 'job': 4711, 'action': 'stopped'},
                           {'kind': 'slurm', 'job': 4712, 'action': 'left alone'}]
    return summary


def sources_stopped_lines(text):
    return [line for line in text.splitlines() if line.startswith('gpu_reclaim_last_run_sources_stopped{')]


def test_the_outcome_counts_a_new_kind_by_its_metric_name(slurm, with_jobs):
    assert host_outcome('orphans', with_jobs)['sources_stopped'] == \
        {'systemd_unit': 2, 'container': 0, 'pod': 0, 'parent': 1, 'slurm_job': 1}
    assert host_outcome('gone', None)['sources_stopped']['slurm_job'] == 0


def test_the_metrics_write_a_new_kind_after_the_others(slurm, with_jobs):
    assert sources_stopped_lines(render(with_jobs, 1767225600.5)) == [
        'gpu_reclaim_last_run_sources_stopped{kind="systemd_unit"} 2',
        'gpu_reclaim_last_run_sources_stopped{kind="container"} 0',
        'gpu_reclaim_last_run_sources_stopped{kind="pod"} 0',
        'gpu_reclaim_last_run_sources_stopped{kind="parent"} 1',
        'gpu_reclaim_last_run_sources_stopped{kind="slurm_job"} 1',
    ]


def test_the_metrics_write_a_new_kind_at_zero_when_none_was_seen(slurm, summaries):
    assert sources_stopped_lines(render(summaries.FREE, 1767225600.5))[-1] == \
        'gpu_reclaim_last_run_sources_stopped{kind="slurm_job"} 0'
    assert sources_stopped_lines(render({}, 1767225600.5))[-1] == \
        'gpu_reclaim_last_run_sources_stopped{kind="slurm_job"} 0'


def test_the_summary_names_a_new_kind_by_its_row_name(slurm, with_jobs):
    lines = summary_lines(with_jobs)
    assert 'source slurm job 4711: stopped' in lines
    assert 'source slurm job 4712: left alone' in lines
    assert 'source systemd trainer.service: stopped' in lines


def test_the_fleet_rolls_up_a_host_with_a_new_kind(slurm, with_jobs):
    fleet = fleet_outcome({'orphans': with_jobs})
    assert fleet['hosts'][0]['sources_stopped']['slurm_job'] == 1
    assert fleet_lines(fleet)[0].startswith('fleet: 1 host(s), 1 free, 0 failed')


def test_without_the_kind_in_the_registry_its_entries_count_for_nothing(with_jobs):
    assert 'slurm_job' not in host_outcome('orphans', with_jobs)['sources_stopped']
    assert 'source slurm -: stopped' in summary_lines(with_jobs)
