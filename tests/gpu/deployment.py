"""The processes of a vLLM-like deployment, started by the acceptance harness.

    deployment.py parent  --run-dir D --gpus 0,1 --gib 40 [--engine-gib 0.5] [--ignore-term-tp N]
    deployment.py worker  --run-dir D --tp N --gpu N --gib G [--ignore-term | --default-term] [--name NAME]
    deployment.py engine  --run-dir D --gpu N --gib G
    deployment.py monitor --run-dir D [--interval S]
    deployment.py nsinit  --run-dir D [--monitor-exe PATH] -- PARENT ARGUMENTS
    deployment.py nsinit  --run-dir D [--monitor-exe PATH] --shape SHAPE --gpu N --gib G
    deployment.py leader  --run-dir D --gpu N --gib G
    deployment.py pool    --run-dir D --gpu N --gib G [--children 3]
    deployment.py receiver --run-dir D --socket @NAME
    deployment.py sender  --run-dir D --gpu N --gib G --socket @NAME

``parent`` plays the API server: it starts one ``VLLM::Worker_TP<n>`` per GPU
and a ``VLLM::EngineCore``, waits until each holds its memory, then reports
ready and waits to be SIGKILLed, which orphans the others. ``worker`` holds
``--gib`` GiB on its GPU with ``torch.empty`` (device memory, not managed
memory), ``engine`` a small CUDA context. ``monitor`` is an NVML-only client:
the harness runs it through a copy of the Python interpreter named
``nv-hostengine``, so that its executable's name is that of NVIDIA's DCGM host
engine. ``nsinit`` is PID 1 of a private PID namespace: it starts a monitor and
a deployment in there, and runs the common shell one-liner on request, so that
the one-liner's ``fuser`` sees nothing but what the harness started.

The context shapes (``nsinit --shape``) leave a CUDA context held by a process
other than the one NVML names, since a context belongs to the open file
descriptions of /dev/nvidia*: ``leader`` allocates in a second thread, then its
main thread ends with the raw ``exit`` system call (not ``exit_group``), so
the process reads ``Z`` while that thread keeps the memory
(``context_exited_leader``); ``pool`` allocates, then forks children without
exec that inherit the descriptors and sleep (``context_forked_pool``);
``sender`` allocates, then passes its /dev/nvidia* descriptors over a Unix
socket (SCM_RIGHTS) to ``receiver``, a process that is not its child and keeps
them (``context_socket_receiver``). In the last two the harness SIGKILLs the
creator afterwards.

Each process writes ``D/ready/<name>.json`` (pid, create time, title) once it
holds what it should, and ``D/term/<name>.json`` when SIGTERM arrives.
``--simulate DIR`` opens stand-in device nodes from DIR instead of using CUDA
and NVML, so that the process plumbing can be tested on a machine without a GPU.
"""

import argparse
import ctypes
import json
import os
import platform
import select
import signal
import socket
import subprocess
import sys
import threading
import time

PR_SET_NAME = 15
PR_SET_PDEATHSIG = 1
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REC = 16384
MS_PRIVATE = 1 << 18

GIB = 1 << 30
HERE = os.path.dirname(os.path.abspath(__file__))

# The exit system call, which ends the calling thread alone (exit_group ends them all).
SYS_EXIT = {'x86_64': 60, 'aarch64': 93}
# Descriptors per SCM_RIGHTS message (the kernel takes at most 253).
MAX_FDS = 250
CONTEXT_SHAPES = ('context_exited_leader', 'context_forked_pool', 'context_socket_receiver')

# The shell one-liner people use to free GPUs, as they type it.
ONELINER = 'kill -9 $(fuser {devices} 2>/dev/null); sleep 3; nvidia-smi'


_LIBC = []


def _libc():
    # Opened once: a child forked from a process with other threads (CUDA's) then needs no dynamic loader.
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def set_title(title):
    """Retitle this process as setproctitle does.

    /proc/PID/comm gets the first 15 bytes (prctl PR_SET_NAME); the argument
    area that /proc/PID/cmdline shows is overwritten with the title and
    padded with NUL bytes, so that the command line reads as the title alone.
    """
    encoded = title.encode('utf-8')
    libc = _libc()
    libc.prctl(PR_SET_NAME, ctypes.c_char_p(encoded[:15]), 0, 0, 0)
    with open('/proc/self/stat', 'rb') as handle:
        fields = handle.read().rpartition(b')')[2].split()
    # Fields 48 and 49 of /proc/PID/stat (arg_start, arg_end); the list starts at field 3.
    arg_start, arg_end = int(fields[45]), int(fields[46])
    size = arg_end - arg_start
    if size <= 1:
        return
    text = encoded[:size - 1]
    ctypes.memmove(arg_start, text + b'\0' * (size - len(text)), size)


