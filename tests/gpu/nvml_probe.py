"""NVML reads for the acceptance harness, each in a process of its own.

    nvml_probe.py snapshot
    nvml_probe.py watch --threshold-mib 64 --interval 0.005 --timeout 120
    nvml_probe.py raw --target PID[:CREATE_TIME] ... --grace 2 --interval 0.005 --timeout 60 [--now]

The harness itself never opens NVML: a process that has it open holds
/dev/nvidia*, and the shell one-liner it measures kills every such process.

``snapshot`` prints one JSON object: the GPUs with used memory (v2 struct:
the driver's reserved memory is not counted) and the PIDs in NVML's process
lists. ``watch`` prints ``{"event": "ready"}``, then polls until every GPU is
free (used memory at most the threshold and no PID in any process list) and
prints ``{"event": "free", "time": ...}``. ``raw`` is the baseline without
Ansible: it opens a pidfd for each target and checks its create time, prints
``{"event": "ready"}``, waits for a line on stdin (not with ``--now``), then sends SIGTERM to every
target and SIGKILL at once to those that ignore SIGTERM (as the module's
ladder does), SIGKILL to the rest after the grace period, polling NVML every
``--interval`` seconds until the GPUs are free.
"""

import argparse
import json
import os
import signal
import sys
import time

MIB = 1 << 20


def emit(data):
    sys.stdout.write(json.dumps(data) + '\n')
    sys.stdout.flush()


class Gpus:
    """NVML opened once, with handles and the v2 memory struct."""

    def __init__(self, nvml):
        self.nvml = nvml
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.v2 = getattr(nvml, 'nvmlMemory_v2', None)

    def used_mib(self, handle):
        if self.v2 is not None:
            try:
                return self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.v2).used // MIB
            except TypeError:
                self.v2 = None
        return self.nvml.nvmlDeviceGetMemoryInfo(handle).used // MIB

    def pids(self, handle):
        found = set()
        for name in ('nvmlDeviceGetComputeRunningProcesses', 'nvmlDeviceGetGraphicsRunningProcesses',
                     'nvmlDeviceGetMPSComputeRunningProcesses'):
            try:
                found.update(int(entry.pid) for entry in getattr(self.nvml, name)(handle))
            except self.nvml.NVMLError:
                continue
        return found

    def poll(self):
        """[(used_mib, pids)] per GPU, in index order."""
        return [(self.used_mib(handle), self.pids(handle)) for handle in self.handles]

    def snapshot(self):
        nvml = self.nvml
        gpus = []
        for index, handle in enumerate(self.handles):
            total = nvml.nvmlDeviceGetMemoryInfo(handle).total // MIB
            uuid = nvml.nvmlDeviceGetUUID(handle)
            name = nvml.nvmlDeviceGetName(handle)
            gpus.append({
                'index': index,
                'uuid': uuid.decode() if isinstance(uuid, bytes) else uuid,
                'name': name.decode() if isinstance(name, bytes) else name,
                'minor': int(nvml.nvmlDeviceGetMinorNumber(handle)),
                'memory_total_mib': total,
                'memory_used_mib': self.used_mib(handle),
                'pids': sorted(self.pids(handle)),
            })
        version = nvml.nvmlSystemGetDriverVersion()
        return {'available': True, 'error': None, 'gpus': gpus,
                'driver_version': version.decode() if isinstance(version, bytes) else version}


def is_free(readings, threshold_mib):
    return all(used <= threshold_mib and not pids for used, pids in readings)


def open_gpus():
    try:
        import pynvml  # pylint: disable=import-outside-toplevel,import-error
    except ImportError as exc:
        return None, 'pynvml (nvidia-ml-py) is not installed: %s' % exc
    try:
        return Gpus(pynvml), None
    except Exception as exc:  # pylint: disable=broad-except
        return None, 'NVML cannot be used: %s' % exc


def cmd_snapshot(args):
    del args
    gpus, error = open_gpus()
    if gpus is None:
        emit({'available': False, 'error': error, 'gpus': [], 'driver_version': None})
        return 0
    emit(gpus.snapshot())
    return 0


def wait_free(gpus, threshold_mib, interval, deadline):
    """Poll until free; return (time when free or None, polls, largest gap between polls)."""
    polls = 0
    largest_gap = 0.0
    last = None
    while True:
        readings = gpus.poll()
        now = time.time()
        polls += 1
        if last is not None:
            largest_gap = max(largest_gap, now - last)
        last = now
        if is_free(readings, threshold_mib):
            return now, polls, largest_gap, readings
        if now >= deadline:
            return None, polls, largest_gap, readings
        time.sleep(interval)


def describe(readings):
    return [{'index': index, 'memory_used_mib': used, 'pids': sorted(pids)}
            for index, (used, pids) in enumerate(readings)]


def cmd_watch(args):
    gpus, error = open_gpus()
    if gpus is None:
        emit({'event': 'failed', 'error': error})
        return 2
    first = gpus.poll()
    emit({'event': 'ready', 'time': time.time(), 'free_at_start': is_free(first, args.threshold_mib),
          'gpus': describe(first)})
    free_at, polls, gap, readings = wait_free(gpus, args.threshold_mib, args.interval, time.time() + args.timeout)
    if free_at is None:
        emit({'event': 'timeout', 'time': time.time(), 'polls': polls, 'gpus': describe(readings)})
        return 1
    emit({'event': 'free', 'time': free_at, 'polls': polls, 'largest_gap_s': round(gap, 4),
          'gpus': describe(readings)})
    return 0


