# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One runner for every external command, and the argv of each: systemctl and the container runtimes.

``command_runner(host)`` gives ``run(argv) -> (rc, out, err)``: the host's ``run_command`` (Ansible's
``module.run_command`` in a module), in the C locale, without a pager, bounded by coreutils' ``timeout``
where it is installed. systemctl can block on a busy or wedged PID 1, and a container runtime on its daemon,
so every call has a deadline. The argv builders below are the only place that spells a command line; the code
that reads the output (``_plan.unit_audit``, ``_discover.containers``, ``_sources.registry``) names what it needs.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

COMMAND_TIMEOUT = 30
ENVIRONMENT = {'LC_ALL': 'C', 'SYSTEMD_PAGER': ''}
# coreutils' timeout exits 124 when the deadline passed, 137 when the command had to be killed.
TIMED_OUT = (124, 137)


def command_runner(host, extra_seconds=0, seconds_left=None):
    """``run(argv) -> (rc, out, err)``, bounded by coreutils' timeout where it is installed.

    Each command gets ``COMMAND_TIMEOUT`` seconds and ``extra_seconds`` more (a stop that waits as long as the
    ladder does). ``seconds_left()``: the time left to a deadline the caller was given; a command then gets no
    more than that (and at least 1 s). A command that timed out answers its rc and, as ``err``, which command
    did not answer within how long.
    """
    timeout = host.get_bin_path('timeout')

    def run(argv):
        seconds = COMMAND_TIMEOUT + int(extra_seconds)
        if seconds_left is not None:
            seconds = max(1, min(seconds, int(math.ceil(seconds_left()))))
        bounded = [timeout, '--kill-after=5', str(seconds)] + argv if timeout else argv
        rc, out, err = host.run_command(bounded, environ_update=dict(ENVIRONMENT))
        if timeout and rc in TIMED_OUT:
            return rc, out, '%s did not answer within %d s' % (' '.join(argv), seconds)
        return rc, out, err
    return run


# --- systemctl ----------------------------------------------------------------

def systemctl_show(units, properties):
    """The argv that reads ``properties`` of each of ``units``, in that order."""
    return ['systemctl', 'show', '--property=' + ','.join(properties), '--'] + list(units)


def systemctl_list_units(patterns):
    """The argv that lists the loaded units matching any of ``patterns`` (names or globs)."""
    return ['systemctl', 'list-units', '--all', '--plain', '--no-legend', '--full', '--'] + list(patterns)


def systemctl_list_unit_files(patterns):
    """The argv that lists the installed unit files matching any of ``patterns``.

    A stopped unit may be unloaded, so list-units alone can miss it.
    """
    return ['systemctl', 'list-unit-files', '--no-legend', '--full', '--'] + list(patterns)


def systemctl_stop(unit):
    # --no-block: a stop that waits for a holder ignoring SIGTERM would take TimeoutStopSec; the
    # ladder deals with the holders, the queued stop job keeps Restart= from bringing them back.
    return ['systemctl', 'stop', '--no-block', '--', unit]


# --- container runtimes (docker, podman, nerdctl) ------------------------------------

# The command line tool of each runtime that can confirm a container.
RUNTIME_CLIS = {'docker': 'docker', 'podman': 'podman', 'containerd': 'nerdctl'}


def container_inspect(cli, container_id, template):
    # ``container inspect``: an image, volume or network of that name is no container.
    return [cli, 'container', 'inspect', '--format', template, container_id]


def container_top(cli, container_id):
    """The runtime's own list of the container's processes, as host PIDs (a header line first)."""
    if cli == 'podman':
        return [cli, 'container', 'top', container_id, 'hpid']
    return [cli, 'container', 'top', container_id, '-o', 'pid']


def container_stop(cli, container_id, seconds):
    return [cli, 'stop', '--time', str(int(max(0, round(seconds)))), container_id]


def container_no_restart(cli, container_id):
    """docker (and nerdctl) restart an ``always`` container when the daemon restarts, even after a
    manual stop: its policy is cleared first. podman ignores the policy after ``podman stop``."""
    if cli == 'podman':
        return None
    return [cli, 'update', '--restart=no', container_id]
