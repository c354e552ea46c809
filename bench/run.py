"""CPU-side benchmarks of gpuops.reclaim (``make bench``).

    python3 bench/run.py [--only NAME,...] [--repetitions N] [--no-readme]

Each figure is a ratio ours/baseline (lower is better) from one run of this
script: the median of several repetitions of each side, run alternately, with
the spread. Results go to bench/results/latest.json and to the table in
bench/README.md.

- ``discovery_vs_fuser_10k``: holder discovery (``_discover.holders.discover``, the
  modules' code) on 10,000 processes, 100 of them holding stand-in device
  nodes, against ``fuser -v`` over the same nodes; in a private PID namespace
  (bench/discovery.py).
- ``holders_blocked_cmdline``: on a simulated host where one holder's
  ``/proc/PID/cmdline`` never answers (``gpusim hold --blocked-cmdline``),
  what nvidia_holders does (NVML inventory and discovery, in-process, with
  ``nvml_timeout`` 2 s), against that deadline plus 0.5 s.
- ``reclaim_vs_raw_sim``: on a simulated host (tests/simhost), the
  gpu_reclaim module's own elapsed time against the raw path (the same signals
  to the same PIDs, NVML polled every 5 ms) on the same workload: two 40 GiB
  workers (one ignoring SIGTERM) and an engine. ``overhead_s`` is the
  difference of the medians.
- ``role_noop_vs_one_task``: playbooks/reclaim.yml on a simulated host whose
  GPUs are free, against a one-task playbook (nvidia-smi) on the same host;
  wall time of ansible-playbook.
- ``incident_release_vs_module``: the incident (8 GPUs, the vllm-sim unit with
  KillMode=process stopped, its 8 workers orphaned) freed by
  playbooks/reclaim.yml: the role's release stage (its own clock, from the
  summary) against the gpu_reclaim module's own ``elapsed_seconds`` in that
  run; ``overhead_s`` is what Ansible adds around the module.
- ``fleet_16_vs_1``: playbooks/reclaim.yml with forks equal to the host count
  on 16 simulated hosts (two GPUs, two orphaned workers each) against 1 host;
  4 hosts are recorded too, and ``floor_ratio``: the same two host counts
  with a playbook of one ``ping`` task, the least any playbook that reaches
  the hosts can do. On a machine with few cores the simulated hosts share
  the controller's cores, and the floor shows how much of the ratio is the
  machine's.

- ``reclaim_vs_raw_respawn_nsinit_sim``: on a simulated host, a 40 GiB holder
  that is PID 1 of its own PID namespace with no SIGTERM handler, and a shell
  loop respawning a 40 GiB worker: the gpu_reclaim module's own elapsed time
  against the raw path (SIGSTOP the loop, SIGKILL the namespace init and the
  worker, poll NVML every 5 ms until free, SIGKILL the loop).
  ``overhead_s`` is the difference of the medians; ``settle_median_s`` is
  the 2 s settle of gpu_assert_free that follows, reported apart.

A figure whose prerequisites are missing (no simulated-host image, not root)
is reported as skipped, with the reason, instead of failing the run.
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import benchlib  # noqa: E402  pylint: disable=wrong-import-position

SIMHOST = os.path.join(ROOT, 'tests', 'simhost', 'simhost')
NSHOSTS = os.path.join(HERE, 'nshosts.py')
PODMAN = os.path.join(ROOT, 'tests', 'simhost', 'podman')
PROBE = os.path.join(ROOT, 'tests', 'gpu', 'nvml_probe.py')
CALLBACKS = os.path.join(ROOT, 'tests', 'gpu', 'callback_plugins')
PLAYBOOK = os.path.join(ROOT, 'playbooks', 'reclaim.yml')
ONE_TASK = os.path.join(HERE, 'playbooks', 'one_task.yml')
PING = os.path.join(HERE, 'playbooks', 'ping.yml')
BIN = os.path.dirname(sys.executable)
NAMES = ('discovery_vs_fuser_10k', 'holders_blocked_cmdline', 'reclaim_vs_raw_sim', 'role_noop_vs_one_task',
         'incident_release_vs_module', 'fleet_16_vs_1', 'reclaim_vs_raw_respawn_nsinit_sim')
HOST_PREFIX = 'gpusim-bench-'
GRACE_SECONDS = 2

# One host of each figure, and the fleet's.
RECLAIM_HOST = HOST_PREFIX + 'reclaim'
BLOCKED_HOST = HOST_PREFIX + 'blocked'
# nvml_timeout of the blocked-cmdline figure: the deadline its baseline is built on.
BLOCKED_NVML_TIMEOUT = 2.0
NOOP_HOST = HOST_PREFIX + 'noop'
INCIDENT_HOST = HOST_PREFIX + 'incident'
FLEET_HOSTS = [HOST_PREFIX + 'fleet-%02d' % number for number in range(1, 17)]


class Skip(Exception):
    """A figure cannot be measured here; the message says why."""


def log(text):
    sys.stderr.write('bench: %s\n' % text)
    sys.stderr.flush()


def run(command, timeout=600, check=True, **kwargs):
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=timeout, check=False, **kwargs)
    if check and proc.returncode != 0:
        raise RuntimeError('%s failed (status %d): %s' % (' '.join(command[:4]), proc.returncode,
                                                          (proc.stderr or proc.stdout).strip()[-2000:]))
    return proc


def tool(name):
    """A program of this Python's environment (the venv), else from PATH, as a command list. An Ansible
    program that is neither (ansible-core installed with pip --target) runs as python -m ansible.cli.X."""
    candidate = os.path.join(BIN, name)
    if os.access(candidate, os.X_OK):
        return [candidate]
    if shutil.which(name):
        return [shutil.which(name)]
    if name.startswith('ansible'):
        return [sys.executable, '-m', 'ansible.cli.' + (name.split('-', 1)[1] if '-' in name else 'adhoc')]
    return [name]


# -- simulated hosts ----------------------------------------------------------------

class Hosts:
    """The simulated hosts this script starts, removed by exact name at the end."""

    connection_label = None

    def __init__(self):
        self.started = []

    @staticmethod
    def fleet_names(count):
        return FLEET_HOSTS[:count]

    @staticmethod
    def inventory(path, names, connection):
        return inventory(path, names, connection)

    def require(self):
        if not os.access(SIMHOST, os.X_OK):
            raise Skip('tests/simhost/simhost is missing')
        if not shutil.which('podman'):
            raise Skip('podman is not installed: run make testbed (tests/simhost/simhost setup)')
        status = run([SIMHOST, 'status'], check=False, timeout=120)
        if '(built)' not in status.stdout:
            raise Skip('the simulated-host image is not built: run make testbed (tests/simhost/simhost setup)')

    def up(self, name, gpus=2):
        run([SIMHOST, 'up', name, '--gpus', str(gpus), '--gpu-mib', '98304'], timeout=300)
        if name not in self.started:
            self.started.append(name)

    def up_many(self, names, gpus=2):
        for name in names:
            self.up(name, gpus)

    def down(self):
        if self.started:
            run([SIMHOST, 'down'] + self.started, check=False, timeout=300)
            self.started = []

    @staticmethod
    def execute(name, *command, stdin=None, timeout=120):
        return run([PODMAN, 'exec', '-i', name] + list(command), input=stdin, timeout=timeout)

    def hold(self, name, gpu, mib, title, ignore_term=False):
        command = ['gpusim', 'hold', '--gpu', str(gpu), '--mib', str(mib), '--title', title]
        if ignore_term:
            command.append('--ignore-term')
        return json.loads(self.execute(name, *command).stdout.strip().splitlines()[-1])

    def workload(self, name):
        """Two orphaned 40 GiB workers (the second ignores SIGTERM) and an engine."""
        return [self.hold(name, 0, 40960, 'VLLM::Worker_TP0'),
                self.hold(name, 1, 40960, 'VLLM::Worker_TP1', ignore_term=True),
                self.hold(name, 0, 512, 'VLLM::EngineCore')]

    def reset(self, name):
        self.execute(name, 'gpusim', 'reset-state')


class NsHosts:
    """The light hosts of bench/nshosts.py (PID and mount namespaces, no podman), for the fleet figure on a
    machine with many cores and no container engine. Reached with the local connection through nsenter."""

    connection_label = 'local, through nsenter'

    def __init__(self, work, python):
        self.dir = os.path.join(work, 'nshosts')
        self.python = python
        self.up_count = 0

    def require(self):
        if os.geteuid() != 0:
            raise Skip('namespace hosts need root (unshare, mount, mknod)')
        for name in ('unshare', 'nsenter', 'mount'):
            if not shutil.which(name):
                raise Skip('namespace hosts need %s (util-linux)' % name)

    @staticmethod
    def fleet_names(count):
        return ['nshost-%02d' % number for number in range(1, count + 1)]

    def up_many(self, names, gpus=2):
        self.up_count = max(self.up_count, len(names))
        run([sys.executable, NSHOSTS, 'up', '--dir', self.dir, '--count', str(len(names)), '--gpus', str(gpus),
             '--python', self.python], timeout=120)

    def down(self):
        if self.up_count:
            run([sys.executable, NSHOSTS, 'down', '--dir', self.dir], check=False, timeout=120)
            self.up_count = 0

    def hold(self, name, gpu, mib, title, ignore_term=False):
        command = [sys.executable, NSHOSTS, 'hold', '--dir', self.dir, name, '--', '--gpu', str(gpu),
                   '--mib', str(mib), '--title', title]
        if ignore_term:
            command.append('--ignore-term')
        return json.loads(run(command, timeout=120).stdout.strip().splitlines()[-1])

    def workload(self, name):
        return [self.hold(name, 0, 40960, 'VLLM::Worker_TP0'),
                self.hold(name, 1, 40960, 'VLLM::Worker_TP1', ignore_term=True),
                self.hold(name, 0, 512, 'VLLM::EngineCore')]

    def reset(self, name):
        """Nothing to do: the role releases every holder, and a zombie holds nothing."""

    def inventory(self, path, names, connection):
        with open(os.path.join(self.dir, 'inventory.json')) as handle:
            data = json.load(handle)
        hosts = data['gpu_hosts']['hosts']
        data['gpu_hosts']['hosts'] = {name: hosts[name] for name in names}
        with open(path, 'w') as handle:
            json.dump(data, handle, indent=2)
        return path


def inventory(path, names, connection):
    """The hosts in group gpu_hosts, reached as tests/simhost/simhost inventory says:
    over SSH with pipelining (as real hosts are), or with the podman connection."""
    proc = run([SIMHOST, 'inventory', '--connection', connection] + list(names), timeout=60)
    with open(path, 'w') as handle:
        handle.write(proc.stdout)
    return path


def ansible_env(work, **extra):
    env = dict(os.environ)
    home = os.path.join(work, 'ansible-home')
    env.update({
        'ANSIBLE_COLLECTIONS_PATH': os.path.join(ROOT, 'build', 'collections'),
        'ANSIBLE_HOME': home,
        'ANSIBLE_LOCAL_TEMP': os.path.join(home, 'tmp'),
        'ANSIBLE_SSH_CONTROL_PATH_DIR': os.path.join(home, 'cp'),
        'ANSIBLE_PIPELINING': 'true',
        'ANSIBLE_NOCOLOR': '1',
        'ANSIBLE_FORCE_COLOR': '0',
        'ANSIBLE_RETRY_FILES_ENABLED': 'false',
        'ANSIBLE_HOST_KEY_CHECKING': 'false',
        'LC_ALL': 'C.UTF-8',
    })
    env.update(extra)
    return env


def require_collection_tree():
    podman_collection = os.path.join(ROOT, 'build', 'collections', 'ansible_collections', 'containers', 'podman')
    ours = os.path.join(ROOT, 'build', 'collections', 'ansible_collections', 'gpuops', 'reclaim')
    if not os.path.isdir(podman_collection):
        raise Skip('containers.podman is not unpacked in build/collections: run make testbed')
    if not os.path.exists(os.path.join(ours, 'galaxy.yml')):
        raise Skip('build/collections has no gpuops.reclaim link: run make tree')


def timed(command, env, log_path, timeout=900):
    with open(log_path, 'ab') as out:
        out.write(('\n$ %s\n' % ' '.join(command)).encode())
        out.flush()
        began = time.perf_counter()
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        # A blocking wait sees the end when it comes: Popen.wait(timeout) polls, every 50 ms once it has waited
        # a while, and would round every figure up to its next poll. The timer enforces the timeout instead.
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        try:
            proc.wait()
        except BaseException:
            # Interrupted (Ctrl-C, say): nothing would be left to end it.
            proc.kill()
            proc.wait()
            raise
        finally:
            watchdog.cancel()
        seconds = time.perf_counter() - began
    if seconds >= timeout:
        raise RuntimeError('%s ran past its %d s and was killed; see %s' % (
            os.path.basename(command[0]), timeout, os.path.relpath(log_path, ROOT)))
    if proc.returncode != 0:
        raise RuntimeError('%s failed with status %d; see %s' % (
            os.path.basename(command[0]), proc.returncode, os.path.relpath(log_path, ROOT)))
    return seconds


# -- the figures -----------------------------------------------------------------------

def bench_discovery(context):
    if os.geteuid() != 0:
        raise Skip('needs root (a private PID namespace and mknod)')
    unshare = shutil.which('unshare')
    if not unshare or not shutil.which('fuser'):
        raise Skip('needs unshare (util-linux) and fuser (psmisc)')
    proc = run([unshare, '--pid', '--fork', '--mount-proc', sys.executable, os.path.join(HERE, 'discovery.py'),
                '--processes', '10000', '--holders', '100', '--repetitions', str(context.repetitions)], timeout=600)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if data['holders_found'] != {'ours': [100], 'fuser': [100]}:
        raise RuntimeError('discovery found %s holders, expected 100 on both sides' % data['holders_found'])
    return benchlib.entry(
        'discovery_vs_fuser_10k', data['ours_s'], data['fuser_s'],
        'fuser -v over the same device nodes (a command, exec included); ours is _discover.holders.discover in-process',
        context.machine, processes=data['visible_processes'], holders=data['holders'],
        spawn_seconds=data['spawn_seconds'])


# Runs on the host: what nvidia_holders does (NVML inventory, then discovery),
# timed in-process, with the collection's module_utils sent along.
HOLDERS_ON_HOST = r'''
import json, os, sys, tempfile, time
files = json.loads(sys.stdin.readline())
root = tempfile.mkdtemp()
for relative, text in files.items():
    path = os.path.join(root, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
sys.path.insert(0, root)
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders
from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml
timeout = float(sys.argv[1])
started = time.monotonic()
view = _nvml.read_inventory(timeout)
snapshot = _holders.discover(view, read_timeout=timeout)
seconds = time.monotonic() - started
print(json.dumps({"seconds": seconds, "holders": [(h["pid"], h["unreadable"]) for h in snapshot.holders]}))
'''


def module_utils_files():
    """The collection's module_utils as ``{path under a collections root: text}``, subpackages included."""
    files = {}
    package = 'ansible_collections/gpuops/reclaim'
    for folder in ('', '/plugins', '/plugins/module_utils'):
        files[package + folder + '/__init__.py'] = ''
    files['ansible_collections/__init__.py'] = ''
    files['ansible_collections/gpuops/__init__.py'] = ''
    utils = os.path.join(ROOT, 'plugins', 'module_utils')
    for folder, dirs, names in os.walk(utils):
        dirs.sort()
        for name in sorted(names):
            if name.endswith('.py'):
                relative = os.path.relpath(os.path.join(folder, name), utils).replace(os.sep, '/')
                with open(os.path.join(folder, name)) as handle:
                    files[package + '/plugins/module_utils/' + relative] = handle.read()
    return files


