# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Running a blocking call under a deadline.

NVML and the driver can hang (a GPU that fell off the bus, a driver stuck in
the kernel). A call that may hang runs in a daemon thread; the caller waits at
most ``timeout`` seconds and then gets ``DeadlineExceeded``. The stuck thread
is abandoned: being a daemon, it cannot keep the process alive at exit. Whoever
owns the library that hung must stop using it afterwards (see ``_host.nvml``).

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys
import threading


class DeadlineExceeded(Exception):
    """The call did not return within its deadline."""

    def __init__(self, what, timeout):
        self.what = what
        self.timeout = timeout
        super(DeadlineExceeded, self).__init__(
            '%s did not return within %.3g seconds' % (what, timeout))


def _describe(func):
    return getattr(func, '__name__', None) or repr(func)


def call_with_deadline(func, timeout, *args, **kwargs):
    """Call ``func(*args, **kwargs)`` and return its result within ``timeout`` seconds.

    Exceptions raised by ``func`` are re-raised in the caller. If ``func`` has
    not returned after ``timeout`` seconds, ``DeadlineExceeded`` is raised and
    the call is left running in its daemon thread. ``timeout`` of ``None``
    calls ``func`` directly, in the calling thread.
    """
    if timeout is None:
        return func(*args, **kwargs)
    if timeout <= 0:
        raise ValueError('timeout must be greater than 0, got %r' % (timeout,))

    outcome = {}
    done = threading.Event()

    def runner():
        try:
            outcome['result'] = func(*args, **kwargs)
        except BaseException:  # pylint: disable=broad-except
            outcome['error'] = sys.exc_info()[1]
        finally:
            done.set()

    thread = threading.Thread(target=runner, name='deadline:%s' % _describe(func))
    thread.daemon = True
    thread.start()
    if not done.wait(timeout):
        raise DeadlineExceeded(_describe(func), timeout)
    if 'error' in outcome:
        raise outcome['error']
    return outcome.get('result')
