# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._outcome import (
    FAILED,
    FREE,
    KEPT,
    NO_RESULT,
    UNPROVEN,
    failure_reasons,
    fleet_outcome,
    gpu_freed,
    host_outcome,
    memory_reclaimed_mib,
    one_line,
    released_by_signal,
)


@pytest.mark.parametrize('before, after, limit, expected', [
    (88473, 0, 64, True),
    (88473, 64, 64, True),
    (88473, 65, 64, False),
    (64, 0, 64, False),       # not busy at the first look: nothing to free
    (0, 0, 64, False),
    (88473, None, 64, False),  # no proof (check mode)
    (None, 0, 64, False),
])
def test_gpu_freed(before, after, limit, expected):
    row = {'memory_used_mib_before': before, 'memory_used_mib_after': after}
    assert gpu_freed(row, limit) is expected


@pytest.mark.parametrize('before, after, expected', [
    (88473, 12, 88461),
    (100, 300, 0),  # memory grew: nothing reclaimed, never negative
    (88473, None, 0),
    (None, None, 0),
])
def test_memory_reclaimed_mib(before, after, expected):
    assert memory_reclaimed_mib({'memory_used_mib_before': before, 'memory_used_mib_after': after}) == expected


@pytest.mark.parametrize('text, limit, expected', [
    ('first\nsecond', 200, 'first'),
    ('\n   \n  GPU 1   busy:  30720 MiB\nNext', 200, 'GPU 1 busy: 30720 MiB'),
    ('', 200, ''),
    (None, 200, ''),
    ('x' * 30, 10, 'x' * 9 + '\u2026'),
])
def test_one_line(text, limit, expected):
    assert one_line(text, limit) == expected


def test_released_by_signal_counts_the_last_signal_and_ignores_plans_and_unsignalled(summaries):
    assert released_by_signal(summaries.ORPHANS['released']) == {'SIGTERM': 2, 'SIGKILL': 1}
    assert released_by_signal(summaries.CHECK['released']) == {}
    assert released_by_signal(None) == {}


def test_a_released_host(summaries):
    outcome = host_outcome('gpu07', summaries.ORPHANS)
    assert outcome == {
        'host': 'gpu07', 'state': FREE, 'why': '', 'failure_reasons': [], 'check_mode': False, 'gpus': 2, 'gpus_freed': 2,
        'memory_reclaimed_mib': 88473 + 88461, 'released': 3, 'released_by_signal': {'SIGTERM': 2, 'SIGKILL': 1},
        'sources_stopped': {'systemd_unit': 2, 'container': 0, 'pod': 0, 'parent': 1}, 'duration_seconds': 4.25,
    }


def test_a_host_free_from_the_start_freed_nothing(summaries):
    outcome = host_outcome('free', summaries.FREE)
    assert (outcome['state'], outcome['gpus_freed'], outcome['memory_reclaimed_mib'], outcome['released']) == \
        (FREE, 0, 0, 0)


def test_a_failed_host_says_why_in_one_line(summaries):
    outcome = host_outcome('stuck', summaries.STUCK)
    assert outcome['state'] == FAILED
    assert outcome['why'] == 'GPUs of stuck are not free. GPU 1 (GPU-00000001) busy: 30720 MiB used, no holder'
    assert outcome['gpus_freed'] == 0


def test_a_host_not_free_without_an_error_message_still_fails(summaries):
    unproven = dict(summaries.STUCK)
    del unproven['error']
    assert host_outcome('stuck', unproven)['state'] == FAILED
    assert host_outcome('stuck', unproven)['why'] == 'the proof found GPUs still busy'


def test_an_error_fails_a_host_even_when_free_is_unknown(summaries):
    failed = summaries.summary('gpu01', [], None, error='Cannot look at the GPUs of gpu01: no psutil')
    assert host_outcome('gpu01', failed)['state'] == FAILED
    assert host_outcome('gpu01', failed)['why'] == 'Cannot look at the GPUs of gpu01: no psutil'


def test_a_host_whose_gpus_the_kept_units_hold_is_kept(summaries):
    kept = summaries.summary('deploy', [], None, kept_units=['llama.service'])
    assert host_outcome('deploy', kept)['state'] == KEPT
    assert fleet_outcome({'deploy': kept})['kept'] == ['deploy']
    failed = summaries.summary('deploy', [], None, kept_units=['llama.service'], error='a stop failed')
    assert host_outcome('deploy', failed)['state'] == FAILED