def bench_holders_blocked_cmdline(context):
    context.hosts.require()
    if not isinstance(context.hosts, Hosts):
        raise Skip('needs the simulated hosts of tests/simhost (a FUSE server in the host)')
    host = BLOCKED_HOST
    context.hosts.up(host)
    context.hosts.reset(host)
    payload = json.dumps(module_utils_files()) + '\n'
    try:
        context.hosts.hold(host, 1, 40960, 'VLLM::Worker_TP1')
        blocked = json.loads(context.hosts.execute(
            host, 'gpusim', 'hold', '--gpu', '0', '--mib', '40960', '--title', 'VLLM::Worker_TP0',
            '--blocked-cmdline').stdout.strip().splitlines()[-1])
        ours = []
        for dummy in range(context.repetitions):
            proc = Hosts.execute(host, 'python3', '-c', HOLDERS_ON_HOST, str(BLOCKED_NVML_TIMEOUT), stdin=payload)
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            unreadable = dict((pid, reason) for pid, reason in result['holders'])
            if len(unreadable) != 2 or not unreadable.get(blocked['pid']):
                raise RuntimeError('expected 2 holders, pid %d unreadable; got %s' % (blocked['pid'], result))
            ours.append(result['seconds'])
    finally:
        context.hosts.reset(host)
    baseline = [BLOCKED_NVML_TIMEOUT + 0.5] * len(ours)
    return benchlib.entry(
        'holders_blocked_cmdline', ours, baseline,
        "nvml_timeout (%g s) + 0.5 s: what nvidia_holders may take when a holder's cmdline never answers; ours is "
        "its NVML inventory and discovery in-process on a simulated host with that holder and one more"
        % BLOCKED_NVML_TIMEOUT, context.machine, nvml_timeout=BLOCKED_NVML_TIMEOUT)


