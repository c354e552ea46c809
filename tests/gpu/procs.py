"""Processes for the acceptance harness: GPU holders, what the harness started,
and which other processes existed before and after a step.

The harness may signal only what it started. Everything it starts is
recorded here with its create time; signals go through a pidfd opened before
the create time is checked, so that a reused PID is never hit.
"""

import glob
import json
import os
import shutil
import signal
import subprocess
import time

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is on every GPU host the harness runs on
    psutil = None

DEVICE_GLOBS = ('/dev/nvidia*', '/dev/nvidia-caps/*')
ACCESS_LETTERS = 'cefFrm'


def device_nodes(globs=DEVICE_GLOBS):
    """The NVIDIA device nodes present (files only, sorted)."""
    found = []
    for pattern in globs:
        for path in sorted(glob.glob(pattern)):
            if not os.path.isdir(path) and path not in found:
                found.append(path)
    return found


def parse_fuser_pids(stdout):
    """PIDs from fuser's standard output (it writes only PIDs there)."""
    pids = set()
    for token in stdout.split():
        token = token.rstrip(ACCESS_LETTERS)
        if token.isdigit():
            pids.add(int(token))
    return sorted(pids)


def clean_fuser_text(stderr):
    """fuser -v's table, without the complaints about unreadable /proc entries."""
    return '\n'.join(line for line in stderr.splitlines() if not line.startswith('Cannot stat'))


def run_fuser(nodes, fuser=None, timeout=30):
    """``(pids, text, error)`` from ``fuser -v`` over ``nodes``."""
    fuser = fuser or shutil.which('fuser')
    if not nodes:
        return [], '', None
    if not fuser:
        return [], '', 'fuser is not installed'
    try:
        proc = subprocess.run([fuser, '-v'] + list(nodes), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=timeout, env=dict(os.environ, LC_ALL='C'), check=False)
    except subprocess.TimeoutExpired:
        return [], '', 'fuser did not finish within %d s' % timeout
    # fuser exits 1 when no process uses the files: not an error.
    return parse_fuser_pids(proc.stdout), clean_fuser_text(proc.stderr), None


