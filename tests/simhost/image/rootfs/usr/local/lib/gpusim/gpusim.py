"""Control the simulated GPUs of this host.

  gpusim hold --gpu 0,1 --mib 40960 [--title T] [--ignore-term]
              [--fork-on-term] [--stuck] [--slow-release K] [--graphics]
              [--visible all|0,1] [--require-free] [--respawn]
              [--user NAME] [--unit NAME [--scope] [--slice S]]
              [--cgroup kubepods|crio|docker|libpod]
        start a process that holds GPU memory; it detaches, and this command
        prints a JSON line with its pid (and the unit or cgroup it runs in)
        once the memory is held
  gpusim clients start|stop   the protected GPU clients (nvidia-persistenced,
                              nv-hostengine, dcgm-exporter) as systemd units
  gpusim nvml ok|hang|no-driver|no-library [--at init|query] [--seconds N]
  gpusim configure [--gpus N] [--gpu-mib MIB] [--reserved-mib MIB] [--name S]
                   [--pid-offset N]
  gpusim show                 what NVML reports, as JSON (through pynvml)
  gpusim reset-state          stop every workload this tool started, clear
                              claims and persistence settings, NVML back to ok

  gpusim monitor [--title T]  an NVML client that nothing protects

How a GPU is "used": a process opens /dev/nvidiactl, /dev/nvidia-uvm and
/dev/nvidiaN, maps the nodes of the GPUs it computes on, and creates a context
on each: an OFD read lock at the context's id on its descriptor of
/dev/nvidiaN, declared with its memory in /run/gpusim/claims/<pid>-<start>.
The lock, like a CUDA context, belongs to the open file description: a thread,
a forked child or a receiver of the descriptor keeps it alive after its
creator has died. The stand-in libnvidia-ml.so.1 derives every figure from the
claims and /proc/locks, at each call.
"""

import argparse
import ctypes
import fcntl
import json
import mmap
import os
import pwd
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

CONF = "/etc/gpusim/gpusim.conf"
STATE = "/run/gpusim"
CLAIMS = STATE + "/claims"
READY = STATE + "/ready"
STARTED = STATE + "/started"
LIBRARY = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
LIBRARY_OFF = "/usr/lib/gpusim/libnvidia-ml.so.1.disabled"
SELF = os.path.realpath(__file__)
# tests/faults/blockfs.py, copied next to this file by the image build.
BLOCKFS = os.path.join(os.path.dirname(SELF), "blockfs.py")
BLOCKFS_MOUNT = "/run/gpusim/blockfs"
BLOCKFS_FILE = BLOCKFS_MOUNT + "/block"
BLOCKFS_PID = "/run/gpusim/blockfs.pid"
PYTHON = sys.executable or "/usr/bin/python3"
CLIENT_UNITS = ["nvidia-persistenced.service", "nvidia-dcgm.service",
                "dcgm-exporter.service"]
DEFAULTS = {
    "gpus": "8", "memory_mib": "98304", "reserved_mib": "615",
    "name": "NVIDIA H200", "driver_version": "580.159.04",
    "cuda_version": "13000", "persistence_mode": "1", "nvml": "ok",
    "hang_at": "init", "hang_seconds": "3600",
}


# ------------------------------------------------------------------ helpers

def read_conf():
    conf = dict(DEFAULTS)
    try:
        with open(CONF) as handle:
            for line in handle:
                if "=" in line and not line.startswith("#"):
                    key, dummy, value = line.partition("=")
                    conf[key.strip()] = value.strip()
    except OSError:
        pass
    return conf


def write_conf(conf):
    os.makedirs(os.path.dirname(CONF), exist_ok=True)
    tmp = CONF + ".tmp"
    with open(tmp, "w") as handle:
        handle.write("# Simulated GPUs of this host; read by libnvidia-ml.so.1 "
                     "at every call.\n")
        for key in sorted(conf):
            handle.write("%s=%s\n" % (key, conf[key]))
    os.rename(tmp, CONF)


def make_dirs():
    for path, mode in ((STATE, 0o755), (CLAIMS, 0o1777), (READY, 0o1777),
                       (STARTED, 0o1777), (STATE + "/persistence", 0o755)):
        os.makedirs(path, exist_ok=True)
        os.chmod(path, mode)


def make_device_nodes(gpus):
    """Character devices that any process can open and map (clones of /dev/zero)."""
    dev_zero = os.makedev(1, 5)
    wanted = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
              "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]
    wanted += ["/dev/nvidia%d" % i for i in range(gpus)]
    os.makedirs("/dev/nvidia-caps", exist_ok=True)
    for name in os.listdir("/dev"):
        if name.startswith("nvidia") and name[6:].isdigit() and int(name[6:]) >= gpus:
            os.unlink(os.path.join("/dev", name))
    for path in wanted:
        if os.path.exists(path) and os.stat(path).st_rdev != dev_zero:
            os.unlink(path)
        if not os.path.exists(path):
            os.mknod(path, 0o666 | 0o020000, dev_zero)
        os.chmod(path, 0o666)