def bench_reclaim(context):
    context.hosts.require()
    require_collection_tree()
    host = RECLAIM_HOST
    context.hosts.up(host)
    inv = inventory(os.path.join(context.work, 'reclaim.json'), [host], context.connection)
    with open(PROBE) as handle:
        probe = handle.read()
    ours, raw, task_seconds = [], [], []
    for repetition in range(context.repetitions):
        context.hosts.reset(host)
        context.hosts.workload(host)
        timing = os.path.join(context.work, 'reclaim-%d.jsonl' % repetition)
        env = ansible_env(context.work, ANSIBLE_CALLBACK_PLUGINS=CALLBACKS, ANSIBLE_CALLBACKS_ENABLED='gpu_timing',
                          ANSIBLE_LOAD_CALLBACK_PLUGINS='true', GPU_TIMING_FILE=timing)
        arguments = json.dumps({'grace_seconds': GRACE_SECONDS, 'poll_interval': 0.005})
        timed(tool('ansible') + ['gpu_hosts', '-i', inv, '-m', 'gpuops.reclaim.gpu_reclaim', '-a', arguments],
              env, os.path.join(context.work, 'reclaim.log'))
        result, start, end = module_result(timing, 'gpuops.reclaim.gpu_reclaim')
        if len(result.get('released', [])) != 3 or result.get('survivors'):
            raise RuntimeError('gpu_reclaim released %d of 3 holders' % len(result.get('released', [])))
        ours.append(result['elapsed_seconds'])
        task_seconds.append(end - start)

        context.hosts.reset(host)
        held = context.hosts.workload(host)
        arguments = ['python3', '-', 'raw', '--now', '--grace', str(GRACE_SECONDS), '--interval', '0.005']
        for item in held:
            arguments += ['--target', str(item['pid'])]
        proc = Hosts.execute(host, *arguments, stdin=probe)
        event = json.loads(proc.stdout.strip().splitlines()[-1])
        if event.get('event') != 'free':
            raise RuntimeError('the raw path did not free the GPUs: %s' % event)
        raw.append(event['seconds'])
    context.hosts.reset(host)
    item = benchlib.entry('reclaim_vs_raw_sim', ours, raw,
                          'raw path: the same signals to the same pids, NVML polled every 5 ms, no discovery',
                          context.machine, ansible_task_median_s=benchlib.summary(task_seconds)[0])
    item['overhead_s'] = round(item['ours_median_s'] - item['baseline_median_s'], 4)
    return item


