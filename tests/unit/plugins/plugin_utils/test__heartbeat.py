# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._heartbeat import (
    PROGRESS_SECONDS,
    Heartbeat,
    what_proof,
    what_release,
)


def test_a_line_per_interval_while_the_block_runs():
    lines = []
    started = time.monotonic()
    with Heartbeat(lines.append, 'gpu07', 'the release of GPU 0', interval=0.05) as beat:
        # However busy the machine, until three beats came (or 10 s passed).
        while len(lines) < 3 and time.monotonic() < started + 10:
            time.sleep(0.01)
    elapsed = time.monotonic() - started
    count = len(lines)
    time.sleep(0.15)
    # Three beats, never more than one per interval, and none after the block.
    assert 3 <= count <= elapsed / 0.05 + 1 and len(lines) == count == beat.lines, lines
    assert lines[0].startswith('[gpu07]: still waiting after 0 s for the release of GPU 0')


def test_a_block_that_ends_sooner_prints_nothing_and_does_not_wait():
    lines = []
    started = time.monotonic()
    with Heartbeat(lines.append, 'gpu07', 'x', interval=PROGRESS_SECONDS):
        pass
    assert lines == [] and time.monotonic() - started < 0.5


def test_the_seconds_count_from_the_start():
    now = [100.0]
    said = []
    done = threading.Event()

    def say(line):
        said.append(line)
        now[0] += 5
        if len(said) == 2:
            done.set()

    with Heartbeat(say, 'h', 'w', interval=0.01, clock=lambda: now[0]):
        done.wait(2)
    assert said[:2] == ['[h]: still waiting after 0 s for w', '[h]: still waiting after 5 s for w']


def test_a_line_that_cannot_be_printed_ends_the_beat_not_the_block():
    calls = []

    def broken(line):
        calls.append(line)
        raise IOError('closed')

    with Heartbeat(broken, 'h', 'w', interval=0.01):
        # However busy the machine, until the first beat came (or 10 s passed), then ten intervals more:
        # a beat that went on would print again.
        started = time.monotonic()
        while not calls and time.monotonic() < started + 10:
            time.sleep(0.01)
        time.sleep(0.1)
    assert len(calls) == 1


def test_an_exception_in_the_block_still_stops_the_beat():
    lines = []
    beat = Heartbeat(lines.append, 'h', 'w', interval=0.01)
    with pytest.raises(ValueError):
        with beat:
            raise ValueError('module failed')
    assert not beat._thread.is_alive()


@pytest.mark.parametrize('args, expected', [
    ({'gpus': ['0', '3'], 'grace_seconds': 7, 'kill_seconds': 5.5},
     'the release of GPU 0, 3 (SIGTERM, 7 s grace, then SIGKILL, 5.5 s)'),
    ({'gpus': ['all']}, 'the release of the GPUs (SIGTERM, 10 s grace, then SIGKILL, 10 s)'),
    ({'grace_seconds': '3'}, 'the release of the GPUs (SIGTERM, 3 s grace, then SIGKILL, 10 s)'),
    ({'gpus': ['1'], 'ladder': [{'signal': 'SIGINT', 'wait_seconds': 5}, {'signal': 'SIGKILL'}]},
     'the release of GPU 1 (a ladder of 2 steps)'),
    ({'gpus': ['0'], 'grace_seconds': 7, 'kill_seconds': 5, 'prove': True, 'proof_timeout_seconds': 30,
      'settle_seconds': 2},
     'the release of GPU 0 (SIGTERM, 7 s grace, then SIGKILL, 5 s), then for GPU 0 to be free (within 30 s, then '
     'for 2 s)'),
    ({'prove': True, 'proof_timeout_seconds': 0},
     'the release of the GPUs (SIGTERM, 10 s grace, then SIGKILL, 10 s), then for the GPUs to be free (within 0 s, '
     'then for 0 s)'),
    ({'prove': 'false', 'settle_seconds': 2}, 'the release of the GPUs (SIGTERM, 10 s grace, then SIGKILL, 10 s)'),
    ({'prove': 'True'}, 'the release of the GPUs (SIGTERM, 10 s grace, then SIGKILL, 10 s), then for the GPUs to be '
                        'free (within 60 s, then for 0 s)'),
])
def test_what_the_release_waits_for(args, expected):
    assert what_release(args) == expected


@pytest.mark.parametrize('args, expected', [
    ({'gpus': ['2'], 'timeout_seconds': 30, 'settle_seconds': 3}, 'GPU 2 to be free (within 30 s, then for 3 s)'),
    ({}, 'the GPUs to be free (within 30 s, then for 0 s)'),
    ({'timeout_seconds': 'soon'}, 'the GPUs to be free (within 30 s, then for 0 s)'),
])
def test_what_the_proof_waits_for(args, expected):
    assert what_proof(args) == expected
