# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which of the role's stages run after its first look, in order.

The role includes the stages in one looped task, so that a stage with nothing
to do costs no task header and no round trip. Each stage runs when its tag is
selected and it has something to do. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# In the order they run: (stage file, the tag that selects it).
ORDER = (
    ('harden', 'gpu_reclaim_harden'),
    ('stop_units', 'gpu_reclaim_stop_units'),
    ('stop_containers', 'gpu_reclaim_stop_units'),
    ('release', 'gpu_reclaim_release'),
    ('reset', 'gpu_reclaim_reset'),
    ('prove', 'gpu_reclaim_prove'),
)


def tag_selected(tag, run_tags, skip_tags):
    """Whether ansible-playbook's --tags and --skip-tags let a task tagged ``tag`` run."""
    run_tags = set(run_tags or ('all',))
    skip_tags = set(skip_tags or ())
    if tag in skip_tags or 'tagged' in skip_tags:
        return False
    return bool(run_tags & set(('all', 'tagged', tag)))


def stages_to_run(state, run_tags=('all',), skip_tags=()):
    """The stage files to include, from ``state``.

    ``state`` holds ``error`` (preflight failed: nothing runs), ``harden_units``,
    ``stop_units``, ``stop_containers`` (the variables' lists), ``free_at_start``
    (free, or held only by units kept running), ``release_done`` (the first look
    was the release), ``proved_in_release`` (the release proves the GPUs free
    too), ``allow_reset``, ``check_mode`` and ``waits`` (``_waits.wait_plan``:
    a stage that runs as an async job is followed by its ``<stage>_wait`` file).
    """
    if state.get('error'):
        return []
    free = bool(state.get('free_at_start'))
    stops = bool(state.get('stop_units')) or bool(state.get('stop_containers'))
    wanted = {
        'harden': bool(state.get('harden_units')),
        'stop_units': bool(state.get('stop_units')),
        'stop_containers': bool(state.get('stop_containers')),
        'release': not free and not state.get('release_done'),
        'reset': bool(state.get('allow_reset')) and not free,
        # A free host's first look was its proof, unless a stop comes between (prove.yml decides then).
        # Check mode changes nothing, so there is nothing to prove.
        # The release proved them itself (proved_in_release): nothing is left to prove.
        'prove': (not free or stops) and not state.get('check_mode') and not state.get('proved_in_release'),
    }
    # A stage that runs as an async job is followed by the task that awaits it (plugin_utils/_waits.py).
    awaited = set(stage for stage, job in (state.get('waits') or {}).items() if job.get('async'))
    files = []
    for name, tag in ORDER:
        if wanted[name] and tag_selected(tag, run_tags, skip_tags):
            files.append(name)
            if name in awaited:
                files.append(name + '_wait')
    return files
