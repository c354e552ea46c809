# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._unit_patterns import (
    expand_units,
    pattern_matches,
    unmatched_warnings,
)

# What `systemctl list-units --all --plain --no-legend --full -- 'vllm-*.service' 'nvidia-*' dcgm-exporter.service
# ghost.service` prints on a simulated GPU host.
LISTING = '''\
dcgm-exporter.service         loaded active running DCGM exporter
nvidia-fabricmanager.service  loaded active running NVIDIA fabric manager
nvidia-persistenced.service   loaded active running NVIDIA persistence daemon
nvidia-vllm.service           loaded active running vLLM on nvidia
vllm-sim.service              loaded active running simulated vLLM server
'''
PATTERNS = ['vllm-*.service', 'nvidia-*', 'dcgm-exporter.service', 'ghost.service']


@pytest.mark.parametrize('pattern, unit, expected', [
    ('vllm-*.service', 'vllm-sim.service', True),
    ('vllm-*.service', 'vllm-sim.socket', False),
    ('nvidia-*', 'nvidia-persistenced.service', True),
    ('nvidia-?pu.service', 'nvidia-gpu.service', True),
    ('vllm-[ab].service', 'vllm-b.service', True),
    ('vllm-[ab].service', 'vllm-c.service', False),
    ('vllm.service', 'vllm.service', True),
    ('vllm', 'vllm.service', False),          # systemctl list-units does not add the type to a plain name
    ('vllm-[^a].service', 'vllm-b.service', True),
    ('vllm-[^a].service', 'vllm-a.service', False),
    ('vllm.socket', 'vllm.service', False),
    ('VLLM.service', 'vllm.service', False),  # systemd matches case-sensitively
])
def test_pattern_matches(pattern, unit, expected):
    assert pattern_matches(pattern, unit) is expected


def test_one_listing_sorted_by_every_pattern():
    assert expand_units(LISTING, PATTERNS) == {
        'units': ['dcgm-exporter.service', 'nvidia-fabricmanager.service', 'nvidia-persistenced.service',
                  'nvidia-vllm.service', 'vllm-sim.service'],
        'protected': ['dcgm-exporter.service', 'nvidia-fabricmanager.service', 'nvidia-persistenced.service'],
        'unprotected': ['nvidia-vllm.service', 'vllm-sim.service'],
        'running': ['nvidia-vllm.service', 'vllm-sim.service'],
        'unmatched': ['ghost.service'],
        'nearest': {'ghost.service': None},
    }


def test_protect_units_and_unprotect_apply_to_the_matches():
    result = expand_units(LISTING, PATTERNS, protect_units=['vllm-*'], unprotect=['dcgm-exporter.service'])
    assert result['protected'] == ['nvidia-fabricmanager.service', 'nvidia-persistenced.service', 'vllm-sim.service']
    assert result['unprotected'] == ['dcgm-exporter.service', 'nvidia-vllm.service']


def test_a_unit_listed_for_no_pattern_is_left_out():
    # systemctl lists only what the patterns match; anything else in its output is not ours to stop.
    assert expand_units('sshd.service loaded active running OpenSSH\n', ['vllm.service'])['units'] == []


def test_a_unit_two_patterns_match_is_listed_once():
    listing = 'vllm-sim.service loaded active running x\nvllm-sim.service loaded active running x\n'
    assert expand_units(listing, ['vllm-*', 'vllm-sim.service'])['units'] == ['vllm-sim.service']


def test_an_empty_listing_matches_nothing():
    assert expand_units('', ['vllm-*.service']) == {
        'units': [], 'protected': [], 'unprotected': [], 'running': [], 'unmatched': ['vllm-*.service'],
        'nearest': {'vllm-*.service': None}}


def test_only_running_units_are_stopped():
    listing = 'a.service loaded active running x\nb.service loaded inactive dead y\nc.service loaded failed failed z\n'
    assert expand_units(listing, ['*.service'])['running'] == ['a.service']


@pytest.mark.parametrize('pattern, expected', [
    ('llama', 'llama.service'),         # systemctl reads a plain name as NAME.service
    ('llama.servce', 'llama.service'),  # a typo
    ('ghost.service', None),            # nothing close: no guess
])
def test_a_name_that_matches_nothing_names_the_nearest_loaded_unit(pattern, expected):
    listing = 'llama.service loaded active running x\nvllm-sim.service loaded inactive dead y\n'
    assert expand_units(listing, [pattern])['nearest'] == {pattern: expected}


def test_the_warnings_name_the_nearest_unit_and_the_protected_ones():
    expanded = expand_units(LISTING + 'llama.service loaded active running x\n', ['llama', 'nvidia-*'])
    assert unmatched_warnings(expanded, 'gpu07') == [
        "gpu_reclaim_stop_units: no loaded unit on gpu07 matches 'llama'; nothing is stopped for it. "
        "Did you mean 'llama.service'?",
        'gpu_reclaim_stop_units: nvidia-fabricmanager.service, nvidia-persistenced.service on gpu07 are protected '
        'GPU services; they are not stopped.']


def test_list_unit_files_output_reads_the_same():
    listing = 'vllm-sim.service enabled enabled\nvllm-b.service disabled enabled\n'
    assert expand_units(listing, ['vllm-*'])['units'] == ['vllm-sim.service', 'vllm-b.service']