NSINIT_HOLDER = os.path.join(ROOT, 'extensions', 'molecule', 'sources', 'files', 'nsinit_holder.py')
HOLD = 'python3 /usr/local/lib/gpusim/gpusim.py _hold --mib 40960'


def respawn_nsinit_workload(host):
    """A 40 GiB namespace init with no SIGTERM handler on GPU 0, and a shell loop respawning a 40 GiB worker
    on GPU 1. Returns ``{"nsinit": pid, "worker": pid, "loop": pid}``."""
    with open(NSINIT_HOLDER) as handle:
        Hosts.execute(host, 'sh', '-c', 'cat > /root/nsinit_holder.py', stdin=handle.read())
    Hosts.execute(host, 'sh', '-c', 'setsid -f unshare --pid --fork python3 /root/nsinit_holder.py --gpu 0 '
                  '--mib 40960 --title nsinit-worker </dev/null >/dev/null 2>&1')
    Hosts.execute(host, 'sh', '-c', "setsid -f bash -c 'while true; do %s --gpu 1 --title loop-worker; sleep 0.3; "
                  "done' </dev/null >/dev/null 2>&1" % HOLD)
    found = {}

    def ready():
        rows = Hosts.execute(host, 'ps', '-eo', 'pid=,ppid=,args=').stdout.splitlines()
        found.clear()
        for row in rows:
            fields = row.split(None, 2)
            if len(fields) == 3 and fields[2] == 'nsinit-worker':
                found['nsinit'] = int(fields[0])
            if len(fields) == 3 and fields[2] == 'loop-worker':
                found['worker'], found['loop'] = int(fields[0]), int(fields[1])
        apps = Hosts.execute(host, 'nvidia-smi', '--query-compute-apps=pid', '--format=csv,noheader').stdout
        return len(found) == 3 and len(apps.split()) == 2
    wait_for(ready, 20, 'the namespace init and the respawned worker to hold their GPUs')
    return dict(found)


