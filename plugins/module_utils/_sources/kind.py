# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What every source kind has: its entry in the ``sources`` list, and its record in the registry.

A source kind (``parent``, ``systemd``, ``container``, ``pod``) is one file of this package with one
``SourceKind``: its name (the entry's ``kind``), its label and metric name, and the line that tells the
operator what can still start a holder and what to do (``leftover``). The registry (``registry.KINDS``) lists
them; adding a kind is one file and one entry there.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

# What the release does about an entry, before it acts.
STOP = 'stop'
LEAVE = 'leave'

# ``name``: the entry's kind; ``label``: how a person calls it; ``metric``: its name in the metrics
# (``sources_stopped{kind=...}``); ``leftover(entry) -> line or None``: the next step when it can still
# start a holder after the release; ``stop(entry, run, stop_seconds) -> (rc, err)``, or None for a kind the
# release does not stop itself.
SourceKind = namedtuple('SourceKind', ['name', 'label', 'metric', 'leftover', 'stop'])


def entry(kind, pid=None, title=None, unit=None, container=None, pod=None, holder_pids=(), action=None,
          reason=None):
    """One entry of the ``sources`` list; every kind has the same keys."""
    return {'kind': kind, 'pid': pid, 'title': title, 'unit': unit, 'container': container, 'pod': pod,
            'holder_pids': sorted(holder_pids), 'action': action, 'reason': reason}


def pid_list(item):
    return ', '.join(str(pid) for pid in item['holder_pids'])


def as_int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
