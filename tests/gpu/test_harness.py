"""Tests of the acceptance harness's parts that need no GPU.

    python3 -m pytest tests/gpu

Processes run with stand-in device nodes (``mknod``, root only) instead of
CUDA and NVML: titles, orphaning, SIGTERM handling, the private PID namespace
of the one-liner, holder listing, and the result and README writers.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), 'bench'))

import acceptance  # noqa: E402  pylint: disable=wrong-import-position
import benchlib  # noqa: E402  pylint: disable=wrong-import-position
import deployment  # noqa: E402  pylint: disable=wrong-import-position
import procs  # noqa: E402  pylint: disable=wrong-import-position
import wheelcheck  # noqa: E402  pylint: disable=wrong-import-position

psutil = pytest.importorskip('psutil')

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason='mknod and namespaces need root')


@pytest.fixture
def devices(tmp_path):
    """Stand-in NVIDIA nodes (clones of /dev/null) in a private folder."""
    folder = tmp_path / 'dev'
    folder.mkdir()
    for name in ('nvidiactl', 'nvidia-uvm', 'nvidia0', 'nvidia1'):
        os.mknod(str(folder / name), 0o666 | 0o020000, os.makedev(1, 3))
    return str(folder)


@pytest.fixture
def owned():
    registry = procs.Owned()
    yield registry
    registry.stop_all(grace=0.5)


def wait_file(path, timeout=30):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, 'no %s after %d s' % (path, timeout)
        time.sleep(0.02)


def wait_until(predicate, timeout=10):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline
        time.sleep(0.02)


# -- argument parsing and small helpers -------------------------------------------

def test_defaults():
    args = acceptance.parse_args([])
    assert args.paths == ['module', 'raw', 'oneliner']
    assert args.repetitions == 3 and args.gib == 40.0 and args.grace == 2.0


@pytest.mark.parametrize('argv, message', [
    (['--paths', 'module,fast'], 'choose from module, raw, oneliner; got: fast'),
    (['--paths', 'raw'], 'must include module'),
    (['--repetitions', '0'], 'at least 1; got: 0'),
    (['--gib', '0'], 'must be positive'),
])
def test_bad_arguments(argv, message):
    with pytest.raises(SystemExit) as caught:
        acceptance.parse_args(argv)
    assert message in str(caught.value)


def test_child_environment_keeps_multicast_off(monkeypatch):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '3')
    harness = acceptance.Harness.__new__(acceptance.Harness)
    harness.site = '/tmp/site'
    env = harness.env()
    assert env['NCCL_NVLS_ENABLE'] == '0'
    assert env['TORCH_SYMM_MEM_DISABLE_MULTICAST'] == '1'
    assert env['NVSHMEM_DISABLE_NVLS'] == '1'
    assert 'CUDA_VISIBLE_DEVICES' not in env
    assert env['PYTHONPATH'].split(os.pathsep)[0] == '/tmp/site'


@pytest.mark.parametrize('names, kind', [
    (['NVIDIA H200'], 'nvidia-h200'),
    (['NVIDIA H200', 'NVIDIA H200'], 'nvidia-h200-x2'),
    ([], 'nvidia-unknown'),
])
def test_kind_from_snapshot(names, kind):
    assert acceptance.kind_from_snapshot({'gpus': [{'name': name} for name in names]}) == kind


@pytest.mark.parametrize('result, seconds', [
    ({'elapsed_seconds': 0.25}, 0.25),
    ({'timings': {'total': 1.5}}, 1.5),
    ({'changed': True}, None),
])
def test_module_seconds(result, seconds):
    assert acceptance.module_seconds(result) == seconds


def test_parse_timing(tmp_path):
    path = tmp_path / 'timing.jsonl'
    lines = [
        {'event': 'runner_start', 'time': 10.0, 'action': 'gpuops.reclaim.nvidia_holders'},
        {'event': 'runner_start', 'time': 12.0, 'action': 'gpuops.reclaim.gpu_reclaim'},
        {'event': 'ok', 'time': 12.5, 'action': 'gpuops.reclaim.gpu_reclaim', 'result': {'elapsed_seconds': 0.3}},
    ]
    path.write_text('\n'.join(json.dumps(line) for line in lines) + '\nnot json\n')
    found = acceptance.parse_timing(str(path))
    assert found['release_start'] == 12.0 and found['release_end'] == 12.5
    assert found['release_result'] == {'elapsed_seconds': 0.3}


def test_parse_timing_tasks_and_settle(tmp_path):
    path = tmp_path / 'timing.jsonl'
    lines = [
        {'event': 'task_start', 'time': 1.0, 'task': 'First look'},
        {'event': 'task_start', 'time': 1.5, 'task': 'Release'},
        {'event': 'runner_start', 'time': 1.6, 'action': 'gpuops.reclaim.gpu_reclaim'},
        {'event': 'ok', 'time': 2.0, 'action': 'gpuops.reclaim.gpu_reclaim', 'result': {}},
        {'event': 'task_start', 'time': 2.25, 'task': 'Prove'},
        {'event': 'ok', 'time': 4.5, 'action': 'gpuops.reclaim.gpu_assert_free',
         'result': {'settle_seconds_observed': 2.0}},
        {'event': 'stats', 'time': 5.0},
    ]
    path.write_text('\n'.join(json.dumps(line) for line in lines) + '\n')
    found = acceptance.parse_timing(str(path))
    assert found['tasks'] == [{'task': 'First look', 'seconds': 0.5}, {'task': 'Release', 'seconds': 0.75},
                              {'task': 'Prove', 'seconds': 2.75}]
    assert found['settle_seconds'] == 2.0
    assert found['proof_end'] == 4.5


def test_parse_timing_a_release_that_proves_itself(tmp_path):
    path = tmp_path / 'timing.jsonl'
    lines = [
        {'event': 'task_start', 'time': 1.0, 'task': 'Release'},
        {'event': 'runner_start', 'time': 1.1, 'action': 'gpuops.reclaim.gpu_reclaim'},
        {'event': 'ok', 'time': 3.5, 'action': 'gpuops.reclaim.gpu_reclaim',
         'result': {'elapsed_seconds': 0.2, 'proof': {'free': True, 'settle_seconds_observed': 2.0}}},
        {'event': 'stats', 'time': 4.0},
    ]
    path.write_text('\n'.join(json.dumps(line) for line in lines) + '\n')
    found = acceptance.parse_timing(str(path))
    assert found['proof_end'] == found['release_end'] == 3.5 and found['settle_seconds'] == 2.0
    # Without prove, the release is no proof.
    path.write_text(json.dumps(dict(lines[2], result={'proof': None})) + '\n')
    assert 'proof_end' not in acceptance.parse_timing(str(path))


# -- holders ---------------------------------------------------------------------

def test_parse_fuser_pids():
    assert procs.parse_fuser_pids(' 123 456m 123c\n 789F') == [123, 456, 789]
    assert procs.parse_fuser_pids('') == []


def test_listing_without_gpu_says_why():
    listing = procs.list_holders({'available': False, 'error': 'NVML Shared Library Not Found', 'gpus': []},
                                 procs.Owned(), nodes=[])
    assert listing['holders'] == [] and listing['foreign'] == []
    assert 'NVML: NVML Shared Library Not Found' in listing['problems']
    assert 'no /dev/nvidia* device nodes on this host' in listing['problems']


@needs_root
def test_listing_tells_ours_from_foreign(devices, owned):
    nodes = [os.path.join(devices, 'nvidia0'), os.path.join(devices, 'nvidiactl')]
    hold = 'import sys, time; handles = [open(p) for p in sys.argv[1:]]; time.sleep(60)'
    ours = subprocess.Popen([sys.executable, '-c', hold] + nodes)
    theirs = subprocess.Popen([sys.executable, '-c', hold, nodes[0]])
    owned.add(ours.pid, label='ours')
    try:
        wait_until(lambda: len(procs.run_fuser(nodes)[0]) == 2)
        snapshot = {'available': True, 'gpus': [{'index': 0, 'pids': [ours.pid, 999999]}]}
        listing = procs.list_holders(snapshot, owned, nodes=nodes)
        by_pid = dict((record['pid'], record) for record in listing['holders'])
        assert by_pid[ours.pid]['ours'] and sorted(by_pid[ours.pid]['sources']) == ['fuser', 'nvml']
        assert not by_pid[theirs.pid]['ours'] and by_pid[theirs.pid]['sources'] == ['fuser']
        assert by_pid[999999].get('gone')
        assert [record['pid'] for record in listing['foreign']] == [theirs.pid]
    finally:
        theirs.kill()
        theirs.wait()
        ours.kill()
        ours.wait()


def test_signal_exact_refuses_a_reused_pid(owned):
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])
    try:
        started = psutil.Process(child.pid).create_time()
        assert procs.signal_exact(child.pid, started - 100, signal.SIGKILL) == 'reused'
        assert child.poll() is None
        assert procs.signal_exact(child.pid, started, signal.SIGKILL) == 'sent'
        child.wait()
        assert procs.signal_exact(child.pid, started, signal.SIGKILL) == 'gone'
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_foreign_processes_and_disappeared(owned):
    outsider = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)
    try:
        # A child of this process is ours by descent: not foreign.
        before = procs.foreign_processes(owned)
        assert outsider.pid not in [pid for pid, dummy in before]
        # Seen from elsewhere (another "harness" pid), it is foreign; once killed, it disappeared.
        before = procs.foreign_processes(owned, me=-1)
        key = [key for key in before if key[0] == outsider.pid]
        assert key
        outsider.kill()
        outsider.wait()
        gone = procs.disappeared(dict((k, before[k]) for k in key))
        assert [item['pid'] for item in gone] == [outsider.pid]
    finally:
        if outsider.poll() is None:
            outsider.kill()
            outsider.wait()


# -- the deployment's processes ----------------------------------------------------

def read_status_mask(pid, field):
    with open('/proc/%d/status' % pid) as handle:
        for line in handle:
            if line.startswith(field + ':'):
                return int(line.split()[1], 16)
    return 0


@needs_root
def test_deployment_titles_orphans_and_sigterm(devices, tmp_path, owned):
    run_dir = str(tmp_path / 'run')
    parent = subprocess.Popen([sys.executable, deployment.__file__, 'parent', '--run-dir', run_dir,
                               '--simulate', devices, '--gpus', '0,1', '--gib', '1'], start_new_session=True)
    owned.add(parent.pid, label='parent')
    wait_file(os.path.join(run_dir, 'ready', 'parent.json'))
    records = {}
    for name in ('engine', 'worker0', 'worker1'):
        records[name] = deployment.read_json(os.path.join(run_dir, 'ready', name + '.json'))
        owned.add(records[name]['pid'], records[name]['create_time'], label=name)
    worker = psutil.Process(records['worker1']['pid'])
    with open('/proc/%d/comm' % worker.pid) as handle:
        assert handle.read() == 'VLLM::Worker_TP\n'
    assert [part for part in worker.cmdline() if part] == ['VLLM::Worker_TP1']
    with open('/proc/%d/cmdline' % worker.pid, 'rb') as handle:
        assert handle.read().rstrip(b'\0') == b'VLLM::Worker_TP1'
    assert psutil.Process(records['engine']['pid']).cmdline()[0] == 'VLLM::EngineCore'
    assert os.path.basename(worker.exe()).startswith('python')
    # The last worker ignores SIGTERM, the others catch it.
    assert read_status_mask(records['worker1']['pid'], 'SigIgn') & (1 << 14)
    assert read_status_mask(records['worker0']['pid'], 'SigCgt') & (1 << 14)
    held = procs.run_fuser([os.path.join(devices, 'nvidia1')])[0]
    assert records['worker1']['pid'] in held
    # The API server dies: the others are orphaned and keep running.
    owned.signal(parent.pid, signal.SIGKILL)
    parent.wait()
    wait_until(lambda: psutil.Process(records['worker0']['pid']).ppid() != parent.pid)
    assert all(owned.owns(record['pid']) for record in records.values())
    # SIGTERM: honoured (and noted) by worker0, ignored by worker1.
    owned.signal(records['worker0']['pid'], signal.SIGTERM)
    owned.signal(records['worker1']['pid'], signal.SIGTERM)
    wait_file(os.path.join(run_dir, 'term', 'worker0.json'))
    wait_until(lambda: procs.is_zombie(records['worker0']['pid']))
    time.sleep(0.2)
    assert not procs.is_zombie(records['worker1']['pid'])
    assert owned.stop_all(grace=0.2) == []


@needs_root
def test_monitor_copy_is_named_nv_hostengine(tmp_path, owned):
    harness = acceptance.Harness.__new__(acceptance.Harness)
    harness.python = sys.executable
    harness.site = None
    harness.work = str(tmp_path)
    harness.prepare_monitor()
    assert os.path.basename(harness.monitor_exe) == 'nv-hostengine'
    run_dir = str(tmp_path / 'run')
    folder = tmp_path / 'dev'
    folder.mkdir()
    for name in ('nvidiactl', 'nvidia0'):
        os.mknod(str(folder / name), 0o666 | 0o020000, os.makedev(1, 3))
    monitor = subprocess.Popen([harness.monitor_exe, deployment.__file__, 'monitor', '--run-dir', run_dir,
                                '--simulate', str(folder)], env=harness.monitor_env)
    owned.add(monitor.pid, label='nv-hostengine')
    wait_file(os.path.join(run_dir, 'ready', 'monitor.json'))
    process = psutil.Process(monitor.pid)
    assert process.name() == 'nv-hostengine'
    assert os.path.basename(process.exe()) == 'nv-hostengine'
    owned.stop_all(grace=1)
    monitor.wait()


@needs_root
def test_oneliner_in_a_namespace_reaches_only_the_namespace(devices, tmp_path, owned):
    """The one-liner kills every holder in its namespace, monitor included,
    and nothing outside, though an outside process holds the same node."""
    outside = subprocess.Popen([sys.executable, '-c', 'import sys, time; h = open(sys.argv[1]); time.sleep(60)',
                                os.path.join(devices, 'nvidia0')])
    owned.add(outside.pid, label='outside holder')
    run_dir = str(tmp_path / 'run')
    launcher = subprocess.Popen(
        [sys.executable, deployment.__file__, 'nsinit', '--run-dir', run_dir, '--simulate', devices,
         '--devices', os.path.join(devices, 'nvidia*'), '--', '--run-dir', run_dir, '--simulate', devices,
         '--gpus', '0,1', '--gib', '1'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    owned.add(launcher.pid, label='launcher')
    events = acceptance.EventReader(launcher)
    ready = events.next(60)
    assert ready['event'] == 'ready', ready
    mapping = procs.ns_pid_map(launcher.pid)
    assert 1 in mapping
    names = ('engine', 'worker0', 'worker1', 'monitor')
    host_pids = {}
    for name in names:
        record = deployment.read_json(os.path.join(run_dir, 'ready', name + '.json'))
        host_pids[name] = mapping[record['pid']]
        assert procs.same_process(host_pids[name], record['create_time'])
    # Orphans of the API server belong to the namespace's init now.
    assert psutil.Process(host_pids['worker0']).ppid() == mapping[1]
    launcher.stdin.write(b'{"op": "oneliner", "replace_nvidia_smi": "true"}\n')
    launcher.stdin.flush()
    result = events.next(60)
    assert result['event'] == 'oneliner' and result['rc'] == 0
    assert 3.0 <= result['end'] - result['start'] < 10
    for name in names:
        assert procs.is_zombie(host_pids[name]), name
    assert outside.poll() is None and not procs.is_zombie(outside.pid)
    launcher.stdin.write(b'{"op": "exit"}\n')
    launcher.stdin.flush()
    assert launcher.wait(timeout=10) == 0
    outside.kill()
    outside.wait()


# -- results -------------------------------------------------------------------------

def test_entry_and_readme(tmp_path):
    item = benchlib.entry('gpu_reclaim_vs_raw', [0.3, 0.25, 0.35], [0.2, 0.22, 0.21], 'raw path', 'nvidia-h200: 1x',
                          '2030-01-02', protected_killed={'ours': 0, 'baseline': 0},
                          foreign_killed={'ours': 0, 'baseline': 0})
    assert item['ours_median_s'] == 0.3 and item['baseline_median_s'] == 0.21
    assert item['ratio'] == round(0.3 / 0.21, 4)
    assert item['repetitions'] == 3
    assert item['spread'] == {'ours_min_s': 0.25, 'ours_max_s': 0.35, 'baseline_min_s': 0.2, 'baseline_max_s': 0.22}
    for key in ('name', 'ratio', 'ours_median_s', 'baseline_median_s', 'baseline', 'repetitions', 'spread',
                'machine', 'date'):
        assert key in item
    readme = tmp_path / 'README.md'
    readme.write_text('# Benchmarks\n\nintro\n')
    assert benchlib.add_gpu_rows([item], 'results/gpu-a.json', path=str(readme))
    assert not benchlib.add_gpu_rows([item], 'results/gpu-a.json', path=str(readme))
    assert benchlib.add_gpu_rows([item], 'results/gpu-b.json', path=str(readme))
    text = readme.read_text()
    assert text.count('| 2030-01-02 | nvidia-h200: 1x | `gpu_reclaim_vs_raw` |') == 2
    assert text.count('| date | machine |') == 1
    assert benchlib.checks_text([{'ok': True}, {'ok': False}]) == '1 of 2 failed'
    assert benchlib.checks_text([{'ok': True}]) == 'all 1 passed'
    benchlib.replace_cpu_table([dict(item, name='reclaim_vs_raw_sim')], path=str(readme))
    fleet = dict(item, name='fleet_16_vs_1', connection='ssh', ratio_4_vs_1=1.5, floor_ratio=4.25,
                 floor_16_median_s=3.4, floor_1_median_s=0.8)
    assert '| connection ssh; 4 hosts: ratio 1.500; one-ping floor: ratio 4.250 (3.400 s / 0.800 s) |' \
        in benchlib.cpu_rows([fleet])[0]
    benchlib.replace_cpu_table([{'name': 'fleet_16_vs_1', 'skipped': 'no simulated hosts'}], path=str(readme))
    text = readme.read_text()
    assert '`fleet_16_vs_1` | skipped' in text and 'reclaim_vs_raw_sim' not in text
    assert text.index(benchlib.GPU_BEGIN) < text.index(benchlib.CPU_BEGIN)
    assert text.startswith('# Benchmarks\n\nintro\n')


def test_scrub_paths():
    data = {'title': '/srv/x/repo/tests/gpu/nvml_probe.py watch', 'list': ['/srv/x/repo', 3], 'other': '/opt/python3'}
    assert acceptance.scrub_paths(data, root='/srv/x/repo') == {
        'title': '<repo>/tests/gpu/nvml_probe.py watch', 'list': ['<repo>', 3], 'other': '/opt/python3'}


def test_result_path_never_overwrites(tmp_path, monkeypatch):
    monkeypatch.setattr(benchlib, 'RESULTS', str(tmp_path))
    first = acceptance.result_path('nvidia-h200', '2030-01-02')
    assert first.endswith('gpu-nvidia-h200-2030-01-02.json')
    open(first, 'w').close()
    assert acceptance.result_path('nvidia-h200', '2030-01-02').endswith('gpu-nvidia-h200-2030-01-02-2.json')


def test_wheelcheck_reports_a_missing_dependency(tmp_path):
    import zipfile  # pylint: disable=import-outside-toplevel

    def wheel(name, version, requires):
        path = tmp_path / ('%s-%s-py3-none-any.whl' % (name, version))
        with zipfile.ZipFile(str(path), 'w') as archive:
            archive.writestr('%s-%s.dist-info/METADATA' % (name, version),
                             'Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s' % (
                                 name, version, ''.join('Requires-Dist: %s\n' % r for r in requires)))
    wheel('ansible_core', '2.19.14', ['jinja2>=3.1.0', 'resolvelib<2.0.0,>=0.5.3',
                                      "typing-extensions; python_version < '3.11'"])
    wheel('jinja2', '3.1.6', ['MarkupSafe>=2.0', "Babel>=2.7; extra == 'i18n'"])
    wheel('resolvelib', '2.0.0', [])
    problems, dummy = wheelcheck.check(str(tmp_path), [], '3.12')
    assert sorted(problems) == [
        'ansible_core-2.19.14-py3-none-any.whl requires resolvelib<2.0.0,>=0.5.3: '
        'the wheel is resolvelib-2.0.0-py3-none-any.whl',
        'jinja2-3.1.6-py3-none-any.whl requires MarkupSafe>=2.0: no wheel for it',
    ]


def test_check_held_stops_when_a_foreign_process_holds_a_gpu(monkeypatch):
    harness = acceptance.Harness.__new__(acceptance.Harness)
    harness.owned = procs.Owned()
    harness.args = acceptance.parse_args(['--gib', '1'])
    snapshot = {'available': True, 'gpus': [{'index': 0, 'memory_used_mib': 2048, 'pids': [os.getpid()]}]}
    monkeypatch.setattr(harness, 'probe', lambda *args, **kwargs: snapshot)
    with pytest.raises(acceptance.HarnessError) as caught:
        harness.check_held('module-0')
    assert 'did not start now hold a GPU: %d' % os.getpid() in str(caught.value)
    harness.owned.add(os.getpid(), label='this test')
    assert harness.check_held('module-0') == snapshot


# -- the sources scenario -----------------------------------------------------------

def test_sources_scenario_arguments():
    args = acceptance.parse_args(['--scenario', 'sources'])
    assert args.scenario == 'sources' and args.paths == ['module', 'raw']
    assert args.stay_free == 5.0 and args.settle == 2.0
    assert acceptance.parse_args([]).scenario == 'plain'
    with pytest.raises(SystemExit):
        acceptance.parse_args(['--scenario', 'other'])


def test_recap_counts():
    text = ('PLAY RECAP *****\nlocalhost                  : ok=12   changed=0    unreachable=0    failed=0    '
            'skipped=9    rescued=0    ignored=0\n')
    assert procs.recap_counts(text) == {'ok': 12, 'changed': 0, 'unreachable': 0, 'failed': 0, 'skipped': 9,
                                        'rescued': 0, 'ignored': 0}
    assert procs.recap_counts('no recap here') == {}


def test_stopped_processes_sees_a_frozen_child():
    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        wait_until(lambda: child.pid in [pid for pid, dummy in procs.stopped_processes()])
        os.kill(child.pid, signal.SIGCONT)
        wait_until(lambda: child.pid not in [pid for pid, dummy in procs.stopped_processes()])
    finally:
        child.kill()
        child.wait()


def test_sources_entry_reports_the_overhead():
    module = [{'module_elapsed_s': 0.3, 'foreign_killed': 0}, {'module_elapsed_s': 0.4, 'foreign_killed': 0}]
    raw = [{'time_to_free_s': 0.2, 'foreign_killed': 0}, {'time_to_free_s': 0.25, 'foreign_killed': 0}]
    entries = acceptance._sources_entry(module, raw, 0.005, 'nvidia-h200: 1x', '2030-01-02')
    assert [entry['name'] for entry in entries] == ['gpu_reclaim_vs_raw_respawn_nsinit']
    assert entries[0]['overhead_s'] == round(entries[0]['ours_median_s'] - entries[0]['baseline_median_s'], 4)
    assert acceptance._sources_entry(module, [], 0.005, 'x', 'y') == []


@needs_root
def test_deploy_sources_respawns_and_finds_the_namespace_init_from_outside(devices, tmp_path):
    args = acceptance.parse_args(['--scenario', 'sources', '--work-dir', str(tmp_path / 'work'), '--gib', '1',
                                  '--ready-timeout', '30'])
    harness = acceptance.Harness(args)
    harness.work = str(tmp_path / 'run')
    os.makedirs(harness.work)
    harness.gpu_indices = [0, 1]
    harness.simulate = devices
    try:
        run_dir, records, respawner, unshare = harness.deploy_sources('sources-test')
        nsinit = records['nsinit']
        assert nsinit['ns_pid'] == 1 and nsinit['pid'] != 1
        with open('/proc/%d/status' % nsinit['pid']) as handle:
            status = dict(line.split(':', 1) for line in handle if ':' in line)
        assert status['NSpid'].split()[-1] == '1' and len(status['NSpid'].split()) > 1
        assert not int(status['SigCgt'], 16) & (1 << 14) and not int(status['SigIgn'], 16) & (1 << 14)
        respawned = records['respawned']
        assert psutil.Process(respawned['pid']).ppid() == respawner.pid
        # Killed, the worker comes back: the loop is a respawner.
        os.remove(os.path.join(run_dir, 'ready', 'respawned.json'))
        harness.owned.signal(respawned['pid'], signal.SIGKILL)
        wait_file(os.path.join(run_dir, 'ready', 'respawned.json'))
        again = deployment.read_json(os.path.join(run_dir, 'ready', 'respawned.json'))
        assert again['pid'] != respawned['pid'] and psutil.Process(again['pid']).ppid() == respawner.pid
    finally:
        harness.owned.adopt_descendants()
        assert harness.owned.stop_all(grace=0.5) == []
        for child in harness.children:
            child.wait(timeout=10)


def test_ansible_floor_times_an_empty_playbook_and_ping_tasks(tmp_path):
    args = acceptance.parse_args(['--work-dir', str(tmp_path / 'work')])
    harness = acceptance.Harness(args)
    harness.work = str(tmp_path / 'run')
    os.makedirs(harness.work)
    harness.inventory = str(tmp_path / 'inventory.ini')
    with open(harness.inventory, 'w') as handle:
        handle.write('localhost ansible_connection=local ansible_python_interpreter=%s\n' % sys.executable)
    floor = harness.ansible_floor(repetitions=1)
    assert floor['repetitions'] == 1
    assert 0 < floor['empty_playbook_median_s'] < 60
    assert 0 < floor['ping_task_first_median_s'] < 60 and 0 < floor['ping_task_median_s'] < 60


# -- the context shapes ---------------------------------------------------------------

@pytest.fixture
def node_files(tmp_path):
    """Stand-ins for the device nodes as plain files: enough for descriptors, no root needed."""
    folder = tmp_path / 'files'
    folder.mkdir()
    for name in ('nvidiactl', 'nvidia-uvm', 'nvidia0'):
        (folder / name).write_bytes(b'')
    return str(folder)


def test_context_arguments():
    args = acceptance.parse_args([])
    assert args.scenario == 'plain' and args.shapes == list(acceptance.CONTEXT_SHAPES)
    assert args.context_repetitions == 1 and args.context_gib == 4.0 and args.recheck == 3.0
    args = acceptance.parse_args(['--scenario', 'contexts', '--repetitions', '2'])
    assert args.paths == ['module', 'oneliner'] and args.context_repetitions == 2
    args = acceptance.parse_args(['--scenario', 'contexts', '--shapes', 'context_socket_receiver,context_forked_pool'])
    assert args.shapes == ['context_forked_pool', 'context_socket_receiver']
    assert acceptance.parse_args(['--shapes', 'none']).shapes == []
    assert acceptance.parse_args(['--scenario', 'sources']).shapes == []
    for argv, message in ((['--shapes', 'context_other'], 'choose from'),
                          (['--scenario', 'contexts', '--shapes', 'none'], 'needs at least one'),
                          (['--context-repetitions', '0'], 'at least 1'),
                          (['--scenario', 'contexts', '--paths', 'raw'], 'must include module')):
        with pytest.raises(SystemExit) as caught:
            acceptance.parse_args(argv)
        assert message in str(caught.value)


def test_shape_commands_start_the_receiver_apart_from_the_sender():
    commands = deployment.shape_commands('context_socket_receiver', '/run', 0, 4.0, socket_name='@s')
    assert [name for name, dummy in commands] == ['receiver', 'creator']
    assert [command[2] for dummy, command in commands] == ['receiver', 'sender']
    assert all(command[command.index('--socket') + 1] == '@s' for dummy, command in commands)
    assert deployment.shape_ready_names('context_forked_pool') == ['creator', 'pool0', 'pool1', 'pool2']
    assert deployment.shape_ready_names('context_exited_leader') == ['leader']
    with pytest.raises(ValueError):
        deployment.shape_ready_names('context_other')


def test_a_leader_that_exited_alone_is_no_zombie(node_files, tmp_path, owned):
    """The main thread ends with the raw exit system call: /proc/PID/stat reads Z and /proc/PID/fd is
    empty, while the other thread holds the nodes; the harness still counts the process as alive and its
    cleanup still stops it."""
    run_dir = str(tmp_path / 'run')
    leader = subprocess.Popen([sys.executable, deployment.__file__, 'leader', '--run-dir', run_dir,
                               '--simulate', node_files, '--gpu', '0', '--gib', '1'])
    owned.add(leader.pid, label='leader')
    wait_file(os.path.join(run_dir, 'ready', 'leader.json'))
    record = deployment.read_json(os.path.join(run_dir, 'ready', 'leader.json'))
    assert record['pid'] == leader.pid and procs.same_process(leader.pid, record['create_time'])
    assert psutil.Process(leader.pid).status() == psutil.STATUS_ZOMBIE
    assert not procs.is_zombie(leader.pid) and procs.live_threads(leader.pid) == [record['tid']]
    seen = procs.context_holding(leader.pid, os.path.join(node_files, 'nvidia'))
    assert seen['state'] == 'Z' and seen['fd_count'] == 0 and seen['fd_nodes'] == 0 and seen['threads'] == 2
    by_tid = dict((task['tid'], task) for task in seen['tasks'])
    assert by_tid[leader.pid]['state'] == 'Z' and by_tid[record['tid']]['fd_nodes'] == 3
    assert acceptance.context_problems('context_exited_leader', dict(leader=seen, used_mib=4096), 3686) == []
    assert [entry['pid'] for entry in owned.alive()] == [leader.pid]
    assert owned.stop_all(grace=0.5) == []
    assert leader.wait(timeout=10) == -signal.SIGTERM


def test_forked_children_and_a_receiver_keep_the_nodes_after_the_creator_dies(node_files, tmp_path, owned):
    run_dir = str(tmp_path / 'run')
    pool = subprocess.Popen([sys.executable, deployment.__file__, 'pool', '--gpu', '0', '--gib', '1', '--children',
                             '2', '--run-dir', run_dir, '--simulate', node_files, '--ready-timeout', '30'])
    owned.add(pool.pid, label='pool creator')
    receiver = subprocess.Popen([sys.executable, deployment.__file__, 'receiver', '--socket', '@gpuops-test-%d'
                                 % os.getpid(), '--run-dir', str(tmp_path / 'socket'), '--ready-timeout', '30'])
    owned.add(receiver.pid, label='receiver')
    sender = subprocess.Popen([sys.executable, deployment.__file__, 'sender', '--socket', '@gpuops-test-%d'
                               % os.getpid(), '--gpu', '0', '--gib', '1', '--run-dir', str(tmp_path / 'socket'),
                               '--simulate', node_files, '--ready-timeout', '30'])
    owned.add(sender.pid, label='sender')
    wait_file(os.path.join(run_dir, 'ready', 'creator.json'))
    wait_file(str(tmp_path / 'socket' / 'ready' / 'creator.json'))
    children = [deployment.read_json(os.path.join(run_dir, 'ready', 'pool%d.json' % index)) for index in (0, 1)]
    for child in children:
        owned.add(child['pid'], child['create_time'], label=child['name'])
        assert psutil.Process(child['pid']).ppid() == pool.pid
    got = deployment.read_json(str(tmp_path / 'socket' / 'ready' / 'receiver.json'))
    names = ('nvidia-uvm', 'nvidia0', 'nvidiactl')
    assert got['received'] == 3 and got['nodes'] == sorted(os.path.join(node_files, name) for name in names)
    assert psutil.Process(receiver.pid).ppid() == os.getpid()
    for creator in (pool, sender):
        owned.signal(creator.pid, signal.SIGKILL)
        creator.wait()
    prefix = os.path.join(node_files, 'nvidia')
    for pid in [child['pid'] for child in children] + [receiver.pid]:
        assert procs.context_holding(pid, prefix)['fd_nodes'] == 3
    assert owned.stop_all(grace=0.5) == []
    receiver.wait()


def test_context_problems():
    tasks = [{'tid': 1, 'state': 'Z', 'fd_nodes': 0}, {'tid': 2, 'state': 'S', 'fd_nodes': 5}]
    leader = {'state': 'Z', 'fd_count': 0, 'tasks': tasks}
    assert acceptance.context_problems('context_exited_leader', {'leader': leader, 'used_mib': 4000}, 3686) == []
    running = dict(leader, state='S', fd_count=7, tasks=[{'tid': 1, 'state': 'S', 'fd_nodes': 0}])
    assert acceptance.context_problems('context_exited_leader', {'leader': running, 'used_mib': 100}, 3686) == [
        '/proc/PID/stat reads S, not Z', '/proc/PID/fd is not empty: 7 entries',
        'no live thread holds /dev/nvidia* in /proc/PID/task/TID/fd',
        'the GPU shows 100 MiB used, expected at least 3686']
    dead = {'pid': 9, 'alive': False, 'signal': 'sent'}
    pool = {'creator': dead, 'pool0': {'fd_nodes': 26}, 'pool1': {'fd_nodes': 26}, 'used_mib': 4200}
    assert acceptance.context_problems('context_forked_pool', pool, 3686) == []
    pool['pool1'] = {'fd_nodes': 0}
    assert acceptance.context_problems('context_forked_pool', pool, 3686) == ['pool1 holds no /dev/nvidia* in /proc/PID/fd']
    socket_shape = {'creator': dict(dead, alive=True), 'receiver': {'fd_nodes': 30}}
    assert acceptance.context_problems('context_socket_receiver', socket_shape, 3686) == [
        "the creator is not dead after SIGKILL: {'pid': 9, 'alive': True, 'signal': 'sent'}",
        'NVML gave no used memory for the GPU']
    assert acceptance.context_problems('context_socket_receiver', socket_shape) != []


def test_gpu_readings():
    snapshot = {'gpus': [{'index': 0, 'memory_used_mib': 4100, 'pids': [7]}, {'index': 1, 'memory_used_mib': 0, 'pids': []}]}
    assert acceptance.total_used(snapshot) == 4100 and acceptance.gpu_used(snapshot, 1) == 0
    assert not acceptance.gpus_free(snapshot, 64)
    assert acceptance.gpus_free({'gpus': [{'index': 0, 'memory_used_mib': 60, 'pids': []}]}, 64)
    assert not acceptance.gpus_free({'available': False, 'gpus': []}, 64)
    assert acceptance.total_used({'gpus': []}) is None


def test_context_entry():
    module = {'shape': 'context_forked_pool', 'path': 'module', 'repetition': 0, 'shape_formed': True,
              'free': True, 'stayed_free': True, 'freed_mib': 4100, 'module_elapsed_s': 0.3,
              'second_run_changed_0': True, 'foreign_killed': 0, 'protected_killed': 0,
              'killed': ['pool0', 'pool1', 'pool2'], 'recheck_s': 3.0, 'nvml_lists_dead_creator': True,
              'observations': {'creator': {'alive': False}, 'pool0': {'state': 'S', 'fd_nodes': 26, 'tasks': []},
                               'used_mib': 4700}}
    oneliner = dict(module, path='oneliner', module_elapsed_s=None, time_to_free_s=3.1, freed_mib=4000,
                    second_run_changed_0=None, protected_killed=1)
    later = dict(module, repetition=1, free=False, stayed_free=False, freed_mib=0, second_run_changed_0=False)
    checks = [{'name': 'context_forked_pool-module-1: GPUs free after the playbook', 'ok': False,
               'scenario': 'context_forked_pool'},
              {'name': 'context_forked_pool-module-0: playbook succeeded', 'ok': True, 'scenario': 'context_forked_pool'},
              {'name': 'module-0: playbook succeeded', 'ok': False}]
    item = acceptance.context_entry('context_forked_pool', [module, oneliner, later], checks, 'nvidia-h200: 1x',
                                    '2030-01-02')
    assert item['name'] == 'context_forked_pool' and item['repetitions'] == 2
    assert item['checks_failed'] == ['context_forked_pool-module-1: GPUs free after the playbook'] and not item['ok']
    assert item['freed_mib'] == 0 and item['freed_mib_samples'] == [4100, 0] and item['oneliner_freed_mib'] == 4000
    assert item['free'] is False and item['stayed_free'] is False and item['second_run_changed_0'] is False
    assert item['oneliner_free'] is True and item['oneliner_stayed_free'] is True
    assert item['ours_median_s'] == 0.3 and item['baseline_median_s'] == 3.1 and item['ratio'] == round(0.3 / 3.1, 4)
    assert item['foreign_killed'] == {'ours': 0, 'baseline': 0}
    assert item['protected_killed'] == {'ours': 0, 'baseline': 1}
    assert item['observed']['creator_alive'] is False and item['observed']['nvml_lists_dead_creator'] is True
    assert item['observed']['pool0']['fd_nodes'] == 26
    passed = acceptance.context_entry('context_forked_pool', [module, oneliner], checks[1:], 'x', 'y')
    assert passed['ok'] and passed['checks_failed'] == [] and passed['free'] and passed['second_run_changed_0']
    assert benchlib.gpu_rows([passed], 'results/gpu-a.json')[0].startswith('| y | x | `context_forked_pool` |')
    missing = acceptance.context_entry('context_socket_receiver', [], checks, 'x', 'y')
    assert missing['checks_failed'] == ['context_socket_receiver: the module path did not run']
    assert missing['free'] is None and missing['freed_mib'] is None and missing['observed'] is None


KEEPER_TITLES = ('ctx-leader', 'pt_data_worker', 'ctx-receiver')


def fake_probe(harness, used_mib=4096):
    """NVML as the harness reads it, for stand-in nodes: the GPU is used while a keeper of the shape runs."""
    def probe(*arguments, **kwargs):
        del kwargs
        held = any(entry['label'].split(' ')[0] in KEEPER_TITLES and procs.same_process(pid, entry['create_time'])
                   and not procs.is_zombie(pid) for pid, entry in list(harness.owned.processes.items()))
        if arguments[0] == 'watch':
            return {'event': 'timeout' if held else 'free', 'time': time.time(), 'gpus': []}
        return {'available': True, 'driver_version': 'stand-in',
                'gpus': [{'index': 0, 'memory_used_mib': used_mib if held else 0, 'pids': []}]}
    return probe


@needs_root
@pytest.mark.parametrize('shape, killed, free', [
    ('context_exited_leader', [], False),
    ('context_forked_pool', ['pool0', 'pool1', 'pool2'], True),
    ('context_socket_receiver', ['receiver'], True),
])
def test_context_shape_along_the_oneliner(devices, tmp_path, monkeypatch, shape, killed, free):
    """Each shape forms in the private namespace beside the monitor; the one-liner kills the monitor and
    what fuser sees, which misses a process whose leader exited; nothing outside is touched."""
    args = acceptance.parse_args(['--scenario', 'contexts', '--shapes', shape, '--work-dir', str(tmp_path / 'work'),
                                  '--recheck', '0.2', '--ready-timeout', '30'])
    harness = acceptance.Harness(args)
    harness.work = str(tmp_path / 'run')
    os.makedirs(harness.work)
    harness.gpu_indices = [0]
    harness.simulate = devices
    monkeypatch.setattr(harness, 'probe', fake_probe(harness))
    # A process outside the namespace that holds no node: the one-liner must not reach it. Only it is
    # watched as foreign, since other processes of this machine come and go on their own.
    outsider = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
    real_foreign = procs.foreign_processes
    monkeypatch.setattr(procs, 'foreign_processes', lambda owned: dict(
        (key, text) for key, text in real_foreign(owned, me=-1).items() if key[0] == outsider.pid))
    try:
        run = harness.run_context(shape, 'oneliner', 0)
        assert run['shape_formed'], run['shape_problems']
        assert run['killed'] == killed and run['free'] is free and run['stayed_free'] is free
        assert run['freed_mib'] == (4096 if free else 0)
        assert not run['monitor_survived'] and run['protected_killed'] == 1
        assert run['foreign_killed'] == 0 and run['oneliner_rc'] == 0
        seen = run['observations']
        if shape == 'context_exited_leader':
            assert seen['leader']['state'] == 'Z' and seen['leader']['fd_count'] == 0
            assert [task['fd_nodes'] for task in seen['leader']['tasks'] if task['state'] != 'Z'] == [3]
            assert not any(name.startswith('ctx-leader') for name in run['fuser_saw'])
        else:
            assert seen['creator']['alive'] is False and seen['creator']['signal'] == 'sent'
            assert all(seen[name]['fd_nodes'] for name in killed)
        assert [check['name'] for check in harness.checks if not check['ok']] == []
        assert all(check['scenario'] == shape for check in harness.checks)
        assert harness.owned.alive() == []
        item = acceptance.context_entry(shape, harness.runs[shape], harness.checks, 'stand-in', '2030-01-02')
        assert item['oneliner_free'] is free and item['checks_failed'] == [shape + ': the module path did not run']
        assert outsider.poll() is None
    finally:
        outsider.kill()
        outsider.wait()
        harness.owned.adopt_descendants()
        assert harness.owned.stop_all(grace=0.5) == []
        for child in harness.children:
            child.wait(timeout=10)


@needs_root
def test_context_shape_stops_before_any_signal_when_an_outsider_holds_a_node(devices, tmp_path, monkeypatch):
    args = acceptance.parse_args(['--scenario', 'contexts', '--shapes', 'context_forked_pool', '--work-dir',
                                  str(tmp_path / 'work'), '--ready-timeout', '30'])
    harness = acceptance.Harness(args)
    harness.work = str(tmp_path / 'run')
    os.makedirs(harness.work)
    harness.gpu_indices = [0]
    harness.simulate = devices
    monkeypatch.setattr(harness, 'probe', fake_probe(harness))
    outsider = subprocess.Popen([sys.executable, '-c', 'import sys, time; h = open(sys.argv[1]); time.sleep(120)',
                                 os.path.join(devices, 'nvidia1')])
    try:
        wait_until(lambda: outsider.pid in procs.run_fuser([os.path.join(devices, 'nvidia1')])[0])
        with pytest.raises(acceptance.HarnessError) as caught:
            harness.run_context('context_forked_pool', 'module', 0)
        assert 'did not start now hold a GPU: %d' % outsider.pid in str(caught.value)
        creators = [pid for pid, entry in harness.owned.processes.items() if entry['label'].startswith('ctx-creator')]
        assert len(creators) == 1 and not procs.is_zombie(creators[0])
        assert outsider.poll() is None
    finally:
        outsider.kill()
        outsider.wait()
        harness.owned.adopt_descendants()
        assert harness.owned.stop_all(grace=0.5) == []
        for child in harness.children:
            child.wait(timeout=10)
