# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What one discovery saw (``holders.discover`` returns it), and its one-line summary.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class Snapshot:
    """The result of one discovery.

    ``gpus``: GPU records (scoped to the selected GPUs), ``holders``: holder
    records sorted by PID, ``unreadable``: how many processes could not be
    inspected, ``unreadable_pids``: which, ``warnings``: text for the user.
    ``builder`` is the ``_discover.record.HolderBuilder`` the records were
    built with (None for a snapshot made otherwise): a release builds the
    record of a process that appears later with it.
    """

    def __init__(self, gpus, holders, unreadable_pids, warnings, nvml_available,
                 driver_version=None, vanished=0, contexts=(), foreign_pids=(), builder=None):
        self.gpus = gpus
        self.builder = builder
        # PIDs NVML lists that no process here has, nor a dead creator whose keeper is here.
        self.foreign_pids = sorted(foreign_pids)
        # Contexts whose creator is gone (``_discover.keepers.attribute``), with their keepers.
        self.contexts = list(contexts)
        self.holders = holders
        self.unreadable_pids = sorted(unreadable_pids)
        self.unreadable = len(self.unreadable_pids)
        self.warnings = warnings
        self.nvml_available = nvml_available
        self.driver_version = driver_version
        self.vanished = vanished

    def summary(self):
        """``8 GPUs, 9 holders (8 compute, 1 client), 768 GiB held``.

        The memory is what the holders hold on the selected GPUs: a holder in
        scope may hold memory on other GPUs too, which is not counted here.
        """
        compute = sum(1 for holder in self.holders if holder['kind'] == 'compute')
        client = len(self.holders) - compute
        selected = set(str(gpu['index']) for gpu in self.gpus)
        memory_mib = sum(mib or 0 for holder in self.holders
                         for index, mib in holder['gpu_memory_mib'].items() if index in selected)
        memory_mib += sum(context['memory_mib'] for context in self.contexts
                          if context['keepers'] and str(context['gpu']) in selected)
        return '%s, %s (%d compute, %d client), %s held' % (
            _plural(len(self.gpus), 'GPU'), _plural(len(self.holders), 'holder'),
            compute, client, format_mib(memory_mib))


def _plural(count, word):
    return '%d %s%s' % (count, word, '' if count == 1 else 's')


def format_mib(mib):
    """``768 GiB``, ``1.5 GiB`` or ``600 MiB``."""
    if mib >= 1024:
        gib = mib / 1024.0
        if gib == int(gib):
            return '%d GiB' % gib
        return '%.1f GiB' % gib
    return '%d MiB' % mib
