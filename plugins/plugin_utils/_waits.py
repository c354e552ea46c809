# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which of the role's waits run as Ansible async jobs, so that the operator sees progress.

The release and the proof are plain tasks whose action plugins print a line
at least every 5 s while the module waits (``_heartbeat``). ``systemctl stop``
is a command, with no action of ours around it: systemd bounds it with each
unit's own stop timeout, unknown here, so outside check mode it runs as an
async job (``async``, ``poll: 0``) and a second task awaits it with
``until``/``retries``: Ansible prints one ``FAILED - RETRYING`` line, naming
the units, per retry. Each retry waits quietly for up to ``QUIET_SECONDS``
(the ``await_job`` action), so a stop that ends sooner prints nothing extra.
In check mode nothing is stopped, and Ansible runs no async task: a plain
task. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

# How long one try of await_job waits in silence, below _heartbeat.PROGRESS_SECONDS (a line at least every
# 5 s) so that each retry line comes in time.
QUIET_SECONDS = 4.5
# Added to a job's longest run, for the round trips: the job is never cut short by Ansible.
MARGIN_SECONDS = 30
# systemd's own stop timeout bounds a `systemctl stop` (DefaultTimeoutStopSec, 90 s unless a unit says
# otherwise); it is not known here, so a stop is awaited as a job, within this bound.
UNIT_STOP_SECONDS = 90.0
UNIT_STOP_BOUND_SECONDS = 600

SYNC = {'async': 0, 'retries': 0, 'seconds': 0.0}


def _job(waited, bound):
    """The async limit and the retries of a job that waits ``waited`` s and never runs past ``bound`` s."""
    limit = int(math.ceil(bound)) + MARGIN_SECONDS
    return {'async': limit, 'retries': int(math.ceil(limit / QUIET_SECONDS)) + 1, 'seconds': round(waited, 3)}


def wait_plan(values, check_mode=False):
    """``{'stop_units': {'async': seconds or 0, 'retries': n, 'seconds': the wait it allows for}}``.

    ``values`` holds ``stop_units``: whether units are to be stopped. ``async`` 0 means a plain task.
    """
    stop_units = values.get('stop_units')
    if not isinstance(stop_units, bool):
        raise TypeError('wait_plan: stop_units must be true or false; got: %r' % (stop_units,))
    if stop_units and not check_mode:
        return {'stop_units': _job(UNIT_STOP_SECONDS, UNIT_STOP_BOUND_SECONDS)}
    return {'stop_units': dict(SYNC)}


def awaited(plan):
    """The stages of ``plan`` that run as jobs, in no particular order."""
    return sorted(stage for stage, job in plan.items() if job['async'])
