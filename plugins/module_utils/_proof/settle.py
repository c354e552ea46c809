# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A proof that holds: once the GPUs read free, they must stay free for a settle window.

A snapshot proof passes right after a kill even when a respawning parent, a
``Restart=`` unit, a container restart policy or kubelet starts a new holder
a second later. ``settle`` therefore keeps looking, every ``poll_interval``
seconds for ``settle_seconds`` from the moment the GPUs first read free, at
the three things that make a GPU busy again:

- its memory (``_proof.verdict.evaluate``: above the limit);
- the NVML process lists (``_proof.verdict.evaluate``: a compute or graphics holder);
- a process opening one of its device nodes that was not there when the GPUs
  first read free (the ``/proc`` scan of every look), unless it is protected,
  this module or one of its ancestors, or named in ``allow``.

The first such look ends the window and fails the proof; each line names the
holder, its parent, its unit, container or pod, and the next step. Pure apart
from the injected probe, clock and sleep.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from .._base.advice import CONTAINER_COMEBACK_STEP, SERVICE_COMEBACK_STEP
from .verdict import evaluate, is_allowed


def _watched(record, selected, allow):
    """Whether a process newly holding a selected GPU counts against the settle."""
    if record.get('protected') or record.get('is_self') or is_allowed(record, allow):
        return False
    if selected is None:
        return True
    return bool(set(record.get('gpus') or []) & set(selected))


def next_step(record, parent_title=None):
    """What the operator does about a holder that came back."""
    container = record.get('container') or {}
    if container.get('pod_uid'):
        return 'drain the node (kubectl drain): kubelet restarts pod %s' % container['pod_uid']
    if container.get('systemd_unit'):
        # A Quadlet-style unit runs the container, and its Restart= would start it again after a plain stop.
        return 'stop its unit (systemctl stop %s), which runs the container, then run again' % container['systemd_unit']
    if container:
        return (CONTAINER_COMEBACK_STEP
                % ({'containerd': 'nerdctl'}.get(container.get('runtime'), container.get('runtime')),
                   (container.get('id') or '')[:12]))
    ppid = record.get('ppid')
    if ppid and ppid > 1 and not record.get('orphaned'):
        return ('stop its parent pid %s (%s), which started it, or run gpuops.reclaim.gpu_reclaim with a scope that '
                'includes it, then run again' % (ppid, parent_title or '?'))
    unit = record.get('systemd_unit')
    if unit and unit.endswith('.service'):
        return SERVICE_COMEBACK_STEP % (unit, unit)
    return 'find what starts it (a cron job, a scheduler) and stop it, then run again'


def describe_comeback(record, gpus, after_seconds, parent_title=None):
    """``pid 42 (python3 worker.py) took GPU 0 back 0.84 s after ...; parent ...; next step: ...``."""
    container = record.get('container') or {}
    owner = []
    if record.get('systemd_unit'):
        owner.append('unit %s' % record['systemd_unit'])
    if container.get('pod_uid'):
        owner.append('pod %s' % container['pod_uid'])
    elif container:
        owner.append('%s container %s' % (container.get('runtime'), (container.get('id') or '')[:12]))
    return 'pid %s (%s) took GPU %s back %.2f s after the GPUs read free; parent pid %s (%s)%s; next step: %s' % (
        record.get('pid'), record.get('title') or record.get('name'), ', '.join(str(i) for i in gpus) or '?',
        after_seconds, record.get('ppid'), parent_title or '?', ''.join('; ' + text for text in owner),
        next_step(record, parent_title))


def settle(probe, baseline_pids, settle_seconds, poll_interval, selected=None, allow=(), parent_title=None,
           clock=time.monotonic, sleep=time.sleep, **criteria):
    """Watch the GPUs for ``settle_seconds`` after they first read free.

    ``probe()`` returns ``(gpus, holders, nvml_available)`` as for
    ``_proof.verdict.wait_until_free``; ``baseline_pids`` are the PIDs of every
    holder (of any kind) at the look that read free; ``parent_title(pid)``
    names a parent (or None). ``criteria`` go to ``_proof.verdict.evaluate``.

    Returns ``{"free", "observed_seconds", "lines", "holders", "verdict"}``:
    ``free`` False at the first look that finds a GPU busy or a new holder.
    """
    baseline = set(baseline_pids)
    start = clock()
    names = parent_title or (lambda pid: None)
    while True:
        gpus, holders, nvml_available = probe()
        verdict = evaluate(gpus, holders, selected=selected, allow=allow, nvml_available=nvml_available, **criteria)
        observed = clock() - start
        newcomers = [h for h in holders if h['pid'] not in baseline and _watched(h, selected, allow)]
        busy = dict((h['pid'], h) for h in verdict['holders'])
        for record in newcomers:
            busy.setdefault(record['pid'], record)
        if busy or not verdict['free']:
            lines = []
            for pid in sorted(busy):
                record = busy[pid]
                gpus_of = sorted(set(record.get('gpus') or []) & set(selected)) if selected is not None \
                    else list(record.get('gpus') or [])
                lines.append(describe_comeback(record, gpus_of, observed, names(record.get('ppid'))))
            if not busy:
                lines.extend(verdict['lines'])
                lines.append('The memory came back during the %g s settle with no holder seen.' % settle_seconds)
            return {'free': False, 'observed_seconds': round(observed, 3), 'lines': lines,
                    'holders': [busy[pid] for pid in sorted(busy)], 'verdict': verdict}
        if observed >= settle_seconds:
            return {'free': True, 'observed_seconds': round(observed, 3), 'lines': [], 'holders': [],
                    'verdict': verdict}
        sleep(max(0.0, min(poll_interval, settle_seconds - observed)))
