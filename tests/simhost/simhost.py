"""Simulated GPU hosts: podman containers with systemd as PID 1.

Subcommands:
  setup                 install podman and friends, fetch wheels, compile the
                        stand-in NVML, build the host image (cached), unpack
                        the containers.podman collection
  build                 only (re)build the host image if its recipe changed
  base                  build the distribution's base image if missing, print its tag
  up NAME [--gpus N] [--gpu-mib MIB]
                        start one host (name gets the gpusim- prefix)
  --distribution debian12|debian13 (build, base, up, status; default
                        GPUSIM_DISTRIBUTION, else debian12)
  down NAME...          remove hosts this tool created, by exact name
  exec NAME CMD...      run a command inside a host
  status                list the hosts and the image
  env                   print the podman environment (for a shell: eval)
  inventory [--connection ssh|podman] NAME...
                        print an Ansible inventory (YAML) of hosts in group
                        gpu_hosts: over SSH with pipelining (default), or
                        with the containers.podman.podman connection

Every subcommand sets CONTAINERS_CONF and CONTAINERS_STORAGE_CONF itself.
Python 3 standard library only.
"""

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.realpath(__file__))
# Fault injections the image carries (tests/faults): the FUSE server that never answers.
FAULTS = os.path.join(os.path.dirname(HERE), "faults")
REPO = os.path.dirname(os.path.dirname(HERE))
# GPUSIM_BUILD_DIR: another build folder (its own image store), e.g. to
# measure a build from nothing without touching the hosts in use.
BUILD = os.environ.get("GPUSIM_BUILD_DIR") or os.path.join(REPO, "build", "simhost")
CACHE = os.path.join(BUILD, "cache")
STAGE = os.path.join(BUILD, "stage")
COLLECTIONS = os.path.join(REPO, "build", "collections")
SSH_KEY = os.path.join(BUILD, "ssh", "id_ed25519")
# ssh's configuration for every simulated host: ansible_ssh_common_args="-F <it>"
SSH_CONFIG = os.path.join(BUILD, "ssh", "config")
# Where a host's sshd looks for the key (tests/simhost/image: sshd_config.d).
AUTHORIZED_KEYS = "/etc/ssh/gpusim_authorized_keys"

PREFIX = "gpusim-"
LABEL = "io.gpuops.gpusim"
# The Debian releases a host can run (--distribution, or GPUSIM_DISTRIBUTION).
# Debian 13's base image also carries what the ansible-core matrix needs to
# run the collection's tests under its Python 3.13 (image/packages-debian13.txt).
DISTRIBUTIONS = {
    "debian12": {"suite": "bookworm", "base": "localhost/gpusim-base",
                 "host": "localhost/gpusim-host", "extra_packages": None},
    "debian13": {"suite": "trixie", "base": "localhost/gpusim-base-debian13",
                 "host": "localhost/gpusim-host-debian13",
                 "extra_packages": "packages-debian13.txt"},
}
DEFAULT_DISTRIBUTION = "debian12"
# A host that runs containers itself (up --containers): its images add podman
# from Debian (image/packages-containers.txt) and it starts with the privileges
# nested podman needs (container_host_options()).
CONTAINERS_SUFFIX = "-containers"
CONTAINERS_PACKAGES = "packages-containers.txt"
# Set by select_distribution() before any subcommand runs.
DISTRIBUTION = DEFAULT_DISTRIBUTION
BASE_REPO = DISTRIBUTIONS[DEFAULT_DISTRIBUTION]["base"]
HOST_REPO = DISTRIBUTIONS[DEFAULT_DISTRIBUTION]["host"]
SUITE = DISTRIBUTIONS[DEFAULT_DISTRIBUTION]["suite"]

APT_PACKAGES = ["podman", "runc", "debootstrap", "uidmap", "fuse-overlayfs",
                "slirp4netns", "psmisc", "openssh-client"]