def create_time(pid):
    """Seconds since the epoch at which ``pid`` started, as psutil computes it."""
    with open('/proc/%d/stat' % pid, 'rb') as handle:
        fields = handle.read().rpartition(b')')[2].split()
    start_ticks = int(fields[19])
    with open('/proc/stat') as handle:
        for line in handle:
            if line.startswith('btime '):
                boot_time = float(line.split()[1])
                break
    return boot_time + start_ticks / float(os.sysconf('SC_CLK_TCK'))


def write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = '%s.%d.tmp' % (path, os.getpid())
    with open(tmp, 'w') as handle:
        json.dump(data, handle)
    os.rename(tmp, path)


def read_json(path):
    with open(path) as handle:
        return json.load(handle)


def report_ready(run_dir, name, title, **extra):
    data = dict(extra, name=name, title=title, pid=os.getpid(), create_time=create_time(os.getpid()),
                time=time.time())
    write_json(os.path.join(run_dir, 'ready', name + '.json'), data)


def install_term_handler(run_dir, name):
    """On SIGTERM: note the time, then exit at once, like a worker that honours it."""
    def on_term(signum, frame):
        del frame
        try:
            write_json(os.path.join(run_dir, 'term', name + '.json'),
                       {'name': name, 'pid': os.getpid(), 'signal': signum, 'time': time.time()})
        finally:
            os._exit(0)
    signal.signal(signal.SIGTERM, on_term)


def hold_forever():
    while True:
        signal.pause()


# -- GPU holders -----------------------------------------------------------

def hold_memory(gpu, gib, simulate):
    """Hold ``gib`` GiB of device memory on ``gpu``; return what keeps it alive."""
    if simulate:
        handles = [open(os.path.join(simulate, name), 'rb')
                   for name in ('nvidiactl', 'nvidia-uvm', 'nvidia%d' % gpu)]
        return handles
    import torch  # pylint: disable=import-outside-toplevel,import-error
    torch.cuda.set_device(gpu)
    count = max(1, int(gib * GIB))
    block = torch.empty(count, dtype=torch.uint8, device='cuda:%d' % gpu)
    block.fill_(1)
    torch.cuda.synchronize(gpu)
    return block


def cmd_worker(args):
    name = args.name or 'worker%d' % args.tp
    title = 'VLLM::Worker_TP%d' % args.tp
    set_title(title)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif args.default_term:
        # No handler: as PID 1 of its own PID namespace, a SIGTERM from outside is dropped by the kernel.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    else:
        install_term_handler(args.run_dir, name)
    keep = hold_memory(args.gpu, args.gib, args.simulate)
    report_ready(args.run_dir, name, title, role='worker', gpu=args.gpu, gib=args.gib,
                 ignores_sigterm=bool(args.ignore_term))
    hold_forever()
    return keep


def cmd_engine(args):
    title = 'VLLM::EngineCore'
    set_title(title)
    install_term_handler(args.run_dir, 'engine')
    keep = hold_memory(args.gpu, args.gib, args.simulate)
    report_ready(args.run_dir, 'engine', title, role='engine', gpu=args.gpu, gib=args.gib,
                 ignores_sigterm=False)
    hold_forever()
    return keep


def cmd_monitor(args):
    """An NVML-only client polling the GPUs, as a DCGM host engine does."""
    title = 'nv-hostengine'
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    if args.simulate:
        keep = [open(os.path.join(args.simulate, name), 'rb') for name in ('nvidiactl', 'nvidia0')]
        report_ready(args.run_dir, 'monitor', title, role='monitor', exe=sys.executable)
        hold_forever()
        return keep
    import pynvml  # pylint: disable=import-outside-toplevel,import-error
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    report_ready(args.run_dir, 'monitor', title, role='monitor', exe=os.path.realpath('/proc/self/exe'),
                 gpus=len(handles))
    while True:
        for handle in handles:
            pynvml.nvmlDeviceGetMemoryInfo(handle)
            pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        time.sleep(args.interval)