def stat_fields(pid):
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().rsplit(")", 1)[1].split()


def start_time(pid):
    # field 22 of /proc/PID/stat; fields[0] is field 3
    return int(stat_fields(pid)[19])


def set_title(title):
    """Retitle this process the way setproctitle does (as vLLM does).

    comm gets the first 15 characters; the argv area is overwritten so that
    /proc/PID/cmdline reads exactly the title.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)  # PR_SET_NAME
    fields = stat_fields(os.getpid())
    arg_start, arg_end = int(fields[45]), int(fields[46])
    size = arg_end - arg_start
    data = title.encode()[:max(size - 2, 0)] + b"\0"
    # A non-zero last byte tells the kernel the area was retitled: it then
    # shows everything up to the first NUL.
    data += b" " * (size - len(data))
    ctypes.memmove(arg_start, data, size)


def present_minors(conf):
    """The minor numbers of the /dev/nvidiaN nodes here: all of them on a host, the
    ones passed in inside a container, where NVML counts them from 0."""
    return [gpu for gpu in range(int(conf["gpus"])) if os.path.exists("/dev/nvidia%d" % gpu)]


def parse_gpus(text, conf=None):
    """GPU indices as NVML counts them here, as the minor numbers of their nodes."""
    conf = conf or read_conf()
    minors = present_minors(conf) or list(range(int(conf["gpus"])))
    if text == "all":
        return minors
    gpus = sorted({int(part) for part in text.split(",") if part.strip() != ""})
    for gpu in gpus:
        if gpu < 0 or gpu >= len(minors):
            raise SystemExit("gpusim: no GPU %d on this host (it has %d)" % (
                gpu, len(minors)))
    return [minors[gpu] for gpu in gpus]


def sd_notify(message):
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.connect(address)
        sock.sendall(message.encode())
    finally:
        sock.close()


def wait_ready(token, pids_to_watch, timeout):
    """Wait for a holder to write its ready file; returns its content."""
    path = os.path.join(READY, token)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(path) as handle:
                text = handle.read()
            if text.endswith("\n"):
                os.unlink(path)
                return json.loads(text)
        except (OSError, ValueError):
            pass
        for pid in pids_to_watch:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if done:
                return {"error": "exited with status %d before holding its GPUs"
                                 % (status >> 8)}
        time.sleep(0.02)
    return {"error": "not ready within %d s" % timeout}


def mark_ready(token, record):
    if not token:
        return
    path = os.path.join(READY, token)
    with open(path + ".tmp", "w") as handle:
        handle.write(json.dumps(record) + "\n")
    os.rename(path + ".tmp", path)


# ------------------------------------------------------------------ holders

F_OFD_SETLK = 37
# SYS_exit ends the calling thread only (exit_group ends the process).
SYS_EXIT = {"x86_64": 60, "aarch64": 93}


def take_context(fd, context):
    """An OFD read lock at offset ``context``: it lives as long as the open file description."""
    flock = struct.pack("hhqqi4x", fcntl.F_RDLCK, os.SEEK_SET, context, 1, 0)
    fcntl.fcntl(fd, F_OFD_SETLK, flock)


def nvidia_fds():
    """This process's descriptors of NVIDIA device nodes."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + name).startswith("/dev/nvidia"):
                found.append(int(name))
        except OSError:
            continue
    return found


def sleep_forever():
    while True:
        time.sleep(3600)


