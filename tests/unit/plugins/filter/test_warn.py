# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.filter import warn as warn_plugin
from ansible_collections.gpuops.reclaim.plugins.filter.unit_patterns import unit_patterns, unit_warnings
from ansible_collections.gpuops.reclaim.plugins.filter.warn import FilterModule, warn


@pytest.fixture
def shown(monkeypatch):
    # Ansible's Display, as the filter uses it, with what it shows kept. The real one, once made in a test
    # process, takes over the warnings of the modules that later tests run.
    lines = []

    class Display(object):
        def warning(self, msg):
            lines.append(msg)

    monkeypatch.setattr(warn_plugin, '_display', Display)
    return lines


def test_each_line_is_a_warning_and_the_input_comes_back(shown):
    listing = 'llama.service loaded active running Llama\nvllm-sim.service loaded inactive dead vLLM\n'
    lines = unit_warnings(unit_patterns(listing, ['llama', 'vllm-sim.service']), 'gpu1')
    assert warn(lines) == lines
    assert shown == ["gpu_reclaim_stop_units: no loaded unit on gpu1 matches 'llama'; nothing is stopped for it. "
                     "Did you mean 'llama.service'?"]


def test_no_lines_no_warning(shown):
    assert warn([]) == []
    assert shown == []


@pytest.mark.parametrize('value', ['llama', [3], None])
def test_refuses_what_is_not_a_list_of_strings(value, shown):
    with pytest.raises(TypeError, match=r'^warn: the input must be a list of strings; got: '):
        warn(value)
    assert shown == []


def test_with_a_key_the_list_under_it_is_shown_and_the_mapping_comes_back(shown):
    summary = {'host': 'gpu1', 'free': True, 'unit_warnings': ['gpu_reclaim_stop_units: llama matches nothing']}
    assert warn(summary, 'unit_warnings') is summary
    assert shown == ['gpu_reclaim_stop_units: llama matches nothing']


def test_with_a_key_a_mapping_without_it_shows_nothing(shown):
    assert warn({'host': 'gpu1'}, 'unit_warnings') == {'host': 'gpu1'}
    assert shown == []


@pytest.mark.parametrize('value, key, message', [
    (['llama'], 'unit_warnings', r'^warn: with a key, the input must be a mapping; got: list$'),
    ({'unit_warnings': 'llama'}, 'unit_warnings', r"^warn: the value of unit_warnings must be a list of strings; got: 'llama'$"),
    ({'unit_warnings': []}, 3, r'^warn: the key must be a string; got: 3$'),
])
def test_with_a_key_refuses_what_holds_no_list_of_strings(value, key, message, shown):
    with pytest.raises(TypeError, match=message):
        warn(value, key)
    assert shown == []


def test_registered():
    assert FilterModule().filters() == {'warn': warn}
