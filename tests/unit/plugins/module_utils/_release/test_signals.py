# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import signal

from ansible_collections.gpuops.reclaim.plugins.module_utils._release.identity import GONE, SENT, ProcessRef
from ansible_collections.gpuops.reclaim.plugins.module_utils._release.signals import Signals


class Ledger:
    """Records what a ``FreezeLedger`` would: the frozen processes, and the killed ones."""

    def __init__(self):
        self.frozen = {}
        self.killed_refs = []

    def signal(self, ref, signum, send):
        outcome = send(ref, signum)
        if outcome == SENT:
            if signum == signal.SIGSTOP:
                self.frozen[ref.pid] = ref
            else:
                self.frozen.pop(ref.pid, None)
        return outcome

    def killed(self, ref):
        self.killed_refs.append(ref.pid)
        self.frozen.pop(ref.pid, None)


def test_stops_and_continues_go_through_the_ledger_and_only_sent_signals_count():
    sent = []

    def signaller(ref, signum, describe=''):
        sent.append((ref.pid, signum, describe))
        return GONE if ref.pid == 9 else SENT
    ledger = Ledger()
    signals = Signals(signaller, ledger)
    a, b, gone = ProcessRef(1, 1.0), ProcessRef(2, 2.0), ProcessRef(9, 9.0)
    assert signals.freeze(a, '(a)') == SENT and signals.freeze(b) == SENT
    assert signals.freeze(gone) == GONE
    assert sorted(ledger.frozen) == [1, 2]
    assert signals.send(a, signal.SIGKILL) == SENT
    assert ledger.killed_refs == [1] and sorted(ledger.frozen) == [2]
    assert signals.send(gone, signal.SIGKILL) == GONE
    assert ledger.killed_refs == [1]
    assert signals.thaw_left_frozen() == [2]
    assert ledger.frozen == {}
    assert sent[-1] == (2, signal.SIGCONT, '(frozen by this run, never killed)')
    assert signals.sent == 4
