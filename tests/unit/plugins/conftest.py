# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Per-host summaries in the shape the gpu_reclaim role keeps as gpu_reclaim_summary, for the
controller-side plugins' tests (fixture ``summaries``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
from types import SimpleNamespace

import pytest


def gpu(index, before, after, left_reasons=(), stuck=False):
    return {'index': index, 'uuid': 'GPU-%08d' % index, 'memory_total_mib': 98304,
            'memory_used_mib_before': before, 'memory_used_mib_after': after, 'released': [], 'protected': [],
            'left_reasons': list(left_reasons), 'stuck': stuck}


def summary(host, gpus, free, released=(), error=None, check_mode=False, stopped_units=(), stopped_containers=(),
            supervisors=(), sources=None, total_seconds=1.5, kept_units=()):
    result = {
        'host': host, 'check_mode': check_mode, 'nvml_available': True, 'max_used_mib': 64, 'gpus': list(gpus),
        'released': list(released), 'protected': [], 'survivors': [], 'supervisors': list(supervisors),
        'stopped_units': list(stopped_units), 'stopped_containers': list(stopped_containers), 'left_behind': {},
        'kept_units': list(kept_units), 'reset_gpus': [], 'free': free, 'stage_seconds': {'preflight': 0.5}, 'total_seconds': total_seconds,
    }
    if sources is not None:
        result['sources'] = list(sources)
    if error is not None:
        result['error'] = error
    return result


def holder(pid, last_signal, outcome='zombie'):
    return {'pid': pid, 'title': 'VLLM::Worker_TP%d' % pid, 'last_signal': last_signal, 'outcome': outcome}


# Orphaned workers on both GPUs, released and proven free.
ORPHANS = summary('orphans', [gpu(0, 88473, 0), gpu(1, 88473, 12)], True,
                  released=[holder(60, 'SIGTERM'), holder(61, 'SIGTERM'), holder(62, 'SIGKILL'),
                            holder(63, None, 'exited')],
                  stopped_units=['vllm-sim.service'],
                  supervisors=[{'pid': 50, 'outcome': 'frozen and killed'},
                               {'pid': 51, 'outcome': 'frozen, then thawed: the ladder has no SIGKILL step'}],
                  sources=[{'kind': 'parent', 'pid': 50, 'action': 'frozen and killed'},
                           {'kind': 'parent', 'pid': 51, 'action': 'frozen, then thawed'},
                           {'kind': 'systemd', 'unit': 'trainer.service', 'action': 'stopped'},
                           {'kind': 'pod', 'pod': 'p', 'action': 'left alone'},
                           {'kind': 'container', 'container': 'c', 'action': 'stop failed: timeout'}],
                  total_seconds=4.25)
# Free from the start: the first look is the proof.
FREE = summary('free', [gpu(0, 0, 0), gpu(1, 0, 0)], True, total_seconds=0.8)
# A stuck context on GPU 1 that no release frees.
STUCK = summary('stuck', [gpu(0, 0, 0), gpu(1, 30720, 30720, stuck=True)], False, stopped_units=['vllm-sim.service'],
                error='GPUs of stuck are not free. GPU 1 (GPU-00000001) busy: 30720 MiB used, no holder\n'
                      'Next step: rerun with gpu_reclaim_allow_reset: true.')
# Check mode: nothing signalled, nothing proven.
CHECK = summary('orphans', [gpu(0, 88473, None), gpu(1, 88473, None)], None, check_mode=True,
                released=[holder(60, None, 'planned'), holder(61, None, 'planned')],
                stopped_units=['vllm-sim.service'], supervisors=[{'pid': 50, 'outcome': 'planned'}],
                sources=[{'kind': 'parent', 'pid': 50, 'action': 'would be frozen and killed'}])


@pytest.fixture
def summaries():
    return SimpleNamespace(gpu=gpu, summary=summary, holder=holder, ORPHANS=copy.deepcopy(ORPHANS),
                           FREE=copy.deepcopy(FREE), STUCK=copy.deepcopy(STUCK), CHECK=copy.deepcopy(CHECK))