# -- context shapes: the memory outlives the PID NVML names -------------------------

def process_state(pid):
    """The state letter of /proc/PID/stat (the thread group leader's), or None."""
    try:
        with open('/proc/%d/stat' % pid, 'rb') as handle:
            return handle.read().rpartition(b')')[2].split()[0].decode('ascii')
    except (OSError, IndexError):
        return None


def fail(run_dir, name, error):
    write_json(os.path.join(run_dir, 'failed', name + '.json'), {'name': name, 'error': error})
    os._exit(1)


def exit_this_thread():
    """End the calling thread with the raw exit system call. From the main thread, the process's leader
    exits and every other thread runs on; glibc's exit and Python's sys.exit would end them all."""
    number = SYS_EXIT.get(platform.machine())
    if number is None:
        raise RuntimeError('no exit system call number known for %s' % platform.machine())
    _libc().syscall(number, 0)
    raise RuntimeError('the exit system call returned')


def device_descriptors(prefix):
    """This process's descriptors whose /proc/self/fd link starts with ``prefix``."""
    found = []
    for name in os.listdir('/proc/self/fd'):
        try:
            if os.readlink('/proc/self/fd/' + name).startswith(prefix):
                found.append(int(name))
        except OSError:
            continue
    return sorted(found)


def node_prefix(simulate):
    return os.path.join(simulate, 'nvidia') if simulate else '/dev/nvidia'


def socket_address(name):
    """``@NAME`` is NAME in the abstract namespace (no file, no length trouble); anything else a path."""
    return '\0' + name[1:] if name.startswith('@') else name


def cmd_leader(args):
    """A second thread allocates and keeps the memory; then the main thread exits alone."""
    title = 'ctx-leader'
    set_title(title)
    held = {}
    allocated = threading.Event()

    def keeper():
        try:
            held['keep'] = hold_memory(args.gpu, args.gib, args.simulate)
        except BaseException as exc:  # pylint: disable=broad-except
            held['error'] = '%s: %s' % (type(exc).__name__, exc)
            allocated.set()
            return
        held['tid'] = threading.get_native_id()
        allocated.set()
        deadline = time.time() + 30
        while process_state(os.getpid()) != 'Z':
            if time.time() > deadline:
                fail(args.run_dir, 'leader', 'the main thread did not exit within 30 s')
            time.sleep(0.01)
        report_ready(args.run_dir, 'leader', title, role='leader', gpu=args.gpu, gib=args.gib, tid=held['tid'],
                     ignores_sigterm=False)
        while True:
            time.sleep(3600)

    threading.Thread(target=keeper, name='keeper').start()
    if not allocated.wait(args.ready_timeout) or 'tid' not in held:
        fail(args.run_dir, 'leader', held.get('error') or 'no allocation after %d s' % args.ready_timeout)
    exit_this_thread()
    return 1


def cmd_pool(args):
    """Allocate, then fork children without exec (as DataLoader workers and multiprocessing's fork make
    them): they inherit every descriptor, touch nothing of CUDA and sleep."""
    title = 'ctx-creator'
    set_title(title)
    keep = hold_memory(args.gpu, args.gib, args.simulate)
    children = {}
    for index in range(args.children):
        name = 'pool%d' % index
        pid = os.fork()
        if pid == 0:
            try:
                set_title('pt_data_worker')
                report_ready(args.run_dir, name, 'pt_data_worker', role='pool-child', index=index,
                             ignores_sigterm=False)
                while True:
                    signal.pause()
            finally:
                os._exit(0)
        children[name] = pid
    try:
        wait_ready(args.run_dir, list(children), {}, args.ready_timeout)
    except RuntimeError as exc:
        fail(args.run_dir, 'creator', str(exc))
    report_ready(args.run_dir, 'creator', title, role='creator', gpu=args.gpu, gib=args.gib, children=children)
    hold_forever()
    return keep