def sigterm_ignored(pid):
    with open('/proc/%d/status' % pid) as handle:
        for line in handle:
            if line.startswith('SigIgn:'):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


def alive(pid):
    """True unless the process is gone or a zombie (a zombie holds no GPU memory)."""
    try:
        with open('/proc/%d/stat' % pid, 'rb') as handle:
            state = handle.read().rpartition(b')')[2].split()[0]
    except OSError:
        return False
    return state not in (b'Z', b'X', b'x')


class Target:
    """A process the harness started, held by a pidfd once its identity is checked."""

    def __init__(self, pid, create_time=None):
        import psutil  # pylint: disable=import-outside-toplevel,import-error
        self.pid = pid
        self.fd = None
        if hasattr(os, 'pidfd_open'):
            self.fd = os.pidfd_open(pid)
        actual = psutil.Process(pid).create_time()
        # Without a create time (benchmarks on a simulated host), the pidfd fixes the identity from here on.
        if create_time is not None and abs(actual - create_time) > 0.05:
            raise ValueError('pid %d started at %.2f, not %.2f: not the process the harness started'
                             % (pid, actual, create_time))
        self.ignores_sigterm = sigterm_ignored(pid)

    def send(self, signum):
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, signum)
            else:
                os.kill(self.pid, signum)
            return True
        except ProcessLookupError:
            return False


def cmd_raw(args):
    gpus, error = open_gpus()
    if gpus is None:
        emit({'event': 'failed', 'error': error})
        return 2
    targets, killed, respawners = [], [], []
    try:
        for texts, into in ((args.target, targets), (args.kill, killed), (args.respawner, respawners)):
            for text in texts:
                pid, dummy, started = text.partition(':')
                into.append(Target(int(pid), float(started) if started else None))
    except (ValueError, OSError) as exc:
        emit({'event': 'failed', 'error': str(exc)})
        return 2
    first = gpus.poll()
    emit({'event': 'ready', 'time': time.time(), 'gpus': describe(first),
          'ignore_sigterm': [t.pid for t in targets if t.ignores_sigterm]})
    if not args.now and not sys.stdin.readline():
        return 0
    signals = []
    start = time.time()
    # The ideal sequence around what respawns: freeze the respawners, SIGKILL what no SIGTERM can reach
    # (a namespace init without a handler), then the usual ladder, then kill the frozen respawners.
    for target in respawners:
        if target.send(signal.SIGSTOP):
            signals.append((target.pid, 'SIGSTOP', time.time() - start))
    for target in killed:
        if target.send(signal.SIGKILL):
            signals.append((target.pid, 'SIGKILL', time.time() - start))
    for target in targets:
        if target.send(signal.SIGTERM):
            signals.append((target.pid, 'SIGTERM', time.time() - start))
    for target in targets:
        if target.ignores_sigterm and target.send(signal.SIGKILL):
            signals.append((target.pid, 'SIGKILL', time.time() - start))
    free_at, polls, gap, readings = wait_free(gpus, args.threshold_mib, args.interval, start + args.grace)
    if free_at is None:
        for target in targets:
            if not target.ignores_sigterm and alive(target.pid) and target.send(signal.SIGKILL):
                signals.append((target.pid, 'SIGKILL', time.time() - start))
        free_at, more, gap2, readings = wait_free(gpus, args.threshold_mib, args.interval, start + args.timeout)
        polls += more
        gap = max(gap, gap2)
    for target in respawners:
        if target.send(signal.SIGKILL):
            signals.append((target.pid, 'SIGKILL', time.time() - start))
    event = 'free' if free_at is not None else 'timeout'
    emit({'event': event, 'start': start, 'time': free_at, 'seconds': None if free_at is None else free_at - start,
          'polls': polls, 'largest_gap_s': round(gap, 4), 'gpus': describe(readings),
          'signals': [{'pid': pid, 'signal': name, 'at_s': round(at, 4)} for pid, name, at in signals]})
    return 0 if free_at is not None else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)
    sub.add_parser('snapshot').set_defaults(func=cmd_snapshot)
    for name, func in (('watch', cmd_watch), ('raw', cmd_raw)):
        command = sub.add_parser(name)
        command.add_argument('--threshold-mib', type=int, default=64)
        command.add_argument('--interval', type=float, default=0.005)
        command.add_argument('--timeout', type=float, default=120.0)
        command.set_defaults(func=func)
    sub.choices['raw'].add_argument('--target', action='append', default=[], metavar='PID:CREATE_TIME')
    sub.choices['raw'].add_argument('--kill', action='append', default=[], metavar='PID:CREATE_TIME',
                                    help='SIGKILL at once (a target no SIGTERM can reach)')
    sub.choices['raw'].add_argument('--respawner', action='append', default=[], metavar='PID:CREATE_TIME',
                                    help='SIGSTOP before any other signal, SIGKILL once the GPUs are free')
    sub.choices['raw'].add_argument('--grace', type=float, default=2.0)
    sub.choices['raw'].add_argument('--now', action='store_true', help='start at once, without waiting for a line')
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == '__main__':
    sys.exit(main())
