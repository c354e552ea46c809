# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU selectors (index, UUID, PCI bus id) validated against the GPUs of the host.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Options shared by every module that selects GPUs; documented by the doc
# fragment gpuops.reclaim.gpu_selection.
GPU_SELECTION_ARGUMENT_SPEC = dict(
    gpus=dict(type='list', elements='str', default=[]),
)

_PCI_BUS_ID = re.compile(
    r'^(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{1,2}):(?P<device>[0-9a-f]{1,2})\.(?P<function>[0-7])$')


class SelectorError(ValueError):
    """A selector matches no GPU, or is malformed."""


def parse_pci_bus_id(text):
    """``(domain, bus, device, function)`` for a PCI bus id, or None.

    Accepts the short Linux form ``0000:3b:00.0``, NVML's ``00000000:3B:00.0``
    and the domain-less ``3b:00.0``, in any case.
    """
    if not text:
        return None
    match = _PCI_BUS_ID.match(text.strip().lower())
    if not match:
        return None
    return (int(match.group('domain') or '0', 16), int(match.group('bus'), 16),
            int(match.group('device'), 16), int(match.group('function'), 16))


def describe_gpus(gpus):
    """``0 (GPU-..., 00000000:3B:00.0), 1 (...)`` for error messages."""
    if not gpus:
        return 'none'
    described = []
    for gpu in gpus:
        details = [value for value in (gpu.get('uuid'), gpu.get('pci_bus_id')) if value]
        if details:
            described.append('%s (%s)' % (gpu['index'], ', '.join(details)))
        else:
            described.append(str(gpu['index']))
    return ', '.join(described)


def match_selector(selector, gpus):
    """The index of the GPU that ``selector`` names, or None."""
    text = str(selector).strip()
    if text.isdigit():
        wanted = int(text)
        for gpu in gpus:
            if gpu['index'] == wanted:
                return gpu['index']
        return None
    lowered = text.lower()
    if lowered.startswith(('gpu-', 'mig-')):
        for gpu in gpus:
            if (gpu.get('uuid') or '').lower() == lowered:
                return gpu['index']
        return None
    wanted_pci = parse_pci_bus_id(text)
    if wanted_pci is not None:
        for gpu in gpus:
            if parse_pci_bus_id(gpu.get('pci_bus_id')) == wanted_pci:
                return gpu['index']
    return None


def resolve_gpus(selectors, gpus, option='gpus'):
    """Sorted indices of the GPUs named by ``selectors``, without repeats.

    An empty or missing list selects every GPU. ``gpus`` are GPU records (see
    docs/architecture.md). Raises ``SelectorError`` naming the option, the
    position, the value and the GPUs that exist.
    """
    if not selectors:
        return [gpu['index'] for gpu in gpus]
    indices = []
    for position, selector in enumerate(selectors):
        if selector is None or str(selector).strip() == '':
            raise SelectorError('%s[%d]: a GPU selector must not be empty; GPUs on this host: %s'
                                % (option, position, describe_gpus(gpus)))
        index = match_selector(selector, gpus)
        if index is None:
            raise SelectorError("%s[%d]: no GPU matches '%s'; GPUs on this host: %s"
                                % (option, position, selector, describe_gpus(gpus)))
        if index not in indices:
            indices.append(index)
    return sorted(indices)
