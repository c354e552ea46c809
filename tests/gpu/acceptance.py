"""Real-GPU acceptance test of gpuops.reclaim, with the baselines beside it.

Run through ``tests/gpu/run`` (``make gpu-acceptance``); see tests/gpu/README.md.

On a host where no process holds a GPU, for each repetition and each path:

1. start a vLLM-like deployment: an API server with one ``VLLM::Worker_TP<n>``
   per GPU (``--gib`` GiB each, the last one ignoring SIGTERM) and a
   ``VLLM::EngineCore``, then SIGKILL the API server so the others are
   orphaned; beside it an NVML-only monitor whose executable is named
   ``nv-hostengine``;
2. free the GPUs along one path:
   ``module``   ansible-playbook playbooks/reclaim.yml against localhost, with
                the collection installed from a tarball built from this tree;
   ``raw``      the same signals to the same processes without Ansible:
                SIGTERM to all (SIGKILL at once to the one that ignores it, as
                the module's ladder does), SIGKILL after the grace period,
                polling NVML every few milliseconds until the GPUs are free;
   ``oneliner`` ``kill -9 $(fuser /dev/nvidia*); sleep 3; nvidia-smi`` through
                bash, inside a private PID namespace holding only what the
                harness started, so that it cannot reach anything else;
3. record the time until the GPUs were proven free (NVML: used memory at most
   ``--threshold-mib`` and no process listed), what was killed, whether the
   monitor survived, and whether any process the harness did not start
   disappeared.

After the repetitions (or alone, with ``--scenario contexts``) come the context
shapes, each along the module path and the one-liner: a CUDA context kept by a
process other than the one NVML names (a leader thread that exited while
another keeps the memory, children forked without exec, descriptors passed
over a Unix socket), see tests/gpu/README.md.

The harness never opens NVML itself: every NVML read runs in a short-lived
helper process (nvml_probe.py). It signals only processes it started, each
checked by create time through a pidfd. It never resets a GPU or changes its
settings.

Results go to bench/results/gpu-<kind>-<date>.json and a row per figure to the
table in bench/README.md; with ``--out`` (or $OUT) copies go there too.
"""

import argparse
import json
import os
import platform
import select
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, 'bench'))

import benchlib  # noqa: E402  pylint: disable=wrong-import-position
import deployment  # noqa: E402  pylint: disable=wrong-import-position
import procs  # noqa: E402  pylint: disable=wrong-import-position

DEPLOYMENT = os.path.join(HERE, 'deployment.py')
PROBE = os.path.join(HERE, 'nvml_probe.py')
PLAYBOOK = 'playbooks/reclaim.yml'
PATHS = ('module', 'raw', 'oneliner')
SCENARIOS = ('plain', 'sources', 'contexts')
# With --scenario sources, the one-liner is not run: it has no answer to a respawner.
SOURCES_PATHS = ('module', 'raw')
# The context shapes: a CUDA context kept by a process other than the one NVML names. Each runs along these
# paths; the raw path has no PIDs to aim at in them.
CONTEXT_SHAPES = deployment.CONTEXT_SHAPES
CONTEXT_PATHS = ('module', 'oneliner')
ONELINER_TEXT = "bash -c 'kill -9 $(fuser /dev/nvidia* 2>/dev/null); sleep 3; nvidia-smi'"

# For every process the harness starts, whatever the GPU count: multicast over
# NVLink stays off (NCCL, PyTorch symmetric memory, NVSHMEM).
CHILD_ENVIRONMENT = {
    'NCCL_NVLS_ENABLE': '0',
    'TORCH_SYMM_MEM_DISABLE_MULTICAST': '1',
    'NVSHMEM_DISABLE_NVLS': '1',
    'CUDA_DEVICE_ORDER': 'PCI_BUS_ID',
    'PYTHONUNBUFFERED': '1',
}

# Top-level entries of the work tree that never belong in the collection tarball.
NOT_IN_TARBALL = ('.git', '.whl', '.venv', '.ansible', '.pytest_cache', 'build', 'tests', 'bench',
                  'extensions', 'scripts', '.ci')


class HarnessError(Exception):
    """Something that stops the run; the message says what to do."""


def log(text):
    sys.stderr.write('gpu-acceptance: %s\n' % text)
    sys.stderr.flush()


# -- small helpers -------------------------------------------------------------

class EventReader:
    """JSON lines from a child's stdout, with a timeout per line."""

    def __init__(self, process):
        self.process = process
        self.buffer = b''

    def next(self, timeout):
        deadline = time.time() + timeout
        fd = self.process.stdout.fileno()
        while b'\n' not in self.buffer:
            remaining = deadline - time.time()
            if remaining <= 0:
                raise HarnessError('no answer from pid %d within %.0f s' % (self.process.pid, timeout))
            ready, dummy, dummy = select.select([fd], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise HarnessError('pid %d exited (status %s) without an answer'
                                       % (self.process.pid, self.process.wait()))
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b'\n', 1)
        return json.loads(line.decode('utf-8'))


def wait_for_files(paths, timeout, processes=(), failure_dir=None):
    deadline = time.time() + timeout
    while True:
        missing = [path for path in paths if not os.path.exists(path)]
        if not missing:
            return
        if failure_dir and os.path.isdir(failure_dir) and os.listdir(failure_dir):
            details = []
            for name in sorted(os.listdir(failure_dir)):
                with open(os.path.join(failure_dir, name)) as handle:
                    details.append('%s: %s' % (name, handle.read().strip()))
            raise HarnessError('the deployment failed: %s' % '; '.join(details))
        for process, what in processes:
            if process.poll() is not None:
                raise HarnessError('%s exited with status %s before it was ready' % (what, process.returncode))
        if time.time() > deadline:
            raise HarnessError('not ready after %.0f s: %s' % (timeout, ', '.join(missing)))
        time.sleep(0.05)


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def python_environment():
    """Versions of what the harness relies on, read in a child process."""
    code = ('import json, platform, sys\n'
            'out = {"python": platform.python_version()}\n'
            'from importlib import metadata\n'
            'for name in ("torch", "psutil", "nvidia-ml-py"):\n'
            '    try:\n'
            '        out[name] = metadata.version(name)\n'
            '    except Exception as exc:\n'
            '        out[name] = "missing: %s" % exc\n'
            'try:\n'
            '    import torch\n'
            '    out["torch_cuda"] = torch.version.cuda\n'
            'except Exception:\n'
            '    pass\n'
            'print(json.dumps(out))\n')
    proc = subprocess.run([sys.executable, '-c', code], stdout=subprocess.PIPE, universal_newlines=True,
                          timeout=120, check=False)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {'python': platform.python_version()}


def kind_from_snapshot(snapshot):
    """``nvidia-h200`` for one H200, ``nvidia-h200-x2`` for two."""
    gpus = snapshot.get('gpus') or []
    if not gpus:
        return 'nvidia-unknown'
    words = gpus[0].get('name', '').lower().replace('nvidia', '').split()
    model = words[0] if words else 'gpu'
    return 'nvidia-%s%s' % (model, '' if len(gpus) == 1 else '-x%d' % len(gpus))


def machine_text(kind, snapshot):
    gpus = snapshot.get('gpus') or []
    name = gpus[0]['name'] if gpus else 'no GPU'
    total = gpus[0].get('memory_total_mib') if gpus else None
    return '%s: %dx %s%s, driver %s, %d CPUs' % (
        kind, len(gpus), name, ' (%d MiB)' % total if total else '', snapshot.get('driver_version'),
        os.cpu_count() or 0)


def result_path(kind, date):
    base = os.path.join(benchlib.RESULTS, 'gpu-%s-%s' % (kind, date))
    path = base + '.json'
    number = 2
    while os.path.exists(path):
        path = '%s-%d.json' % (base, number)
        number += 1
    return path


# -- the harness ---------------------------------------------------------------