def bench_respawn_nsinit(context):
    context.hosts.require()
    require_collection_tree()
    host = RECLAIM_HOST
    context.hosts.up(host)
    inv = inventory(os.path.join(context.work, 'respawn.json'), [host], context.connection)
    with open(PROBE) as handle:
        probe = handle.read()
    ours, raw, settles = [], [], []
    for repetition in range(context.repetitions):
        context.hosts.reset(host)
        respawn_nsinit_workload(host)
        timing = os.path.join(context.work, 'respawn-%d.jsonl' % repetition)
        env = ansible_env(context.work, ANSIBLE_CALLBACK_PLUGINS=CALLBACKS, ANSIBLE_CALLBACKS_ENABLED='gpu_timing',
                          ANSIBLE_LOAD_CALLBACK_PLUGINS='true', GPU_TIMING_FILE=timing)
        arguments = json.dumps({'grace_seconds': GRACE_SECONDS, 'poll_interval': 0.005})
        timed(tool('ansible') + ['gpu_hosts', '-i', inv, '-m', 'gpuops.reclaim.gpu_reclaim', '-a', arguments],
              env, os.path.join(context.work, 'respawn.log'))
        result, dummy, dummy2 = module_result(timing, 'gpuops.reclaim.gpu_reclaim')
        parents = [item for item in result.get('sources', []) if item['kind'] == 'parent']
        if len(result.get('released', [])) != 2 or result.get('survivors') or \
                [item['action'] for item in parents] != ['frozen and killed']:
            raise RuntimeError('gpu_reclaim did not release both holders and kill the respawning loop: %s'
                               % json.dumps({k: result.get(k) for k in ('released', 'survivors', 'sources')}))
        ours.append(result['elapsed_seconds'])
        # The settle, reported apart from the release: the proof's own clock.
        timing = os.path.join(context.work, 'settle-%d.jsonl' % repetition)
        env['GPU_TIMING_FILE'] = timing
        timed(tool('ansible') + ['gpu_hosts', '-i', inv, '-m', 'gpuops.reclaim.gpu_assert_free', '-a',
                                 json.dumps({'settle_seconds': 2})], env, os.path.join(context.work, 'settle.log'))
        proof, dummy, dummy2 = module_result(timing, 'gpuops.reclaim.gpu_assert_free')
        if not proof.get('free'):
            raise RuntimeError('the GPUs did not stay free after gpu_reclaim: %s' % proof.get('msg'))
        settles.append(proof['settle_seconds_observed'])

        context.hosts.reset(host)
        held = respawn_nsinit_workload(host)
        arguments = ['python3', '-', 'raw', '--now', '--grace', str(GRACE_SECONDS), '--interval', '0.005',
                     '--respawner', str(held['loop']), '--kill', str(held['nsinit']), '--kill', str(held['worker'])]
        proc = Hosts.execute(host, *arguments, stdin=probe)
        event = json.loads(proc.stdout.strip().splitlines()[-1])
        if event.get('event') != 'free':
            raise RuntimeError('the raw path did not free the GPUs: %s' % event)
        raw.append(event['seconds'])
    context.hosts.reset(host)
    item = benchlib.entry('reclaim_vs_raw_respawn_nsinit_sim', ours, raw,
                          'raw path: SIGSTOP the respawning shell loop, SIGKILL the namespace init and the worker, '
                          'poll NVML every 5 ms until free, SIGKILL the loop; no discovery',
                          context.machine, settle_median_s=benchlib.summary(settles)[0])
    item['overhead_s'] = round(item['ours_median_s'] - item['baseline_median_s'], 4)
    return item


