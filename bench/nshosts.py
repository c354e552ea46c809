"""Light simulated GPU hosts for the fleet benchmark on a machine without podman.

    python3 bench/nshosts.py up --dir DIR --count 16 [--gpus 2] [--python PYTHON]
    python3 bench/nshosts.py hold --dir DIR NAME -- --gpu 0 --mib 40960 --title T
    python3 bench/nshosts.py down --dir DIR

A host here is a PID and mount namespace (``unshare``) with the testbed's own
parts: its PID 1 reaps orphans, ``/dev`` is a private tmpfs holding the
stand-in NVIDIA device nodes, ``/etc/gpusim`` and ``/run/gpusim`` are the
host's own folders, and ``gpusim.py boot`` (tests/simhost) sets them up. The
stand-in ``libnvidia-ml.so.1`` comes first on ``LD_LIBRARY_PATH``, so the
unmodified pynvml of the machine's Python sees the host's simulated GPUs, not
the machine's real ones, and ``/proc`` shows the host's processes only.

Ansible reaches a host with the local connection and pipelining: the host's
``python`` wrapper (its ansible_python_interpreter) enters the namespaces with
``nsenter`` and runs the module there. No systemd, no sshd: this is for
measuring how the controller's work scales with the host count on a machine
with many cores (bench/run.py --hosts ns); the podman hosts of tests/simhost
remain the hosts every behaviour is tested on.

``up`` writes DIR/inventory.json (group gpu_hosts) and DIR/hosts.json. Every
process a host runs dies with its PID 1, which ``down`` kills: nothing outside
the namespaces is ever signalled.
"""

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GPUSIM = os.path.join(ROOT, 'tests', 'simhost', 'image', 'rootfs', 'usr', 'local', 'lib', 'gpusim', 'gpusim.py')
# Mount points the namespaces bind their own folders onto; made (empty) when missing, removed by down.
MOUNT_POINTS = ('/etc/gpusim', '/run/gpusim')
PREFIX = 'nshost-'


def die(message):
    sys.stderr.write('nshosts: %s\n' % message)
    sys.exit(1)


def state_path(work):
    return os.path.join(work, 'hosts.json')