class Holder(object):
    """A process that holds GPU memory until it dies."""

    def __init__(self, args):
        self.args = args
        self.conf = read_conf()
        self.gpus = parse_gpus(args.gpu, self.conf)
        self.visible = parse_gpus(args.visible, self.conf) if args.visible \
            else list(self.gpus)
        self.fds = []
        self.maps = []
        self.contexts = {}
        self.generation = 0

    def check_free(self):
        import pynvml
        pynvml.nvmlInit()
        try:
            for gpu in self.gpus:
                minors = present_minors(self.conf)
                handle = pynvml.nvmlDeviceGetHandleByIndex(minors.index(gpu) if gpu in minors else gpu)
                memory = pynvml.nvmlDeviceGetMemoryInfo(
                    handle, version=pynvml.nvmlMemory_v2)
                free_mib = memory.free // (1024 * 1024)
                if free_mib < self.args.mib:
                    sys.stderr.write(
                        "torch.OutOfMemoryError: CUDA out of memory. Tried to "
                        "allocate %d MiB. GPU %d has a total capacity of %d MiB "
                        "of which %d MiB is free.\n" % (
                            self.args.mib, gpu, memory.total // (1024 * 1024),
                            free_mib))
                    sys.exit(1)
        finally:
            pynvml.nvmlShutdown()

    def open_devices(self):
        """Open the nodes as CUDA does, map the control node and the nodes of
        the GPUs it computes on, and create one context on each of those."""
        paths = ["/dev/nvidiactl", "/dev/nvidia-uvm",
                 "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]
        paths += ["/dev/nvidia%d" % gpu for gpu in sorted(set(self.visible) | set(self.gpus))]
        for path in paths:
            if not os.path.exists(path):
                continue
            fd = os.open(path, os.O_RDWR)
            self.fds.append(fd)
            gpu = int(path[11:]) if path[11:].isdigit() else None
            if path == "/dev/nvidiactl" or gpu in self.gpus:
                self.maps.append(mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ))
            if gpu in self.gpus:
                context = random.getrandbits(40) | 1
                take_context(fd, context)
                self.contexts[gpu] = context

    def close_devices(self):
        for mapping in self.maps:
            mapping.close()
        for fd in self.fds:
            os.close(fd)
        self.maps, self.fds, self.contexts = [], [], {}

    def write_claim(self):
        pid = os.getpid()
        path = os.path.join(CLAIMS, "%d-%d" % (pid, start_time(pid)))
        if self.args.stuck:
            release = "release stuck\n"
        elif self.args.slow_release:
            release = "release slow %s\n" % self.args.slow_release
        else:
            release = "release normal\n"
        kind = "graphics" if self.args.graphics else "compute"
        # The namespace that numbers this PID: the library translates it for a caller
        # in another one (a holder in a container), as the driver does.
        pidns = "pidns %d\n" % os.stat("/proc/self/ns/pid").st_ino
        lines = [pidns, release] + ["%d %d %s %d\n" % (gpu, self.args.mib, kind, self.contexts.get(gpu, 0))
                                    for gpu in self.gpus]
        with open(path + ".tmp", "w") as handle:
            handle.write("".join(lines))
        os.rename(path + ".tmp", path)

    def on_term(self, _signum, _frame):
        if self.args.fork_on_term and self.generation < self.args.fork_on_term:
            child = os.fork()
            if child == 0:
                # The new holder: its own devices and contexts, its own claim.
                self.generation += 1
                self.close_devices()
                self.open_devices()
                self.write_claim()
                record_started(os.getpid())
                return
            os._exit(0)
        os._exit(0)

    def run(self):
        if self.args.require_free:
            self.check_free()
        self.open_devices()
        self.write_claim()
        if self.args.title:
            set_title(self.args.title)
        if self.args.ignore_term:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, self.on_term)
        if self.args.block_term:
            # SIGTERM stays pending: not ignored (SigIgn), so it is given its grace.
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
        record_started(os.getpid())
        ready = {"pid": os.getpid(), "gpus": self.gpus, "mib": self.args.mib}
        if self.args.fork_pool:
            ready["pool_pids"] = self.fork_pool(self.args.fork_pool)
        if self.args.pass_fds:
            self.pass_fds(self.args.pass_fds)
        mark_ready(self.args.ready, ready)
        if self.args.blocked_cmdline:
            block_memory_lock()
        if self.args.exit_leader:
            self.exit_leader()
        while True:
            signal.pause()

    def fork_pool(self, count):
        """Children forked without exec, as DataLoader workers are: they
        inherit the descriptors (so the contexts) and the mappings."""
        pids = []
        for dummy in range(count):
            child = os.fork()
            if child == 0:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                record_started(os.getpid())
                while True:
                    signal.pause()
            pids.append(child)
        return pids

    def pass_fds(self, path):
        """Send every NVIDIA descriptor to the receiver listening at ``path`` (SCM_RIGHTS)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            socket.send_fds(conn, [b"fds"], nvidia_fds())
            conn.recv(1)

    def exit_leader(self):
        """End the main thread alone while another thread keeps the process:
        /proc/PID/stat then reads Z and /proc/PID/fd is empty, and the
        descriptors show under /proc/PID/task/TID/fd."""
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        threading.Thread(target=sleep_forever).start()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(SYS_EXIT[os.uname().machine], 0)


def block_memory_lock():
    """Make every reader of this process's cmdline and environ wait, as a
    thread stuck in the GPU driver does: one thread faults on a page of a
    file that blockfs never serves while it holds this process's mmap lock
    (a read of /proc/self/mem cannot drop the lock), and another asks for
    the lock as a writer (mmap), so new readers queue behind it. A fatal
    signal still ends the process: blockfs answers the interrupt."""
    import mmap
    import threading
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    fd = os.open(BLOCKFS_FILE, os.O_RDONLY)
    address = libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, 0)
    mem = os.open("/proc/self/mem", os.O_RDONLY)

    def fault():
        os.pread(mem, 1, address)

    def want_write_lock():
        time.sleep(0.2)
        mmap.mmap(-1, 4096)
    for target in (fault, want_write_lock):
        thread = threading.Thread(target=target)
        thread.daemon = True
        thread.start()


def cmd_blockfs(args):
    """Start or stop the file system that never answers a read."""
    if args.action == "start":
        if os.path.ismount(BLOCKFS_MOUNT):
            return
        stop_blockfs()  # a mount whose server is gone
        os.makedirs(BLOCKFS_MOUNT, exist_ok=True)
        devnull = open(os.devnull, "r+")
        proc = subprocess.Popen([PYTHON, BLOCKFS, "--give-up", str(args.give_up), BLOCKFS_MOUNT],
                                stdin=devnull, stdout=devnull, stderr=devnull, start_new_session=True)
        record_started(proc.pid)
        with open(BLOCKFS_PID, "w") as handle:
            handle.write("%d %d\n" % (proc.pid, start_time(proc.pid)))
        deadline = time.time() + 5
        while not os.path.ismount(BLOCKFS_MOUNT):
            if time.time() > deadline or proc.poll() is not None:
                raise SystemExit("gpusim: blockfs did not mount on %s" % BLOCKFS_MOUNT)
            time.sleep(0.02)
        os.stat(BLOCKFS_FILE)
        return
    stop_blockfs()


def stop_blockfs():
    """Stopping the server closes /dev/fuse, which fails every read still waiting."""
    # Never by reading cmdlines: those of the processes it blocks would block this too.
    try:
        with open(BLOCKFS_PID) as handle:
            pid, start = (int(field) for field in handle.read().split())
        if start_time(pid) == start:
            os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    subprocess.run(["umount", "-l", BLOCKFS_MOUNT], check=False, stderr=subprocess.DEVNULL)


def wait_blocked(pid, timeout=5):
    """Until a thread of ``pid`` waits for its mmap lock as a writer (state D)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/stat" % (pid, tid)) as handle:
                    if handle.read().rpartition(")")[2].split()[0] == "D":
                        time.sleep(0.05)  # the queued writer now holds back new readers
                        return
            except OSError:
                continue
        time.sleep(0.02)
    raise SystemExit("gpusim: pid %d did not block its readers" % pid)