def module_result(path, action):
    start = end = None
    result = {}
    with open(path) as handle:
        for line in handle:
            event = json.loads(line)
            if event.get('action') != action:
                continue
            if event['event'] == 'runner_start':
                start = event['time']
            elif event['event'] in ('ok', 'failed'):
                end = event['time']
                result = event.get('result') or {}
    if start is None or end is None:
        raise RuntimeError('no result of %s in %s' % (action, path))
    return result, start, end


def bench_role_noop(context):
    context.hosts.require()
    require_collection_tree()
    host = NOOP_HOST
    context.hosts.up(host)
    context.hosts.reset(host)
    inv = inventory(os.path.join(context.work, 'noop.json'), [host], context.connection)
    env = ansible_env(context.work)
    log_path = os.path.join(context.work, 'noop.log')
    ours, baseline = [], []
    for dummy in range(context.repetitions):
        ours.append(timed(tool('ansible-playbook') + ['-i', inv, PLAYBOOK], env, log_path))
        baseline.append(timed(tool('ansible-playbook') + ['-i', inv, ONE_TASK], env, log_path))
    return benchlib.entry('role_noop_vs_one_task', ours, baseline,
                          'bench/playbooks/one_task.yml: one task running nvidia-smi on the same host',
                          context.machine)


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError('timed out after %d s waiting for %s' % (timeout, what))


def busy_gpus(name):
    proc = Hosts.execute(name, 'nvidia-smi', '--query-gpu=memory.used', '--format=csv,noheader,nounits')
    return sum(1 for line in proc.stdout.split() if line.strip() and int(line) > 1024)