def load(work):
    try:
        with open(state_path(work)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {'hosts': {}, 'made_mount_points': []}


def save(work, state):
    with open(state_path(work), 'w') as handle:
        json.dump(state, handle, indent=2, sort_keys=True)


def host_env(host):
    env = dict(os.environ)
    env['LD_LIBRARY_PATH'] = host['library_dir'] + (':' + env['LD_LIBRARY_PATH'] if env.get('LD_LIBRARY_PATH') else '')
    return env


def enter(host):
    """The command prefix that runs a program inside the host."""
    return ['nsenter', '--target', str(host['init_pid']), '--pid', '--mount', '--',
            'env', 'LD_LIBRARY_PATH=%s' % host['library_dir']]


# -- PID 1 of a host ------------------------------------------------------------------

def make_dev():
    """A private /dev: the usual character devices, then gpusim boot adds the NVIDIA ones."""
    subprocess.run(['mount', '-t', 'tmpfs', '-o', 'mode=755,nosuid', 'nshost-dev', '/dev'], check=True)
    for name, major, minor in (('null', 1, 3), ('zero', 1, 5), ('full', 1, 7), ('random', 1, 8),
                               ('urandom', 1, 9), ('tty', 5, 0)):
        os.mknod('/dev/' + name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod('/dev/' + name, 0o666)
    os.symlink('/proc/self/fd', '/dev/fd')
    for number, name in enumerate(('stdin', 'stdout', 'stderr')):
        os.symlink('/proc/self/fd/%d' % number, '/dev/' + name)


def cmd_init(args):
    """PID 1 of a host: mounts, gpusim boot, then reap every orphan until killed."""
    subprocess.run(['mount', '--make-rprivate', '/'], check=True)
    make_dev()
    for point in MOUNT_POINTS:
        own = os.path.join(args.root, point.strip('/').replace('/', '-'))
        os.makedirs(own, exist_ok=True)
        subprocess.run(['mount', '--bind', own, point], check=True)
    subprocess.run([sys.executable, GPUSIM, 'boot'], check=True)
    with open(os.path.join(args.root, 'ready'), 'w') as handle:
        handle.write('%d\n' % os.getpid())
    signal.signal(signal.SIGTERM, lambda *dummy: os._exit(0))
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(0.5)


# -- commands ---------------------------------------------------------------------------

def parent_of(pid):
    with open('/proc/%d/stat' % pid) as handle:
        return int(handle.read().rsplit(')', 1)[1].split()[1])


def child_of(pid):
    for name in os.listdir('/proc'):
        if name.isdigit():
            try:
                if parent_of(int(name)) == pid:
                    return int(name)
            except (OSError, ValueError, IndexError):
                continue
    die('the namespace of unshare pid %d has no PID 1' % pid)
    return None


def cmd_up(args):
    if os.geteuid() != 0:
        die('needs root (unshare, mount, mknod)')
    for tool in ('unshare', 'nsenter', 'mount'):
        if not shutil.which(tool):
            die('needs %s (util-linux)' % tool)
    library = os.path.abspath(args.library)
    if not os.path.exists(os.path.join(library, 'libnvidia-ml.so.1')):
        die('no libnvidia-ml.so.1 in %s (tests/simhost/simhost setup builds it)' % library)
    os.makedirs(args.dir, exist_ok=True)
    state = load(args.dir)
    for point in MOUNT_POINTS:
        if not os.path.isdir(point):
            os.makedirs(point)
            state['made_mount_points'].append(point)
    python = os.path.abspath(args.python)
    names = ['%s%02d' % (PREFIX, number) for number in range(1, args.count + 1)]
    started = []
    for name in names:
        if name in state['hosts']:
            continue
        root = os.path.join(os.path.abspath(args.dir), name)
        os.makedirs(root, exist_ok=True)
        env = dict(os.environ, GPUSIM_GPUS=str(args.gpus), GPUSIM_GPU_MIB=str(args.gpu_mib))
        with open(os.path.join(root, 'init.log'), 'ab') as log:
            # Not our stdout: whoever reads it would wait for the host to end.
            proc = subprocess.Popen(['unshare', '--pid', '--mount', '--fork', '--mount-proc', '--',
                                     sys.executable, os.path.abspath(__file__), '_init', '--root', root],
                                    env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True)
        state['hosts'][name] = {'root': root, 'unshare_pid': proc.pid, 'init_pid': None,
                                'library_dir': library, 'python': python}
        started.append(name)
    save(args.dir, state)
    deadline = time.monotonic() + 30
    for name in started:
        host = state['hosts'][name]
        ready = os.path.join(host['root'], 'ready')
        while not os.path.exists(ready):
            if time.monotonic() > deadline:
                die('%s did not start within 30 s' % name)
            time.sleep(0.05)
        # unshare --fork: its only child is the host's PID 1.
        host['init_pid'] = child_of(host['unshare_pid'])
        wrapper = os.path.join(host['root'], 'python')
        with open(wrapper, 'w') as handle:
            handle.write('#!/bin/sh\n# ansible_python_interpreter of %s: run Python inside the host.\n'
                         'exec %s %s "$@"\n' % (name, ' '.join(enter(host)), host['python']))
        os.chmod(wrapper, 0o755)
    save(args.dir, state)
    inventory = {'gpu_hosts': {
        'hosts': {name: {'ansible_python_interpreter': os.path.join(state['hosts'][name]['root'], 'python')}
                  for name in sorted(state['hosts'])},
        'vars': {'ansible_connection': 'local', 'ansible_pipelining': True}}}
    with open(os.path.join(args.dir, 'inventory.json'), 'w') as handle:
        json.dump(inventory, handle, indent=2, sort_keys=True)
    print(json.dumps(sorted(state['hosts'])))


def cmd_hold(args):
    state = load(args.dir)
    host = state['hosts'].get(args.name)
    if not host:
        die('no host %s in %s' % (args.name, args.dir))
    extra = args.hold_args[1:] if args.hold_args[:1] == ['--'] else args.hold_args
    proc = subprocess.run(enter(host) + [host['python'], GPUSIM, 'hold'] + extra, check=False,
                          stdout=subprocess.PIPE, universal_newlines=True)
    sys.stdout.write(proc.stdout)
    sys.exit(proc.returncode)


def cmd_down(args):
    state = load(args.dir)
    for name, host in sorted(state['hosts'].items()):
        # Only the PID 1 this tool started, checked by its parent: the unshare process it ran.
        pid = host.get('init_pid')
        try:
            parent = parent_of(pid)
        except (OSError, TypeError, ValueError, IndexError):
            continue
        if parent == host['unshare_pid']:
            os.kill(pid, signal.SIGKILL)
    for name, host in state['hosts'].items():
        try:
            os.waitpid(host['unshare_pid'], 0)
        except ChildProcessError:
            deadline = time.monotonic() + 10
            while os.path.exists('/proc/%d' % host['unshare_pid']) and time.monotonic() < deadline:
                time.sleep(0.05)
    for point in state.get('made_mount_points', []):
        try:
            os.rmdir(point)
        except OSError:
            pass
    os.unlink(state_path(args.dir))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    sub = parser.add_subparsers(dest='command', required=True)
    up = sub.add_parser('up')
    up.add_argument('--dir', required=True)
    up.add_argument('--count', type=int, default=1)
    up.add_argument('--gpus', type=int, default=2)
    up.add_argument('--gpu-mib', type=int, default=98304)
    up.add_argument('--python', default=sys.executable, help='the Python that runs modules (psutil, pynvml)')
    up.add_argument('--library', default=os.path.join(ROOT, 'build', 'simhost', 'stage', 'files', 'usr', 'lib',
                                                      'x86_64-linux-gnu'),
                    help='the folder holding the stand-in libnvidia-ml.so.1')
    up.set_defaults(func=cmd_up)
    hold = sub.add_parser('hold')
    hold.add_argument('--dir', required=True)
    hold.add_argument('name')
    hold.add_argument('hold_args', nargs=argparse.REMAINDER)
    hold.set_defaults(func=cmd_hold)
    down = sub.add_parser('down')
    down.add_argument('--dir', required=True)
    down.set_defaults(func=cmd_down)
    init = sub.add_parser('_init')
    init.add_argument('--root', required=True)
    init.set_defaults(func=cmd_init)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == '__main__':
    main()
