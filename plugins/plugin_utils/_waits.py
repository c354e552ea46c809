# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which of the role's waits run as Ansible async jobs, so that the operator sees progress.

A stage that may wait 5 s or more (the release's grace and kill windows, the
proof's deadline and settle window, ``systemctl stop``) runs as an async job
(``async``, ``poll: 0``), and a second task awaits it with ``until``/``retries``:
Ansible prints one ``FAILED - RETRYING`` line, naming what is waited for, per
retry. Each retry waits quietly for up to ``QUIET_SECONDS`` (the ``await_job``
action), so a job that ends sooner prints nothing extra. A stage whose
configured waits are all shorter, and every stage in check mode (Ansible does
not run an async task in check mode), runs as a plain task: no job, no extra
task. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

# The operator sees a line at least this often during a wait.
PROGRESS_SECONDS = 5.0
# How long one try of await_job waits in silence, below PROGRESS_SECONDS so that each retry line comes in time.
QUIET_SECONDS = 4.5
# Added to a job's longest run, for the round trips and NVML start: the job is never cut short by Ansible.
MARGIN_SECONDS = 30
# systemd's own stop timeout bounds a `systemctl stop` (DefaultTimeoutStopSec, 90 s unless a unit says
# otherwise); it is not known here, so a stop is always awaited as a job, within this bound.
UNIT_STOP_SECONDS = 90.0
UNIT_STOP_BOUND_SECONDS = 600

SYNC = {'async': 0, 'retries': 0, 'seconds': 0.0}


def _seconds(values, name):
    value = values.get(name)
    try:
        # An extra variable (-e NAME=5) is a string.
        number = None if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or math.isnan(number) or math.isinf(number) or number < 0:
        raise TypeError('wait_plan: %s must be a number of seconds, 0 or more; got: %r' % (name, value))
    return number


def _job(waited, bound):
    """The async limit and the retries of a job that waits ``waited`` s and never runs past ``bound`` s."""
    limit = int(math.ceil(bound)) + MARGIN_SECONDS
    return {'async': limit, 'retries': int(math.ceil(limit / QUIET_SECONDS)) + 1, 'seconds': round(waited, 3)}


def wait_plan(values, check_mode=False):
    """``{stage: {'async': seconds or 0, 'retries': n, 'seconds': the configured wait}}`` for the waiting stages.

    ``values`` holds the role's configured seconds: ``grace_seconds``, ``kill_seconds``, ``lock_timeout``,
    ``nvml_timeout``, ``assert_timeout``, ``settle_seconds``, and ``stop_units`` (whether units are to be
    stopped). ``async`` 0 means a plain task. A stage is a job when its own waits (grace and kill; the proof's
    deadline and settle window; a unit stop) add up to ``PROGRESS_SECONDS`` or more: the host lock and NVML's
    deadlines only bound the job, since they wait only when something is wrong.
    """
    grace, kill = _seconds(values, 'grace_seconds'), _seconds(values, 'kill_seconds')
    lock, nvml = _seconds(values, 'lock_timeout'), _seconds(values, 'nvml_timeout')
    deadline, settle = _seconds(values, 'assert_timeout'), _seconds(values, 'settle_seconds')
    plan = {
        'release': _job(grace + kill, lock + grace + kill + 4 * nvml),
        'prove': _job(deadline + settle, deadline + settle + 2 * nvml),
        'stop_units': _job(UNIT_STOP_SECONDS, UNIT_STOP_BOUND_SECONDS) if values.get('stop_units') else dict(SYNC),
    }
    for stage, job in plan.items():
        if check_mode or job['seconds'] < PROGRESS_SECONDS:
            plan[stage] = dict(SYNC)
    return plan


def awaited(plan):
    """The stages of ``plan`` that run as jobs, in no particular order."""
    return sorted(stage for stage, job in plan.items() if job['async'])
