# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._plan import ladder as _ladder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import EscalationError, parse_ladder


# -- ladder ------------------------------------------------------------------

def test_default_ladder():
    steps = parse_ladder(None, 3, 4)
    assert [(s['name'], s['wait']) for s in steps] == [('SIGTERM', 3.0), ('freeze', 0.0), ('SIGKILL', 4.0)]


@pytest.mark.parametrize('ladder, grace, kill, message', [
    ([], 10, 10, 'ladder: must be a non-empty list of steps; got: []'),
    ([{'signal': 'SIGTERM'}, {'signal': 'SIGFOO'}], 10, 10, "ladder[1].signal: unknown signal 'SIGFOO'"),
    ([{'signal': 'SIGTERM', 'wait': -1}], 10, 10, 'ladder[0].wait: must be a number of seconds from 0 to 3600; got: -1'),
    ([{'signal': 'SIGTERM', 'wait': 3601}], 10, 10, 'ladder[0].wait: must be a number of seconds from 0 to 3600; got: 3601'),
    ([{'signal': 'SIGTERM', 'wait': 'soon'}], 10, 10, "ladder[0].wait: must be a number of seconds from 0 to 3600; got: 'soon'"),
    ([{'action': 'freeze'}], 10, 10, 'ladder[0]: a freeze step must be followed by a SIGKILL step; got: the end of the ladder'),
    ([{'action': 'freeze'}, {'signal': 'SIGTERM'}], 10, 10,
     "ladder[0]: a freeze step must be followed by a SIGKILL step; got: {'signal': 'SIGTERM'}"),
    ([{'action': 'pause'}], 10, 10, "ladder[0].action: unknown action 'pause'; the only action is 'freeze'"),
    ([{'action': 'freeze', 'wait': 1}, {'signal': 'SIGKILL'}], 10, 10,
     "ladder[0]: a freeze step takes neither signal nor wait; got: {'action': 'freeze', 'wait': 1}"),
    ([{'signal': 'SIGSTOP'}], 10, 10, "ladder[0].signal: signal 'SIGSTOP' is not allowed"),
    ([{'signal': 15}], 10, 10, 'ladder[0].signal: must be a signal name such as SIGTERM; got: 15'),
    ([{'wait': 3}], 10, 10, "ladder[0]: needs a signal or action; got: {'wait': 3}"),
    ([{'signal': 'SIGTERM', 'delay': 3}], 10, 10, 'ladder[0]: unknown key delay'),
    (['SIGTERM'], 10, 10, "ladder[0]: must be a dictionary with signal (and wait) or action; got: 'SIGTERM'"),
    (None, -1, 10, 'grace_seconds: must be a number of seconds from 0 to 3600; got: -1'),
    (None, 10, 86400, 'kill_seconds: must be a number of seconds from 0 to 3600; got: 86400'),
])
def test_bad_ladders_name_option_and_value(ladder, grace, kill, message):
    with pytest.raises(EscalationError) as info:
        parse_ladder(ladder, grace, kill)
    assert str(info.value).startswith(message)


def test_custom_ladder_defaults_and_names():
    steps = parse_ladder([{'signal': 'int', 'wait': 1}, {'signal': 'TERM'}, {'action': 'freeze'},
                          {'signal': 'sigkill'}], 7, 2)
    assert [(s['signal'], s['wait']) for s in steps] == [
        ('SIGINT', 1.0), ('SIGTERM', 7.0), ('SIGSTOP', 0.0), ('SIGKILL', 2.0)]


@pytest.mark.parametrize('ladder, origins, expected', [
    # Nobody asked yet: the whole ladder, as the others.
    (None, [(0, False)], (0, [])),
    (None, [], (0, [])),
    # The origin was sent SIGTERM (or skipped it): no grace, straight to the freeze.
    (None, [(0, True)], (1, [0])),
    (None, [(0, False), (1, True)], (1, [0])),
    # The origin is further: start where it is.
    (None, [(2, True)], (2, [0])),
    # Several polite steps are all skipped; the freeze is not a signal step.
    ([{'signal': 'SIGINT', 'wait': 3}, {'signal': 'SIGTERM', 'wait': 5}, {'action': 'freeze'},
      {'signal': 'SIGKILL', 'wait': 5}], [(0, True)], (2, [0, 1])),
    # A ladder without freeze or SIGKILL: where the most advanced origin is.
    ([{'signal': 'SIGTERM', 'wait': 3}, {'signal': 'SIGINT', 'wait': 3}], [(0, True)], (0, [])),
    ([{'signal': 'SIGTERM', 'wait': 3}, {'signal': 'SIGINT', 'wait': 3}], [(1, True)], (1, [0])),
    # SIGKILL first: nothing to skip.
    ([{'signal': 'SIGKILL', 'wait': 3}], [(0, True)], (0, [])),
])
def test_adoption_start(ladder, origins, expected):
    assert _ladder.adoption_start(parse_ladder(ladder, 3, 5), origins) == expected


def test_total_and_longest_wait():
    ladder = parse_ladder([{'signal': 'SIGINT', 'wait': 2}, {'signal': 'SIGTERM'}, {'action': 'freeze'},
                           {'signal': 'SIGKILL'}], 3, 4)
    assert _ladder.total_wait(ladder) == 9.0
    assert _ladder.longest_wait(ladder) == 4.0


# Security: a ladder out of order fails before anything is signalled.
@pytest.mark.parametrize('ladder, message', [
    ([{'signal': 'SIGKILL'}, {'signal': 'SIGTERM'}], 'ladder[1]: comes after the SIGKILL of ladder[0], which must be'),
    ([{'signal': 'SIGTERM'}, {'signal': 'SIGKILL'}, {'action': 'freeze'}, {'signal': 'SIGKILL'}],
     'ladder[2]: comes after the SIGKILL of ladder[1]'),
    ([{'signal': 'SIGKILL'}, {'signal': 'SIGKILL'}], 'ladder[1]: comes after the SIGKILL of ladder[0]'),
])
def test_a_step_after_sigkill_is_an_error(ladder, message):
    with pytest.raises(EscalationError) as caught:
        parse_ladder(ladder, 3, 4)
    assert str(caught.value).startswith(message)
    assert 'got: %r' % (ladder,) in str(caught.value)
