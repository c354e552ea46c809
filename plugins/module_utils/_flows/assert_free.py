# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""discover -> prove: the whole of ``gpu_assert_free`` but its argument spec.

``prove(host, params)`` checks the input, looks at the host (``_flows.module_harness``),
waits until the selected GPUs are free (``_proof.verdict.wait_until_free``) and, with
``settle_seconds``, that they stay free (``_proof.settle``). Bad input raises
``_flows.module_harness.Failure`` before the first look.

``host`` is the module (an ``AnsibleModule``): only ``warn`` is used.
This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from .module_harness import Failure, check_options, container_identifier, find_holders, open_view, select_gpus
from .._host.nvml import NvmlSession, read_inventory
from .._host.procfs import read_stat
from .._proof.verdict import ProofError, check_left_alone, check_limits, verdict_message, wait_until_free
from .._base.checks import SettleError, check_settle_seconds
from .._proof.settle import settle

NVML_REQUIRED = ('Cannot prove the GPUs free: NVML cannot be used (%s) and require_nvml is true. Set require_nvml: '
                 'false to accept the /proc view alone.')
WITHOUT_NVML = ('NVML cannot be used (%s): GPU memory is not checked, and only holders that keep a /dev/nvidiaN '
                'node open are seen.')
# What a failure before the first look returns besides its message.
NOTHING_SEEN = dict(free=False, gpus=[], holders=[], waited_seconds=0.0, time_to_free_seconds=None,
                    settle_seconds_observed=0.0)
SECONDS_OPTIONS = ('timeout_seconds', 'poll_interval', 'nvml_timeout', 'settle_seconds')


def parent_title(pid):
    """A parent's command name, from /proc/PID/stat (which never blocks behind the process's memory map)."""
    try:
        return read_stat(pid)['comm'] if pid else None
    except (OSError, ValueError, KeyError):
        return None


def check_input(params):
    """Convert and check the options; raise ``Failure`` naming a bad option and its value."""
    check_options(params, SECONDS_OPTIONS)
    try:
        check_limits(params['max_used_mib'], params['max_used_percent'], params['timeout_seconds'],
                     params['poll_interval'])
        check_settle_seconds(params['settle_seconds'])
        return check_left_alone(params['left_alone'])
    except (ProofError, SettleError) as exc:
        raise Failure(str(exc))


def prove(host, params):
    """Whether the selected GPUs are free (and stay free); return ``(result, failed)``, ``msg`` in the result."""
    left_alone = check_input(params)
    session = NvmlSession(timeout=params['nvml_timeout'])
    try:
        view = open_view(host, params, WITHOUT_NVML, session=session, required=NVML_REQUIRED,
                         uid=os.geteuid(), **NOTHING_SEEN)
        indices = select_gpus(view, params, uid=os.geteuid(), **NOTHING_SEEN)
        result, failed = wait_free(host, params, session, indices, view.available, first_view=view,
                                   left_alone=left_alone, released_gpus=params.get('released_gpus'))
    finally:
        session.close()
    result['uid'] = os.geteuid()
    return result, failed


def wait_free(host, params, session, indices, nvml_available, first_view=None, left_alone=(), released_gpus=None):
    """Wait until the GPUs ``indices`` are free and, with ``settle_seconds``, that they stay free; return
    ``(result, failed)`` in ``gpu_assert_free``'s shape, ``uid`` left out.

    The proof of ``gpu_assert_free`` and of ``gpu_reclaim``'s ``prove``: ``params`` holds ``timeout_seconds``,
    ``settle_seconds``, ``poll_interval``, ``max_used_mib``, ``max_used_percent``, ``allow``, ``nvml_timeout``
    and the protection options, checked. The first look is ``first_view`` when the caller has just read it,
    else a new one from ``session``; ``nvml_available`` says whether NVML answered the caller.
    """
    state = {'view': first_view, 'warnings': []}
    # Asking a runtime about a holder's container never takes the proof past its deadline and settle.
    ends = time.monotonic() + params['timeout_seconds'] + params['settle_seconds']
    identify = container_identifier(host, seconds_left=lambda: ends - time.monotonic())

    def warn(text):
        if text not in state['warnings']:
            state['warnings'].append(text)

    def probe():
        current = state['view']
        if current is None:
            current = read_inventory(params['nvml_timeout'], session=session)
            if nvml_available and not current.available:
                # NVML went away (or hung) while waiting: nothing more can be proven.
                warn('NVML stopped answering while waiting: %s' % current.error)
        state['view'] = None
        snapshot = find_holders(warn, current, params, indices, identify=identify)
        state['holders'] = snapshot.holders
        # Whether NVML is relied on: once it answered, losing it mid-wait proves nothing.
        return snapshot.gpus, snapshot.holders, nvml_available or current.available

    verdict = wait_until_free(probe, timeout_seconds=params['timeout_seconds'],
                              poll_interval=params['poll_interval'], selected=indices,
                              max_used_mib=params['max_used_mib'], max_used_percent=params['max_used_percent'],
                              allow=params['allow'], left_alone=left_alone, released_gpus=released_gpus)
    time_to_free = verdict['waited_seconds'] if verdict['free'] else None
    settled = None
    if verdict['free'] and params['settle_seconds'] > 0:
        settled = settle(probe, [h['pid'] for h in state.get('holders') or []], params['settle_seconds'],
                         params['poll_interval'], selected=indices, allow=params['allow'],
                         parent_title=parent_title, max_used_mib=params['max_used_mib'],
                         max_used_percent=params['max_used_percent'])
        if not settled['free']:
            verdict = dict(settled['verdict'], free=False, holders=settled['holders'],
                           waited_seconds=verdict['waited_seconds'],
                           lines=['The GPUs read free after %.2f s, then did not stay free for %g s:'
                                  % (verdict['waited_seconds'], params['settle_seconds'])] + settled['lines'])

    for warning in state['warnings']:
        host.warn(warning)
    result = dict(
        changed=False,
        free=verdict['free'],
        gpus=verdict['gpus'],
        holders=verdict['holders'],
        waited_seconds=verdict['waited_seconds'],
        time_to_free_seconds=time_to_free,
        settle_seconds_observed=settled['observed_seconds'] if settled else 0.0,
        nvml_available=nvml_available,
    )
    result['msg'] = verdict_message(verdict)
    if not verdict['free']:
        return result, True
    if settled:
        result['msg'] += ', and stayed free for %.2f s' % settled['observed_seconds']
    return result, False