class Harness:

    def __init__(self, args):
        self.args = args
        self.python = args.python
        self.base = os.path.abspath(args.work_dir)
        os.makedirs(self.base, exist_ok=True)
        self.state_file = os.path.join(self.base, 'started.json')
        self.work = None
        self.tarball = None
        self.preflight_listing = {'holders': []}
        self.children = []
        self.owned = procs.Owned(self.state_file)
        self.runs = {name: [] for name in PATHS}
        self.runs.update((shape, []) for shape in args.shapes)
        self.checks = []
        self.snapshot = None
        self.gpu_indices = []
        self.site = None
        self.collections = None
        self.monitor_exe = None
        self.monitor_env = None
        self.started = time.time()
        # Stand-in device nodes instead of CUDA (the harness's own offline tests only).
        self.simulate = None

    # -- child processes -------------------------------------------------------

    def env(self, **extra):
        env = dict(os.environ)
        env.update(CHILD_ENVIRONMENT)
        env.pop('CUDA_VISIBLE_DEVICES', None)
        if self.site:
            env['PYTHONPATH'] = os.pathsep.join([self.site] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
        env.update(extra)
        return env

    def logfile(self, name):
        return open(os.path.join(self.work, name + '.log'), 'ab')

    def probe(self, *arguments, timeout=60):
        """Run nvml_probe.py to completion; return its last JSON line."""
        proc = subprocess.run([self.python, PROBE] + list(arguments), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout, env=self.env(),
                              check=False)
        lines = [line for line in proc.stdout.splitlines() if line.startswith('{')]
        if not lines:
            raise HarnessError('nvml_probe.py %s printed nothing (status %d): %s'
                               % (arguments[0], proc.returncode, proc.stderr.strip()[-2000:]))
        return json.loads(lines[-1])

    def wait_free(self, timeout, what):
        """Wait (through a short-lived watcher) until every GPU is free."""
        event = self.probe('watch', '--threshold-mib', str(self.args.threshold_mib), '--interval', '0.02',
                           '--timeout', str(timeout), timeout=timeout + 60)
        if event.get('event') != 'free':
            raise HarnessError('%s: the GPUs are not free after %.0f s: %s' % (what, timeout, event.get('gpus')))
        return event

    # -- preflight -------------------------------------------------------------

    def preflight(self):
        previous = procs.Owned.load(self.state_file)
        left = previous.alive()
        if left:
            raise HarnessError('processes started by an earlier run are still alive: %s. Stop them with '
                               'tests/gpu/run --cleanup' % ', '.join('%d (%s)' % (e['pid'], e['label']) for e in left))
        self.snapshot = self.probe('snapshot')
        listing = procs.list_holders(self.snapshot, self.owned)
        log('GPU holders before the run:\n%s' % procs.format_holders(listing))
        if listing['fuser_text'].strip():
            log('fuser -v:\n%s' % listing['fuser_text'])
        self.preflight_listing = listing
        if listing['foreign']:
            raise HarnessError('%d process(es) that this harness did not start hold a GPU: %s. The harness '
                               'only runs on a host where it may kill everything that holds a GPU; stop them '
                               'first.' % (len(listing['foreign']), ', '.join(
                                   '%d (%s)' % (r['pid'], r.get('name')) for r in listing['foreign'])))
        if not self.snapshot.get('available') or not self.snapshot.get('gpus'):
            raise HarnessError('no NVIDIA GPU usable here: %s' % '; '.join(listing['problems'] or ['NVML lists no GPU']))
        self.gpu_indices = [gpu['index'] for gpu in self.snapshot['gpus']]
        if self.args.scenario == 'contexts':
            need_mib = self.args.context_gib * 1024 + 2048
        else:
            need_mib = max(self.args.gib * 1024 + self.args.engine_gib * 1024, self.args.context_gib * 1024) + 2048
        for gpu in self.snapshot['gpus']:
            if gpu['memory_used_mib'] > self.args.threshold_mib:
                raise HarnessError('GPU %d already has %d MiB in use with no holder; the harness needs free GPUs'
                                   % (gpu['index'], gpu['memory_used_mib']))
            if gpu['memory_total_mib'] < need_mib:
                raise HarnessError('GPU %d has %d MiB; --gib %s needs about %d MiB'
                                   % (gpu['index'], gpu['memory_total_mib'], self.args.gib, need_mib))

    # -- preparation -----------------------------------------------------------

    def ansible_importable(self, env):
        proc = subprocess.run([self.python, '-c', 'import ansible.release, jinja2, yaml, cryptography'],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        return proc.returncode == 0

    def prepare_ansible(self):
        if self.ansible_importable(self.env()):
            log('ansible-core is importable by %s' % self.python)
        else:
            wheels = os.path.abspath(self.args.wheels)
            found = sorted(name for name in os.listdir(wheels) if name.endswith('.whl')) if os.path.isdir(wheels) else []
            if not found:
                raise HarnessError('ansible-core is not installed for %s and there are no wheels in %s: run '
                                   'tests/gpu/fetch-wheels on a machine with a package index and carry .whl/'
                                   % (self.python, wheels))
            self.site = os.path.join(self.base, 'site')
            marker = os.path.join(self.site, '.wheels')
            if not os.path.exists(marker) or open(marker).read() != '\n'.join(found):
                shutil.rmtree(self.site, ignore_errors=True)
                log('installing %d wheels from %s into %s' % (len(found), wheels, self.site))
                proc = subprocess.run([self.python, '-m', 'pip', 'install', '--quiet', '--disable-pip-version-check',
                                       '--no-index', '--no-deps', '--target', self.site]
                                      + [os.path.join(wheels, name) for name in found],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                      check=False)
                if proc.returncode != 0:
                    raise HarnessError('pip could not install the wheels: %s' % proc.stdout[-2000:])
                with open(marker, 'w') as handle:
                    handle.write('\n'.join(found))
            if not self.ansible_importable(self.env()):
                raise HarnessError('ansible-core is still not importable from %s' % self.site)
        # Build the collection from a copy of this tree and install the tarball.
        source = os.path.join(self.work, 'src')
        shutil.copytree(ROOT, source, symlinks=True,
                        ignore=lambda directory, names: [n for n in names if directory == ROOT and n in NOT_IN_TARBALL])
        dist = os.path.join(self.work, 'dist')
        self.collections = os.path.join(self.work, 'collections')
        with open(os.path.join(self.work, 'ansible.cfg'), 'w') as handle:
            handle.write('[defaults]\nretry_files_enabled = False\n')
            # As an operator's ansible.cfg usually has it (and the simulated hosts' inventory): a module task
            # is one process on the host, without copying the module to a temporary file first.
            handle.write('[connection]\npipelining = %s\n' % bool(self.args.pipelining))
        env = self.ansible_env()
        for command in (['ansible.cli.galaxy', 'collection', 'build', '--force', '--output-path', dist, source],):
            self.run_logged([self.python, '-m'] + command, env, 'galaxy-build')
        tarballs = [name for name in os.listdir(dist) if name.endswith('.tar.gz')]
        if len(tarballs) != 1:
            raise HarnessError('ansible-galaxy collection build left %s in %s' % (tarballs, dist))
        self.tarball = os.path.join(dist, tarballs[0])
        self.run_logged([self.python, '-m', 'ansible.cli.galaxy', 'collection', 'install', '--force', '-p',
                         self.collections, self.tarball], env, 'galaxy-install')
        self.installed = os.path.join(self.collections, 'ansible_collections', 'gpuops', 'reclaim')
        if not os.path.exists(os.path.join(self.installed, PLAYBOOK)):
            raise HarnessError('the installed collection has no %s' % PLAYBOOK)
        self.inventory = os.path.join(self.work, 'inventory.ini')
        with open(self.inventory, 'w') as handle:
            handle.write('localhost ansible_connection=local ansible_python_interpreter=%s\n' % self.python)
        log('collection built (%s) and installed in %s' % (os.path.basename(self.tarball), self.collections))

    def ansible_env(self, **extra):
        home = os.path.join(self.work, 'ansible-home')
        return self.env(
            ANSIBLE_CONFIG=os.path.join(self.work, 'ansible.cfg'),
            ANSIBLE_COLLECTIONS_PATH=self.collections or os.path.join(self.work, 'collections'),
            ANSIBLE_COLLECTIONS_SCAN_SYS_PATH='False',
            ANSIBLE_HOME=home,
            ANSIBLE_LOCAL_TEMP=os.path.join(home, 'tmp'),
            ANSIBLE_REMOTE_TEMP=os.path.join(home, 'remote-tmp'),
            ANSIBLE_CALLBACK_PLUGINS=os.path.join(HERE, 'callback_plugins'),
            ANSIBLE_CALLBACKS_ENABLED='gpu_timing',
            ANSIBLE_NOCOLOR='1',
            ANSIBLE_FORCE_COLOR='0',
            ANSIBLE_RETRY_FILES_ENABLED='False',
            LC_ALL='C.UTF-8',
            PYTHONUTF8='1',
            **extra)

    def run_logged(self, command, env, name, timeout=300):
        with self.logfile(name) as out:
            out.write(('$ %s\n' % ' '.join(command)).encode())
            out.flush()
            proc = subprocess.run(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.work,
                                  timeout=timeout, check=False)
        if proc.returncode != 0:
            with open(os.path.join(self.work, name + '.log')) as handle:
                tail = handle.read()[-3000:]
            raise HarnessError('%s failed (status %d):\n%s' % (command[2:4], proc.returncode, tail))

    def prepare_monitor(self):
        """A copy of the interpreter named nv-hostengine, in a minimal venv layout
        (pyvenv.cfg points at the real interpreter's directory)."""
        real = os.path.realpath(self.python)
        root = os.path.join(self.work, 'nv-hostengine')
        os.makedirs(os.path.join(root, 'bin'))
        self.monitor_exe = os.path.join(root, 'bin', 'nv-hostengine')
        shutil.copy2(real, self.monitor_exe)
        os.chmod(self.monitor_exe, 0o755)
        with open(os.path.join(root, 'pyvenv.cfg'), 'w') as handle:
            handle.write('home = %s\ninclude-system-site-packages = true\n' % os.path.dirname(real))
        paths = subprocess.run([self.python, '-c', 'import sys, json; print(json.dumps([p for p in sys.path if p]))'],
                               stdout=subprocess.PIPE, universal_newlines=True, env=self.env(), check=True).stdout
        extra = {'PYTHONPATH': os.pathsep.join(json.loads(paths))}
        if sysconfig.get_config_var('Py_ENABLE_SHARED') and sysconfig.get_config_var('LIBDIR'):
            extra['LD_LIBRARY_PATH'] = os.pathsep.join(
                [sysconfig.get_config_var('LIBDIR')] + [p for p in os.environ.get('LD_LIBRARY_PATH', '').split(os.pathsep) if p])
        self.monitor_env = self.env(**extra)
        self.monitor_env_file = os.path.join(self.work, 'monitor-env.json')
        with open(self.monitor_env_file, 'w') as handle:
            json.dump(extra, handle)
        check = subprocess.run([self.monitor_exe, '-c', 'import pynvml, psutil; print("ok")'], env=self.monitor_env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
        if check.returncode != 0 or 'ok' not in check.stdout:
            raise HarnessError('the interpreter copied as %s cannot import pynvml: %s'
                               % (self.monitor_exe, check.stdout[-1500:]))

    # -- deployments -------------------------------------------------------------

    def parent_arguments(self, run_dir):
        return ['--run-dir', run_dir, '--gpus', ','.join(str(i) for i in self.gpu_indices),
                '--gib', str(self.args.gib), '--engine-gib', str(self.args.engine_gib),
                '--ready-timeout', str(self.args.ready_timeout)]

    def workload_names(self):
        return ['engine'] + ['worker%d' % tp for tp in range(len(self.gpu_indices))]

    def deploy(self, label):
        """Start the deployment on the host and orphan it; return its records."""
        run_dir = os.path.join(self.work, label)
        os.makedirs(run_dir)
        with self.logfile(label) as out:
            monitor = subprocess.Popen([self.monitor_exe, DEPLOYMENT, 'monitor', '--run-dir', run_dir],
                                       env=self.monitor_env, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
            self.owned.add(monitor.pid, label='nv-hostengine')
            parent = subprocess.Popen([self.python, DEPLOYMENT, 'parent'] + self.parent_arguments(run_dir),
                                      env=self.env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
            self.owned.add(parent.pid, label='VLLM::APIServer')
        self.children += [monitor, parent]
        ready = os.path.join(run_dir, 'ready')
        wait_for_files([os.path.join(ready, 'parent.json'), os.path.join(ready, 'monitor.json')],
                       self.args.ready_timeout + 30, [(parent, 'the API server'), (monitor, 'the monitor')],
                       os.path.join(run_dir, 'failed'))
        records = {}
        for name in self.workload_names():
            record = read_json(os.path.join(ready, name + '.json'))
            self.owned.add(record['pid'], record['create_time'], label=record['title'])
            records[name] = record
        monitor_record = read_json(os.path.join(ready, 'monitor.json'))
        monitor_record['create_time'] = self.owned.processes[monitor.pid]['create_time']
        # The API server dies; its workers and engine are orphaned.
        self.owned.signal(parent.pid, signal.SIGKILL)
        parent.wait()
        return run_dir, records, monitor_record

    def holders_or_refuse(self, what):
        """NVML's snapshot (read in a child process) and the holders (``fuser -v`` and NVML); stops the run
        when a process the harness did not start holds a GPU, since the module and the one-liner would
        signal it."""
        snapshot = self.probe('snapshot')
        nodes = None
        if getattr(self, 'simulate', None):
            nodes = procs.device_nodes((os.path.join(self.simulate, 'nvidia*'),))
        listing = procs.list_holders(snapshot, self.owned, nodes=nodes)
        if listing['foreign']:
            raise HarnessError('%s: process(es) that this harness did not start now hold a GPU: %s; stopping '
                               'before anything is signalled' % (what, ', '.join(
                                   '%d (%s)' % (r['pid'], r.get('name')) for r in listing['foreign'])))
        return snapshot, listing

    def check_held(self, what, indices=None):
        """Right before a path acts: NVML shows the workers' memory on every GPU (read
        in a child process), and no process the harness did not start holds a GPU,
        since the module and the one-liner would signal it."""
        snapshot, dummy = self.holders_or_refuse(what)
        want = self.args.gib * 1024 * 0.9
        for gpu in snapshot.get('gpus', []):
            if indices is not None and gpu['index'] not in indices:
                continue
            if gpu['memory_used_mib'] < want:
                raise HarnessError('%s: GPU %d shows %d MiB used, expected at least %d'
                                   % (what, gpu['index'], gpu['memory_used_mib'], want))
        return snapshot

    def outcome(self, records, monitor_record):
        """Which workload processes died, and whether the monitor did."""
        killed = []
        for name, record in sorted(records.items()):
            if not procs.same_process(record['pid'], record['create_time']) or procs.is_zombie(record['pid']):
                killed.append(record['title'])
        monitor_alive = (procs.same_process(monitor_record['pid'], monitor_record['create_time'])
                         and not procs.is_zombie(monitor_record['pid']))
        if not monitor_alive:
            killed.append('nv-hostengine')
        return killed, monitor_alive

    def finish(self, label):
        """Stop what is left of this repetition and wait until the GPUs are free."""
        left = self.owned.stop_all(grace=1.0)
        if left:
            raise HarnessError('%s: processes the harness started do not exit: %s' % (label, left))
        for child in self.children:
            if child.poll() is None:
                child.wait(timeout=10)
        self.children = []
        self.wait_free(60, label)

    # -- the three paths -----------------------------------------------------------

    def run_module(self, repetition):
        label = 'module-%d' % repetition
        run_dir, records, monitor = self.deploy(label)
        self.check_held(label)
        watcher = subprocess.Popen([self.python, PROBE, 'watch', '--threshold-mib', str(self.args.threshold_mib),
                                    '--interval', str(self.args.poll_interval), '--timeout', '300'],
                                   stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=self.logfile(label),
                                   env=self.env())
        self.owned.add(watcher.pid, label='watcher')
        self.children.append(watcher)
        events = EventReader(watcher)
        ready = events.next(60)
        if ready.get('event') != 'ready' or ready.get('free_at_start'):
            raise HarnessError('%s: the watcher did not start on busy GPUs: %s' % (label, ready))
        report_dir = os.path.join(run_dir, 'report')
        os.makedirs(report_dir)
        timing_file = os.path.join(run_dir, 'timing.jsonl')
        variables = os.path.join(run_dir, 'vars.json')
        with open(variables, 'w') as handle:
            json.dump({'target': 'localhost', 'gpu_reclaim_grace_seconds': self.args.grace,
                       'gpu_reclaim_poll_interval': self.args.poll_interval,
                       'gpu_reclaim_max_used_mib': self.args.threshold_mib,
                       'gpu_reclaim_allow_reset': False,
                       'gpu_reclaim_report_dir': report_dir}, handle)
        command = [self.python, '-m', 'ansible.cli.playbook', '-i', self.inventory,
                   os.path.join(self.installed, PLAYBOOK), '-e', '@' + variables]
        before = procs.foreign_processes(self.owned)
        with self.logfile(label + '-playbook') as out:
            started = time.time()
            proc = subprocess.run(command, env=self.ansible_env(GPU_TIMING_FILE=timing_file), stdout=out,
                                  stderr=subprocess.STDOUT, cwd=self.work, timeout=300, check=False)
            ended = time.time()
        gone = procs.disappeared(before)
        try:
            free = events.next(10)
        except HarnessError as exc:
            free = {'event': 'timeout', 'error': str(exc)}
        watcher_status = watcher.poll()
        after = self.probe('snapshot')
        free_after = all(gpu['memory_used_mib'] <= self.args.threshold_mib and not gpu['pids']
                         for gpu in after.get('gpus', []))
        killed, monitor_alive = self.outcome(records, monitor)
        timing = parse_timing(timing_file)
        report = None
        report_file = os.path.join(report_dir, 'localhost.json')
        if os.path.exists(report_file):
            report = read_json(report_file)
        release_start = timing.get('release_start')
        module_result = timing.get('release_result') or {}
        term_times = sorted(read_json(os.path.join(run_dir, 'term', name))['time']
                            for name in (os.listdir(os.path.join(run_dir, 'term'))
                                         if os.path.isdir(os.path.join(run_dir, 'term')) else []))
        released = [item for item in module_result.get('released', []) if isinstance(item, dict)]
        workload = set(record['pid'] for record in records.values())
        not_ours = ['%s (%s)' % (item.get('pid'), item.get('title')) for item in released
                    if item.get('pid') not in self.owned.processes]
        not_workload = ['%s (%s, kind %s)' % (item.get('pid'), item.get('title'), item.get('kind'))
                        for item in released if item.get('pid') not in workload]
        run = {
            'repetition': repetition,
            'playbook_rc': proc.returncode,
            'playbook_wall_s': round(ended - started, 4),
            # The proof's settle window, which the wall time includes; reported on its own.
            'settle_s': timing.get('settle_seconds'),
            'playbook_wall_without_settle_s': round(ended - started - (timing.get('settle_seconds') or 0.0), 4),
            # From the playbook's start until the proof task ended, the settle window left out.
            'until_proven_free_s': (round(timing['proof_end'] - started - (timing.get('settle_seconds') or 0.0), 4)
                                    if timing.get('proof_end') else None),
            'tasks': [item for item in timing['tasks'] if 'seconds' in item],
            'release_task_start': release_start,
            'release_task_s': _diff(timing.get('release_end'), release_start),
            'module_elapsed_s': module_seconds(module_result),
            'time_to_free_s': _diff(free.get('time'), release_start) if free.get('event') == 'free' else None,
            'first_signal_after_task_start_s': _diff(term_times[0], release_start) if term_times else None,
            'watcher': free,
            'watcher_exit_status': watcher_status,
            'free': free.get('event') == 'free' or free_after,
            'free_after_playbook': free_after,
            'gpus_after_playbook': after.get('gpus'),
            'killed': killed,
            'monitor_survived': monitor_alive,
            'protected_killed': 0 if monitor_alive else 1,
            'foreign_killed': len(gone),
            'foreign_disappeared': gone,
            'released': ['%s (%s)' % (item.get('pid'), item.get('title')) for item in released],
            'released_not_started_by_harness': not_ours,
            'released_outside_workload': not_workload,
            'module_result': _trim(module_result),
            'role_report': _trim(report),
            'stage_seconds': (report or {}).get('stage_seconds'),
        }
        self.runs['module'].append(run)
        self.check('%s: playbook succeeded' % label, proc.returncode == 0, 'rc %d, log %s-playbook.log' % (proc.returncode, label))
        self.check('%s: GPUs free after the playbook' % label, free_after, after.get('gpus'))
        self.check('%s: nv-hostengine survived' % label, monitor_alive, killed)
        self.check('%s: no process the harness did not start disappeared' % label, not gone, gone)
        self.check('%s: the module released only processes the harness started' % label, not not_ours, not_ours)
        self.check('%s: the module released only the workload, no NVML-only client' % label,
                   not not_workload, not_workload)
        self.check('%s: every workload process is gone' % label,
                   sorted(killed) == sorted(r['title'] for r in records.values()), killed)
        self.finish(label)
        return run

    def run_raw(self, repetition):
        label = 'raw-%d' % repetition
        run_dir, records, monitor = self.deploy(label)
        del run_dir
        self.check_held(label)
        command = [self.python, PROBE, 'raw', '--threshold-mib', str(self.args.threshold_mib),
                   '--interval', str(self.args.poll_interval), '--grace', str(self.args.grace), '--timeout', '120']
        for record in records.values():
            command += ['--target', '%d:%r' % (record['pid'], record['create_time'])]
        raw = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.logfile(label),
                               env=self.env())
        self.owned.add(raw.pid, label='raw path')
        self.children.append(raw)
        events = EventReader(raw)
        ready = events.next(60)
        if ready.get('event') != 'ready':
            raise HarnessError('%s: the raw path did not start: %s' % (label, ready))
        before = procs.foreign_processes(self.owned)
        raw.stdin.write(b'go\n')
        raw.stdin.flush()
        result = events.next(self.args.grace + 180)
        gone = procs.disappeared(before)
        killed, monitor_alive = self.outcome(records, monitor)
        run = {
            'repetition': repetition,
            'time_to_free_s': result.get('seconds'),
            'free': result.get('event') == 'free',
            'signals': result.get('signals'),
            'polls': result.get('polls'),
            'largest_gap_s': result.get('largest_gap_s'),
            'killed': killed,
            'monitor_survived': monitor_alive,
            'protected_killed': 0 if monitor_alive else 1,
            'foreign_killed': len(gone),
            'foreign_disappeared': gone,
        }
        self.runs['raw'].append(run)
        self.check('%s: GPUs proven free' % label, run['free'], result)
        self.check('%s: no process the harness did not start disappeared' % label, not gone, gone)
        self.finish(label)
        return run

    def run_oneliner(self, repetition):
        label = 'oneliner-%d' % repetition
        run_dir = os.path.join(self.work, label)
        os.makedirs(run_dir)
        command = [self.python, DEPLOYMENT, 'nsinit', '--run-dir', run_dir, '--monitor-exe', self.monitor_exe,
                   '--monitor-env', self.monitor_env_file, '--ready-timeout', str(self.args.ready_timeout),
                   '--'] + self.parent_arguments(run_dir)
        launcher = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=self.logfile(label), env=self.env())
        self.owned.add(launcher.pid, label='namespace launcher')
        self.children.append(launcher)
        events = EventReader(launcher)
        ready = events.next(self.args.ready_timeout + 60)
        if ready.get('event') != 'ready':
            raise HarnessError('%s: the deployment in a private PID namespace failed: %s' % (label, ready.get('error')))
        mapping = procs.ns_pid_map(launcher.pid)
        records = {}
        for name in self.workload_names() + ['monitor']:
            record = read_json(os.path.join(run_dir, 'ready', name + '.json'))
            record['ns_pid'] = record['pid']
            record['pid'] = mapping[record['ns_pid']]
            self.owned.add(record['pid'], record['create_time'], label=record['title'])
            records[name] = record
        for ns_pid, pid in mapping.items():
            if not self.owned.owns(pid):
                self.owned.add(pid, label='namespace pid %d' % ns_pid)
        monitor = records.pop('monitor')
        self.check_held(label)
        before = procs.foreign_processes(self.owned)
        launcher.stdin.write(b'{"op": "oneliner"}\n')
        launcher.stdin.flush()
        result = events.next(120)
        after = self.probe('snapshot')
        free_at = None
        if all(gpu['memory_used_mib'] <= self.args.threshold_mib and not gpu['pids'] for gpu in after.get('gpus', [])):
            free_at = result['end']
        else:
            event = self.probe('watch', '--threshold-mib', str(self.args.threshold_mib), '--interval',
                               str(self.args.poll_interval), '--timeout', '120', timeout=200)
            if event.get('event') == 'free':
                free_at = event['time']
        gone = procs.disappeared(before)
        killed, monitor_alive = self.outcome(records, monitor)
        run = {
            'repetition': repetition,
            'command': result.get('command'),
            'oneliner_s': round(result['end'] - result['start'], 4),
            'oneliner_rc': result.get('rc'),
            'time_to_free_s': None if free_at is None else round(free_at - result['start'], 4),
            'free': free_at is not None,
            'killed': killed,
            'monitor_survived': monitor_alive,
            'protected_killed': 0 if monitor_alive else 1,
            'foreign_killed': len(gone),
            'foreign_disappeared': gone,
            'output_tail': (result.get('output') or '')[-1500:],
        }
        self.runs['oneliner'].append(run)
        self.check('%s: no process the harness did not start disappeared' % label, not gone, gone)
        launcher.stdin.write(b'{"op": "exit"}\n')
        launcher.stdin.flush()
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.owned.signal(launcher.pid, signal.SIGKILL)
            launcher.wait()
        self.finish(label)
        return run

    # -- the sources scenario: what brings a holder back ---------------------------

    def sources_gpus(self):
        """The GPUs the sources scenario loads: the first and the last."""
        return set([self.gpu_indices[0], self.gpu_indices[-1]])

    def deploy_sources(self, label):
        """A worker respawned by a shell loop, and a worker that is PID 1 of its own PID namespace with no
        SIGTERM handler (unshare --pid --fork --mount-proc: without --mount-proc CUDA fails with error 304).
        With one GPU both share it, each with half of --gib. Returns the run dir, the records (host pids) and
        the two processes the harness started."""
        run_dir = os.path.join(self.work, label)
        os.makedirs(run_dir)
        first, last = self.gpu_indices[0], self.gpu_indices[-1]
        gib = self.args.gib if first != last else self.args.gib / 2
        worker = [self.python, DEPLOYMENT, 'worker', '--run-dir', run_dir, '--gib', str(gib)]
        if self.simulate:
            worker += ['--simulate', self.simulate]
        loop = 'while true; do %s --tp 0 --gpu %d --name respawned; sleep 0.5; done' % (
            ' '.join(shlex.quote(word) for word in worker), first)
        with self.logfile(label) as out:
            respawner = subprocess.Popen(['bash', '-c', loop], env=self.env(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
            self.owned.add(respawner.pid, label='respawn loop')
            unshare = subprocess.Popen(['unshare', '--pid', '--fork', '--mount-proc'] + worker
                                       + ['--tp', '1', '--gpu', str(last), '--default-term', '--name', 'nsinit'],
                                       env=self.env(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
            self.owned.add(unshare.pid, label='unshare')
        self.children += [respawner, unshare]
        ready = os.path.join(run_dir, 'ready')
        wait_for_files([os.path.join(ready, 'respawned.json'), os.path.join(ready, 'nsinit.json')],
                       self.args.ready_timeout + 30, [(respawner, 'the respawn loop'), (unshare, 'the namespace init')],
                       os.path.join(run_dir, 'failed'))
        records = {'respawned': read_json(os.path.join(ready, 'respawned.json'))}
        nsinit = read_json(os.path.join(ready, 'nsinit.json'))
        # Its ready file holds its pid inside its namespace (1): the host pid is found from outside.
        mapping = procs.ns_pid_map(unshare.pid)
        if nsinit['pid'] not in mapping:
            raise HarnessError('%s: the namespace init is not found below unshare (pid %d): %s'
                               % (label, unshare.pid, mapping))
        nsinit['ns_pid'], nsinit['pid'] = nsinit['pid'], mapping[nsinit['pid']]
        records['nsinit'] = nsinit
        for record in records.values():
            self.owned.add(record['pid'], record['create_time'], label=record['title'])
        return run_dir, records, respawner, unshare

    def play(self, label, variables, timing_file=None):
        """ansible-playbook with the installed playbook; returns (rc, seconds, output)."""
        command = [self.python, '-m', 'ansible.cli.playbook', '-i', self.inventory,
                   os.path.join(self.installed, PLAYBOOK), '-e', '@' + variables]
        log_path = os.path.join(self.work, label + '.log')
        with open(log_path, 'ab') as out:
            started = time.time()
            proc = subprocess.run(command, env=self.ansible_env(GPU_TIMING_FILE=timing_file or os.devnull),
                                  stdout=out, stderr=subprocess.STDOUT, cwd=self.work, timeout=300, check=False)
            seconds = time.time() - started
        with open(log_path) as handle:
            return proc.returncode, seconds, handle.read()

    def ansible_floor(self, repetitions=3):
        """What Ansible itself costs on this host, to read the playbook's figures against: the wall time of a
        playbook with no task, and the time of a task of ansible.builtin.ping (the first, which builds the
        module, and the later ones), through the same inventory, interpreter and settings as the role."""
        empty = os.path.join(self.work, 'floor-empty.yml')
        pings = os.path.join(self.work, 'floor-ping.yml')
        with open(empty, 'w') as handle:
            handle.write('- hosts: localhost\n  gather_facts: false\n  tasks: []\n')
        with open(pings, 'w') as handle:
            handle.write('- hosts: localhost\n  gather_facts: false\n  tasks:\n'
                         + ''.join('    - name: Ping %d\n      ansible.builtin.ping:\n' % number
                                   for number in range(4)))
        walls, first, later = [], [], []
        for repetition in range(repetitions):
            for path in (empty, pings):
                timing_file = os.path.join(self.work, 'floor-%d.jsonl' % repetition)
                command = [self.python, '-m', 'ansible.cli.playbook', '-i', self.inventory, path]
                with self.logfile('floor') as out:
                    started = time.time()
                    proc = subprocess.run(command, env=self.ansible_env(GPU_TIMING_FILE=timing_file), stdout=out,
                                          stderr=subprocess.STDOUT, cwd=self.work, timeout=120, check=False)
                    wall = time.time() - started
                if proc.returncode != 0:
                    raise HarnessError('the floor playbook %s failed (status %d)' % (path, proc.returncode))
                if path == empty:
                    walls.append(wall)
                    continue
                tasks = [item['seconds'] for item in parse_timing(timing_file)['tasks'] if 'seconds' in item]
                first.extend(tasks[:1])
                later.extend(tasks[1:])
        return {'empty_playbook_median_s': benchlib.summary(walls)[0],
                'ping_task_first_median_s': benchlib.summary(first)[0],
                'ping_task_median_s': benchlib.summary(later)[0],
                'repetitions': repetitions}

    def run_sources_module(self, repetition):
        label = 'sources-module-%d' % repetition
        run_dir, records, respawner, unshare = self.deploy_sources(label)
        self.check_held(label, self.sources_gpus())
        report_dir = os.path.join(run_dir, 'report')
        os.makedirs(report_dir)
        timing_file = os.path.join(run_dir, 'timing.jsonl')
        variables = os.path.join(run_dir, 'vars.json')
        with open(variables, 'w') as handle:
            json.dump({'target': 'localhost', 'gpu_reclaim_grace_seconds': self.args.grace,
                       'gpu_reclaim_poll_interval': self.args.poll_interval,
                       'gpu_reclaim_max_used_mib': self.args.threshold_mib, 'gpu_reclaim_allow_reset': False,
                       'gpu_reclaim_settle_seconds': self.args.settle, 'gpu_reclaim_report_dir': report_dir}, handle)
        before = procs.foreign_processes(self.owned)
        rc, wall, dummy = self.play(label + '-playbook', variables, timing_file)
        # Still free a few seconds later: nothing was left to bring a holder back.
        time.sleep(self.args.stay_free)
        later = self.probe('snapshot')
        free_later = all(gpu['memory_used_mib'] <= self.args.threshold_mib and not gpu['pids']
                         for gpu in later.get('gpus', []))
        again_rc, dummy, again_output = self.play(label + '-again', variables)
        again = procs.recap_counts(again_output)
        gone = procs.disappeared(before)
        stopped = procs.stopped_processes()
        timing = parse_timing(timing_file)
        module_result = timing.get('release_result') or {}
        sources = [item for item in module_result.get('sources', []) if isinstance(item, dict)]
        by_pid = dict((item.get('pid'), item) for item in module_result.get('released', []) if isinstance(item, dict))
        nsinit_cases = [step.get('case') for step in (by_pid.get(records['nsinit']['pid']) or {}).get('skipped_steps', [])]
        loop_actions = [item.get('action') for item in sources if item.get('pid') == respawner.pid]
        run = {
            'repetition': repetition,
            'playbook_rc': rc,
            'playbook_wall_s': round(wall, 4),
            'module_elapsed_s': module_seconds(module_result),
            'time_to_free_s': None,
            'free_after_%gs' % self.args.stay_free: free_later,
            'gpus_later': later.get('gpus'),
            'second_run': again,
            'second_run_rc': again_rc,
            'foreign_killed': len(gone),
            'foreign_disappeared': gone,
            'left_stopped': stopped,
            'sources': sources,
            'nsinit_skipped_cases': nsinit_cases,
            'killed': [record['title'] for record in records.values()
                       if not procs.same_process(record['pid'], record['create_time'])
                       or procs.is_zombie(record['pid'])],
            'module_result': _trim(module_result),
        }
        self.runs['module'].append(run)
        self.check('%s: playbook succeeded' % label, rc == 0, 'rc %d, log %s-playbook.log' % (rc, label))
        self.check('%s: GPUs still free %g s after the playbook' % (label, self.args.stay_free), free_later,
                   later.get('gpus'))
        self.check('%s: the second run is changed=0' % label, again_rc == 0 and again.get('changed') == 0,
                   {'rc': again_rc, 'recap': again})
        self.check('%s: no process the harness did not start disappeared' % label, not gone, gone)
        self.check('%s: no process left stopped' % label, not stopped, stopped)
        self.check('%s: the respawn loop was frozen and killed' % label, loop_actions == ['frozen and killed'],
                   sources)
        self.check('%s: the namespace init got no grace' % label,
                   nsinit_cases == ['namespace-init-without-handler'], by_pid.get(records['nsinit']['pid']))
        self.finish(label)
        return run

    def run_sources_raw(self, repetition):
        label = 'sources-raw-%d' % repetition
        dummy, records, respawner, unshare = self.deploy_sources(label)
        self.check_held(label, self.sources_gpus())
        command = [self.python, PROBE, 'raw', '--now', '--threshold-mib', str(self.args.threshold_mib), '--interval',
                   str(self.args.poll_interval), '--grace', str(self.args.grace), '--timeout', '120',
                   '--respawner', str(respawner.pid)]
        for record in records.values():
            command += ['--kill', '%d:%r' % (record['pid'], record['create_time'])]
        before = procs.foreign_processes(self.owned)
        result = self.probe(*command[2:], timeout=200)
        gone = procs.disappeared(before)
        run = {'repetition': repetition, 'time_to_free_s': result.get('seconds'), 'free': result.get('event') == 'free',
               'signals': result.get('signals'), 'killed': [], 'foreign_killed': len(gone),
               'foreign_disappeared': gone}
        self.runs['raw'].append(run)
        self.check('%s: GPUs proven free' % label, run['free'], result)
        self.check('%s: no process the harness did not start disappeared' % label, not gone, gone)
        self.finish(label)
        return run

    # -- the context shapes: a context kept by a process other than the one NVML names ------

    def context_gpu(self):
        """The GPU a context shape allocates on: the first."""
        return self.gpu_indices[0]

    def deploy_context(self, label, shape):
        """Start a context shape beside an NVML-only monitor in a private PID namespace (the one-liner's
        fuser sees nothing else there); return the run dir, the namespace launcher, its event reader and
        the records, with host pids, of the shape's processes and the monitor."""
        run_dir = os.path.join(self.work, label)
        os.makedirs(run_dir)
        command = [self.python, DEPLOYMENT, 'nsinit', '--run-dir', run_dir, '--ready-timeout',
                   str(self.args.ready_timeout), '--shape', shape, '--gpu', str(self.context_gpu()),
                   '--gib', str(self.args.context_gib)]
        if self.monitor_exe:
            command += ['--monitor-exe', self.monitor_exe, '--monitor-env', self.monitor_env_file]
        if self.simulate:
            command += ['--simulate', self.simulate, '--devices', os.path.join(self.simulate, 'nvidia*')]
        launcher = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=self.logfile(label), env=self.env())
        self.owned.add(launcher.pid, label='namespace launcher')
        self.children.append(launcher)
        events = EventReader(launcher)
        ready = events.next(self.args.ready_timeout + 60)
        if ready.get('event') != 'ready':
            raise HarnessError('%s: the shape in a private PID namespace failed: %s' % (label, ready.get('error')))
        mapping = procs.ns_pid_map(launcher.pid)
        records = {}
        for name in deployment.shape_ready_names(shape) + ['monitor']:
            record = read_json(os.path.join(run_dir, 'ready', name + '.json'))
            record['ns_pid'] = record['pid']
            if record['ns_pid'] not in mapping:
                raise HarnessError('%s: %s (pid %d in the namespace) is not found below the launcher: %s'
                                   % (label, name, record['ns_pid'], mapping))
            record['pid'] = mapping[record['ns_pid']]
            self.owned.add(record['pid'], record['create_time'], label='%s (%s)' % (record['title'], name))
            records[name] = record
        for ns_pid, pid in mapping.items():
            if not self.owned.owns(pid):
                self.owned.add(pid, label='namespace pid %d' % ns_pid)
        return run_dir, launcher, events, records

    def form_context(self, records):
        """Complete the shape: SIGKILL its creator, where it has one (through a pidfd, create time checked),
        and wait until it is dead; then read what /proc shows of each process that should keep the context."""
        prefix = deployment.node_prefix(self.simulate)
        seen = {}
        creator = records.get('creator')
        if creator is not None:
            sent = self.owned.signal(creator['pid'], signal.SIGKILL)
            deadline = time.time() + 10
            while _alive(creator) and time.time() < deadline:
                time.sleep(0.02)
            seen['creator'] = {'pid': creator['pid'], 'signal': sent, 'alive': _alive(creator)}
            # Memory that the creator's death frees is back within a tenth of a second of a SIGKILL.
            time.sleep(0.5)
        for name, record in sorted(records.items()):
            if name not in ('creator', 'monitor'):
                seen[name] = procs.context_holding(record['pid'], prefix)
        return seen

    def run_context(self, shape, path, repetition):
        """One context shape along one path (module or oneliner): deploy it, check that it formed, list the
        holders (refusing to go on when a process the harness did not start holds a GPU), free the GPUs,
        check them right after and ``--recheck`` seconds later, and clean up."""
        label = '%s-%s-%d' % (shape, path, repetition)
        run_dir, launcher, events, records = self.deploy_context(label, shape)
        monitor = records.pop('monitor')
        # No signal, not even to a creator, while a process the harness did not start holds a GPU.
        self.holders_or_refuse(label)
        seen = self.form_context(records)
        snapshot, listing = self.holders_or_refuse(label)
        log('%s: GPU holders before the path:\n%s' % (label, procs.format_holders(listing)))
        if listing['fuser_text'].strip():
            log('%s: fuser -v:\n%s' % (label, listing['fuser_text']))
        seen['used_mib'] = gpu_used(snapshot, self.context_gpu())
        problems = context_problems(shape, seen, self.args.context_gib * 1024 * 0.9)
        nvml_pids = sorted(set(pid for gpu in snapshot.get('gpus') or [] for pid in gpu.get('pids', [])))
        creator = records.get('creator')
        run = {
            'shape': shape,
            'path': path,
            'repetition': repetition,
            'shape_formed': not problems,
            'shape_problems': problems,
            'observations': seen,
            'nvml_pids': [{'pid': pid, 'process': self.owned.label(pid),
                           'alive': self.owned.owns(pid) and not procs.is_zombie(pid)} for pid in nvml_pids],
            'nvml_lists_dead_creator': None if creator is None else creator['pid'] in nvml_pids,
            'fuser_saw': sorted(self.owned.label(item['pid']) or '%s (%s)' % (item['pid'], item.get('name'))
                                for item in listing['holders'] if 'fuser' in item['sources']),
            'fuser_v': listing['fuser_text'],
            'used_before_mib': total_used(snapshot),
            'gpus_before': snapshot.get('gpus'),
        }
        self.check('%s: the shape formed' % label, not problems, {'problems': problems, 'observations': seen},
                   scenario=shape)
        keepers = dict((name, record) for name, record in records.items() if name != 'creator')
        if problems:
            run['skipped'] = 'the shape did not form: %s' % '; '.join(problems)
            run['killed'] = []
        elif path == 'module':
            self.context_module(label, run_dir, run, keepers, monitor)
        else:
            self.context_oneliner(label, events, launcher, run, keepers, monitor)
        self.runs[shape].append(run)
        self.stop_launcher(launcher)
        self.finish(label)
        return run

    def after_path(self, run, keepers, monitor):
        """The GPUs right after a path and ``--recheck`` seconds later, and which processes it killed."""
        after = self.probe('snapshot')
        time.sleep(self.args.recheck)
        later = self.probe('snapshot')
        monitor_alive = _alive(monitor)
        run.update({
            'used_after_mib': total_used(after),
            'used_later_mib': total_used(later),
            'freed_mib': _diff(run['used_before_mib'], total_used(after)),
            'free': gpus_free(after, self.args.threshold_mib),
            'stayed_free': gpus_free(after, self.args.threshold_mib) and gpus_free(later, self.args.threshold_mib),
            'recheck_s': self.args.recheck,
            'gpus_after': after.get('gpus'),
            'gpus_later': later.get('gpus'),
            'killed': [name for name, record in sorted(keepers.items()) if not _alive(record)],
            'monitor_survived': monitor_alive,
            'protected_killed': 0 if monitor_alive else 1,
        })
        return run

    def context_module(self, label, run_dir, run, keepers, monitor):
        shape = run['shape']
        report_dir = os.path.join(run_dir, 'report')
        os.makedirs(report_dir)
        timing_file = os.path.join(run_dir, 'timing.jsonl')
        variables = os.path.join(run_dir, 'vars.json')
        with open(variables, 'w') as handle:
            json.dump({'target': 'localhost', 'gpu_reclaim_grace_seconds': self.args.grace,
                       'gpu_reclaim_poll_interval': self.args.poll_interval,
                       'gpu_reclaim_max_used_mib': self.args.threshold_mib, 'gpu_reclaim_allow_reset': False,
                       'gpu_reclaim_assert_timeout': self.args.context_assert_timeout,
                       'gpu_reclaim_report_dir': report_dir}, handle)
        before = procs.foreign_processes(self.owned)
        rc, wall, dummy = self.play(label + '-playbook', variables, timing_file)
        self.after_path(run, keepers, monitor)
        # Run again once the GPUs stayed free: with nothing left to release, nothing may change.
        again, again_rc = None, None
        if run['stayed_free']:
            again_rc, dummy, again_output = self.play(label + '-again', variables)
            again = procs.recap_counts(again_output)
        gone = procs.disappeared(before)
        stopped = procs.stopped_processes()
        module_result = parse_timing(timing_file).get('release_result') or {}
        released = [item for item in module_result.get('released', []) if isinstance(item, dict)]
        not_ours = ['%s (%s)' % (item.get('pid'), item.get('title')) for item in released
                    if item.get('pid') not in self.owned.processes]
        run.update({
            'playbook_rc': rc,
            'playbook_wall_s': round(wall, 4),
            'module_elapsed_s': module_seconds(module_result),
            'time_to_free_s': module_seconds(module_result) if run['free'] else None,
            'second_run': again,
            'second_run_rc': again_rc,
            'second_run_changed_0': again_rc == 0 and (again or {}).get('changed') == 0,
            'second_run_skipped': None if run['stayed_free'] else 'the GPUs did not stay free after the first run',
            'foreign_killed': len(gone),
            'foreign_disappeared': gone,
            'left_stopped': stopped,
            'released': ['%s (%s)' % (item.get('pid'), self.owned.label(item.get('pid')) or item.get('title'))
                         for item in released],
            'released_not_started_by_harness': not_ours,
            'survivors': module_result.get('survivors'),
            'stuck_gpus': module_result.get('stuck_gpus'),
            'module_result': _trim(module_result),
        })
        self.check('%s: playbook succeeded' % label, rc == 0, 'rc %d, log %s-playbook.log' % (rc, label),
                   scenario=shape)
        self.check('%s: GPUs free after the playbook' % label, run['free'], run['gpus_after'], scenario=shape)
        self.check('%s: GPUs still free %g s later' % (label, self.args.recheck), run['stayed_free'],
                   run['gpus_later'], scenario=shape)
        self.check('%s: the second run is changed=0' % label, run['second_run_changed_0'],
                   {'rc': again_rc, 'recap': again, 'skipped': run['second_run_skipped']}, scenario=shape)
        self.check('%s: nv-hostengine survived' % label, run['monitor_survived'], run['killed'], scenario=shape)
        self.check('%s: no process the harness did not start disappeared' % label, not gone, gone, scenario=shape)
        self.check('%s: the module released only processes the harness started' % label, not not_ours, not_ours,
                   scenario=shape)
        self.check('%s: no process left stopped' % label, not stopped, stopped, scenario=shape)
        return run

    def context_oneliner(self, label, events, launcher, run, keepers, monitor):
        shape = run['shape']
        request = {'op': 'oneliner'}
        if self.simulate:
            request['replace_nvidia_smi'] = 'true'
        before = procs.foreign_processes(self.owned)
        launcher.stdin.write((json.dumps(request) + '\n').encode())
        launcher.stdin.flush()
        result = events.next(120)
        self.after_path(run, keepers, monitor)
        gone = procs.disappeared(before)
        run.update({
            'command': result.get('command'),
            'oneliner_s': round(result['end'] - result['start'], 4),
            'oneliner_rc': result.get('rc'),
            'time_to_free_s': round(result['end'] - result['start'], 4) if run['free'] else None,
            'foreign_killed': len(gone),
            'foreign_disappeared': gone,
            'output_tail': (result.get('output') or '')[-1500:],
        })
        self.check('%s: no process the harness did not start disappeared' % label, not gone, gone, scenario=shape)
        return run

    def stop_launcher(self, launcher):
        """Ask the namespace's init to exit (the kernel then kills what is left in there)."""
        try:
            launcher.stdin.write(b'{"op": "exit"}\n')
            launcher.stdin.flush()
        except OSError:
            pass
        try:
            launcher.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.owned.signal(launcher.pid, signal.SIGKILL)
            launcher.wait()

    def context_results(self, machine, date):
        return [context_entry(shape, self.runs.get(shape, []), self.checks, machine, date)
                for shape in self.args.shapes]

    def ran_module(self):
        """Whether the module path ran at least once (every figure needs it)."""
        if self.runs['module']:
            return True
        return any(run.get('path') == 'module' and not run.get('skipped')
                   for shape in self.args.shapes for run in self.runs.get(shape, []))

    # -- bookkeeping -------------------------------------------------------------

    def check(self, name, ok, detail=None, scenario=None):
        item = {'name': name, 'ok': bool(ok), 'detail': None if ok else detail}
        if scenario:
            item['scenario'] = scenario
        self.checks.append(item)
        if not ok:
            log('CHECK FAILED: %s: %s' % (name, json.dumps(detail, default=str)[:1500]))

    def sources_results(self, machine, date):
        return _sources_entry(self.runs['module'], self.runs['raw'], self.args.poll_interval, machine, date)

    def run(self):
        order = list(self.args.paths)
        deadline = self.started + self.args.deadline
        for repetition in range(self.args.repetitions if self.args.scenario != 'contexts' else 0):
            for path in order:
                if time.time() > deadline:
                    log('deadline of %d s reached: skipping the remaining repetitions' % self.args.deadline)
                    return
                began = time.time()
                prefix = 'run_sources_' if self.args.scenario == 'sources' else 'run_'
                run = getattr(self, prefix + path)(repetition)
                log('%s %d: free in %s s, killed %s (%.1f s with set-up)' % (
                    path, repetition, _fmt(run.get('time_to_free_s') if path != 'module' else run.get('module_elapsed_s')),
                    ', '.join(run['killed']) or 'nothing', time.time() - began))
        for repetition in range(self.args.context_repetitions):
            for shape in self.args.shapes:
                for path in [path for path in order if path in CONTEXT_PATHS]:
                    if time.time() > deadline:
                        log('deadline of %d s reached: skipping the remaining context shapes' % self.args.deadline)
                        return
                    began = time.time()
                    run = self.run_context(shape, path, repetition)
                    log('%s %s %d: %s, freed %s MiB, killed %s (%.1f s with set-up)' % (
                        shape, path, repetition, run.get('skipped') or ('free' if run.get('free') else 'NOT free'),
                        run.get('freed_mib', '-'), ', '.join(run['killed']) or 'nothing', time.time() - began))

    def results(self, kind, machine, date):
        if self.args.scenario == 'sources':
            return self.sources_results(machine, date)
        entries = [] if self.args.scenario == 'contexts' else self.plain_results(machine, date)
        return entries + self.context_results(machine, date)

    def plain_results(self, machine, date):
        module = self.runs['module']
        ours_measure = 'module elapsed_seconds'
        ours = [run['module_elapsed_s'] for run in module]
        if not module or any(value is None for value in ours):
            ours_measure = 'time to free from the start of the release task'
            ours = [run['time_to_free_s'] for run in module]
        common = {
            'ours_measure': ours_measure,
            'harness_time_to_free_median_s': benchlib.summary([r['time_to_free_s'] for r in module])[0],
            'playbook_wall_median_s': benchlib.summary([r['playbook_wall_s'] for r in module])[0],
            'settle_median_s': benchlib.summary([r['settle_s'] or 0.0 for r in module])[0],
            'playbook_wall_without_settle_median_s': benchlib.summary(
                [r['playbook_wall_without_settle_s'] for r in module])[0],
            'until_proven_free_median_s': benchlib.summary(
                [r['until_proven_free_s'] for r in module if r['until_proven_free_s'] is not None])[0],
            'release_task_median_s': benchlib.summary([r['release_task_s'] for r in module])[0],
        }
        entries = []
        for name, path, baseline_text in (
                ('gpu_reclaim_vs_raw', 'raw', 'raw path: the same signals to the same pids, NVML polled every %g s, '
                 'no Ansible' % self.args.poll_interval),
                ('gpu_reclaim_vs_oneliner', 'oneliner', "bash -c 'kill -9 $(fuser /dev/nvidia* 2>/dev/null); "
                 "sleep 3; nvidia-smi'")):
            baseline_runs = self.runs[path]
            if not module or not baseline_runs:
                continue
            baseline = [run['time_to_free_s'] for run in baseline_runs]
            extra = dict(common)
            extra['protected_killed'] = {'ours': sum(r['protected_killed'] for r in module),
                                         'baseline': sum(r['protected_killed'] for r in baseline_runs)}
            extra['foreign_killed'] = {'ours': sum(r['foreign_killed'] for r in module),
                                       'baseline': sum(r['foreign_killed'] for r in baseline_runs)}
            item = benchlib.entry(name, [v for v in ours if v is not None], [v for v in baseline if v is not None],
                                  baseline_text, machine, date, **extra)
            if name == 'gpu_reclaim_vs_raw' and item['ours_median_s'] is not None and item['baseline_median_s'] is not None:
                item['overhead_s'] = round(item['ours_median_s'] - item['baseline_median_s'], 4)
            entries.append(item)
        return entries


def _sources_entry(module, raw, poll_interval, machine, date):
    ours = [run['module_elapsed_s'] for run in module if run['module_elapsed_s'] is not None]
    baseline = [run['time_to_free_s'] for run in raw if run['time_to_free_s'] is not None]
    if not ours or not baseline:
        return []
    item = benchlib.entry('gpu_reclaim_vs_raw_respawn_nsinit', ours, baseline,
                          'raw path: SIGSTOP the respawn loop, SIGKILL the namespace init and the respawned worker, '
                          'NVML polled every %g s, no Ansible' % poll_interval, machine, date,
                          foreign_killed={'ours': sum(r['foreign_killed'] for r in module),
                                          'baseline': sum(r['foreign_killed'] for r in raw)})
    item['overhead_s'] = round(item['ours_median_s'] - item['baseline_median_s'], 4)
    return [item]


# -- the context shapes' checks and entries --------------------------------------------

def _alive(record):
    """Whether the process of a record (pid and create time) still runs: not gone, not reused, not a zombie
    in every thread."""
    return procs.same_process(record['pid'], record['create_time']) and not procs.is_zombie(record['pid'])


def gpus_free(snapshot, threshold_mib):
    """Every GPU of an NVML snapshot at or below the threshold with no process listed (and at least one GPU)."""
    gpus = snapshot.get('gpus') or []
    return bool(gpus) and all(gpu['memory_used_mib'] <= threshold_mib and not gpu.get('pids') for gpu in gpus)


def total_used(snapshot):
    """MiB used on all GPUs of an NVML snapshot, or None without GPUs."""
    gpus = snapshot.get('gpus') or []
    return sum(gpu['memory_used_mib'] for gpu in gpus) if gpus else None


def gpu_used(snapshot, index):
    for gpu in snapshot.get('gpus') or []:
        if gpu.get('index') == index:
            return gpu['memory_used_mib']
    return None


def context_problems(shape, seen, want_mib=None):
    """Why a context shape is not in place before a path acts, from what the harness saw (``seen``: what
    /proc showed of each process, the creator's fate, NVML's used MiB on the shape's GPU); empty when it is."""
    problems = []
    if shape == 'context_exited_leader':
        leader = seen.get('leader') or {}
        if leader.get('state') != 'Z':
            problems.append('/proc/PID/stat reads %s, not Z' % leader.get('state'))
        if leader.get('fd_count') != 0:
            problems.append('/proc/PID/fd is not empty: %s entries' % leader.get('fd_count'))
        live = [task for task in leader.get('tasks', [])
                if task.get('state') not in (None, 'Z', 'X', 'x') and task.get('fd_nodes')]
        if not live:
            problems.append('no live thread holds /dev/nvidia* in /proc/PID/task/TID/fd')
    elif shape in ('context_forked_pool', 'context_socket_receiver'):
        creator = seen.get('creator')
        if creator is None or creator.get('alive'):
            problems.append('the creator is not dead after SIGKILL: %s' % creator)
        if shape == 'context_forked_pool':
            keepers = sorted(name for name in seen if name.startswith('pool'))
            if not keepers:
                problems.append('no forked child')
        else:
            keepers = ['receiver']
        for name in keepers:
            held = seen.get(name) or {}
            if not held.get('fd_nodes'):
                problems.append('%s holds no /dev/nvidia* in /proc/PID/fd' % name)
    else:
        problems.append('unknown context shape %s' % shape)
    if want_mib is not None:
        used = seen.get('used_mib')
        if used is None:
            problems.append('NVML gave no used memory for the GPU')
        elif used < want_mib:
            problems.append('the GPU shows %d MiB used, expected at least %d' % (used, want_mib))
    return problems


def observed(run):
    """The facts of a run's shape in a few keys, for its entry."""
    seen = run.get('observations') or {}
    found = {'nvml_lists_dead_creator': run.get('nvml_lists_dead_creator'), 'fuser_saw': run.get('fuser_saw'),
             'used_mib': seen.get('used_mib')}
    for name, item in sorted(seen.items()):
        if not isinstance(item, dict):
            continue
        if name == 'creator':
            found['creator_alive'] = item.get('alive')
            continue
        found[name] = {'state': item.get('state'), 'threads': item.get('threads'), 'fd_count': item.get('fd_count'),
                       'fd_nodes': item.get('fd_nodes'), 'maps_nodes': item.get('maps_nodes'),
                       'task_fd_nodes': dict((str(task['tid']), task.get('fd_nodes')) for task in item.get('tasks', []))}
    return found


def _all(values):
    values = list(values)
    return None if not values else all(bool(value) for value in values)


def _least(values):
    values = [value for value in values if value is not None]
    return min(values) if values else None


def context_entry(shape, runs, checks, machine, date):
    """The result entry of a context shape: the module's time against the one-liner's, over the runs that
    freed the GPUs, and beside them ``checks_failed`` (empty for success), the MiB each path freed (the
    least over the repetitions), whether the GPUs were free and stayed free, whether the second run was
    changed=0, and what each path killed that it should not have."""
    module = [run for run in runs if run.get('path') == 'module' and not run.get('skipped')]
    oneliner = [run for run in runs if run.get('path') == 'oneliner' and not run.get('skipped')]
    failed = [check['name'] for check in checks if check.get('scenario') == shape and not check['ok']]
    if not module:
        failed.append('%s: the module path did not run' % shape)
    ours = [run['module_elapsed_s'] for run in module if run.get('free') and run.get('module_elapsed_s') is not None]
    baseline = [run['time_to_free_s'] for run in oneliner if run.get('free') and run.get('time_to_free_s') is not None]
    item = benchlib.entry(shape, ours, baseline, ONELINER_TEXT, machine, date,
                          ours_measure='module elapsed_seconds, runs that freed the GPUs',
                          baseline_measure='one-liner wall time, runs that freed the GPUs')
    item.update({
        'ok': not failed,
        'checks_failed': failed,
        'repetitions': max([run.get('repetition', 0) + 1 for run in runs] or [0]),
        'shape_formed': _all(run.get('shape_formed') for run in runs),
        'freed_mib': _least(run.get('freed_mib') for run in module),
        'freed_mib_samples': [run.get('freed_mib') for run in module],
        'oneliner_freed_mib': _least(run.get('freed_mib') for run in oneliner),
        'oneliner_freed_mib_samples': [run.get('freed_mib') for run in oneliner],
        'free': _all(run.get('free') for run in module),
        'stayed_free': _all(run.get('stayed_free') for run in module),
        'oneliner_free': _all(run.get('free') for run in oneliner),
        'oneliner_stayed_free': _all(run.get('stayed_free') for run in oneliner),
        'second_run_changed_0': _all(run.get('second_run_changed_0') for run in module),
        'recheck_s': runs[0].get('recheck_s') if runs else None,
        'foreign_killed': {'ours': sum(run.get('foreign_killed', 0) for run in module),
                           'baseline': sum(run.get('foreign_killed', 0) for run in oneliner)},
        'protected_killed': {'ours': sum(run.get('protected_killed', 0) for run in module),
                             'baseline': sum(run.get('protected_killed', 0) for run in oneliner)},
        'killed': {'ours': sorted(set(name for run in module for name in run.get('killed', []))),
                   'baseline': sorted(set(name for run in oneliner for name in run.get('killed', [])))},
        'observed': observed(runs[0]) if runs else None,
    })
    return item


def _diff(later, earlier):
    if later is None or earlier is None:
        return None
    return round(later - earlier, 4)


def _fmt(value):
    return '-' if value is None else '%.3f' % value


def _trim(data, limit=20000):
    """Keep a result small enough for the JSON file."""
    if data is None:
        return None
    text = json.dumps(data, default=str)
    if len(text) <= limit:
        return json.loads(text)
    return {'truncated': True, 'keys': sorted(data) if isinstance(data, dict) else None}


def scrub_paths(data, root=ROOT):
    """The same data with this checkout's location written as ``<repo>``."""
    text = json.dumps(data, default=str)
    return json.loads(text.replace(json.dumps(root)[1:-1], '<repo>'))


def module_seconds(result):
    """The module's own elapsed time, from its result."""
    for key in ('elapsed_seconds', 'seconds', 'total_seconds'):
        value = result.get(key)
        if isinstance(value, (int, float)):
            return float(value)
    timings = result.get('timings') or result.get('timing') or {}
    if isinstance(timings, dict):
        for key in ('total', 'total_seconds', 'elapsed_seconds'):
            if isinstance(timings.get(key), (int, float)):
                return float(timings[key])
    return None


def parse_timing(path):
    """From the callback's file: start, end and result of the release task (gpuops.reclaim.gpu_reclaim),
    the end of the last proof (gpu_assert_free's task, or the release's own with ``prove``) and the settle it
    observed, and how long each task took (until the next task, or the end)."""
    found = {'events': 0, 'tasks': []}
    if not os.path.exists(path):
        return found
    with open(path) as handle:
        for line in handle:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            found['events'] += 1
            if event.get('event') in ('task_start', 'stats'):
                if found['tasks']:
                    found['tasks'][-1]['seconds'] = round(event['time'] - found['tasks'][-1].pop('start'), 4)
                if event['event'] == 'task_start':
                    found['tasks'].append({'task': event.get('task'), 'start': event['time']})
            result = event.get('result') or {}
            # The proof: gpu_assert_free's task, or the release's own (gpu_reclaim with prove).
            proof = (result if event.get('action') == 'gpuops.reclaim.gpu_assert_free'
                     else result.get('proof') if event.get('action') == 'gpuops.reclaim.gpu_reclaim' else None)
            if isinstance(proof, dict) and event.get('event') in ('ok', 'failed'):
                settle = proof.get('settle_seconds_observed')
                if isinstance(settle, (int, float)):
                    found['settle_seconds'] = max(found.get('settle_seconds', 0.0), float(settle))
                # The last proof's end: the GPUs are proven free (or not) from then on.
                found['proof_end'] = event['time']
            if event.get('action') not in ('gpuops.reclaim.gpu_reclaim',):
                continue
            if event['event'] == 'runner_start':
                found['release_start'] = event['time']
            elif event['event'] in ('ok', 'failed'):
                found['release_end'] = event['time']
                found['release_result'] = event.get('result') or {}
            elif event['event'] == 'skipped':
                found['release_skipped'] = True
    return found


def record_result(path, readme=True):
    """Copy a result file into bench/results and add its rows to bench/README.md."""
    data = read_json(path)
    if 'results' not in data:
        raise HarnessError('%s has no "results" key' % path)
    name = os.path.basename(path)
    target = os.path.join(benchlib.RESULTS, name)
    if os.path.abspath(path) != os.path.abspath(target):
        shutil.copyfile(path, target)
    if readme:
        benchlib.add_gpu_rows(data['results'], 'results/' + name, checks=benchlib.checks_text(data.get('checks', [])))
    return target


def build_parser():
    parser = argparse.ArgumentParser(prog='tests/gpu/run', description=__doc__.strip().splitlines()[0])
    parser.add_argument('--kind', default=os.environ.get('GPU_KIND'),
                        help='machine kind for the result file name, e.g. nvidia-h200 (default: from NVML)')
    parser.add_argument('--out', default=os.environ.get('OUT'), help='also copy the results here (default: $OUT)')
    parser.add_argument('--repetitions', type=int, default=3)
    parser.add_argument('--paths', default=','.join(PATHS),
                        help='comma-separated, in the order run in each repetition (default: %(default)s)')
    parser.add_argument('--scenario', choices=SCENARIOS, default='plain',
                        help='plain: orphaned vLLM-like workers, then the context shapes; sources: a respawned '
                        'worker and a namespace-init worker, checked to stay free after the playbook; contexts: '
                        'the context shapes alone (default: %(default)s)')
    parser.add_argument('--shapes', default=','.join(CONTEXT_SHAPES),
                        help='context shapes to run, comma-separated, or "none" (default: %(default)s)')
    parser.add_argument('--context-gib', type=float, default=4.0,
                        help='GiB a context shape holds on the first GPU (default: %(default)s)')
    parser.add_argument('--context-repetitions', type=int,
                        help='repetitions of each context shape (default: 1, with --scenario contexts --repetitions)')
    parser.add_argument('--recheck', type=float, default=3.0,
                        help='with the context shapes: seconds after a path the GPUs must still be free '
                        '(default: %(default)s)')
    parser.add_argument('--context-assert-timeout', type=float, default=10.0,
                        help='with the context shapes: gpu_reclaim_assert_timeout (default: %(default)s)')
    parser.add_argument('--stay-free', type=float, default=5.0,
                        help='with --scenario sources: seconds after the playbook the GPUs must still be free')
    parser.add_argument('--settle', type=float, default=2.0,
                        help='with --scenario sources: gpu_reclaim_settle_seconds (default: %(default)s)')
    parser.add_argument('--no-pipelining', dest='pipelining', action='store_false',
                        help="run Ansible without pipelining (ansible.cfg's [connection] pipelining; on by default)")
    parser.add_argument('--gib', type=float, default=40.0, help='GiB each worker holds (default: %(default)s)')
    parser.add_argument('--engine-gib', type=float, default=0.5, help='GiB the engine holds (default: %(default)s)')
    parser.add_argument('--grace', type=float, default=2.0, help='seconds between SIGTERM and SIGKILL (default: %(default)s)')
    parser.add_argument('--poll-interval', type=float, default=0.005,
                        help='NVML polling interval of the module, the raw path and the watcher (default: %(default)s)')
    parser.add_argument('--threshold-mib', type=int, default=64, help='a GPU is free at or below this (default: %(default)s)')
    parser.add_argument('--ready-timeout', type=float, default=240.0, help='seconds to wait for a deployment')
    parser.add_argument('--deadline', type=float, default=520.0,
                        help='start no new repetition after this many seconds (default: %(default)s)')
    parser.add_argument('--python', default=sys.executable, help='interpreter for every process (default: this one)')
    parser.add_argument('--wheels', default=os.path.join(ROOT, '.whl'), help='wheels of ansible-core and its dependencies')
    parser.add_argument('--work-dir', default=os.path.join(ROOT, 'build', 'gpu-acceptance'))
    parser.add_argument('--no-readme', action='store_true', help='do not add rows to bench/README.md')
    parser.add_argument('--list-holders', action='store_true', help='only list the GPU holders; status 1 if any')
    parser.add_argument('--cleanup', action='store_true', help='stop the processes an interrupted run left behind')
    parser.add_argument('--record', metavar='RESULT_JSON',
                        help='copy a result file (e.g. fetched from $OUT) into bench/results and add its README rows')
    return parser


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    args.paths = [path.strip() for path in args.paths.split(',') if path.strip()]
    unknown = [path for path in args.paths if path not in PATHS]
    if unknown or not args.paths:
        raise SystemExit('tests/gpu/run: --paths: choose from %s; got: %s' % (', '.join(PATHS), ', '.join(unknown) or 'nothing'))
    shapes = [shape.strip() for shape in args.shapes.split(',') if shape.strip()]
    if shapes == ['none'] or args.scenario == 'sources':
        shapes = []
    unknown = [shape for shape in shapes if shape not in CONTEXT_SHAPES]
    if unknown:
        raise SystemExit('tests/gpu/run: --shapes: choose from %s or none; got: %s'
                         % (', '.join(CONTEXT_SHAPES), ', '.join(unknown)))
    if args.scenario == 'contexts' and not shapes:
        raise SystemExit('tests/gpu/run: --scenario contexts needs at least one of --shapes')
    args.shapes = [shape for shape in CONTEXT_SHAPES if shape in shapes]
    if args.context_repetitions is None:
        args.context_repetitions = args.repetitions if args.scenario == 'contexts' else 1
    if args.context_repetitions < 1:
        raise SystemExit('tests/gpu/run: --context-repetitions must be at least 1; got: %d' % args.context_repetitions)
    if args.context_gib <= 0 or args.recheck < 0 or args.context_assert_timeout <= 0:
        raise SystemExit('tests/gpu/run: --context-gib and --context-assert-timeout must be positive and '
                         '--recheck not negative')
    if args.scenario == 'sources':
        args.paths = [path for path in args.paths if path in SOURCES_PATHS]
    if args.scenario == 'contexts':
        args.paths = [path for path in args.paths if path in CONTEXT_PATHS]
    if 'module' not in args.paths:
        raise SystemExit('tests/gpu/run: --paths must include module: every figure compares it with a baseline')
    found = shutil.which(args.python)
    if not found:
        raise SystemExit('tests/gpu/run: --python: no interpreter %s' % args.python)
    args.python = os.path.abspath(found)
    if args.repetitions < 1:
        raise SystemExit('tests/gpu/run: --repetitions must be at least 1; got: %d' % args.repetitions)
    if args.gib <= 0 or args.engine_gib <= 0 or args.grace < 0 or args.poll_interval <= 0:
        raise SystemExit('tests/gpu/run: --gib, --engine-gib and --poll-interval must be positive and --grace not negative')
    return args


def list_only(args):
    owned = procs.Owned()
    harness = Harness.__new__(Harness)
    harness.python = args.python
    harness.site = None
    snapshot = harness.probe('snapshot')
    listing = procs.list_holders(snapshot, owned)
    print('GPU holders:\n%s' % procs.format_holders(listing))
    for problem in listing['problems']:
        print('note: %s' % problem)
    return 1 if listing['foreign'] else 0


def main(argv=None):
    args = parse_args(argv)
    os.environ.update(CHILD_ENVIRONMENT)
    if args.record:
        print(record_result(args.record, readme=not args.no_readme))
        return 0
    if args.list_holders:
        return list_only(args)
    if args.cleanup:
        owned = procs.Owned.load(os.path.join(args.work_dir, 'started.json'))
        left = owned.stop_all()
        print('stopped what the last run left; still alive: %s' % (left or 'nothing'))
        return 1 if left else 0
    harness = Harness(args)
    status = 1
    try:
        harness.preflight()
        harness.work = tempfile.mkdtemp(prefix='run-', dir=harness.base)
        kind = args.kind or kind_from_snapshot(harness.snapshot)
        machine = machine_text(kind, harness.snapshot)
        date = benchlib.today()
        log('%s; work dir %s' % (machine, harness.work))
        environment = python_environment()
        harness.prepare_ansible()
        harness.prepare_monitor()
        error = None
        try:
            harness.run()
        except HarnessError as exc:
            error = str(exc)
            log('stopped: %s' % error)
        floor = None
        if error is None and args.scenario != 'contexts':
            try:
                floor = harness.ansible_floor()
            except (HarnessError, subprocess.SubprocessError, OSError) as exc:
                floor = {'error': str(exc)}
        entries = harness.results(kind, machine, date)
        ok = error is None and all(item['ok'] for item in harness.checks) and harness.ran_module()
        data = {
            'results': entries,
            'ok': ok,
            'error': error,
            'kind': kind,
            'machine': machine,
            'date': date,
            'started': benchlib.now_iso(),
            'seconds': round(time.time() - harness.started, 1),
            'config': {'gib_per_worker': args.gib, 'engine_gib': args.engine_gib, 'grace_seconds': args.grace,
                       'pipelining': args.pipelining,
                       'poll_interval': args.poll_interval, 'threshold_mib': args.threshold_mib,
                       'repetitions': args.repetitions, 'paths': args.paths, 'gpus': harness.gpu_indices,
                       'tarball': os.path.basename(harness.tarball or ''), 'scenario': args.scenario,
                       'shapes': args.shapes, 'context_gib': args.context_gib,
                       'context_repetitions': args.context_repetitions, 'recheck_seconds': args.recheck,
                       'context_assert_timeout': args.context_assert_timeout},
            'environment': environment,
            'driver_version': harness.snapshot.get('driver_version'),
            'gpus': harness.snapshot.get('gpus'),
            'preflight_holders': harness.preflight_listing['holders'],
            'checks': harness.checks,
            'runs': harness.runs,
            # Ansible's own cost on this host: a playbook with no task, and a ping task.
            'ansible_floor': floor,
        }
        path = result_path(kind, date)
        benchlib.write_json(path, scrub_paths(data))
        log('results written to %s' % path)
        checks = benchlib.checks_text(harness.checks)
        if not args.no_readme and entries:
            benchlib.add_gpu_rows(entries, 'results/' + os.path.basename(path), checks=checks)
        if args.out:
            # Three files: the results, their README rows, and the logs in one archive.
            os.makedirs(args.out, exist_ok=True)
            shutil.copy(path, os.path.join(args.out, os.path.basename(path)))
            with open(os.path.join(args.out, 'readme-rows.md'), 'w') as handle:
                handle.write('\n'.join(benchlib.gpu_rows(entries, 'results/' + os.path.basename(path), checks)) + '\n')
            with tarfile.open(os.path.join(args.out, 'gpu-acceptance-logs.tar.gz'), 'w:gz') as archive:
                for name in sorted(os.listdir(harness.work)):
                    if name.endswith('.log'):
                        archive.add(os.path.join(harness.work, name), arcname='gpu-acceptance-logs/' + name)
        for item in entries:
            log('%s: ratio %s, ours %s s, baseline %s s%s, protected killed %s, foreign killed %s' % (
                item['name'], item['ratio'], item['ours_median_s'], item['baseline_median_s'],
                ', overhead %s s' % item['overhead_s'] if 'overhead_s' in item else '',
                item.get('protected_killed', '-'), item['foreign_killed']))
        failed = [check['name'] for check in harness.checks if not check['ok']]
        log('%s: %d checks, %d failed%s' % (
            'PASS' if ok else 'FAIL', len(harness.checks), len(failed), (': ' + '; '.join(failed)) if failed else ''))
        status = 0 if ok else 1
    except HarnessError as exc:
        log('error: %s' % exc)
        status = 2
    finally:
        left = harness.owned.stop_all(grace=1.0)
        if left:
            log('WARNING: still alive after cleanup: %s' % left)
        elif os.path.exists(harness.state_file):
            os.remove(harness.state_file)
    return status


if __name__ == '__main__':
    sys.exit(main())