WHEELS = {
    # name in the cache (prefix) -> pip requirement
    "nvidia_nvml_dev-13.5.37-": "nvidia-nvml-dev==13.5.37",
    "nvidia_ml_py-13.615.71-": "nvidia-ml-py==13.615.71",
    "ansible-12.3.0-": "ansible==12.3.0",
}
DEFAULT_GPUS = 8
DEFAULT_GPU_MIB = 98304


CONTAINERS = False


def select_distribution(name, containers=False):
    global DISTRIBUTION, BASE_REPO, HOST_REPO, SUITE, CONTAINERS  # pylint: disable=global-statement
    if name not in DISTRIBUTIONS:
        die("unknown distribution %r; known: %s" % (name, ", ".join(sorted(DISTRIBUTIONS))))
    DISTRIBUTION = name
    CONTAINERS = bool(containers)
    suffix = CONTAINERS_SUFFIX if CONTAINERS else ""
    BASE_REPO = DISTRIBUTIONS[name]["base"] + suffix
    HOST_REPO = DISTRIBUTIONS[name]["host"] + suffix
    SUITE = DISTRIBUTIONS[name]["suite"]


def log(msg):
    sys.stderr.write("simhost: %s\n" % msg)
    sys.stderr.flush()


def die(msg, code=1):
    log(msg)
    sys.exit(code)


def podman_env():
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = os.path.join(BUILD, "containers.conf")
    env["CONTAINERS_STORAGE_CONF"] = os.path.join(BUILD, "storage.conf")
    return env


def write_if_changed(path, text):
    try:
        with open(path) as handle:
            if handle.read() == text:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as handle:
        handle.write(text)
    os.rename(path + ".tmp", path)
    return True


def write_podman_conf():
    write_if_changed(os.path.join(BUILD, "containers.conf"), (
        "# Written by tests/simhost/simhost. crun cannot set RLIMIT_NOFILE\n"
        "# here and does not support cgroups v1 hybrid: use runc.\n"
        "[containers]\n"
        'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
        'log_driver = "k8s-file"\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'))
    write_if_changed(os.path.join(BUILD, "storage.conf"), (
        "# Written by tests/simhost/simhost.\n"
        "[storage]\n"
        'driver = "overlay"\n'
        'runroot = "%s"\n'
        'graphroot = "%s"\n' % (os.path.join(BUILD, "run"),
                                os.path.join(BUILD, "storage"))))


def run(cmd, check=True, capture=False, env=None, **kwargs):
    if capture:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("universal_newlines", True)
    proc = subprocess.run(cmd, env=env, check=False, **kwargs)
    if check and proc.returncode != 0:
        detail = ""
        if capture:
            detail = ": " + (proc.stderr or proc.stdout or "").strip()[-2000:]
        die("command failed (rc=%d): %s%s" % (proc.returncode, " ".join(cmd), detail))
    return proc


def podman(*args, check=True, capture=True, **kwargs):
    return run(["podman"] + list(args), check=check, capture=capture,
               env=podman_env(), **kwargs)


# ---------------------------------------------------------------- setup steps

def ensure_apt_packages():
    missing = []
    for package in APT_PACKAGES:
        proc = run(["dpkg-query", "-W", "-f=${Status}", package], check=False,
                   capture=True)
        if "install ok installed" not in proc.stdout:
            missing.append(package)
    if not missing:
        return
    log("installing %s" % " ".join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing,
        env=env)


def pip_command():
    venv_pip = os.path.join(REPO, ".venv", "bin", "pip")
    if os.access(venv_pip, os.X_OK):
        return [venv_pip]
    return [sys.executable, "-m", "pip"]


def cached_wheel(prefix):
    if not os.path.isdir(CACHE):
        return None
    for name in sorted(os.listdir(CACHE)):
        if name.startswith(prefix) and name.endswith(".whl"):
            return os.path.join(CACHE, name)
    return None


def ensure_wheels():
    os.makedirs(CACHE, exist_ok=True)
    for prefix, requirement in WHEELS.items():
        if cached_wheel(prefix):
            continue
        log("downloading %s" % requirement)
        run(pip_command() + ["download", "--no-deps", "--quiet", "-d", CACHE,
                             requirement])
        if not cached_wheel(prefix):
            die("pip did not leave a wheel for %s in %s" % (requirement, CACHE))


