# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.selectors import (
    SelectorError,
    parse_pci_bus_id,
    resolve_gpus,
)

UUID_0 = 'GPU-8a3f6c1e-9a0b-4d2e-8f7c-1b2c3d4e5f60'
UUID_1 = 'GPU-0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0'

GPUS = [
    {'index': 0, 'uuid': UUID_0, 'pci_bus_id': '00000000:3B:00.0'},
    {'index': 1, 'uuid': UUID_1, 'pci_bus_id': '00000000:AF:00.0'},
]

HOST = '0 (%s, 00000000:3B:00.0), 1 (%s, 00000000:AF:00.0)' % (UUID_0, UUID_1)


@pytest.mark.parametrize('selectors, expected', [
    (None, [0, 1]),
    ([], [0, 1]),
    (['0'], [0]),
    ([1], [1]),
    (['1', '0'], [0, 1]),
    (['0', '0', UUID_0], [0]),
    ([UUID_1], [1]),
    ([UUID_1.upper()], [1]),
    ([UUID_1.lower()], [1]),
    (['00000000:AF:00.0'], [1]),
    (['0000:af:00.0'], [1]),
    (['af:00.0'], [1]),
    (['0000:3B:00.0', ' 1 '], [0, 1]),
])
def test_resolve_gpus(selectors, expected):
    assert resolve_gpus(selectors, GPUS) == expected


@pytest.mark.parametrize('selectors, option, message', [
    (['GPU-abc'], 'gpus', "gpus[0]: no GPU matches 'GPU-abc'; GPUs on this host: " + HOST),
    (['0', '7'], 'gpus', "gpus[1]: no GPU matches '7'; GPUs on this host: " + HOST),
    (['0000:3c:00.0'], 'scope', "scope[0]: no GPU matches '0000:3c:00.0'; GPUs on this host: " + HOST),
    (['first'], 'gpus', "gpus[0]: no GPU matches 'first'; GPUs on this host: " + HOST),
    (['-1'], 'gpus', "gpus[0]: no GPU matches '-1'; GPUs on this host: " + HOST),
    (['0', ''], 'gpus', 'gpus[1]: a GPU selector must not be empty; GPUs on this host: ' + HOST),
])
def test_resolve_gpus_errors(selectors, option, message):
    with pytest.raises(SelectorError) as info:
        resolve_gpus(selectors, GPUS, option=option)
    assert str(info.value) == message


def test_resolve_gpus_without_gpus():
    with pytest.raises(SelectorError) as info:
        resolve_gpus(['0'], [])
    assert str(info.value) == "gpus[0]: no GPU matches '0'; GPUs on this host: none"


def test_resolve_gpus_without_nvml_knows_only_indices():
    gpus = [{'index': 0, 'uuid': None, 'pci_bus_id': None}, {'index': 3, 'uuid': None, 'pci_bus_id': None}]
    assert resolve_gpus(['3'], gpus) == [3]
    with pytest.raises(SelectorError) as info:
        resolve_gpus([UUID_0], gpus)
    assert str(info.value) == "gpus[0]: no GPU matches '%s'; GPUs on this host: 0, 3" % UUID_0


@pytest.mark.parametrize('text, expected', [
    ('00000000:3B:00.0', (0, 0x3b, 0, 0)),
    ('0000:3b:00.0', (0, 0x3b, 0, 0)),
    ('3b:00.0', (0, 0x3b, 0, 0)),
    ('0001:c1:1f.7', (1, 0xc1, 0x1f, 7)),
    ('0000:3b:00.8', None),
    ('0000:3b:00', None),
    ('GPU-1', None),
    ('', None),
    (None, None),
])
def test_parse_pci_bus_id(text, expected):
    assert parse_pci_bus_id(text) == expected
