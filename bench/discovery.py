"""discovery_vs_fuser_10k: holder discovery on a host with 10,000 processes.

    unshare --pid --fork --mount-proc python3 bench/discovery.py [--processes 10000] [--holders 100]

Meant to run as PID 1 of a private PID namespace with its own /proc (run.py
starts it that way), so that both sides see exactly the processes started
here. It starts ``--processes`` sleeping processes (``sleep infinity``,
spawned with posix_spawn: cheap in memory), ``--holders`` of which hold
stand-in NVIDIA device nodes open (``/dev/null`` clones in a private folder:
``nvidiactl``, ``nvidia-uvm`` and one ``nvidiaN`` each, as a CUDA process
does). Then, alternating, it times

- ours: ``_discover.holders.discover`` of the collection's module_utils, the code the
  modules run (one pass over every process's fds, records for the holders),
  in this process, with an NVML view that lists the GPUs and no processes;
- the baseline: ``fuser -v`` over the same device nodes, as a command.

Prints one JSON object with the samples. Everything started here dies with
PID 1 of the namespace when this script exits.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

GPUS = 8


def collection_path():
    """A folder with ansible_collections/gpuops/reclaim pointing at this tree."""
    folder = tempfile.mkdtemp(prefix='bench-collections-')
    parent = os.path.join(folder, 'ansible_collections', 'gpuops')
    os.makedirs(parent)
    os.symlink(ROOT, os.path.join(parent, 'reclaim'))
    return folder


def make_nodes(folder):
    for name in ['nvidiactl', 'nvidia-uvm'] + ['nvidia%d' % i for i in range(GPUS)]:
        os.mknod(os.path.join(folder, name), 0o666 | 0o020000, os.makedev(1, 3))


def spawn(count, holders, dev_dir):
    sleep = '/bin/sleep' if os.path.exists('/bin/sleep') else '/usr/bin/sleep'
    env = {'PATH': '/usr/bin:/bin'}
    pids = []
    for number in range(count):
        actions = []
        if number < holders:
            for fd, name in ((3, 'nvidiactl'), (4, 'nvidia-uvm'), (5, 'nvidia%d' % (number % GPUS))):
                actions.append((os.POSIX_SPAWN_OPEN, fd, os.path.join(dev_dir, name), os.O_RDONLY, 0))
        pids.append(os.posix_spawn(sleep, ['sleep', 'infinity'], env, file_actions=actions))
    return pids


def gpu_records():
    return [{'index': i, 'uuid': 'GPU-bench-%d' % i, 'name': 'bench', 'minor': i, 'pci_bus_id': None,
             'memory_total_mib': 98304, 'memory_used_mib': 0, 'memory_reserved_mib': 0,
             'persistence_mode': True, 'display_active': False, 'holder_pids': []} for i in range(GPUS)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--processes', type=int, default=10000)
    parser.add_argument('--holders', type=int, default=100)
    parser.add_argument('--repetitions', type=int, default=5)
    parser.add_argument('--allow-host-namespace', action='store_true',
                        help='run even when not PID 1 of a private namespace (for trying it out)')
    args = parser.parse_args(argv)
    if os.getpid() != 1 and not args.allow_host_namespace:
        sys.stderr.write('discovery.py: run me as PID 1 of a private PID namespace: '
                         'unshare --pid --fork --mount-proc %s %s\n' % (sys.executable, __file__))
        return 2
    sys.path.insert(0, collection_path())
    from ansible_collections.gpuops.reclaim.plugins.module_utils._discover import holders as _holders  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuops.reclaim.plugins.module_utils._host import nvml as _nvml  # pylint: disable=import-outside-toplevel

    dev_dir = tempfile.mkdtemp(prefix='bench-dev-')
    make_nodes(dev_dir)
    started = time.time()
    spawn(args.processes, args.holders, dev_dir)
    spawn_seconds = time.time() - started
    visible = len([name for name in os.listdir('/proc') if name.isdigit()])
    nodes = sorted(glob.glob(os.path.join(dev_dir, 'nvidia*')))
    view = _nvml.NvmlView(True, driver_version='bench', gpus=gpu_records(), processes={})

    def ours():
        began = time.perf_counter()
        snapshot = _holders.discover(view, dev_dir=dev_dir)
        seconds = time.perf_counter() - began
        return seconds, len(snapshot.holders)

    def fuser():
        began = time.perf_counter()
        proc = subprocess.run(['fuser', '-v'] + nodes, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, check=False)
        seconds = time.perf_counter() - began
        return seconds, len(set(proc.stdout.split()))

    # One unmeasured round each, so both start with warm /proc dentries.
    ours()
    fuser()
    ours_samples, fuser_samples = [], []
    found = {'ours': set(), 'fuser': set()}
    for dummy in range(args.repetitions):
        seconds, count = ours()
        ours_samples.append(seconds)
        found['ours'].add(count)
        seconds, count = fuser()
        fuser_samples.append(seconds)
        found['fuser'].add(count)
    print(json.dumps({
        'processes': args.processes, 'holders': args.holders, 'visible_processes': visible,
        'spawn_seconds': round(spawn_seconds, 2), 'ours_s': ours_samples, 'fuser_s': fuser_samples,
        'holders_found': {'ours': sorted(found['ours']), 'fuser': sorted(found['fuser'])},
    }))
    return 0


if __name__ == '__main__':
    sys.exit(main())