def extract_members(wheel, prefix, dest):
    """Unpack the members of a wheel under PREFIX into DEST (prefix stripped)."""
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            target = os.path.join(dest, info.filename[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with archive.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def ensure_podman_collection():
    dest = os.path.join(COLLECTIONS, "ansible_collections", "containers", "podman")
    wheel = cached_wheel("ansible-12.3.0-")
    marker = os.path.join(dest, ".from-wheel")
    if os.path.exists(marker):
        with open(marker) as handle:
            if handle.read().strip() == os.path.basename(wheel):
                return
    log("unpacking containers.podman from %s" % os.path.basename(wheel))
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    extract_members(wheel, "ansible_collections/containers/podman/", dest)
    with open(marker, "w") as handle:
        handle.write(os.path.basename(wheel) + "\n")


def compile_stage():
    """Compile the stand-in NVML and the GPU client programs into STAGE."""
    include = os.path.join(BUILD, "nvml-include")
    header = os.path.join(include, "nvml.h")
    if not os.path.exists(header):
        extract_members(cached_wheel("nvidia_nvml_dev-13.5.37-"),
                        "nvidia/cu13/include/", include)
    out = os.path.join(STAGE, "files")
    libdir = os.path.join(out, "usr", "lib", "x86_64-linux-gnu")
    bindir = os.path.join(out, "usr", "bin")
    os.makedirs(libdir, exist_ok=True)
    os.makedirs(bindir, exist_ok=True)
    src = os.path.join(HERE, "nvml")
    run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
         "-I", include, "-Wl,-soname,libnvidia-ml.so.1",
         "-o", os.path.join(libdir, "libnvidia-ml.so.1"),
         os.path.join(src, "nvml_sim.c")], capture=True)
    for name in ("nvidia-persistenced", "nv-hostengine", "dcgm-exporter"):
        run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror",
             "-DCLIENT_NAME=\"%s\"" % name,
             "-o", os.path.join(bindir, name),
             os.path.join(src, "gpu_client.c")], capture=True)
    # pynvml, unmodified, where Debian's python3 finds it.
    extract_members(cached_wheel("nvidia_ml_py-13.615.71-"), "",
                    os.path.join(out, "usr", "lib", "python3", "dist-packages"))
    return out


# ---------------------------------------------------------------- images

# A mirror that serves one of these serves them all.
MIRROR_SUITES = {d["suite"] for d in DISTRIBUTIONS.values()}


def apt_mirror():
    """The Debian mirror of this machine's apt sources."""
    candidates = []
    for path in ["/etc/apt/sources.list"] + sorted(
            os.path.join("/etc/apt/sources.list.d", n)
            for n in (os.listdir("/etc/apt/sources.list.d")
                      if os.path.isdir("/etc/apt/sources.list.d") else [])):
        try:
            with open(path) as handle:
                text = handle.read()
        except OSError:
            continue
        if path.endswith(".sources"):
            for stanza in text.split("\n\n"):
                fields = {}
                for line in stanza.splitlines():
                    if ":" in line and not line.startswith("#"):
                        key, dummy, value = line.partition(":")
                        fields[key.strip()] = value.strip()
                if MIRROR_SUITES & set(fields.get("Suites", "").split()) and \
                        "main" in fields.get("Components", "").split():
                    candidates.extend(fields.get("URIs", "").split())
        else:
            for line in text.splitlines():
                parts = line.split()
                if len(parts) >= 4 and parts[0] == "deb" and parts[2] in MIRROR_SUITES:
                    candidates.append(parts[1])
    for uri in candidates:
        if "security" not in uri:
            return uri.rstrip("/")
    return "http://deb.debian.org/debian"