def bench_incident(context):
    context.hosts.require()
    require_collection_tree()
    host = INCIDENT_HOST
    context.hosts.up(host, gpus=8)
    inv = inventory(os.path.join(context.work, 'incident.json'), [host], context.connection)
    stage, module, task = [], [], []
    for repetition in range(context.repetitions):
        context.hosts.reset(host)
        Hosts.execute(host, 'gpusim', 'clients', 'start')
        Hosts.execute(host, 'systemctl', 'start', 'vllm-sim.service')
        wait_for(lambda: busy_gpus(host) == 8, 60, 'the 8 workers of vllm-sim.service')
        # The incident: the unit is stopped, its workers stay (KillMode=process).
        Hosts.execute(host, 'systemctl', 'stop', 'vllm-sim.service')
        reports = os.path.join(context.work, 'incident-reports-%d' % repetition)
        timing = os.path.join(context.work, 'incident-%d.jsonl' % repetition)
        env = ansible_env(context.work, ANSIBLE_CALLBACK_PLUGINS=CALLBACKS, ANSIBLE_CALLBACKS_ENABLED='gpu_timing',
                          ANSIBLE_LOAD_CALLBACK_PLUGINS='true', GPU_TIMING_FILE=timing)
        extra = json.dumps({'gpu_reclaim_report_dir': reports, 'gpu_reclaim_grace_seconds': GRACE_SECONDS})
        timed(tool('ansible-playbook') + ['-i', inv, PLAYBOOK, '-e', extra],
              env, os.path.join(context.work, 'incident.log'))
        with open(os.path.join(reports, host + '.json')) as handle:
            summary = json.load(handle)
        result, start, end = module_result(timing, 'gpuops.reclaim.gpu_reclaim')
        if not summary.get('free') or len(summary.get('released', [])) < 8:
            raise RuntimeError('the role released %d holders (8 or more expected) and free is %s'
                               % (len(summary.get('released', [])), summary.get('free')))
        stage.append(summary['stage_seconds']['release'])
        module.append(result['elapsed_seconds'])
        task.append(end - start)
    context.hosts.reset(host)
    item = benchlib.entry('incident_release_vs_module', stage, module,
                          "the gpu_reclaim module's own elapsed_seconds in the same run; ours is the role's "
                          'release stage (stage_seconds.release of its summary)',
                          context.machine, ansible_task_median_s=round(benchlib.summary(task)[0], 4))
    item['overhead_s'] = round(item['ours_median_s'] - item['baseline_median_s'], 4)
    return item


def bench_fleet(context):
    context.hosts.require()
    if isinstance(context.hosts, Hosts):
        require_collection_tree()
    fleet = context.hosts.fleet_names(16)
    log('starting %d simulated hosts' % len(fleet))
    context.hosts.up_many(fleet)
    env = ansible_env(context.work)
    log_path = os.path.join(context.work, 'fleet.log')
    samples = {1: [], 4: [], 16: []}
    floor = {1: [], 16: []}
    repetitions = min(context.repetitions, 3)
    for dummy in range(repetitions):
        for count in (1, 4, 16):
            names = fleet[:count]
            with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
                list(pool.map(lambda name: (context.hosts.reset(name), context.hosts.workload(name)), names))
            inv = context.hosts.inventory(os.path.join(context.work, 'fleet-%d.json' % count), names,
                                          context.connection)
            samples[count].append(timed(tool('ansible-playbook') + ['-i', inv, '-f', str(count), PLAYBOOK, '-e',
                                                                    'gpu_reclaim_grace_seconds=%d' % GRACE_SECONDS],
                                        env, log_path))
            if count in floor:
                floor[count].append(timed(tool('ansible-playbook') + ['-i', inv, '-f', str(count), PING],
                                          env, log_path))
    for name in fleet:
        context.hosts.reset(name)
    four = benchlib.summary(samples[4])
    floor_one, floor_sixteen = benchlib.summary(floor[1])[0], benchlib.summary(floor[16])[0]
    return benchlib.entry('fleet_16_vs_1', samples[16], samples[1],
                          'the same playbook on 1 host; forks equal to the host count; each host has 2 GPUs, '
                          'two orphaned 40 GiB workers (one ignoring SIGTERM) and an engine',
                          context.machine, hosts_4_median_s=benchlib._round(four[0]),  # pylint: disable=protected-access
                          hosts_4_samples_s=[benchlib._round(v) for v in samples[4]],  # pylint: disable=protected-access
                          ratio_4_vs_1=round(four[0] / benchlib.summary(samples[1])[0], 4),
                          floor='bench/playbooks/ping.yml (one ping task) on the same 16 and 1 hosts',
                          floor_16_median_s=benchlib._round(floor_sixteen),  # pylint: disable=protected-access
                          floor_1_median_s=benchlib._round(floor_one),  # pylint: disable=protected-access
                          floor_ratio=round(floor_sixteen / floor_one, 4))