def cmd_receiver(args):
    """Wait for descriptors over a Unix socket (SCM_RIGHTS), keep them and sleep."""
    title = 'ctx-receiver'
    set_title(title)
    install_term_handler(args.run_dir, 'receiver')
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(socket_address(args.socket))
    server.listen(1)
    server.settimeout(args.ready_timeout)
    try:
        conn, dummy = server.accept()
        conn.settimeout(args.ready_timeout)
        kept = []
        while True:
            message, fds, dummy, dummy = socket.recv_fds(conn, 4096, MAX_FDS)
            kept.extend(fds)
            if not message:
                raise RuntimeError('the sender closed the connection after %d descriptors' % len(kept))
            if json.loads(message.decode('utf-8')).get('last'):
                break
        conn.sendall(b'ok')
        conn.close()
    except (OSError, RuntimeError, ValueError) as exc:
        fail(args.run_dir, 'receiver', 'no descriptors received: %s' % exc)
    server.close()
    nodes = sorted(set(os.readlink('/proc/self/fd/%d' % fd) for fd in kept))
    report_ready(args.run_dir, 'receiver', title, role='receiver', received=len(kept), nodes=nodes,
                 ignores_sigterm=False)
    hold_forever()
    return kept


def cmd_sender(args):
    """Allocate, then send every /dev/nvidia* descriptor to the receiver and keep running."""
    title = 'ctx-creator'
    set_title(title)
    keep = hold_memory(args.gpu, args.gib, args.simulate)
    fds = device_descriptors(node_prefix(args.simulate))
    if not fds:
        fail(args.run_dir, 'creator', 'no descriptor of %s* to send' % node_prefix(args.simulate))
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    deadline = time.time() + args.ready_timeout
    while True:
        try:
            conn.connect(socket_address(args.socket))
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.time() > deadline:
                fail(args.run_dir, 'creator', 'the receiver does not listen on %s' % args.socket)
            time.sleep(0.02)
    conn.settimeout(args.ready_timeout)
    try:
        for start in range(0, len(fds), MAX_FDS):
            batch = fds[start:start + MAX_FDS]
            header = {'last': start + MAX_FDS >= len(fds), 'count': len(batch)}
            socket.send_fds(conn, [json.dumps(header).encode('utf-8')], batch)
        answer = conn.recv(16)
    except OSError as exc:
        fail(args.run_dir, 'creator', 'sending the descriptors failed: %s' % exc)
    if answer != b'ok':
        fail(args.run_dir, 'creator', 'the receiver answered %r' % answer)
    conn.close()
    report_ready(args.run_dir, 'creator', title, role='creator', gpu=args.gpu, gib=args.gib, sent=len(fds))
    hold_forever()
    return keep


def shape_ready_names(shape, children=3):
    """The ready files that say a context shape is in place, before the harness kills any creator."""
    if shape == 'context_exited_leader':
        return ['leader']
    if shape == 'context_forked_pool':
        return ['creator'] + ['pool%d' % index for index in range(children)]
    if shape == 'context_socket_receiver':
        return ['receiver', 'creator']
    raise ValueError('unknown context shape %r; choose from %s' % (shape, ', '.join(CONTEXT_SHAPES)))


def shape_commands(shape, run_dir, gpu, gib, simulate=None, children=3, socket_name=None, ready_timeout=300.0):
    """``[(name, command)]`` that nsinit starts, in this order, for a context shape."""
    def role(name):
        command = [sys.executable, os.path.abspath(__file__), name, '--run-dir', run_dir,
                   '--ready-timeout', str(ready_timeout)]
        return command + (['--simulate', simulate] if simulate else [])
    hold = ['--gpu', str(gpu), '--gib', str(gib)]
    if shape == 'context_exited_leader':
        return [('leader', role('leader') + hold)]
    if shape == 'context_forked_pool':
        return [('creator', role('pool') + hold + ['--children', str(children)])]
    if shape == 'context_socket_receiver':
        # Started one after the other by nsinit: the receiver is no child of the sender.
        return [('receiver', role('receiver') + ['--socket', socket_name]),
                ('creator', role('sender') + hold + ['--socket', socket_name])]
    raise ValueError('unknown context shape %r; choose from %s' % (shape, ', '.join(CONTEXT_SHAPES)))


# -- the API server ----------------------------------------------------------

def child_command(role, args, *extra):
    command = [sys.executable, os.path.abspath(__file__), role, '--run-dir', args.run_dir]
    if args.simulate:
        command += ['--simulate', args.simulate]
    return command + [str(item) for item in extra]


def wait_ready(run_dir, names, processes, timeout):
    """Wait until each name has a ready file; fail if a process exits first."""
    deadline = time.time() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            if os.path.exists(os.path.join(run_dir, 'ready', name + '.json')):
                pending.discard(name)
        for name, process in processes.items():
            if name in pending and process.poll() is not None:
                raise RuntimeError('%s exited with status %s before it was ready' % (name, process.returncode))
        if pending and time.time() > deadline:
            raise RuntimeError('not ready after %d s: %s' % (timeout, ', '.join(sorted(pending))))
        time.sleep(0.05)