def read_packages():
    names = ["packages.txt"]
    if DISTRIBUTIONS[DISTRIBUTION]["extra_packages"]:
        names.append(DISTRIBUTIONS[DISTRIBUTION]["extra_packages"])
    if CONTAINERS:
        names.append(CONTAINERS_PACKAGES)
    packages = []
    for name in names:
        with open(os.path.join(HERE, "image", name)) as handle:
            packages.extend(line.strip() for line in handle
                            if line.strip() and not line.startswith("#"))
    return packages


def hash_tree(digest, root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            digest.update(str(os.stat(path).st_mode & 0o777).encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(handle.read())


def base_recipe_hash():
    digest = hashlib.sha256()
    digest.update(("minbase %s %s\n" % (SUITE, apt_mirror())).encode())
    digest.update("\n".join(read_packages()).encode())
    return digest.hexdigest()[:16]


def host_recipe_hash():
    digest = hashlib.sha256()
    digest.update(base_recipe_hash().encode())
    for sub in ("image", "nvml"):
        hash_tree(digest, os.path.join(HERE, sub))
    hash_tree(digest, FAULTS)
    for prefix in ("nvidia_nvml_dev-13.5.37-", "nvidia_ml_py-13.615.71-"):
        digest.update(prefix.encode())
    with open(os.path.realpath(__file__), "rb") as handle:
        digest.update(handle.read())
    return digest.hexdigest()[:16]


def image_exists(ref):
    return podman("image", "exists", ref, check=False).returncode == 0


def ensure_base_image():
    tag = "%s:%s" % (BASE_REPO, base_recipe_hash())
    if image_exists(tag):
        return tag
    rootfs = os.path.join(BUILD, "rootfs")
    if os.path.isdir(rootfs):
        shutil.rmtree(rootfs)
    debs = os.path.join(CACHE, "debs")
    os.makedirs(debs, exist_ok=True)
    mirror = apt_mirror()
    started = time.time()
    log("debootstrap %s from %s (packages cached in %s)" % (SUITE, mirror, debs))
    run(["debootstrap", "--variant=minbase", "--cache-dir=" + debs,
         "--include=" + ",".join(read_packages()), SUITE, rootfs, mirror],
        capture=True)
    # Trim what a test host never needs.
    for sub in ("usr/share/doc", "usr/share/man", "usr/share/locale",
                "var/cache/apt/archives", "var/lib/apt/lists"):
        path = os.path.join(rootfs, sub)
        if os.path.isdir(path):
            shutil.rmtree(path)
            os.makedirs(path)
    log("debootstrap took %.0f s; importing" % (time.time() - started))
    tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."],
                           stdout=subprocess.PIPE)
    imported = subprocess.run(["podman", "import", "--quiet", "-", tag], check=False,
                              stdin=tar.stdout, env=podman_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True)
    tar.stdout.close()
    if tar.wait() != 0 or imported.returncode != 0:
        die("podman import failed: %s" % imported.stderr.strip())
    shutil.rmtree(rootfs)
    return tag


def ensure_host_image(force=False):
    """The host image of the current recipe, built once even when several
    simhost commands run at the same time."""
    os.makedirs(BUILD, exist_ok=True)
    with open(os.path.join(BUILD, ".image.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_host_image(force)


def _ensure_host_image(force=False):
    ensure_wheels()
    tag = "%s:%s" % (HOST_REPO, host_recipe_hash())
    if image_exists(tag) and not force:
        podman("tag", tag, HOST_REPO + ":latest")
        return tag
    base = ensure_base_image()
    started = time.time()
    context = os.path.join(BUILD, "context")
    if os.path.isdir(context):
        shutil.rmtree(context)
    shutil.copytree(os.path.join(HERE, "image", "rootfs"),
                    os.path.join(context, "rootfs"), symlinks=True)
    staged = compile_stage()
    shutil.copytree(staged, os.path.join(context, "rootfs"), symlinks=True,
                    dirs_exist_ok=True)
    shutil.copy(os.path.join(FAULTS, "blockfs.py"),
                os.path.join(context, "rootfs", "usr", "local", "lib", "gpusim", "blockfs.py"))
    shutil.copy(os.path.join(HERE, "image", "setup-image.sh"), context)
    with open(os.path.join(context, "Containerfile"), "w") as handle:
        handle.write("FROM %s\n"
                     "COPY rootfs/ /\n"
                     "COPY setup-image.sh /tmp/setup-image.sh\n"
                     "RUN sh /tmp/setup-image.sh && rm /tmp/setup-image.sh\n"
                     'CMD ["/sbin/init"]\n' % base)
    old = podman("images", "--quiet", "--no-trunc", "--filter",
                 "reference=%s" % HOST_REPO, check=False).stdout.split()
    podman("build", "--quiet", "--network", "none", "--layers=false",
           "--label", "%s=host" % LABEL, "-t", tag, "-t", HOST_REPO + ":latest",
           context)
    log("host image %s built in %.1f s" % (tag, time.time() - started))
    new_id = podman("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()
    for image_id in set(old) - {new_id}:
        # Earlier builds of this image only, by id; busy ones stay.
        podman("rmi", image_id, check=False)
    return tag


def ensure_ssh_key():
    """The key Ansible logs in with (root, on simulated hosts only), and the
    ssh configuration that reaches a host without a network: its ProxyCommand
    runs the host's sshd in inetd mode through podman exec, once per
    connection; Ansible's ControlPersist keeps that connection for the tasks
    that follow."""
    if not (os.path.exists(SSH_KEY) and os.path.exists(SSH_KEY + ".pub")):
        os.makedirs(os.path.dirname(SSH_KEY), mode=0o700, exist_ok=True)
        for path in (SSH_KEY, SSH_KEY + ".pub"):
            if os.path.exists(path):
                os.unlink(path)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpusim-ansible",
             "-f", SSH_KEY], capture=True)
    write_if_changed(SSH_CONFIG, (
        "# Written by tests/simhost/simhost: how ssh reaches a simulated host.\n"
        "Host %s*\n"
        "  ProxyCommand %s exec -i %%h /usr/sbin/sshd -i\n"
        "  User root\n"
        "  IdentityFile %s\n"
        "  IdentitiesOnly yes\n"
        "  UserKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking no\n"
        "  LogLevel ERROR\n" % (PREFIX, os.path.join(HERE, "podman"), SSH_KEY)))
    return SSH_KEY


def cmd_setup(_args):
    started = time.time()
    ensure_apt_packages()
    os.makedirs(BUILD, exist_ok=True)
    write_podman_conf()
    ensure_ssh_key()
    ensure_wheels()
    ensure_podman_collection()
    tag = ensure_host_image()
    log("setup done in %.1f s; image %s" % (time.time() - started, tag))


def cmd_build(args):
    write_podman_conf()
    print(ensure_host_image(force=args.force))


def cmd_base(_args):
    """The distribution's base image (debootstrap only: no stand-in NVML, no
    units), built when missing; the ansible-core matrix runs in it."""
    write_podman_conf()
    os.makedirs(BUILD, exist_ok=True)
    with open(os.path.join(BUILD, ".image.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        print(ensure_base_image())


# ---------------------------------------------------------------- hosts

def container_name(name):
    return name if name.startswith(PREFIX) else PREFIX + name


def inspect(name):
    proc = podman("container", "inspect", name, check=False)
    if proc.returncode != 0:
        return None
    data = json.loads(proc.stdout)
    return data[0] if data else None


def wait_running(name, timeout):
    deadline = time.time() + timeout
    state = ""
    while time.time() < deadline:
        proc = podman("exec", name, "systemctl", "is-system-running", check=False)
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return state
        time.sleep(0.1)
    die("%s: systemd did not reach running within %d s (last state: %r)" % (
        name, timeout, state))


def fuse_device():
    """/dev/fuse for tests/faults/blockfs.py, where the machine has it."""
    return ["--device", "/dev/fuse"] if os.path.exists("/dev/fuse") else []


def container_host_options():
    """What a host that runs podman itself needs beyond an ordinary host's options.

    Nested podman mounts (its storage, /proc and /sys of each container), sets
    up cgroups for its containers and namespaces for their processes, so the
    host runs privileged, keeps CAP_SYS_ADMIN past gpusim-init for systemd's
    services (a Quadlet-style unit runs podman under systemd), and keeps its
    container storage on a volume of its own: overlay cannot use an overlay
    upper directory, which the host's root is.
    """
    if not CONTAINERS:
        return []
    return ["--privileged", "--env", "GPUSIM_KEEP_SYS_ADMIN=1",
            "--volume", "/var/lib/containers", "--volume", "/var/lib/docker"]


def cmd_up(args):
    write_podman_conf()
    started = time.time()
    tag = ensure_host_image()
    key = ensure_ssh_key()
    # A host keeps the key it started with (a bind mount): a new key means a new host.
    with open(key + ".pub", "rb") as handle:
        key_digest = hashlib.sha256(handle.read()).hexdigest()[:16]
    name = container_name(args.name)
    existing = inspect(name)
    if existing:
        ours = existing.get("Config", {}).get("Labels", {}) or {}
        if ours.get(LABEL) != "host":
            die("%s exists and was not created by simhost; not touching it" % name)
        same = (existing["State"].get("Running")
                and ours.get(LABEL + ".key") == key_digest
                and ours.get(LABEL + ".gpus") == str(args.gpus)
                and ours.get(LABEL + ".gpu-mib") == str(args.gpu_mib)
                and ours.get(LABEL + ".containers", "no") == ("yes" if CONTAINERS else "no")
                and existing.get("ImageName") == tag)
        if same and not args.recreate:
            wait_running(name, 30)
            print(name)
            return
        podman("rm", "--force", "--time", "0", existing["Id"])
    podman("run", "--detach", "--name", name, "--hostname", name,
           "--label", "%s=host" % LABEL,
           "--label", "%s.gpus=%d" % (LABEL, args.gpus),
           "--label", "%s.gpu-mib=%d" % (LABEL, args.gpu_mib),
           "--label", "%s.distribution=%s" % (LABEL, DISTRIBUTION),
           "--label", "%s.containers=%s" % (LABEL, "yes" if CONTAINERS else "no"),
           "--label", "%s.key=%s" % (LABEL, key_digest),
           "--env", "GPUSIM_GPUS=%d" % args.gpus,
           "--env", "GPUSIM_GPU_MIB=%d" % args.gpu_mib,
           # Ansible's key, for `sshd -i` run through podman exec (no network)
           "--volume", "%s.pub:%s:ro" % (key, AUTHORIZED_KEYS),
           "--systemd=always", "--network", "none", "--cgroupns=private",
           # root on a real host may read every process's /proc/PID/fd
           "--cap-add", "SYS_PTRACE",
           # for gpusim-init's cgroup mount only; PID 1 drops it
           "--cap-add", "SYS_ADMIN",
           "--stop-signal", "SIGRTMIN+3",
           *fuse_device(),
           *container_host_options(),
           tag, "/usr/local/sbin/gpusim-init")
    state = wait_running(name, 60)
    log("%s up (%s, %d GPUs of %d MiB) in %.1f s" % (
        name, state, args.gpus, args.gpu_mib, time.time() - started))
    print(name)


def created_containers():
    """Ids of every container that carries this tool's label."""
    proc = podman("ps", "--all", "--no-trunc", "--filter", "label=%s=host" % LABEL,
                  "--format", "{{.ID}}", check=False)
    return proc.stdout.split()


def cmd_down(args):
    names = list(args.names)
    if args.all_created:
        names += created_containers()
    if not names:
        die("down: name the hosts to remove, or pass --all-created")
    for raw in names:
        name = raw if len(raw) == 64 and not raw.startswith(PREFIX) \
            else container_name(raw)
        existing = inspect(name)
        if not existing:
            continue
        labels = existing.get("Config", {}).get("Labels", {}) or {}
        if labels.get(LABEL) != "host":
            log("%s was not created by simhost; left alone" % name)
            continue
        podman("rm", "--force", "--time", "0", existing["Id"])
        log("%s removed" % existing["Name"])


def cmd_exec(args):
    name = container_name(args.name)
    flags = ["-i"] + (["-t"] if sys.stdin.isatty() and sys.stdout.isatty() else [])
    proc = subprocess.run(["podman", "exec"] + flags + [name] + args.command, check=False,
                          env=podman_env())
    sys.exit(proc.returncode)


def cmd_status(_args):
    write_podman_conf()
    proc = podman("ps", "--all", "--filter", "label=%s=host" % LABEL,
                  "--format", "{{.Names}}\t{{.Status}}\t{{.ID}}\t{{.Labels}}")
    print("image: %s:%s (%s)" % (
        HOST_REPO, host_recipe_hash(),
        "built" if image_exists("%s:%s" % (HOST_REPO, host_recipe_hash()))
        else "not built"))
    for line in proc.stdout.splitlines():
        name, status, cid = line.split("\t")[:3]
        print("%s\t%s\t%s" % (name, status, cid[:12]))


def cmd_env(_args):
    env = podman_env()
    for key in ("CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF"):
        print("export %s=%s" % (key, env[key]))


def host_vars(connection):
    if connection == "podman":
        return {"ansible_connection": "containers.podman.podman",
                "ansible_podman_executable": os.path.join(HERE, "podman"),
                "ansible_python_interpreter": "/usr/bin/python3"}
    ensure_ssh_key()
    return {"ansible_connection": "ssh",
            "ansible_ssh_common_args": "-F %s" % SSH_CONFIG,
            "ansible_ssh_pipelining": True,
            "ansible_python_interpreter": "/usr/bin/python3"}


def cmd_inventory(args):
    hosts = {container_name(name): None for name in args.names}
    inventory = {"gpu_hosts": {"hosts": hosts, "vars": host_vars(args.connection)}}
    # JSON is YAML, and Ansible reads either.
    print(json.dumps(inventory, indent=2))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="simhost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup").set_defaults(func=cmd_setup)
    build = sub.add_parser("build")
    build.add_argument("--force", action="store_true")
    build.set_defaults(func=cmd_build)
    up = sub.add_parser("up")
    up.add_argument("name")
    up.add_argument("--gpus", type=int, default=DEFAULT_GPUS)
    up.add_argument("--gpu-mib", type=int, default=DEFAULT_GPU_MIB)
    up.add_argument("--recreate", action="store_true")
    up.set_defaults(func=cmd_up)
    down = sub.add_parser("down")
    down.add_argument("names", nargs="*")
    down.add_argument("--all-created", action="store_true",
                      help="every host this tool created (by label, removed by id)")
    down.set_defaults(func=cmd_down)
    execute = sub.add_parser("exec")
    execute.add_argument("name")
    execute.add_argument("command", nargs=argparse.REMAINDER)
    execute.set_defaults(func=cmd_exec)
    status = sub.add_parser("status")
    status.set_defaults(func=cmd_status)
    base = sub.add_parser("base")
    base.set_defaults(func=cmd_base)
    sub.add_parser("env").set_defaults(func=cmd_env)
    inv = sub.add_parser("inventory")
    inv.add_argument("--connection", choices=("ssh", "podman"), default="ssh")
    inv.add_argument("names", nargs="+")
    inv.set_defaults(func=cmd_inventory)
    for subparser in (build, up, status, base):
        subparser.add_argument(
            "--distribution", choices=sorted(DISTRIBUTIONS),
            default=os.environ.get("GPUSIM_DISTRIBUTION") or DEFAULT_DISTRIBUTION)
        subparser.add_argument(
            "--containers", action="store_true",
            help="a host that runs podman itself (image/packages-containers.txt, privileged)")
    args = parser.parse_args(argv)
    select_distribution(getattr(args, "distribution", None)
                        or os.environ.get("GPUSIM_DISTRIBUTION") or DEFAULT_DISTRIBUTION,
                        containers=getattr(args, "containers", False))
    if getattr(args, "gpus", 1) < 1 or getattr(args, "gpus", 1) > 64:
        parser.error("--gpus must be between 1 and 64")
    args.func(args)


if __name__ == "__main__":
    main()
