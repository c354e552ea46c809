# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._proof.verdict import (
    FAIL_FAST_POLLS,
    FAIL_FAST_SECONDS,
    check_left_alone,
    ProofError,
    check_limits,
    evaluate,
    is_allowed,
    wait_until_free,
)

UUID5 = 'GPU-8cdf1234-0000-4000-8000-000000000005'


def gpu(index, used, total=98304, uuid=None):
    return {'index': index, 'uuid': uuid or 'GPU-%08d-0000' % index, 'memory_used_mib': used,
            'memory_total_mib': total, 'holder_pids': []}


def holder(pid, gpus, state='sleeping', kind='compute', **extra):
    record = {'pid': pid, 'ppid': 1, 'name': 'VLLM::Worker_TP', 'title': 'VLLM::Worker_TP5',
              'exe': '/usr/bin/python3.12', 'state': state, 'wchan': None, 'gpus': list(gpus),
              'gpu_memory_mib': dict((str(i), 96798) for i in gpus), 'kind': kind, 'nvml_types': ['compute'],
              'orphaned': True}
    record.update(extra)
    return record


def test_free_host():
    verdict = evaluate([gpu(0, 0), gpu(1, 12)], [])
    assert verdict['free'] is True and verdict['lines'] == []
    assert [g['free'] for g in verdict['gpus']] == [True, True]


def test_busy_gpu_message_names_memory_holders_and_next_step():
    verdict = evaluate([gpu(5, 96798, uuid=UUID5), gpu(6, 0)], [holder(233730, [5])])
    assert verdict['free'] is False
    assert verdict['lines'] == [
        'GPU 5 (GPU-8cdf\u2026) busy: 96798 MiB used; holders: pid 233730 VLLM::Worker_TP5 (orphaned, parent 1, state S)',
        'Next step: run gpuops.reclaim.gpu_reclaim (or the role gpuops.reclaim.gpu_reclaim) to release the holders.',
    ]
    assert [h['pid'] for h in verdict['holders']] == [233730]
    assert verdict['gpus'][0]['holder_pids'] == [233730] and verdict['gpus'][1]['free'] is True


def test_stuck_context_names_the_reset():
    verdict = evaluate([gpu(3, 20480, uuid='GPU-abcdef0123')], [])
    assert verdict['lines'] == [
        'GPU 3 (GPU-abcd\u2026) busy: 20480 MiB used; holders: none (stuck context)',
        'Next step for GPU 3: memory is held with no holder (stuck context), so a GPU reset '
        '(gpu_reclaim_allow_reset in the role, or nvidia-smi --gpu-reset -i 3) or a reboot.',
    ]


def test_holder_in_disk_sleep_names_the_reset():
    verdict = evaluate([gpu(0, 4000, uuid='GPU-1')], [holder(7, [0], state='disk-sleep', wchan='uvm_spin_loop',
                                                             orphaned=False, ppid=300)])
    assert verdict['lines'] == [
        'GPU 0 (GPU-1) busy: 4000 MiB used; holders: pid 7 VLLM::Worker_TP5 (parent 300, state D, wchan uvm_spin_loop)',
        'Next step for GPU 0: a holder in state D cannot be killed, so a GPU reset '
        '(gpu_reclaim_allow_reset in the role, or nvidia-smi --gpu-reset -i 0) or a reboot.',
    ]


@pytest.mark.parametrize('used, mib, percent, free', [
    (64, None, None, True),
    (65, None, None, False),
    (65, 100, None, True),
    (0, 0, None, True),
    (1, 0, None, False),
    (983, None, 1, True),     # 1 % of 98304 MiB is 983.04 MiB
    (984, None, 1, False),
])
def test_memory_limits(used, mib, percent, free):
    assert evaluate([gpu(0, used)], [], max_used_mib=mib, max_used_percent=percent)['free'] is free


def test_clients_never_make_a_gpu_busy_but_graphics_do():
    client = holder(10, [0], kind='client', gpu_memory_mib={}, nvml_types=[])
    assert evaluate([gpu(0, 0)], [client])['free'] is True
    xorg = holder(11, [0], kind='client', nvml_types=['graphics'], gpu_memory_mib={})
    assert evaluate([gpu(0, 0)], [xorg])['free'] is False


@pytest.mark.parametrize('allow, allowed', [
    (['dcgm-exporter'], True),
    (['4242'], True),
    ([4242], True),
    (['python3'], False),
    ([], False),
])
def test_allow_by_executable_or_pid(allow, allowed):
    exporter = holder(4242, [0], name='dcgm-exporter', exe='/usr/bin/dcgm-exporter', title='dcgm-exporter -f x',
                      gpu_memory_mib={'0': 300})
    assert is_allowed(exporter, allow) is allowed
    verdict = evaluate([gpu(0, 300)], [exporter], allow=allow)
    # The allowed holder's own memory is accepted too.
    assert verdict['free'] is allowed
    if allowed:
        assert [h['pid'] for h in verdict['allowed']] == [4242]


