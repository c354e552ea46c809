# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Why the stop stage refuses: containers the runtime does not know, or no runtime at all.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _first_line(text):
    for line in (text or '').splitlines():
        if line.strip():
            return line.strip()
    return ''


def _not_run(entry):
    # The command module could not execute the runtime: no rc, or its 'Error executing command' (ENOENT).
    msg = entry.get('msg') or ''
    return entry.get('rc') is None or 'No such file' in msg or msg.startswith('Error executing command')


def missing_containers(inspections, runtime, host, ignored=False):
    """The failure message for the ``container inspect`` results that did not succeed.

    ``inspections`` are the loop results of the stage's inspect task (``item``,
    ``rc``, ``stderr``, ``msg``); a result with no ``rc``, or the command
    module's ``Error executing command`` of a missing executable, means the
    runtime itself is missing.
    """
    names = [str(entry.get('item')) for entry in inspections]
    not_installed = any(_not_run(entry) for entry in inspections)
    if not_installed:
        why = 'the container runtime %s is not installed on %s' % (runtime, host)
    else:
        why = '; '.join('%s: %s' % (entry.get('item'), _first_line(entry.get('stderr')) or 'not found (rc %s)'
                                    % entry.get('rc')) for entry in inspections)
        why = '%s knows no container %s on %s (%s)' % (runtime, ', '.join(names), host, why)
    if ignored:
        return 'gpu_reclaim_stop_containers: %s; gone on without them (gpu_reclaim_stop_ignore_missing)' % why
    return ('gpu_reclaim_stop_containers: %s; nothing was stopped or released. Fix the names (or '
            'gpu_reclaim_container_runtime), or set gpu_reclaim_stop_ignore_missing: true to go on without them.'
            % why)
