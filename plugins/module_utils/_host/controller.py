# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether the controller that started the module is still there.

A controller stopped with SIGINT, or a dropped SSH connection, leaves the
module running on the host: nothing reads its result any more, yet it would
walk the whole ladder. ``ControllerWatch.gone()`` tells, between two steps of
the release, that the controller went away, from two facts the module can
read about itself:

- its parent process changed since the start (``getppid()``): the shell or
  the ``sshd`` session that ran it has died and the module was reparented;
- its output is closed: the reader of its standard output (the SSH channel,
  the controller's pipe) is gone, which ``poll`` reports as an error or a
  hang-up on the module's end.

Where neither can change, the module cannot tell: a parent that was already
PID 1 (or a subreaper) at the start, or an output that is a file (``async``
writes the result to one). The release then runs to its end, which the
ladder bounds (the sum of its waits, plus at most 0.5 s), and the guardian
(``_release.guardian``) still thaws whatever is frozen if the module is killed.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import select
import stat

_CLOSED = select.POLLERR | select.POLLHUP | getattr(select, 'POLLNVAL', 0x20)


def output_closed(fd):
    """Whether the reader of ``fd`` (a pipe, socket or terminal) went away. A file is never closed that way."""
    try:
        poller = select.poll()
        poller.register(fd, 0)
        events = poller.poll(0)
    except (OSError, ValueError):
        return False
    return any(mask & _CLOSED for dummy, mask in events)


class ControllerWatch:
    """``gone()``: why the controller is gone, or None. The parent is read when the watch is made."""

    def __init__(self, output_fd=1, getppid=os.getppid):
        self.getppid = getppid
        self.parent_pid = getppid()
        self.output_fd = output_fd
        # Whether the output can report a closed reader at all: a pipe, socket or terminal, not a file.
        try:
            mode = os.fstat(output_fd).st_mode
            self.output_watched = not stat.S_ISREG(mode) and not output_closed(output_fd)
        except OSError:
            self.output_watched = False

    @property
    def can_tell(self):
        """Whether either fact can change: a parent other than PID 1, or an output that is no file."""
        return self.parent_pid > 1 or self.output_watched

    def gone(self):
        if self.parent_pid > 1:
            parent = self.getppid()
            if parent != self.parent_pid:
                return ('the controller went away: the module\'s parent (PID %d) ended and it now has PID %d as '
                        'parent' % (self.parent_pid, parent))
        if self.output_watched and output_closed(self.output_fd):
            return 'the controller went away: nothing reads the module\'s output any more'
        return None