def test_only_selected_gpus_count():
    verdict = evaluate([gpu(0, 0), gpu(1, 5000)], [holder(9, [1])], selected=[0])
    assert verdict['free'] is True and [g['index'] for g in verdict['gpus']] == [0]


def test_without_nvml_memory_is_unknown_and_holders_decide():
    verdict = evaluate([gpu(0, None)], [], nvml_available=False)
    assert verdict['free'] is True
    verdict = evaluate([gpu(0, None)], [holder(1, [0])], nvml_available=False)
    assert verdict['lines'][0].startswith('GPU 0 (GPU-0000\u2026) busy: unknown MiB used; holders: pid 1')


@pytest.mark.parametrize('kwargs, message', [
    ({'max_used_mib': -1}, 'max_used_mib: must be 0 or more; got: -1'),
    ({'max_used_percent': 101}, 'max_used_percent: must be from 0 to 100; got: 101'),
    ({'max_used_percent': -0.5}, 'max_used_percent: must be from 0 to 100; got: -0.5'),
    ({'timeout_seconds': -1}, 'timeout_seconds: must be a number of seconds from 0 to 3600; got: -1'),
    ({'timeout_seconds': 7200}, 'timeout_seconds: must be a number of seconds from 0 to 3600; got: 7200'),
    ({'poll_interval': 0}, 'poll_interval: must be a number of seconds from 0.005 to 5; got: 0'),
])
def test_bad_limits(kwargs, message):
    with pytest.raises(ProofError) as info:
        check_limits(**kwargs)
    assert str(info.value) == message


class Clock:
    def __init__(self):
        self.now = 0.0

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds > 0
        self.now += seconds


def test_wait_returns_as_soon_as_free():
    clock = Clock()

    def probe():
        used = 5000 if clock.now < 1.2 else 0
        return [gpu(0, used)], [], True

    verdict = wait_until_free(probe, timeout_seconds=10, poll_interval=0.05, clock=clock.clock, sleep=clock.sleep)
    assert verdict['free'] is True
    assert 1.2 <= verdict['waited_seconds'] <= 1.25


def test_wait_gives_up_at_the_timeout():
    clock = Clock()
    verdict = wait_until_free(lambda: ([gpu(0, 5000)], [], True), timeout_seconds=2, poll_interval=0.05,
                              clock=clock.clock, sleep=clock.sleep)
    assert verdict['free'] is False and verdict['waited_seconds'] == pytest.approx(2.0)


def test_no_timeout_checks_once():
    clock = Clock()
    verdict = wait_until_free(lambda: ([gpu(0, 5000)], [], True), clock=clock.clock, sleep=clock.sleep)
    assert verdict['polls'] == 1 and verdict['waited_seconds'] == 0.0


def test_unknown_memory_is_not_free_when_nvml_was_relied_on():
    gpus = [{'index': 0, 'uuid': 'GPU-0', 'memory_used_mib': None, 'memory_total_mib': 98304}]
    relied = evaluate(gpus, [], nvml_available=True)
    assert relied['free'] is False
    assert relied['gpus'][0]['reasons'] == ['memory unknown: NVML did not answer']
    without = evaluate(gpus, [], nvml_available=False)
    assert without['free'] is True


def test_a_holder_in_a_pod_names_the_pod_and_says_to_drain_the_node():
    gpus = [{'index': 0, 'uuid': 'GPU-0', 'memory_used_mib': 4096, 'memory_total_mib': 98304}]
    pod = {'runtime': 'containerd', 'id': 'ab' * 32, 'pod_uid': 'u-1'}
    holders = [{'pid': 145, 'ppid': 1, 'title': 'pod-worker', 'kind': 'compute', 'gpus': [0], 'state': 'sleeping',
                'gpu_memory_mib': {'0': 4096}, 'container': pod}]
    verdict = evaluate(gpus, holders)
    assert not verdict['free']
    assert ('Next step for Kubernetes pod u-1 (pid 145): kubelet restarts it whatever is done on the host; drain the '
            'node, or release it anyway with gpu_reclaim_scope_pods.') in verdict['lines']


# --- keepers, and holders no release takes away --------------------------------------

def test_a_keeper_blocks_its_gpu_and_is_named_with_its_creator():
    keeper = holder(50, [0], kind='client', keeps=[{'gpu': 0, 'creator_pids': [41], 'memory_mib': 6144,
                                                    'evidence': ['received'], 'rank': 3}])
    verdict = evaluate([gpu(0, 6144)], [keeper])
    assert not verdict['free'] and verdict['gpus'][0]['holder_pids'] == [50]
    assert 'keeps the context of exited pid 41 on GPU 0' in verdict['lines'][0]
    # A process holds the node: no reset is suggested.
    assert not any('GPU reset' in line for line in verdict['lines'])


