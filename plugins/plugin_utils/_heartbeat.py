# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A line every few seconds while a module waits on a host, so that the operator sees the run is alive.

The release and the proof run as plain tasks (pipelined, one round trip);
their action plugins run the module while a thread of the controller's worker
prints, every ``PROGRESS_SECONDS`` until the module answers, which host waits,
for how long so far, and for what (``what_release`` and ``what_proof`` say it
from the task's own options). A module that answers sooner prints nothing
extra and costs nothing: no async job, no status polls. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import truth

# The operator sees a line at least this often while a module waits.
PROGRESS_SECONDS = 5.0


def _gpus(args):
    gpus = args.get('gpus')
    if isinstance(gpus, (list, tuple)) and gpus and all(str(g) != 'all' for g in gpus):
        return 'GPU %s' % ', '.join(str(g) for g in gpus)
    return 'the GPUs'


def _seconds(value, default):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    return int(number) if number == int(number) else number


def what_release(args):
    """What gpu_reclaim waits for, from its options: the release, then, with ``prove``, the proof."""
    ladder = args.get('ladder')
    if isinstance(ladder, (list, tuple)) and ladder:
        what = 'the release of %s (a ladder of %d steps)' % (_gpus(args), len(ladder))
    else:
        what = 'the release of %s (SIGTERM, %s s grace, then SIGKILL, %s s)' % (
            _gpus(args), _seconds(args.get('grace_seconds'), 10), _seconds(args.get('kill_seconds'), 10))
    if truth(args.get('prove')):
        timeout = args.get('proof_timeout_seconds')
        what += ', then for %s' % what_proof(dict(args, timeout_seconds=60 if timeout is None else timeout))
    return what


def what_proof(args):
    """What gpu_assert_free waits for, from its options."""
    return '%s to be free (within %s s, then for %s s)' % (
        _gpus(args), _seconds(args.get('timeout_seconds'), 30), _seconds(args.get('settle_seconds'), 0))


class Heartbeat:
    """``with Heartbeat(say, 'host', 'what'):`` calls ``say(line)`` every ``interval`` s until the block ends."""

    def __init__(self, say, host, what, interval=PROGRESS_SECONDS, clock=time.monotonic):
        self.say, self.host, self.what, self.interval, self.clock = say, host, what, interval, clock
        self._stop = threading.Event()
        self._thread = None
        self.lines = 0

    def _beat(self):
        started = self.clock()
        while not self._stop.wait(self.interval):
            self.lines += 1
            try:
                self.say('[%s]: still waiting after %d s for %s' % (self.host, int(self.clock() - started), self.what))
            except Exception:  # pylint: disable=broad-except
                # A line that cannot be printed must not end the wait it reports on.
                return

    def __enter__(self):
        self._thread = threading.Thread(target=self._beat, name='gpuops-reclaim-heartbeat')
        self._thread.daemon = True
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False
