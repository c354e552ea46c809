# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every signal of one release, in one place: sent, counted, and every SIGSTOP and SIGCONT on the ledger.

``Signals`` is what the loop and its collaborators (``trees``, ``source_parents``) signal through. A SIGSTOP
or SIGCONT goes through the ``guardian.FreezeLedger``, which records what is frozen until it is thawed or
killed; a SIGKILL that was sent takes the process off it. ``sent`` counts the signals that reached a process:
``changed`` is whether there was one.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

from .identity import SENT


class Signals:
    """``signaller(ref, signum, describe) -> outcome`` (``identity.signal_process``), through ``ledger``."""

    def __init__(self, signaller, ledger):
        self.signaller = signaller
        self.ledger = ledger
        self.sent = 0

    def send(self, ref, signum, describe=''):
        if signum in (signal.SIGSTOP, signal.SIGCONT):
            outcome = self.ledger.signal(ref, signum, lambda r, s: self.signaller(r, s, describe))
        else:
            outcome = self.signaller(ref, signum, describe)
            if signum == signal.SIGKILL and outcome == SENT:
                self.ledger.killed(ref)
        if outcome == SENT:
            self.sent += 1
        return outcome

    def freeze(self, ref, describe=''):
        """The one way a release stops a process (SIGSTOP): the ledger records it until it is thawed or killed."""
        return self.send(ref, signal.SIGSTOP, describe)

    def thaw(self, ref, describe=''):
        """The one way a release thaws a process it froze (SIGCONT), through the ledger."""
        return self.send(ref, signal.SIGCONT, describe)

    def thaw_left_frozen(self):
        """SIGCONT to whatever is still stopped, so that nothing frozen outlives the release; the PIDs thawed."""
        return [pid for pid, ref in sorted(self.ledger.frozen.items())
                if self.thaw(ref, '(frozen by this run, never killed)') == SENT]
