# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import host_summary
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._outcome import fleet_outcome
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._summary_text import (
    fleet_lines, source_label, summary_lines, summary_view, truncate)

RUN = {
    'host': 'h1', 'check_mode': False, 'max_used_mib': 64, 'start': 0, 'now': 2.5,
    'first_look': {'gpus': [{'index': 0, 'uuid': 'GPU-abcdefgh-1', 'memory_used_mib': 4000},
                            {'index': 1, 'uuid': None, 'memory_used_mib': 10}],
                   'holders': [{'pid': 5, 'title': 'nv-hostengine', 'protected': True, 'gpus': [0]}],
                   'nvml_available': True},
    'release': {
        'released': [{'pid': 7, 'title': '/usr/bin/python3 -u /srv/a_very_long_program_name_for_training.py',
                      'gpus': [0], 'gpu_memory_mib': {'0': 3000}}],
        'protected': [{'pid': 5, 'title': 'nv-hostengine', 'gpus': [0], 'exe': '/usr/bin/nv-hostengine'}],
        'survivors': [],
        'sources': [{'kind': 'systemd', 'unit': 'x.service', 'action': 'stopped'},
                    {'kind': 'parent', 'pid': 3, 'title': 'bash -c while true; do python worker.py; done # a long loop',
                     'action': 'frozen and killed'},
                    {'kind': 'pod', 'pod': 'ns/p', 'action': 'left alone'},
                    {'kind': 'container', 'container': {'id': '0123456789abcdef'}, 'action': 'stopped'}],
        'filter_warnings': ['users: x']},
    'proof': {'gpus': [{'index': 0, 'memory_used_mib': 0, 'free': True},
                       {'index': 1, 'memory_used_mib': 900, 'free': False, 'holder_pids': []}],
              'holders': [], 'settle_seconds_observed': 2.0, 'waited_seconds': 0.3},
    'stopped_units': ['x.service'], 'stopped_containers': ['0123456789abcdef0000'], 'reset_gpus': [1],
    'reset_errors': ['persistence mode of GPU 1 was not restored: no'],
    'kept': {'kept': ['k.service'], 'pids': [9]}, 'unit_warnings': ['w1'],
    'stop_results': [{'delta': '0:00:01.500000'}],
}

# What the role printed for RUN, line for line.
LINES = [
    u'h1: 2 GPU(s), released 1, survivors 0, reset GPU(s) 1, kept running: k.service in 2.5 s',
    u'GPU  UUID       BEFORE MiB  AFTER MiB  RELEASED                           LEFT',
    u'  0  GPU-abcd\u2026        4000          0  a_very_long_program_name_for_trai\u2026 -',
    u'  1  \u2026                  10        900  -                                  '
    u'900 MiB with no holder: reset (gpu_reclaim_allow_reset) or reboot',
    u'protected, never signalled: nv-hostengine',
    u'kept running: k.service (pid 9): they alone hold the selected GPUs',
    u'x.service stopped; 0 process(es) of it still held a GPU',
    u'container 0123456789ab stopped; 0 process(es) of it still held a GPU',
    u'source systemd x.service: stopped',
    u'source parent 3 bash -c while true; do python worker.py\u2026: frozen and killed',
    u'source pod ns/p: left alone',
    u'source container 0123456789ab: stopped',
    u'stages (s): preflight - | stop_units 1.5 | release - | reset - | prove 2.3 | settle 2.0',
    u'reset: persistence mode of GPU 1 was not restored: no',
    u'warning: w1',
    u'warning: users: x',
]


def test_every_line_of_the_summary():
    assert summary_lines(host_summary(RUN)) == LINES


def test_no_line_ends_in_a_space():
    assert all(line == line.rstrip() for line in summary_lines(host_summary(RUN)))


def test_check_mode_says_what_would_happen():
    lines = summary_lines(host_summary(dict(RUN, check_mode=True, proof={}, kept={}, reset_gpus=[])))
    assert lines[0] == u'h1: 2 GPU(s), would release 1, survivors 0 (check mode: nothing was signalled) in 2.5 s'
    assert 'WOULD RELEASE' in lines[1]
    assert 'x.service would be stopped; 0 process(es) of it hold a GPU' in lines


def test_the_free_verdict(summaries):
    assert summary_lines(summaries.FREE)[0].endswith(', free in 0.8 s')
    assert summary_lines(summaries.STUCK)[0].endswith(', NOT FREE in 1.5 s')


def test_what_a_stopped_unit_left_names_its_processes():
    summary = host_summary(RUN)
    summary['left_behind'] = {'vllm.service': [{'pid': 1, 'title': 'VLLM::Worker_TP0'}]}
    assert 'vllm.service stopped; 1 process(es) of it still held a GPU: VLLM::Worker_TP0' in summary_lines(summary)


@pytest.mark.parametrize('source, label', [
    ({'kind': 'systemd', 'unit': 'vllm.service'}, 'vllm.service'),
    ({'kind': 'pod', 'pod': 'default/trainer'}, 'default/trainer'),
    ({'kind': 'parent', 'pid': 50, 'title': None}, '50 '),
    ({'kind': 'parent', 'pid': 50, 'title': 'x' * 46}, '50 ' + 'x' * 39 + u'\u2026'),
    ({'kind': 'container', 'container': {'id': 'f' * 64}}, 'f' * 12),
    ({'kind': 'container', 'container': None}, ''),
])
def test_source_labels(source, label):
    assert source_label(source) == label


@pytest.mark.parametrize('text, length, expected', [
    ('abc', 2, 'abc'),
    ('a' * 39, 34, 'a' * 39),
    ('a' * 40, 34, 'a' * 33 + u'\u2026'),
    (None, 34, ''),
])
def test_truncate_keeps_up_to_five_characters_over(text, length, expected):
    assert truncate(text, length) == expected


def test_the_view_passes_without_an_error_and_formats_by_result_format(summaries):
    view = summary_view(summaries.FREE)
    assert view['passed'] and view['error'] == '' and view['message'] == summary_lines(summaries.FREE)
    assert summary_view(summaries.FREE, 'yaml')['message'] == '\n'.join(summary_lines(summaries.FREE))
    failed = summary_view(summaries.STUCK)
    assert not failed['passed'] and failed['error'].startswith('GPUs of stuck are not free.')


def test_a_host_that_stopped_before_its_summary_shows_nothing():
    assert summary_view({}) == {'passed': True, 'error': '', 'message': []}


def test_the_fleet_lines(summaries):
    fleet = fleet_outcome({'h1': host_summary(RUN), 'h2': summaries.FREE, 'h3': {}})
    lines = fleet_lines(fleet)
    assert lines[0] == ('fleet: 3 host(s), 1 free, 1 kept running, 1 failed; 1 of 4 GPU(s) freed, '
                        '3.9 GiB reclaimed, 0 holder(s) released')
    assert lines[1:5] == [
        'HOST                     STATE     GPUS  FREED  RECLAIMED GiB  RELEASED  SECONDS',
        'h1                       kept         2      1            3.9         0      2.5',
        'h2                       free         2      0            0.0         0      0.8',
        'h3                       failed       0      0            0.0         0        -',
    ]
    assert lines[5].startswith('failed h3: no result')


def test_check_mode_hosts_are_not_proven(summaries):
    lines = fleet_lines(fleet_outcome({'orphans': summaries.CHECK}))
    assert ', 1 not proven (check mode);' in lines[0]
