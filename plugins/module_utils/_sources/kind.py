# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What every source kind has: its entry in the ``sources`` list, and its record in the registry.

A source kind (``parent``, ``systemd``, ``container``, ``pod``) is one file of this package with one
``SourceKind``: its name (the entry's ``kind``), its label and metric name, the line that tells the operator
what can still start a holder and what to do (``leftover``), and how the role's summary names and counts its
entries. The registry (``registry.KINDS``) lists them; adding a kind is one file and one entry there, and the
controller (the summary, the metrics) takes it from there.

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
# For the role's summary, on the controller: ``row_name(entry) -> str``: what names one entry in its row
# (``source <kind> <row_name>: <action>``); ``role_stopped``: the summary's list of what the role's own stop
# stage stopped of this kind (counted with the entries the release stopped), or None; ``older_list``: in a
# result without ``sources`` (an older release), its list whose items, by their ``outcome``, stand for this
# kind's entries, or None.
SourceKind = namedtuple('SourceKind', ['name', 'label', 'metric', 'leftover', 'stop', 'row_name', 'role_stopped',
                                       'older_list'])


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