def cmd_parent(args):
    title = 'VLLM::APIServer'
    set_title(title)
    gpus = [int(item) for item in args.gpus.split(',')]
    ignore_tp = args.ignore_term_tp if args.ignore_term_tp is not None else len(gpus) - 1
    processes = {}
    processes['engine'] = subprocess.Popen(child_command('engine', args, '--gpu', gpus[0], '--gib', args.engine_gib))
    for tp, gpu in enumerate(gpus):
        extra = ['--tp', tp, '--gpu', gpu, '--gib', args.gib]
        if tp == ignore_tp:
            extra.append('--ignore-term')
        processes['worker%d' % tp] = subprocess.Popen(child_command('worker', args, *extra))
    try:
        wait_ready(args.run_dir, list(processes), processes, args.ready_timeout)
    except RuntimeError as exc:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
        write_json(os.path.join(args.run_dir, 'failed', 'parent.json'), {'error': str(exc)})
        return 1
    report_ready(args.run_dir, 'parent', title, role='parent',
                 children=dict((name, process.pid) for name, process in processes.items()))
    hold_forever()
    return 0


# -- PID namespace for the one-liner ------------------------------------------

def _check(result, what):
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, '%s: %s' % (what, os.strerror(error)))


def enter_pid_namespace():
    """Fork into a new PID and mount namespace with its own /proc.

    Returns in the child, which is PID 1 there; the calling process waits for
    it and exits with its status. If the caller dies, the child gets SIGKILL,
    and with it every process of the namespace.
    """
    libc = _libc()
    _check(libc.unshare(CLONE_NEWPID | CLONE_NEWNS), 'unshare')
    child = os.fork()
    if child:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        while True:
            try:
                dummy, status = os.waitpid(child, 0)
                break
            except InterruptedError:
                continue
        os._exit(os.waitstatus_to_exitcode(status) & 0xff)
    _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), 'prctl')
    _check(libc.mount(None, b'/', None, MS_REC | MS_PRIVATE, None), 'mount --make-rprivate /')
    _check(libc.mount(b'proc', b'/proc', b'proc', MS_NOSUID | MS_NODEV | MS_NOEXEC, None), 'mount proc')


def emit(data):
    sys.stdout.write(json.dumps(data) + '\n')
    sys.stdout.flush()