def record_started(pid):
    """Remember the processes this tool started, for reset-state."""
    try:
        with open(os.path.join(STARTED, "%d-%d" % (pid, start_time(pid))), "w"):
            pass
    except OSError:
        pass


def hold_argv(args, token, title=None):
    argv = [PYTHON, SELF, "_hold", "--gpu", args.gpu, "--mib", str(args.mib),
            "--ready", token]
    if title or args.title:
        argv += ["--title", title or args.title]
    for flag in ("ignore_term", "stuck", "graphics", "require_free", "block_term", "blocked_cmdline"):
        if getattr(args, flag):
            argv.append("--" + flag.replace("_", "-"))
    if args.fork_on_term:
        argv += ["--fork-on-term", str(args.fork_on_term)]
    if args.slow_release:
        argv += ["--slow-release", str(args.slow_release)]
    if args.fork_pool:
        argv += ["--fork-pool", str(args.fork_pool)]
    if args.exit_leader:
        argv.append("--exit-leader")
    if args.visible:
        argv += ["--visible", args.visible]
    return argv


def demote(user):
    entry = pwd.getpwnam(user)

    def preexec():
        os.setgid(entry.pw_gid)
        os.initgroups(user, entry.pw_gid)
        os.setuid(entry.pw_uid)
    return preexec


def random_hex(length):
    return "".join(random.choice("0123456789abcdef") for dummy in range(length))


def cgroup_placement(args):
    """Unit and slice names in the formats container runtimes use."""
    cid = args.container_id or random_hex(64)
    pod = args.pod_uid or "%s-%s-%s-%s-%s" % (random_hex(8), random_hex(4),
                                              random_hex(4), random_hex(4),
                                              random_hex(12))
    pod_slice = pod.replace("-", "_")
    if args.cgroup == "kubepods":
        # kubelet with the systemd cgroup driver, containerd
        return ("cri-containerd-%s" % cid, "kubepods-besteffort-pod%s.slice" % pod_slice,
                {"runtime": "containerd", "id": cid, "pod_uid": pod})
    if args.cgroup == "crio":
        return ("crio-%s" % cid, "kubepods-burstable-pod%s.slice" % pod_slice,
                {"runtime": "cri-o", "id": cid, "pod_uid": pod})
    if args.cgroup == "docker":
        return ("docker-%s" % cid, "system.slice", {"runtime": "docker", "id": cid})
    if args.cgroup == "libpod":
        return ("libpod-%s" % cid, "machine.slice", {"runtime": "podman", "id": cid})
    raise SystemExit("gpusim: unknown --cgroup %s" % args.cgroup)