def describe_pid(pid):
    """A short record of a process, or None when it is gone."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            info = {'pid': pid, 'ppid': proc.ppid(), 'name': proc.name(), 'create_time': proc.create_time(),
                    'status': proc.status()}
        try:
            info['exe'] = proc.exe()
        except psutil.Error:
            info['exe'] = None
        try:
            info['cmdline'] = ' '.join(proc.cmdline()).strip()
        except psutil.Error:
            info['cmdline'] = None
        return info
    except psutil.NoSuchProcess:
        return None
    except psutil.Error as exc:
        return {'pid': pid, 'error': str(exc)}


def list_holders(nvml_snapshot, owned, fuser=None, nodes=None):
    """Who holds a GPU: ``fuser -v`` over the device nodes plus NVML's process lists.

    ``nvml_snapshot`` is what ``nvml_probe.py snapshot`` printed. Returns a
    dict with ``holders`` (records with ``sources`` and ``ours``), ``foreign``
    (the holders the harness did not start), ``fuser_text``, ``nodes`` and
    ``problems`` (text: why the picture may be incomplete).
    """
    nodes = device_nodes() if nodes is None else nodes
    problems = []
    pids, text, error = run_fuser(nodes, fuser=fuser)
    if error:
        problems.append(error)
    sources = dict((pid, ['fuser']) for pid in pids)
    if nvml_snapshot.get('available'):
        for gpu in nvml_snapshot.get('gpus', []):
            for pid in gpu.get('pids', []):
                entry = sources.setdefault(pid, [])
                if 'nvml' not in entry:
                    entry.append('nvml')
    else:
        problems.append('NVML: %s' % (nvml_snapshot.get('error') or 'not available'))
    if not nodes:
        problems.append('no /dev/nvidia* device nodes on this host')
    holders = []
    for pid in sorted(sources):
        record = describe_pid(pid) or {'pid': pid, 'gone': True}
        record['sources'] = sources[pid]
        record['ours'] = owned.owns(pid)
        holders.append(record)
    foreign = [record for record in holders if not record['ours'] and not record.get('gone')]
    return {'holders': holders, 'foreign': foreign, 'fuser_text': text, 'nodes': nodes, 'problems': problems}


def format_holders(listing):
    lines = []
    for record in listing['holders']:
        lines.append('  pid %s (%s) %s [%s]%s' % (
            record['pid'], record.get('name', '?'), (record.get('cmdline') or '')[:80],
            '+'.join(record['sources']), '' if not record['ours'] else ' started by the harness'))
    return '\n'.join(lines) or '  none'


class Owned:
    """Every process the harness started: pid -> create time and a label.

    With ``state_file``, the record is also kept on disk, so that
    ``--cleanup`` can stop what an interrupted run left behind.
    """

    def __init__(self, state_file=None):
        self.processes = {}
        self.state_file = state_file

    def add(self, pid, create_time=None, label=''):
        if create_time is None:
            create_time = psutil.Process(pid).create_time()
        self.processes[pid] = {'pid': pid, 'create_time': create_time, 'label': label}
        self._save()
        return self.processes[pid]

    def _save(self):
        if not self.state_file:
            return
        tmp = self.state_file + '.tmp'
        with open(tmp, 'w') as handle:
            json.dump(sorted(self.processes.values(), key=lambda item: item['pid']), handle, indent=1)
        os.rename(tmp, self.state_file)

    @classmethod
    def load(cls, state_file):
        owned = cls(state_file)
        try:
            with open(state_file) as handle:
                for item in json.load(handle):
                    owned.processes[item['pid']] = item
        except (OSError, ValueError):
            pass
        return owned

    def owns(self, pid):
        """True when ``pid`` is a process the harness started (create time checked)."""
        entry = self.processes.get(pid)
        if entry is None:
            return False
        return same_process(pid, entry['create_time'])

    def label(self, pid):
        entry = self.processes.get(pid)
        return entry['label'] if entry else None

    def alive(self):
        return [entry for pid, entry in sorted(self.processes.items())
                if same_process(pid, entry['create_time']) and not is_zombie(pid)]

    def signal(self, pid, signum):
        entry = self.processes.get(pid)
        if entry is None:
            raise ValueError('pid %d was not started by the harness' % pid)
        return signal_exact(pid, entry['create_time'], signum)

    def adopt_descendants(self):
        """Record the live descendants of what the harness started: it started them too."""
        for entry in self.alive():
            try:
                children = psutil.Process(entry['pid']).children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                if child.pid not in self.processes:
                    try:
                        self.add(child.pid, child.create_time(), label='child of %s' % entry['label'])
                    except psutil.Error:
                        continue

    def stop_all(self, grace=2.0):
        """SIGTERM what is still alive (descendants included), then SIGKILL what is
        left after ``grace``."""
        self.adopt_descendants()
        for entry in self.alive():
            self.signal(entry['pid'], signal.SIGTERM)
        deadline = time.time() + grace
        while self.alive() and time.time() < deadline:
            time.sleep(0.05)
        for entry in self.alive():
            self.signal(entry['pid'], signal.SIGKILL)
        deadline = time.time() + 10
        while self.alive() and time.time() < deadline:
            time.sleep(0.05)
        return self.alive()


def same_process(pid, create_time):
    try:
        return abs(psutil.Process(pid).create_time() - create_time) < 0.05
    except psutil.Error:
        return False


def is_zombie(pid):
    """True when ``pid`` is gone, or has exited and waits to be reaped: every thread of it, not only the
    leader. A leader thread that exited on its own leaves ``Z`` in /proc/PID/stat while the other threads
    run on and keep what the process holds."""
    try:
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return True
    return not live_threads(pid)


def _state(stat_path):
    """The state letter of a ``stat`` file of /proc, or None when it cannot be read."""
    try:
        with open(stat_path, 'rb') as handle:
            fields = handle.read().rpartition(b')')[2].split()
    except OSError:
        return None
    return fields[0].decode('ascii', 'replace') if fields else None


def live_threads(pid, proc_root='/proc'):
    """TIDs of the threads of ``pid`` that have not exited (state neither Z nor X)."""
    task = os.path.join(proc_root, str(pid), 'task')
    try:
        names = os.listdir(task)
    except OSError:
        return []
    found = []
    for name in names:
        state = _state(os.path.join(task, name, 'stat'))
        if state is not None and state not in ('Z', 'X', 'x'):
            found.append(int(name))
    return sorted(found)


def device_links(fd_dir, prefix='/dev/nvidia'):
    """Targets of the links in a ``fd`` folder of /proc that start with ``prefix`` (sorted, one per
    descriptor), or None when the folder cannot be read."""
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    found = []
    for name in names:
        try:
            target = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if target.startswith(prefix):
            found.append(target)
    return sorted(found)


def context_holding(pid, prefix='/dev/nvidia', proc_root='/proc'):
    """What /proc shows of ``pid`` as a holder of device nodes: the state in /proc/PID/stat, ``Threads:``
    of its status, the nodes under /proc/PID/fd and mapped in /proc/PID/maps, and for each thread its
    state and the nodes under /proc/PID/task/TID/fd (where a thread whose leader exited still shows them).
    ``fd_count`` counts every entry of /proc/PID/fd, the other counts descriptors of the nodes; ``nodes``
    names the distinct nodes."""
    base = os.path.join(proc_root, str(pid))
    seen = {'pid': pid, 'exists': os.path.isdir(base), 'state': _state(os.path.join(base, 'stat')),
            'threads': None, 'fd_count': None, 'fd_nodes': None, 'maps_nodes': None, 'tasks': [], 'nodes': []}
    if not seen['exists']:
        return seen
    try:
        with open(os.path.join(base, 'status')) as handle:
            for line in handle:
                if line.startswith('Threads:'):
                    seen['threads'] = int(line.split()[1])
    except (OSError, ValueError):
        pass
    try:
        seen['fd_count'] = len(os.listdir(os.path.join(base, 'fd')))
    except OSError:
        pass
    links = device_links(os.path.join(base, 'fd'), prefix)
    seen['fd_nodes'] = None if links is None else len(links)
    nodes = set(links or [])
    try:
        with open(os.path.join(base, 'maps')) as handle:
            seen['maps_nodes'] = sum(1 for line in handle if prefix in line)
    except OSError:
        pass
    try:
        tids = sorted(int(name) for name in os.listdir(os.path.join(base, 'task')))
    except OSError:
        tids = []
    for tid in tids:
        task_links = device_links(os.path.join(base, 'task', str(tid), 'fd'), prefix)
        nodes.update(task_links or [])
        seen['tasks'].append({'tid': tid, 'state': _state(os.path.join(base, 'task', str(tid), 'stat')),
                              'fd_nodes': None if task_links is None else len(task_links)})
    seen['nodes'] = sorted(nodes)
    return seen


def signal_exact(pid, create_time, signum):
    """Signal ``pid`` only if it is still the process that started at ``create_time``.

    Returns ``sent``, ``gone`` or ``reused``.
    """
    fd = None
    try:
        if hasattr(os, 'pidfd_open'):
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                return 'gone'
        if not same_process(pid, create_time):
            return 'reused' if psutil.pid_exists(pid) else 'gone'
        try:
            if fd is not None:
                signal.pidfd_send_signal(fd, signum)
            else:
                os.kill(pid, signum)
        except ProcessLookupError:
            return 'gone'
        return 'sent'
    finally:
        if fd is not None:
            os.close(fd)


def descendants_of(root_pid, table):
    """PIDs below ``root_pid`` in ``table`` (pid -> ppid)."""
    children = {}
    for pid, ppid in table.items():
        children.setdefault(ppid, []).append(pid)
    found = set()
    stack = [root_pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def foreign_processes(owned, me=None):
    """``{(pid, create_time): description}`` of every live user-space process the
    harness did not start: not itself, not its descendants, not what it recorded.
    Kernel threads (PID 2 and its children) are left out.
    """
    me = os.getpid() if me is None else me
    rows = []
    table = {}
    for proc in psutil.process_iter(['pid', 'ppid', 'create_time', 'name', 'status', 'cmdline']):
        info = proc.info
        if info['pid'] is None or info['create_time'] is None:
            continue
        table[info['pid']] = info['ppid']
        rows.append(info)
    mine = descendants_of(me, table) | {me}
    found = {}
    for info in rows:
        pid = info['pid']
        if pid in (0, 2) or info['ppid'] == 2 or pid in mine or owned.owns(pid):
            continue
        if info['status'] == psutil.STATUS_ZOMBIE:
            continue
        found[(pid, info['create_time'])] = '%s %s' % (info['name'], ' '.join(info['cmdline'] or [])[:120])
    return found


def disappeared(before):
    """Entries of a ``foreign_processes`` result that are gone (or zombies) now."""
    gone = []
    for (pid, create_time), text in sorted(before.items()):
        if not same_process(pid, create_time) or is_zombie(pid):
            gone.append({'pid': pid, 'create_time': create_time, 'process': text})
    return gone


def ns_pid_map(root_pid):
    """``{pid in its namespace: host pid}`` for ``root_pid`` and its descendants."""
    result = {}
    try:
        procs = [psutil.Process(root_pid)] + psutil.Process(root_pid).children(recursive=True)
    except psutil.Error:
        return result
    for proc in procs:
        try:
            with open('/proc/%d/status' % proc.pid) as handle:
                for line in handle:
                    if line.startswith('NSpid:'):
                        result[int(line.split()[-1])] = proc.pid
                        break
        except OSError:
            continue
    return result


def stopped_processes(proc_root='/proc'):
    """``[(pid, comm)]`` of every process in state T (stopped) or t (traced): none may be left by a reclaim."""
    found = []
    for name in os.listdir(proc_root):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, name, 'stat'), 'rb') as handle:
                text = handle.read()
        except OSError:
            continue
        head, dummy, tail = text.rpartition(b')')
        fields = tail.split()
        if fields and fields[0] in (b'T', b't'):
            found.append((int(name), head.partition(b'(')[2].decode('utf-8', 'replace')))
    return sorted(found)


def recap_counts(text, host='localhost'):
    """``{"ok": N, "changed": N, ...}`` from the PLAY RECAP line of ``host`` in ansible-playbook's output."""
    counts = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[0] == host and fields[1] == ':':
            counts = {}
            for field in fields[2:]:
                key, sep, value = field.partition('=')
                if sep and value.isdigit():
                    counts[key] = int(value)
    return counts