def test_check_mode_proves_nothing_and_counts_nothing_as_done(summaries):
    outcome = host_outcome('orphans', summaries.CHECK)
    assert outcome['state'] == UNPROVEN
    assert outcome['check_mode'] is True
    assert (outcome['gpus_freed'], outcome['memory_reclaimed_mib'], outcome['released']) == (0, 0, 0)
    assert outcome['sources_stopped'] == {'systemd_unit': 0, 'container': 0, 'pod': 0, 'parent': 0}


@pytest.mark.parametrize('summary', [{}, None])
def test_a_host_that_stopped_before_its_summary(summary):
    outcome = host_outcome('gpu09', summary)
    assert (outcome['state'], outcome['why'], outcome['gpus']) == (FAILED, NO_RESULT, 0)


def test_fleet_outcome(summaries):
    fleet = fleet_outcome({'stuck': summaries.STUCK, 'orphans': summaries.ORPHANS, 'free': summaries.FREE,
                           'gpu09': {}, 'not-in-play': None})
    assert [outcome['host'] for outcome in fleet['hosts']] == ['free', 'gpu09', 'orphans', 'stuck']
    assert fleet['host_count'] == 4
    assert fleet['free'] == ['free', 'orphans']
    assert fleet['failed'] == [
        {'host': 'gpu09', 'why': NO_RESULT},
        {'host': 'stuck', 'why': 'GPUs of stuck are not free. GPU 1 (GPU-00000001) busy: 30720 MiB used, no holder'},
    ]
    assert fleet['unproven'] == []
    assert (fleet['gpus'], fleet['gpus_freed'], fleet['memory_reclaimed_mib'], fleet['released']) == \
        (6, 2, 88473 + 88461, 3)
    assert fleet['check_mode'] is False


def test_fleet_outcome_in_check_mode(summaries):
    fleet = fleet_outcome({'orphans': summaries.CHECK})
    assert (fleet['unproven'], fleet['free'], fleet['failed'], fleet['check_mode']) == (['orphans'], [], [], True)


def test_an_empty_fleet():
    fleet = fleet_outcome({})
    assert (fleet['host_count'], fleet['hosts'], fleet['gpus_freed']) == (0, [], 0)


def test_without_sources_the_killed_supervisors_count_as_parents(summaries):
    summary = summaries.ORPHANS
    del summary['sources']
    assert host_outcome('orphans', summary)['sources_stopped'] == \
        {'systemd_unit': 1, 'container': 0, 'pod': 0, 'parent': 1}


def test_a_failed_host_says_why_in_labels(summaries):
    assert host_outcome('stuck', summaries.STUCK)['failure_reasons'] == ['stuck_gpus']
    assert host_outcome('gpu07', summaries.ORPHANS)['failure_reasons'] == []
    assert host_outcome('gpu09', None)['failure_reasons'] == ['other']


@pytest.mark.parametrize('rows, more, expected', [
    # Holders the proof still found: left alone by the scope, protected, come back after the release.
    ([(['skipped', 'came_back'], False)], {}, ['holders_left']),
    # Holders that outlived the ladder, listed by the release and found again by the proof.
    ([(['survived'], False), (['unkillable'], False)], {'survivors': [{'pid': 5}]}, ['survivors']),
    # A survivor the proof no longer saw still says the release left one.
    ([([], False)], {'survivors': [{'pid': 5}]}, ['survivors']),
    ([(['protected'], False), ([], True)], {'reset_errors': ['persistence mode of GPU 0 was not restored']},
     ['holders_left', 'stuck_gpus', 'reset']),
    # A stop that failed, a missing library: nothing the GPUs say.
    ([([], False)], {'error': 'vllm.service: stop failed'}, ['other']),
])
def test_failure_reasons(summaries, rows, more, expected):
    gpus = [summaries.gpu(index, 1000, 1000, left_reasons=left, stuck=stuck)
            for index, (left, stuck) in enumerate(rows)]
    summary = summaries.summary('gpu01', gpus, False, **dict((k, v) for k, v in more.items() if k == 'error'))
    summary.update((k, v) for k, v in more.items() if k != 'error')
    assert failure_reasons(summary) == expected
    assert host_outcome('gpu01', summary)['failure_reasons'] == expected