def reap():
    """Collect exited children (orphans are ours as PID 1 of the namespace)."""
    while True:
        try:
            pid, dummy = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def cmd_nsinit(args):
    try:
        enter_pid_namespace()
    except OSError as exc:
        emit({'event': 'failed', 'error': 'cannot enter a private PID namespace: %s' % exc})
        return 3
    monitor_command = [args.monitor_exe or sys.executable, os.path.abspath(__file__), 'monitor',
                       '--run-dir', args.run_dir]
    if args.simulate:
        monitor_command += ['--simulate', args.simulate]
    monitor_env = None
    if args.monitor_env:
        monitor_env = dict(os.environ)
        monitor_env.update(read_json(args.monitor_env))
    monitor = subprocess.Popen(monitor_command, env=monitor_env)
    if args.shape:
        # A context shape instead of the vLLM-like job; any creator is killed by the harness later.
        processes = {}
        socket_name = '@gpuops-ctx-%s' % os.urandom(6).hex()
        for name, command in shape_commands(args.shape, args.run_dir, args.gpu, args.gib, args.simulate,
                                            args.children, socket_name, args.ready_timeout):
            # Their stdout goes to the log: nsinit's own stdout carries its events to the harness.
            processes[name] = subprocess.Popen(command, stdout=sys.stderr.fileno())
        names = shape_ready_names(args.shape, args.children)
    else:
        parent_args = list(args.parent)
        if parent_args and parent_args[0] == '--':
            parent_args = parent_args[1:]
        processes = {'parent': subprocess.Popen([sys.executable, os.path.abspath(__file__), 'parent'] + parent_args)}
        names = ['parent']
    try:
        wait_ready(args.run_dir, names + ['monitor'], dict(processes, monitor=monitor), args.ready_timeout)
    except RuntimeError as exc:
        emit({'event': 'failed', 'error': str(exc)})
        return 1
    if args.shape:
        emit({'event': 'ready', 'monitor': monitor.pid, 'shape': args.shape,
              'pids': dict((name, process.pid) for name, process in processes.items())})
    else:
        parent = processes['parent']
        parent.kill()
        parent.wait()
        emit({'event': 'ready', 'monitor': monitor.pid, 'parent': parent.pid})
    devices = args.devices
    while True:
        ready, dummy, dummy = select.select([sys.stdin], [], [], 0.05)
        reap()
        if not ready:
            continue
        line = sys.stdin.readline()
        if not line:
            return 0
        request = json.loads(line)
        if request.get('op') == 'exit':
            return 0
        if request.get('op') == 'oneliner':
            command = ONELINER.format(devices=devices)
            if request.get('replace_nvidia_smi'):
                command = command.replace('nvidia-smi', request['replace_nvidia_smi'])
            started = time.time()
            process = subprocess.Popen(['bash', '-c', command], stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, universal_newlines=True)
            output = process.communicate()[0]
            ended = time.time()
            emit({'event': 'oneliner', 'command': command, 'start': started, 'end': ended,
                  'rc': process.returncode, 'output': output[-4000:]})


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest='role', required=True)

    def common(name):
        command = sub.add_parser(name)
        command.add_argument('--run-dir', required=True)
        command.add_argument('--simulate', metavar='DIR', help='stand-in device nodes instead of CUDA and NVML')
        command.add_argument('--ready-timeout', type=float, default=300.0)
        return command

    parent = common('parent')
    parent.add_argument('--gpus', required=True, help='GPU indices, comma-separated')
    parent.add_argument('--gib', type=float, required=True, help='GiB each worker holds')
    parent.add_argument('--engine-gib', type=float, default=0.5)
    parent.add_argument('--ignore-term-tp', type=int, help='the worker that ignores SIGTERM (default: the last)')
    parent.set_defaults(func=cmd_parent)

    worker = common('worker')
    worker.add_argument('--tp', type=int, required=True)
    worker.add_argument('--gpu', type=int, required=True)
    worker.add_argument('--gib', type=float, required=True)
    worker.add_argument('--ignore-term', action='store_true')
    worker.add_argument('--default-term', action='store_true', help='no SIGTERM handler (SIG_DFL)')
    worker.add_argument('--name', help='the ready file name (default: worker<tp>)')
    worker.set_defaults(func=cmd_worker)

    engine = common('engine')
    engine.add_argument('--gpu', type=int, required=True)
    engine.add_argument('--gib', type=float, required=True)
    engine.set_defaults(func=cmd_engine)

    monitor = common('monitor')
    monitor.add_argument('--interval', type=float, default=0.1)
    monitor.set_defaults(func=cmd_monitor)

    nsinit = common('nsinit')
    nsinit.add_argument('--monitor-exe')
    nsinit.add_argument('--monitor-env', metavar='FILE', help='JSON object of variables for the monitor')
    nsinit.add_argument('--devices', default='/dev/nvidia*', help='the glob the one-liner passes to fuser')
    nsinit.add_argument('--shape', choices=CONTEXT_SHAPES, help='a context shape instead of the vLLM-like job')
    nsinit.add_argument('--gpu', type=int, default=0, help='with --shape: the GPU it allocates on')
    nsinit.add_argument('--gib', type=float, default=4.0, help='with --shape: GiB it allocates')
    nsinit.add_argument('--children', type=int, default=3, help='with --shape context_forked_pool: forked children')
    nsinit.add_argument('parent', nargs=argparse.REMAINDER)
    nsinit.set_defaults(func=cmd_nsinit)

    for name, func in (('leader', cmd_leader), ('pool', cmd_pool), ('sender', cmd_sender)):
        command = common(name)
        command.add_argument('--gpu', type=int, required=True)
        command.add_argument('--gib', type=float, required=True)
        if name == 'pool':
            command.add_argument('--children', type=int, default=3)
        if name == 'sender':
            command.add_argument('--socket', required=True, help='@NAME (abstract) or a path')
        command.set_defaults(func=func)
    receiver = common('receiver')
    receiver.add_argument('--socket', required=True, help='@NAME (abstract) or a path')
    receiver.set_defaults(func=cmd_receiver)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    result = args.func(args)
    return result if isinstance(result, int) else 0


if __name__ == '__main__':
    sys.exit(main())