def test_no_reset_while_an_unprotected_process_holds_the_node():
    client = holder(60, [0], kind='client')
    assert not any('GPU reset' in line for line in evaluate([gpu(0, 6144)], [client])['lines'])
    protected = holder(61, [0], kind='client', protected=True, protected_reason='protected executable')
    assert any('GPU reset' in line for line in evaluate([gpu(0, 6144)], [protected])['lines'])


def test_the_proof_gives_up_early_when_only_protected_holders_keep_the_gpu():
    protected = holder(62, [0], protected=True, protected_reason='protected executable nv-hostengine',
                       gpu_memory_mib={'0': 6144})
    polls = []
    now = [0.0]

    def probe():
        polls.append(now[0])
        return [gpu(0, 6144)], [protected], True

    def sleep(seconds):
        now[0] += seconds
    verdict = wait_until_free(probe, timeout_seconds=30, poll_interval=0.1, clock=lambda: now[0], sleep=sleep)
    assert not verdict['free'] and verdict['nothing_in_flight']
    # At least three polls spanning a second: well inside the 30 s timeout.
    assert len(polls) >= FAIL_FAST_POLLS and FAIL_FAST_SECONDS <= verdict['waited_seconds'] < FAIL_FAST_SECONDS + 0.2
    assert any('protected, so never signalled' in line for line in verdict['lines'])
    assert 'protected (protected executable nv-hostengine)' in verdict['lines'][0]


def test_after_a_release_each_holder_it_left_alone_is_named_with_the_option_that_includes_it():
    other_user = holder(70, [0], user='researcher', gpu_memory_mib={'0': 4096})
    newcomer = holder(71, [1])
    verdict = evaluate([gpu(0, 4096), gpu(1, 96798)], [other_user, newcomer],
                       left_alone=check_left_alone([{'pid': 70, 'reason': 'user not selected', 'title': 'x'}]))
    text = '\n'.join(verdict['lines'])
    assert 'left alone by the release: user not selected' in verdict['lines'][0]
    assert ('Next step for pid 70: the release left it alone (user not selected); it is included by users '
            '(gpu_reclaim_scope_users in the role).') in verdict['lines']
    assert 'Next step for pid 71: it holds the GPU although the release ran' in text
    assert 'run gpuops.reclaim.gpu_reclaim' not in text
    # Without a release the proof still points to one.
    assert 'run gpuops.reclaim.gpu_reclaim' in '\n'.join(evaluate([gpu(1, 96798)], [newcomer])['lines'])


def test_the_proof_gives_up_early_on_what_the_release_left_alone():
    other_user = holder(70, [0], gpu_memory_mib={'0': 4096})
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds
    verdict = wait_until_free(lambda: ([gpu(0, 4096)], [other_user], True), timeout_seconds=30, poll_interval=0.1,
                              clock=lambda: now[0], sleep=sleep, left_alone={70: 'user not selected'})
    assert verdict['polls'] >= FAIL_FAST_POLLS and verdict['waited_seconds'] < FAIL_FAST_SECONDS + 0.2
    assert not verdict['free']


@pytest.mark.parametrize('entries', [[{'reason': 'x'}], [{'pid': 'abc'}], [{'pid': True}], [{'pid': -3}], ['70']])
def test_left_alone_items_must_name_a_pid(entries):
    with pytest.raises(ProofError, match=r'^left_alone\[0\]: must be a dict with a positive integer pid; got: '):
        check_left_alone(entries)


def test_after_a_release_memory_no_holder_explains_elsewhere_fails_fast_once_it_stops_dropping():
    readings = itertools.chain([8192, 6144], itertools.repeat(4096))
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    def probe():
        return [gpu(0, next(readings))], [], True
    verdict = wait_until_free(probe, timeout_seconds=30, poll_interval=0.1, clock=lambda: now[0], sleep=sleep,
                              left_alone={}, released_gpus=[1])
    # While it dropped the proof waited; once it had stopped, a second of polls.
    assert not verdict['free'] and verdict['nothing_in_flight']
    assert 0.2 + FAIL_FAST_SECONDS <= verdict['waited_seconds'] < 0.2 + FAIL_FAST_SECONDS + 0.2


def test_memory_on_a_gpu_the_release_just_released_is_waited_on():
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds
    verdict = wait_until_free(lambda: ([gpu(0, 4096)], [], True), timeout_seconds=2, poll_interval=0.5,
                              clock=lambda: now[0], sleep=sleep, left_alone={}, released_gpus=[0])
    assert verdict['polls'] == 5 and not verdict['nothing_in_flight']