def cmd_hold(args):
    if args.blocked_cmdline:
        cmd_blockfs(argparse.Namespace(action="start", give_up=300))
    token = "%d-%s" % (os.getpid(), random_hex(8))
    inner = hold_argv(args, token)
    result = {}
    if args.pass_fds:
        result["receiver_pid"], socket_path = start_receiver(args.timeout)
        inner += ["--pass-fds", socket_path]
    scope = args.scope
    unit, slice_name = args.unit, args.slice
    if args.cgroup:
        unit, slice_name, result["container"] = cgroup_placement(args)
        scope = True
    if args.respawn:
        inner = [PYTHON, SELF, "_supervise", "--title", args.supervisor_title,
                 "--ready", token, "--"] + inner
    devnull = open(os.devnull, "r+")
    watch = []
    if unit:
        systemd_run = ["systemd-run", "--quiet", "--unit", unit]
        if slice_name:
            systemd_run += ["--slice", slice_name]
        if args.user:
            systemd_run += ["--uid", args.user]
        if scope:
            # systemd-run --scope becomes the command itself: detach it.
            proc = subprocess.Popen(systemd_run + ["--scope"] + inner,
                                    stdin=devnull, stdout=devnull, stderr=devnull,
                                    start_new_session=True)
            watch.append(proc.pid)
        else:
            subprocess.run(systemd_run + ["--collect", "-p", "KillMode=process"]
                           + inner, check=True)
        result["unit"] = unit + (".scope" if scope else ".service")
        if slice_name:
            result["slice"] = slice_name
    else:
        proc = subprocess.Popen(inner, stdin=devnull, stdout=devnull, stderr=devnull,
                                start_new_session=True,
                                preexec_fn=demote(args.user) if args.user else None)
        watch.append(proc.pid)
    ready = wait_ready(token, watch, args.timeout)
    if "error" in ready:
        sys.stderr.write("gpusim: holder %s\n" % ready["error"])
        sys.exit(1)
    result.update(ready)
    if args.blocked_cmdline:
        wait_blocked(ready["pid"])
    if args.title:
        result["title"] = args.title
    print(json.dumps(result, sort_keys=True))
    sys.stdout.flush()
    # The holder is not waited for: it is orphaned to PID 1 when we exit.
    os._exit(0)


def cmd_internal_hold(args):
    Holder(args).run()


def cmd_internal_receive(args):
    """Keep whatever descriptors a holder sends over a Unix socket."""
    set_title(args.title)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    record_started(os.getpid())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(args.socket)
        os.chmod(args.socket, 0o600)
        server.listen(1)
        mark_ready(args.ready, {"pid": os.getpid()})
        conn, dummy = server.accept()
        with conn:
            dummy, kept, dummy2, dummy3 = socket.recv_fds(conn, 16, 64)
            conn.sendall(b"k")
    os.unlink(args.socket)
    sys.stdin.close()
    while kept:
        signal.pause()


def cmd_monitor(args):
    """An NVML client, as an exporter is, that no default protects."""
    token = "%d-%s" % (os.getpid(), random_hex(8))
    devnull = open(os.devnull, "r+")
    proc = subprocess.Popen([PYTHON, SELF, "_monitor", "--title", args.title, "--ready", token],
                            stdin=devnull, stdout=devnull, stderr=devnull, start_new_session=True)
    ready = wait_ready(token, [proc.pid], 20)
    if "error" in ready:
        sys.exit("gpusim: monitor %s" % ready["error"])
    print(json.dumps(ready, sort_keys=True))
    sys.stdout.flush()
    os._exit(0)


def cmd_internal_monitor(args):
    import pynvml
    set_title(args.title)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    pynvml.nvmlInit()
    record_started(os.getpid())
    mark_ready(args.ready, {"pid": os.getpid(), "title": args.title})
    while True:
        signal.pause()


def start_receiver(timeout):
    """A process unrelated to the holder (its own session) that will keep its descriptors."""
    token = "%d-%s" % (os.getpid(), random_hex(8))
    path = os.path.join(READY, "receiver-%s.sock" % token)
    devnull = open(os.devnull, "r+")
    proc = subprocess.Popen([PYTHON, SELF, "_receive", "--socket", path, "--ready", token],
                            stdin=devnull, stdout=devnull, stderr=devnull, start_new_session=True)
    ready = wait_ready(token, [proc.pid], timeout)
    if "error" in ready:
        sys.exit("gpusim: receiver %s" % ready["error"])
    return ready["pid"], path


