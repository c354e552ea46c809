# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One target of a release on its way along the ladder: where it stands, and how it left.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .identity import ProcessRef

ACTIVE = 'active'


class Target:
    """One target on its way along the ladder."""

    # Where it stands: the step sent (entered) and when its wait ends.
    entered = False
    deadline = None
    outcome = ACTIVE
    last_signal = None
    # How it left: when, through what, and the time the ladder still granted it.
    released_at = None
    release_outcome = None
    budget_end = None
    frozen = False
    reason = None
    limit = None    # seconds from the start that no wait may pass (adopted holders)

    def __init__(self, record, position=0):
        self.record = record
        self.ref = ProcessRef.from_record(record)
        self.position = position
        self.state = record.get('state')
        self.tree = {}       # pid -> ProcessRef of frozen descendants
        self.killed = []     # descendant pids killed with the tree
        self.skipped_steps = []

    @property
    def adopted(self):
        return bool(self.record.get('adopted'))

    @property
    def signalled(self):
        """Whether the ladder has started on it: a step was sent, or skipped past."""
        return self.entered or self.position > 0 or self.frozen

    def wait_until(self, now, seconds):
        end = now + seconds
        return end if self.limit is None else min(end, self.limit)

    @property
    def pid(self):
        return self.ref.pid

    def describe(self):
        gpus = self.record.get('gpus') or []
        text = '(%s)' % (self.record.get('title') or self.record.get('name') or '?')
        if gpus:
            text += ' on GPU %s' % ', '.join(str(i) for i in gpus)
        return text
