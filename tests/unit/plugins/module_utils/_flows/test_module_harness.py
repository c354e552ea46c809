# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One look at the host (``_flows.module_harness``), with a stand-in NVML and stand-in device nodes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._flows import module_harness as _discovery
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import commands as _commands
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml
from ansible_collections.gpuops.reclaim.plugins.module_utils._flows.module_harness import Failure


class Host:
    """What a module passes for itself: here, only the warnings it was given."""

    def __init__(self):
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)


def params(**extra):
    values = {'gpus': [], 'nvml_timeout': 2.0, 'require_nvml': False, 'protect': [], 'unprotect': [],
              'protect_units': []}
    values.update(extra)
    return values


@pytest.fixture(autouse=True)
def stand_in_nodes(monkeypatch, fake_dev):
    """Discovery sees the stand-in device nodes only, never the host's."""
    monkeypatch.setattr(_discovery, 'discover', functools.partial(_holders.discover, dev_dir=fake_dev))
    monkeypatch.setattr(_discovery, 'host_gpus', functools.partial(_holders.host_gpus, dev_dir=fake_dev))
    return fake_dev


@pytest.fixture
def two_gpus(monkeypatch, fake_nvml_factory):
    fake = fake_nvml_factory(fake_nvml_factory.h200_gpus(2, used_mib=0))
    monkeypatch.setattr(_nvml, 'pynvml', fake)
    return fake


@pytest.fixture
def no_library(monkeypatch, fake_nvml_factory):
    fake = fake_nvml_factory(())
    fake.init_error = fake.NVMLError_LibraryNotFound()
    monkeypatch.setattr(_nvml, 'pynvml', fake)
    return fake


def test_argument_spec_adds_the_shared_options():
    spec = _discovery.argument_spec({'units': {'type': 'list'}}, gpus=False)
    assert set(spec) == {'units', 'nvml_timeout', 'require_nvml'}
    spec = _discovery.argument_spec(protection=True)
    assert set(spec) == {'gpus', 'nvml_timeout', 'require_nvml', 'protect', 'protect_units', 'unprotect',
                         'unprotect_all_confirmed'}


@pytest.mark.parametrize('psutil_ok, pynvml_ok, require_nvml, expected', [
    (True, True, True, None),
    (False, True, False, 'psutil'),
    (True, False, True, 'nvidia-ml-py'),
    (True, False, False, None),
])
def test_missing_library_names_the_first_one_needed(monkeypatch, psutil_ok, pynvml_ok, require_nvml, expected):
    monkeypatch.setattr(_discovery, 'HAS_PSUTIL', psutil_ok)
    monkeypatch.setattr(_discovery, 'HAS_PYNVML', pynvml_ok)
    missing = _discovery.missing_library(require_nvml)
    assert (missing[0] if missing else None) == expected


@pytest.mark.parametrize('values, message', [
    ({'nvml_timeout': True}, 'nvml_timeout'),
    ({'nvml_timeout': 0}, 'nvml_timeout must be greater than 0 and at most 600 seconds; got: 0'),
    ({'poll_interval': 'soon'}, 'poll_interval'),
])
def test_bad_seconds_fail_naming_the_option(values, message):
    with pytest.raises(Failure, match=message):
        _discovery.check_seconds_options(params(**values), ('poll_interval', 'nvml_timeout'))


def test_seconds_are_converted_in_place():
    values = params(nvml_timeout='1.5', poll_interval=2)
    _discovery.check_seconds_options(values, ('poll_interval', 'nvml_timeout'))
    assert values['nvml_timeout'] == 1.5 and values['poll_interval'] == 2.0


def test_look_selects_and_discovers(two_gpus):
    host = Host()
    found = _discovery.look(host, params(gpus=['1']), 'no NVML: %s')
    assert found.view.available and found.indices == [1]
    assert [gpu['index'] for gpu in found.snapshot.gpus] == [1]
    assert host.warnings == []


def test_a_bad_selector_fails_naming_it(two_gpus):
    with pytest.raises(Failure) as caught:
        _discovery.look(Host(), params(gpus=['7']), 'no NVML: %s')
    assert str(caught.value).startswith("gpus[0]: no GPU matches '7'")
    assert caught.value.fields == {'nvml_available': True}


def test_without_nvml_a_warning_or_a_failure(no_library):
    host = Host()
    found = _discovery.look(host, params(), 'no NVML (%s), /proc only')
    assert not found.view.available and found.indices == [0, 1, 2, 3]  # the stand-in nodes
    assert host.warnings == ['no NVML (NVML could not be initialised: NVML Shared Library Not Found), /proc only']
    with pytest.raises(Failure) as caught:
        _discovery.open_view(Host(), params(require_nvml=True), 'unused %s', required='required: %s', uid=0)
    assert str(caught.value) == 'required: NVML could not be initialised: NVML Shared Library Not Found'
    assert caught.value.fields == {'nvml_available': False, 'uid': 0}


def test_find_holders_passes_the_warnings_on(two_gpus):
    warnings = []
    snapshot = _discovery.find_holders(warnings.append, _nvml.read_inventory(2.0), params(unprotect=['nosuch']))
    assert [gpu['index'] for gpu in snapshot.gpus] == [0, 1]
    assert len(warnings) == 1 and warnings[0].startswith('unprotect names no default protected executable or unit: nosuch')


class Snapshot:
    def __init__(self, foreign_pids, holders=()):
        self.foreign_pids = list(foreign_pids)
        self.holders = list(holders)
        self.warnings = []