def cmd_internal_supervise(args):
    """A supervisor that respawns its worker whenever the worker dies."""
    if args.title:
        set_title(args.title)
    argv = args.worker
    if argv and argv[0] == "--":
        argv = argv[1:]
    record_started(os.getpid())
    child = {"pid": None}

    def stop(_signum, _frame):
        if child["pid"]:
            try:
                os.kill(child["pid"], signal.SIGTERM)
            except OSError:
                pass
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    first = True
    while True:
        token = "%d-%s" % (os.getpid(), random_hex(8))
        worker_argv = list(argv)
        worker_argv[worker_argv.index("--ready") + 1] = token
        proc = subprocess.Popen(worker_argv)
        child["pid"] = proc.pid
        ready = wait_ready(token, [], 15)
        if first:
            ready["supervisor_pid"] = os.getpid()
            mark_ready(args.ready, ready)
            first = False
        proc.wait()
        child["pid"] = None
        time.sleep(args.respawn_delay)


# ------------------------------------------------------------------ vLLM

def cmd_vllm_serve(args):
    """VLLM::APIServer: an engine core with one worker per GPU, and /health."""
    import http.server
    import threading

    conf = read_conf()
    prefix = os.environ.get("VLLM_PROCESS_NAME_PREFIX", "VLLM")
    tensor_parallel = int(os.environ.get("VLLM_SIM_TENSOR_PARALLEL") or len(present_minors(conf)) or conf["gpus"])
    utilization = float(os.environ.get("VLLM_SIM_GPU_MEMORY_UTILIZATION", "0.9"))
    worker_mib = int(os.environ.get("VLLM_SIM_WORKER_MIB") or
                     int(int(conf["memory_mib"]) * utilization) - int(conf["reserved_mib"]))
    port = int(os.environ.get("VLLM_SIM_PORT", "8000"))
    set_title("%s::APIServer" % prefix)
    token = "%d-%s" % (os.getpid(), random_hex(8))
    engine = subprocess.Popen([PYTHON, SELF, "_engine-core", "--ready", token,
                               "--tensor-parallel", str(tensor_parallel),
                               "--mib", str(worker_mib), "--prefix", prefix])
    ready = wait_ready(token, [engine.pid], 60)
    if "error" in ready:
        sys.stderr.write("RuntimeError: Engine core initialization failed. "
                         "See root cause above. (%s)\n" % ready["error"])
        sys.exit(1)
    sys.stderr.write("engine core %d ready with workers %s\n" % (
        engine.pid, ready.get("workers")))

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                body = b""
            elif self.path == "/v1/models":
                body = json.dumps({"object": "list", "data": [
                    {"id": os.environ.get("VLLM_SIM_MODEL", "sim/model"),
                     "object": "model"}]}).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    sd_notify("READY=1\nSTATUS=serving on 127.0.0.1:%d" % port)

    # Stopping the API server leaves its engine core and workers behind,
    # as in vLLM's orphan reports: nothing is forwarded to them.
    def stop(_signum, _frame):
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    while True:
        signal.pause()


def cmd_engine_core(args):
    """VLLM::EngineCore: parent of the workers; stops them on SIGTERM."""
    set_title("%s::EngineCore" % args.prefix)
    record_started(os.getpid())
    workers = []
    for rank in range(args.tensor_parallel):
        token = "%d-%d-%s" % (os.getpid(), rank, random_hex(6))
        argv = [PYTHON, SELF, "_hold", "--gpu", str(rank), "--mib", str(args.mib),
                "--visible", "all", "--require-free", "--ready", token,
                "--title", "%s::Worker_TP%d" % (args.prefix, rank)]
        workers.append((subprocess.Popen(argv), token))
    pids = []
    for proc, token in workers:
        ready = wait_ready(token, [proc.pid], 30)
        if "error" in ready:
            for other, dummy in workers:
                try:
                    other.kill()
                except OSError:
                    pass
            sys.stderr.write("Worker failed: %s\n" % ready["error"])
            sys.exit(1)
        pids.append(proc.pid)

    def stop(_signum, _frame):
        for proc, dummy in workers:
            try:
                proc.terminate()
            except OSError:
                pass
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    mark_ready(args.ready, {"pid": os.getpid(), "workers": pids})
    while True:
        signal.pause()


# ------------------------------------------------------------------ settings

def ldconfig():
    subprocess.run(["ldconfig"], check=True)


def cmd_nvml(args):
    conf = read_conf()
    if args.mode == "no-library":
        if os.path.exists(LIBRARY):
            os.makedirs(os.path.dirname(LIBRARY_OFF), exist_ok=True)
            os.rename(LIBRARY, LIBRARY_OFF)
            ldconfig()
        conf["nvml"] = "ok"
    else:
        if not os.path.exists(LIBRARY) and os.path.exists(LIBRARY_OFF):
            os.rename(LIBRARY_OFF, LIBRARY)
            ldconfig()
        conf["nvml"] = args.mode
        if args.mode == "hang":
            conf["hang_at"] = args.at
            conf["hang_seconds"] = str(args.seconds)
    write_conf(conf)
    print(json.dumps({"nvml": args.mode}))