FIGURES = {
    'discovery_vs_fuser_10k': bench_discovery,
    'holders_blocked_cmdline': bench_holders_blocked_cmdline,
    'reclaim_vs_raw_sim': bench_reclaim,
    'role_noop_vs_one_task': bench_role_noop,
    'incident_release_vs_module': bench_incident,
    'fleet_16_vs_1': bench_fleet,
    'reclaim_vs_raw_respawn_nsinit_sim': bench_respawn_nsinit,
}


class Context:
    def __init__(self, repetitions, work, connection, hosts='simhost', python=None):
        self.repetitions = repetitions
        self.connection = connection
        self.work = work
        self.machine = benchlib.cpu_machine()
        self.hosts = Hosts() if hosts == 'simhost' else NsHosts(work, python or sys.executable)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--only', help='comma-separated figure names (default: all)')
    parser.add_argument('--repetitions', type=int, default=5)
    parser.add_argument('--output', default=os.path.join(benchlib.RESULTS, 'latest.json'))
    parser.add_argument('--no-readme', action='store_true')
    parser.add_argument('--connection', choices=('ssh', 'podman'), default='ssh',
                        help='how Ansible reaches the simulated hosts (default: ssh with pipelining, as a real host)')
    parser.add_argument('--hosts', choices=('simhost', 'ns'), default='simhost',
                        help='simulated hosts: podman containers (tests/simhost, default) or namespaces '
                        '(bench/nshosts.py: fleet_16_vs_1 only, for a machine without podman)')
    parser.add_argument('--module-python', help='with --hosts ns: the Python that runs modules on the hosts '
                        '(needs psutil and nvidia-ml-py; default: this one)')
    parser.add_argument('--keep-hosts', action='store_true', help='leave the simulated hosts running')
    args = parser.parse_args(argv)
    names = [name.strip() for name in (args.only or ','.join(NAMES)).split(',') if name.strip()]
    unknown = [name for name in names if name not in FIGURES]
    if unknown:
        parser.error('--only: unknown figure %s; choose from %s' % (', '.join(unknown), ', '.join(NAMES)))
    work = tempfile.mkdtemp(prefix='bench-', dir=os.path.join(ROOT, 'build') if os.path.isdir(os.path.join(ROOT, 'build')) else None)
    if args.hosts == 'ns' and names != ['fleet_16_vs_1']:
        parser.error('--hosts ns measures fleet_16_vs_1 only: pass --only fleet_16_vs_1')
    context = Context(args.repetitions, work, args.connection, args.hosts, args.module_python)
    results = []
    failed = False
    began = time.time()
    try:
        for name in names:
            started = time.time()
            log('%s ...' % name)
            try:
                item = FIGURES[name](context)
            except Skip as exc:
                log('%s skipped: %s' % (name, exc))
                item = {'name': name, 'skipped': str(exc), 'machine': context.machine, 'date': benchlib.today()}
            except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as exc:
                log('%s failed: %s' % (name, exc))
                item = {'name': name, 'skipped': 'failed: %s' % exc, 'machine': context.machine,
                        'date': benchlib.today()}
                failed = True
            if name != 'discovery_vs_fuser_10k' and 'ratio' in item:
                item['connection'] = context.hosts.connection_label or context.connection
            item['seconds'] = round(time.time() - started, 1)
            results.append(item)
            if 'ratio' in item:
                log('%s: ratio %s (ours %s s, baseline %s s) in %.0f s' % (
                    name, item['ratio'], item['ours_median_s'], item['baseline_median_s'], item['seconds']))
    finally:
        if not args.keep_hosts:
            context.hosts.down()
    if args.only:
        # A partial run replaces only its own figures; the others stay as last measured.
        try:
            with open(args.output) as handle:
                previous = json.load(handle).get('results', [])
        except (OSError, ValueError):
            previous = []
        fresh = set(item['name'] for item in results)
        results = [item for item in previous if item.get('name') not in fresh] + results
        results.sort(key=lambda item: NAMES.index(item['name']) if item.get('name') in NAMES else len(NAMES))
    data = {'results': results, 'machine': context.machine, 'date': benchlib.today(),
            'started': benchlib.now_iso(), 'seconds': round(time.time() - began, 1),
            'logs': os.path.relpath(work, ROOT)}
    benchlib.write_json(args.output, data)
    if not args.no_readme:
        benchlib.replace_cpu_table(results)
    log('wrote %s (%.0f s)' % (args.output, time.time() - began))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