@pytest.mark.parametrize('foreign, shares, refused', [([386], False, True), ([386], True, False), ([], False, False)])
def test_find_holders_refuses_outside_the_host_pid_namespace_before_identifying(monkeypatch, foreign, shares, refused):
    monkeypatch.setattr(_discovery, 'discover', lambda *args, **kwargs: Snapshot(foreign))
    asked = []
    if refused:
        with pytest.raises(Failure) as caught:
            _discovery.find_holders(lambda text: None, None, params(), identify=asked.append, shares_namespace=shares)
        assert 'Run it in the host' in str(caught.value)
        assert caught.value.fields == {'foreign_pids': [386]}
        assert asked == []
    else:
        _discovery.find_holders(lambda text: None, None, params(), identify=asked.append, shares_namespace=shares)
        assert asked == [[]]


@pytest.mark.parametrize('looks, refused', [
    # A listed process that exited before its /proc entry was read is gone on the second look.
    ([[386], []], None),
    ([[386], [386]], [386]),
    # Only what both looks lack is refused; a PID new on the second look is not (it may be exiting too).
    ([[386, 387], [387, 390]], [387]),
    ([[386], [390]], None),
])
def test_a_pid_missing_on_one_look_only_is_not_refused(monkeypatch, looks, refused):
    snapshots = [Snapshot(foreign, holders=[{'look': n}]) for n, foreign in enumerate(looks)]
    monkeypatch.setattr(_discovery, 'discover', lambda *args, **kwargs: snapshots.pop(0))
    asked = []
    if refused:
        with pytest.raises(Failure) as caught:
            _discovery.find_holders(lambda text: None, None, params(), identify=asked.append, shares_namespace=False)
        assert caught.value.fields == {'foreign_pids': refused}
        assert 'NVML lists PID %s,' % ', '.join(str(pid) for pid in refused) in str(caught.value)
        assert asked == []
    else:
        snapshot = _discovery.find_holders(lambda text: None, None, params(), identify=asked.append,
                                           shares_namespace=False)
        assert snapshot.holders == [{'look': 1}] and asked == [[{'look': 1}]]
    assert snapshots == []


class BinHost(Host):
    """A host with run_command and get_bin_path: the runtime's answers come from a table."""

    def __init__(self, answers, bins=('podman', 'timeout')):
        Host.__init__(self)
        self.answers = answers
        self.bins = bins
        self.calls = []

    def get_bin_path(self, name):
        return '/usr/bin/' + name if name in self.bins else None

    def run_command(self, argv, environ_update=None):
        self.calls.append(list(argv))
        return self.answers.pop(0)


def test_container_identifier_confirms_through_the_runtime_under_a_deadline(monkeypatch):
    ident = 'cd' * 32
    monkeypatch.setattr(_discovery, 'read_cgroup_text', lambda pid: '0::/machine.slice/libpod-%s.scope\n' % ident)
    host = BinHost([(0, '%s\tvllm\tlocalhost/vllm:latest\t500\talways\t<no value>\n' % ident, '')])
    records = [{'pid': 500, 'container': {'runtime': 'podman', 'id': ident}}, {'pid': 9, 'container': None}]
    _discovery.container_identifier(host)(records)
    assert host.calls[0][:4] == ['/usr/bin/timeout', '--kill-after=5', str(_commands.COMMAND_TIMEOUT), 'podman']
    assert records[0]['container']['confirmed'] and records[0]['container']['name'] == 'vllm'
    # Polled again (the proof polls): each container is asked about once per module run.
    identify = _discovery.container_identifier(BinHost([(0, '%s\tvllm\timg\t500\talways\t\n' % ident, '')]))
    for dummy in range(3):
        again = [{'pid': 500, 'container': {'runtime': 'podman', 'id': ident}}]
        identify(again)
        assert again[0]['container']['confirmed']
    # No container among the holders: no runtime is asked, nothing is looked up.
    quiet = BinHost([])
    _discovery.container_identifier(quiet)([{'pid': 9, 'container': None}])
    assert quiet.calls == []


class Ended(Exception):
    pass


class Module:
    """What ``answer`` ends: ``exit_json`` and ``fail_json`` end the module, as Ansible's do."""

    def __init__(self, values):
        self.params = values
        self.ended = None

    def exit_json(self, **result):
        self.ended = ('exit', result)
        raise Ended()

    def fail_json(self, **result):
        self.ended = ('fail', result)
        raise Ended()


@pytest.mark.parametrize('flow, expected', [
    (lambda host, values, extra: ({'msg': 'done %s %s' % (values['x'], extra)}, False), ('exit', {'msg': 'done 1 2'})),
    (lambda host, values, extra: ({'msg': 'not free', 'free': False}, True), ('fail', {'msg': 'not free', 'free': False})),
])
def test_answer_ends_the_module_with_the_flow_result(flow, expected):
    module = Module({'x': 1})
    with pytest.raises(Ended):
        _discovery.answer(module, flow, extra=2)
    assert module.ended == expected


def test_answer_turns_a_failure_into_fail_json():
    def flow(host, values):
        raise Failure('gpus[0]: no GPU matches', nvml_available=True)

    module = Module({})
    with pytest.raises(Ended):
        _discovery.answer(module, flow)
    assert module.ended == ('fail', {'msg': 'gpus[0]: no GPU matches', 'nvml_available': True})