def cmd_configure(args):
    conf = read_conf()
    if args.gpus is not None:
        conf["gpus"] = str(args.gpus)
    if args.gpu_mib is not None:
        conf["memory_mib"] = str(args.gpu_mib)
    if args.reserved_mib is not None:
        conf["reserved_mib"] = str(args.reserved_mib)
    if args.name is not None:
        conf["name"] = args.name
    if args.persistence_mode is not None:
        conf["persistence_mode"] = str(args.persistence_mode)
    if args.pid_offset is not None:
        conf["pid_offset"] = str(args.pid_offset)
    write_conf(conf)
    make_dirs()
    make_device_nodes(int(conf["gpus"]))


def cmd_boot(_args):
    """At boot: GPUs from the container's environment, nodes, state dirs."""
    env = {}
    try:
        with open("/proc/1/environ", "rb") as handle:
            for item in handle.read().split(b"\0"):
                key, dummy, value = item.decode(errors="replace").partition("=")
                env[key] = value
    except OSError:
        pass
    conf = read_conf()
    for key, name in (("gpus", "GPUSIM_GPUS"), ("memory_mib", "GPUSIM_GPU_MIB"),
                      ("reserved_mib", "GPUSIM_RESERVED_MIB"),
                      ("name", "GPUSIM_GPU_NAME")):
        if env.get(name):
            conf[key] = env[name]
    write_conf(conf)
    make_dirs()
    make_device_nodes(int(conf["gpus"]))


def cmd_clients(args):
    subprocess.run(["systemctl", args.action] + CLIENT_UNITS, check=True)
    states = {}
    for unit in CLIENT_UNITS:
        proc = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit], check=False,
                              stdout=subprocess.PIPE, universal_newlines=True)
        states[unit] = int(proc.stdout.strip() or 0)
    print(json.dumps({"units": states}, sort_keys=True))


