# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess
import sys

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._release import grace as _grace
from ansible_collections.gpuops.reclaim.plugins.module_utils._host.procfs import read_status

TERM_BIT = '%016x' % (1 << 14)
NONE = '0000000000000000'


def status(nspid='4242', ignored=NONE, caught=NONE):
    return {'NSpid': nspid, 'SigIgn': ignored, 'SigCgt': caught}


@pytest.mark.parametrize('fields, signum, expected', [
    (status(), signal.SIGTERM, None),
    (status(ignored=TERM_BIT), signal.SIGTERM, _grace.SIGTERM_IGNORED),
    # the init of a nested PID namespace: SIGTERM from outside is dropped without a handler
    (status(nspid='4242\t1'), signal.SIGTERM, _grace.NAMESPACE_INIT),
    (status(nspid='4242\t17\t1'), signal.SIGTERM, _grace.NAMESPACE_INIT),
    (status(nspid='4242\t1', caught=TERM_BIT), signal.SIGTERM, None),
    # PID 1 of the reader's own namespace (one value) is not a nested init
    (status(nspid='1'), signal.SIGTERM, None),
    (status(nspid='4242\t7'), signal.SIGTERM, None),
    # SIGKILL and SIGSTOP always reach it
    (status(nspid='4242\t1'), signal.SIGKILL, None),
    (status(ignored=TERM_BIT), signal.SIGSTOP, None),
    (status(nspid='4242\t1', caught=TERM_BIT), signal.SIGINT, 'namespace-init-without-handler'),
    (status(nspid='4242\t1', caught='%016x' % (1 << 1)), signal.SIGINT, None),
    ({}, signal.SIGTERM, None),
    ({'NSpid': 'garbage', 'SigIgn': 'zz'}, signal.SIGTERM, None),
])
def test_grace_case(fields, signum, expected):
    found = _grace.grace_case(fields, signum)
    if expected is None:
        assert found is None
    else:
        assert found[0] == expected
        assert found[1]


def test_ignored_wins_and_reason_names_the_signal():
    case, reason = _grace.grace_case(status(nspid='9\t1', ignored=TERM_BIT), signal.SIGTERM)
    assert (case, reason) == ('sigterm-ignored', 'ignores SIGTERM')
    case, reason = _grace.grace_case(status(nspid='9\t1'), signal.SIGTERM)
    assert 'PID namespace' in reason and 'SIGTERM' in reason


def test_this_process_is_no_namespace_init():
    mine = read_status(os.getpid())
    assert not _grace.is_namespace_init(mine)
    assert _grace.namespace_pids(mine)[-1] == os.getpid() or len(_grace.namespace_pids(mine)) > 1


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists('/usr/bin/unshare'), reason='needs root and unshare')
def test_a_real_namespace_init_is_recognised():
    """unshare --pid --fork: the child is PID 1 of its own namespace, with no SIGTERM handler."""
    proc = subprocess.Popen(['unshare', '--pid', '--fork', sys.executable, '-c', 'import time; time.sleep(30)'],
                            start_new_session=True)
    try:
        init = None
        for dummy in range(200):
            children = open('/proc/%d/task/%d/children' % (proc.pid, proc.pid)).read().split()
            if children:
                init = int(children[0])
                fields = read_status(init)
                if _grace.namespace_pids(fields)[-1:] == [1]:
                    break
            subprocess.call(['sleep', '0.01'])
        assert init is not None
        fields = read_status(init)
        assert _grace.is_namespace_init(fields)
        assert _grace.grace_case(fields, signal.SIGTERM)[0] == _grace.NAMESPACE_INIT
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
