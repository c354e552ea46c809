# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host import commands as _commands

C = 'cd' * 32


class BinHost:
    """A host with some binaries installed, answering each command in turn."""

    def __init__(self, answers, bins=('timeout',)):
        self.answers = list(answers)
        self.bins = bins
        self.calls = []
        self.environments = []

    def get_bin_path(self, name):
        return '/usr/bin/' + name if name in self.bins else None

    def run_command(self, argv, environ_update=None):
        self.calls.append(list(argv))
        self.environments.append(environ_update)
        return self.answers.pop(0)


@pytest.mark.parametrize('left, seconds', [(None, 30), (100.0, 30), (7.2, 8), (0.3, 1), (-4.0, 1)])
def test_a_command_gets_no_more_than_the_callers_deadline_leaves(left, seconds):
    host = BinHost([(0, 'ok', '')])
    run = _commands.command_runner(host, seconds_left=None if left is None else (lambda: left))
    assert run(['podman', 'ps']) == (0, 'ok', '')
    assert host.calls == [['/usr/bin/timeout', '--kill-after=5', str(seconds), 'podman', 'ps']]


def test_every_command_runs_in_the_c_locale_without_a_pager():
    host = BinHost([(0, '', '')])
    _commands.command_runner(host)(['systemctl', 'show'])
    assert host.environments == [{'LC_ALL': 'C', 'SYSTEMD_PAGER': ''}]


def test_extra_seconds_lengthen_the_deadline():
    host = BinHost([(0, '', '')])
    _commands.command_runner(host, extra_seconds=10.7)(['podman', 'stop', C])
    assert host.calls[0][:3] == ['/usr/bin/timeout', '--kill-after=5', '40']


@pytest.mark.parametrize('rc', [124, 137])
def test_a_command_that_does_not_answer_says_so(rc):
    host = BinHost([(rc, '', 'killed')])
    assert _commands.command_runner(host)(['systemctl', 'show']) == (
        rc, '', 'systemctl show did not answer within 30 s')


def test_without_timeout_installed_the_command_runs_as_it_is():
    host = BinHost([(124, 'out', 'err')], bins=())
    assert _commands.command_runner(host)(['systemctl', 'show']) == (124, 'out', 'err')
    assert host.calls == [['systemctl', 'show']]


def test_systemctl_show_names_the_properties_and_the_units():
    assert _commands.systemctl_show(['a.service', 'b.service'], ('Id', 'MainPID')) == [
        'systemctl', 'show', '--property=Id,MainPID', '--', 'a.service', 'b.service']


def test_list_units_command_lists_every_pattern_at_once():
    assert _commands.systemctl_list_units(['a.service', 'b-*']) == [
        'systemctl', 'list-units', '--all', '--plain', '--no-legend', '--full', '--', 'a.service', 'b-*']


def test_list_unit_files_command_lists_every_pattern_at_once():
    assert _commands.systemctl_list_unit_files(['a.service', 'b-*']) == [
        'systemctl', 'list-unit-files', '--no-legend', '--full', '--', 'a.service', 'b-*']


def test_a_unit_stop_is_queued_not_waited_for():
    assert _commands.systemctl_stop('vllm.service') == ['systemctl', 'stop', '--no-block', '--', 'vllm.service']


@pytest.mark.parametrize('cli, expected', [
    ('podman', ['podman', 'container', 'top', C, 'hpid']),
    ('docker', ['docker', 'container', 'top', C, '-o', 'pid']),
    ('nerdctl', ['nerdctl', 'container', 'top', C, '-o', 'pid']),
])
def test_container_top_lists_host_pids(cli, expected):
    assert _commands.container_top(cli, C) == expected


@pytest.mark.parametrize('seconds, expected', [(10.4, '10'), (-3, '0'), (0.6, '1')])
def test_container_stop_waits_whole_seconds(seconds, expected):
    assert _commands.container_stop('docker', C, seconds) == ['docker', 'stop', '--time', expected, C]


def test_only_docker_and_nerdctl_clear_the_restart_policy_first():
    assert _commands.container_no_restart('podman', C) is None
    assert _commands.container_no_restart('docker', C) == ['docker', 'update', '--restart=no', C]
    assert _commands.container_no_restart('nerdctl', C) == ['nerdctl', 'update', '--restart=no', C]