def cmd_show(_args):
    import pynvml
    pynvml.nvmlInit()
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            gpus.append({
                "index": index,
                "uuid": pynvml.nvmlDeviceGetUUID(handle),
                "pci_bus_id": pynvml.nvmlDeviceGetPciInfo(handle).busId,
                "memory_used_mib": memory.used // (1024 * 1024),
                "memory_total_mib": memory.total // (1024 * 1024),
                "persistence_mode": pynvml.nvmlDeviceGetPersistenceMode(handle),
                "processes": [{"pid": p.pid, "used_mib": p.usedGpuMemory // (1024 * 1024)}
                              for p in procs],
            })
        print(json.dumps({"driver_version": pynvml.nvmlSystemGetDriverVersion(),
                          "gpus": gpus}, indent=1))
    finally:
        pynvml.nvmlShutdown()


def cmd_reset_state(_args):
    stop_blockfs()
    units = CLIENT_UNITS + ["vllm-sim.service"]
    subprocess.run(["systemctl", "stop"] + units, check=False)
    subprocess.run(["systemctl", "reset-failed"] + units, check=False,
                   stderr=subprocess.DEVNULL)
    killed = []
    for name in os.listdir(STARTED):
        pid, dummy, start = name.partition("-")
        try:
            if start_time(int(pid)) == int(start):
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
        except (OSError, ValueError, IndexError):
            pass
        os.unlink(os.path.join(STARTED, name))
    for directory in (CLAIMS, READY, STATE + "/persistence"):
        for name in os.listdir(directory):
            os.unlink(os.path.join(directory, name))
    conf = read_conf()
    conf["nvml"] = "ok"
    conf["pid_offset"] = "0"
    write_conf(conf)
    if not os.path.exists(LIBRARY) and os.path.exists(LIBRARY_OFF):
        os.rename(LIBRARY_OFF, LIBRARY)
        ldconfig()
    print(json.dumps({"killed": sorted(killed)}))


# ------------------------------------------------------------------ main

def add_hold_options(parser, internal):
    parser.add_argument("--gpu", required=True, help="GPU indices, e.g. 0,1, or all")
    parser.add_argument("--mib", type=int, default=40960)
    parser.add_argument("--title")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--fork-on-term", type=int, nargs="?", const=3, default=0,
                        metavar="GENERATIONS")
    parser.add_argument("--stuck", action="store_true")
    parser.add_argument("--slow-release", type=float, default=0, metavar="SECONDS")
    parser.add_argument("--graphics", action="store_true")
    parser.add_argument("--visible", help="device nodes opened: all, or indices")
    parser.add_argument("--require-free", action="store_true")
    parser.add_argument("--block-term", action="store_true",
                        help="SIGTERM stays blocked (pending), so the holder sits out its grace")
    parser.add_argument("--blocked-cmdline", action="store_true",
                        help="readers of /proc/PID/cmdline and environ wait (needs /dev/fuse)")
    parser.add_argument("--exit-leader", action="store_true",
                        help="the main thread exits; another thread keeps the contexts")
    parser.add_argument("--fork-pool", type=int, default=0, metavar="N",
                        help="fork N children without exec, which inherit the contexts")
    if internal:
        parser.add_argument("--ready", default="")
        parser.add_argument("--pass-fds", metavar="SOCKET",
                            help="send the NVIDIA descriptors to the receiver at SOCKET")
    else:
        parser.add_argument("--respawn", action="store_true")
        parser.add_argument("--pass-fds", action="store_true",
                            help="send the NVIDIA descriptors to an unrelated receiver (SCM_RIGHTS)")
        parser.add_argument("--supervisor-title", default="gpu-supervisor")
        parser.add_argument("--user")
        parser.add_argument("--unit")
        parser.add_argument("--scope", action="store_true")
        parser.add_argument("--slice")
        parser.add_argument("--cgroup", choices=["kubepods", "crio", "docker", "libpod"])
        parser.add_argument("--container-id")
        parser.add_argument("--pod-uid")
        parser.add_argument("--timeout", type=int, default=20)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gpusim", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    hold = sub.add_parser("hold")
    add_hold_options(hold, internal=False)
    hold.set_defaults(func=cmd_hold)
    internal = sub.add_parser("_hold")
    add_hold_options(internal, internal=True)
    internal.set_defaults(func=cmd_internal_hold)
    receive = sub.add_parser("_receive")
    receive.add_argument("--socket", required=True)
    receive.add_argument("--ready", default="")
    receive.add_argument("--title", default="gpu-receiver")
    receive.set_defaults(func=cmd_internal_receive)
    monitor = sub.add_parser("monitor")
    monitor.add_argument("--title", default="gpu-monitor")
    monitor.set_defaults(func=cmd_monitor)
    internal_monitor = sub.add_parser("_monitor")
    internal_monitor.add_argument("--title", default="gpu-monitor")
    internal_monitor.add_argument("--ready", default="")
    internal_monitor.set_defaults(func=cmd_internal_monitor)
    supervise = sub.add_parser("_supervise")
    supervise.add_argument("--title")
    supervise.add_argument("--ready", default="")
    supervise.add_argument("--respawn-delay", type=float, default=0.3)
    supervise.add_argument("worker", nargs=argparse.REMAINDER)
    supervise.set_defaults(func=cmd_internal_supervise)
    # vLLM's own options (--model, ...) are accepted and ignored.
    sub.add_parser("vllm-serve").set_defaults(func=cmd_vllm_serve)
    engine = sub.add_parser("_engine-core")
    engine.add_argument("--ready", default="")
    engine.add_argument("--tensor-parallel", type=int, required=True)
    engine.add_argument("--mib", type=int, required=True)
    engine.add_argument("--prefix", default="VLLM")
    engine.set_defaults(func=cmd_engine_core)
    nvml = sub.add_parser("nvml")
    nvml.add_argument("mode", choices=["ok", "hang", "no-driver", "no-library"])
    nvml.add_argument("--at", choices=["init", "query"], default="init")
    nvml.add_argument("--seconds", type=int, default=3600)
    nvml.set_defaults(func=cmd_nvml)
    configure = sub.add_parser("configure")
    configure.add_argument("--gpus", type=int)
    configure.add_argument("--gpu-mib", type=int)
    configure.add_argument("--reserved-mib", type=int)
    configure.add_argument("--name")
    configure.add_argument("--persistence-mode", type=int, choices=[0, 1])
    # NVML reports every PID plus this offset, as an old driver reports host
    # PIDs to a caller in a container.
    configure.add_argument("--pid-offset", type=int)
    configure.set_defaults(func=cmd_configure)
    sub.add_parser("boot").set_defaults(func=cmd_boot)
    clients = sub.add_parser("clients")
    clients.add_argument("action", choices=["start", "stop"])
    clients.set_defaults(func=cmd_clients)
    sub.add_parser("show").set_defaults(func=cmd_show)
    blockfs = sub.add_parser("blockfs")
    blockfs.add_argument("action", choices=["start", "stop"])
    blockfs.add_argument("--give-up", type=int, default=300,
                         help="seconds after which the server stops and every waiting read fails")
    blockfs.set_defaults(func=cmd_blockfs)
    sub.add_parser("reset-state").set_defaults(func=cmd_reset_state)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "vllm-serve":
        parser.error("unrecognized arguments: %s" % " ".join(extra))
    args.func(args)


if __name__ == "__main__":
    main()
