"""Run ansible-test units and sanity on each ansible-core release of the matrix.

    python3 scripts/matrix.py [--tests units,sanity] [--ends] [VERSION ...]

VERSION is a release of tests/matrix/versions.txt or its minor (2.16); none
means every release there. A release whose controller is `host` runs under
this machine's Python in a venv of its own (build/matrix/<version>/venv). A
release whose controller is `debian13` needs a newer Python than this
machine's: it runs in the Debian 13 base image of the simulated hosts
(tests/simhost/simhost base), under Debian's python3, in a container with no
network and a pids limit. Its Python packages come from a wheel directory
that this script fills once with pip on this machine (build/matrix/wheels-*).

Everything is cached under build/matrix/: venvs, ansible-test's own venvs
(its HOME), the wheels. The collection is copied to
build/matrix/<version>/tree/ansible_collections/gpuops/reclaim for each run.
Python 3 standard library only.
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile

from worktree_files import copy_work_tree

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
MATRIX = os.path.join(ROOT, "build", "matrix")
VERSIONS_FILE = os.path.join(ROOT, "tests", "matrix", "versions.txt")
GET_PIP_STAND_IN = os.path.join(ROOT, "scripts", "get-pip-offline.py")
SIMHOST = os.path.join(ROOT, "tests", "simhost", "simhost")
PODMAN = os.path.join(ROOT, "tests", "simhost", "podman")
UNIT_REQUIREMENTS = os.path.join(ROOT, "tests", "unit", "requirements.txt")
# The pip releases that ansible-test 2.16 to 2.21 bootstrap their venvs with.
GET_PIP_VERSIONS = ("23.1.2", "24.2", "25.2")
CONTAINER_PYTHON = {"debian13": "3.13"}
# Wheels for the container's CPython; pip picks among these platform tags.
CONTAINER_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                       "manylinux1_x86_64", "linux_x86_64")
PIDS_LIMIT = "4096"


def log(msg):
    sys.stderr.write("matrix: %s\n" % msg)
    sys.stderr.flush()


# The file that run() also writes each command's output to: one per release,
# so that the failures can be shown again after the table (the end of a long
# log is all that some readers keep).
OUTPUT = {"path": None}
FAILURE_LINE = re.compile(r"FAILED|ERROR|Error|error:|Traceback|^E  ")
FAILURE_LINES = 40


def run(cmd, **kwargs):
    log("$ " + " ".join(cmd))
    if OUTPUT["path"] is None:
        return subprocess.run(cmd, check=False, **kwargs).returncode
    with open(OUTPUT["path"], "ab") as keep:
        keep.write(("$ %s\n" % " ".join(cmd)).encode())
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)
        for line in proc.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            keep.write(line)
        return proc.wait()


def output_size():
    try:
        return os.path.getsize(OUTPUT["path"]) if OUTPUT["path"] else 0
    except OSError:
        return 0


# How ansible-test names a command of its own that failed, and the commands that
# install packages (its pip bootstrap and its requirements).
FATAL_COMMAND = re.compile(r'^FATAL: Command "(.*)" returned exit status', re.MULTILINE)
INSTALL_COMMAND = re.compile(r"(^|[ /])pip[0-9.]*( |$)|-m pip |get_pip|requirements\.py")


def install_failed(start):
    """Whether a command that failed in what run() kept since byte ``start`` was a package install."""
    if not OUTPUT["path"]:
        return False
    with open(OUTPUT["path"], "rb") as handle:
        handle.seek(start)
        text = handle.read().decode("utf-8", "replace")
    commands = FATAL_COMMAND.findall(text)
    return any(INSTALL_COMMAND.search(command) for command in commands)


def failure_digest(path):
    """The lines of a release's output that name a failure, and its last lines."""
    try:
        with open(path, "rb") as handle:
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    named = [line for line in lines if FAILURE_LINE.search(line)]
    return named[-FAILURE_LINES:] + ["..."] + lines[-10:]


def must(cmd, **kwargs):
    code = run(cmd, **kwargs)
    if code != 0:
        log("failed (rc=%d): %s" % (code, " ".join(cmd)))
        sys.exit(code)


def read_versions():
    versions = []
    with open(VERSIONS_FILE) as handle:
        for line in handle:
            fields = line.split("#", 1)[0].split()
            if fields:
                versions.append((fields[0], fields[1]))
    return versions


def pick(versions, wanted):
    if not wanted:
        return versions
    chosen = []
    for want in wanted:
        matches = [entry for entry in versions
                   if entry[0] == want or entry[0].startswith(want + ".")]
        if not matches:
            log("no release %s in %s; known: %s" % (
                want, os.path.relpath(VERSIONS_FILE, ROOT), " ".join(entry[0] for entry in versions)))
            sys.exit(2)
        chosen.extend(match for match in matches if match not in chosen)
    return chosen


def tree_of(version):
    """Where ansible-test runs for this release: a copy of its own."""
    return os.path.join(MATRIX, version, "tree", "ansible_collections", "gpuops", "reclaim")


def copy_tree(version):
    """Tracked and new (not ignored) files, as scripts/collection-tree copies them."""
    tree = tree_of(version)
    tree_base = os.path.dirname(os.path.dirname(os.path.dirname(tree)))
    if os.path.isdir(tree_base):
        shutil.rmtree(tree_base)
    # A git repository of its own, so that ansible-test lists its files
    # instead of applying this repository's ignore rules (build/).
    copy_work_tree(ROOT, tree)
    # The stand-in NVML's own tests compile it against nvml.h, which the
    # testbed set-up unpacks into build/ (ignored, so not copied above).
    include = os.path.join(ROOT, "build", "simhost", "nvml-include")
    if os.path.isdir(include):
        shutil.copytree(include, os.path.join(tree, "build", "simhost", "nvml-include"))
    # ansible-test finds the containers.podman collection, if present, beside ours.
    podman_collection = os.path.join(ROOT, "build", "collections", "ansible_collections", "containers")
    if os.path.isdir(podman_collection):
        os.symlink(podman_collection, os.path.join(tree_base, "ansible_collections", "containers"))


def seed_get_pip(home):
    """ansible-test downloads a pip bootstrap script from a host that may be out
    of reach; its cache gets the stand-in that uses the standard library's pip."""
    cache = os.path.join(home, ".ansible", "test", "cache")
    os.makedirs(cache, exist_ok=True)
    for version in GET_PIP_VERSIONS:
        shutil.copy(GET_PIP_STAND_IN, os.path.join(cache, "get_pip_%s.py" % version.replace(".", "_")))


def python_version_of(python):
    return subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.strip()


def ansible_test_commands(tests, python):
    commands = []
    if "units" in tests:
        # The collection's own unit tests; those of the stand-in NVML
        # (tests/unit/simhost) do not depend on ansible-core, and make units runs them.
        commands.append(["units", "--venv", "--python", python, "--color", "no", "tests/unit/plugins/"])
    if "sanity" in tests:
        commands.append(["sanity", "--venv", "--python", python, "--color", "no"])
    return commands


# ---------------------------------------------------------------- on this machine

def run_on_host(version, tests):
    python = os.environ.get("PYTHON") or "python3"
    venv = os.path.join(MATRIX, version, "venv")
    marker = os.path.join(venv, ".installed-ansible-core-" + version)
    if not os.path.exists(marker):
        if os.path.isdir(venv):
            shutil.rmtree(venv)
        must([python, "-m", "venv", venv])
        must([os.path.join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check",
              "ansible-core==" + version])
        open(marker, "w").close()
    home = os.path.join(MATRIX, "home-host")
    seed_get_pip(home)
    env = dict(os.environ, HOME=home, ANSIBLE_HOME=os.path.join(home, ".ansible"),
               PATH=os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", ""))
    env.pop("ANSIBLE_COLLECTIONS_PATH", None)
    controller = python_version_of(os.path.join(venv, "bin", "python"))
    for command in ansible_test_commands(tests, controller):
        argv = [os.path.join(venv, "bin", "ansible-test")] + command
        start = output_size()
        code = run(argv, cwd=tree_of(version), env=env)
        if code != 0 and install_failed(start):
            # ansible-test installs its requirements from the package index on
            # this controller; a download that broke is tried once more.
            log("ansible-test could not install its requirements; once more")
            code = run(argv, cwd=tree_of(version), env=env)
        if code != 0:
            return code
    return 0


# ---------------------------------------------------------------- in a container

def core_wheel(wheels, version):
    for name in os.listdir(wheels):
        if name.startswith("ansible_core-%s-" % version) and name.endswith(".whl"):
            return os.path.join(wheels, name)
    return None


def fill_wheels(version, python):
    """Every wheel ansible-test installs for this release, for the container's
    CPython, downloaded once with pip on this machine."""
    wheels = os.path.join(MATRIX, "wheels-cp%s" % python.replace(".", ""))
    os.makedirs(wheels, exist_ok=True)
    with open(UNIT_REQUIREMENTS, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()[:12]
    marker = os.path.join(wheels, ".complete-%s-%s" % (version, digest))
    if os.path.exists(marker):
        return wheels
    target = ["--python-version", python, "--implementation", "cp", "--only-binary=:all:",
              "--dest", wheels, "--quiet", "--disable-pip-version-check"]
    for platform in CONTAINER_PLATFORMS:
        target += ["--platform", platform]
    # The project's venv has pip; the system Python may not.
    venv_pip = os.path.join(ROOT, ".venv", "bin", "pip")
    pip = ([venv_pip] if os.access(venv_pip, os.X_OK) else [sys.executable, "-m", "pip"]) + ["download"]
    must(pip + target + ["ansible-core==" + version, "pip==25.2"])
    wheel = core_wheel(wheels, version)
    requirements = os.path.join(MATRIX, version, "requirements")
    if os.path.isdir(requirements):
        shutil.rmtree(requirements)
    os.makedirs(requirements)
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name = info.filename
            if name.startswith("ansible_test/_data/requirements/") and name.endswith(".txt"):
                with archive.open(info) as src, \
                        open(os.path.join(requirements, os.path.basename(name)), "wb") as out:
                    shutil.copyfileobj(src, out)
    constraints = os.path.join(requirements, "constraints.txt")
    for name in sorted(os.listdir(requirements)):
        if name in ("constraints.txt", "windows-integration.txt"):
            continue
        must(pip + target + ["-c", constraints, "-r", os.path.join(requirements, name)])
    must(pip + target + ["-c", constraints, "-r", UNIT_REQUIREMENTS])
    open(marker, "w").close()
    return wheels


def container_image(controller):
    proc = subprocess.run([SIMHOST, "base", "--distribution", controller], check=False,
                          stdout=subprocess.PIPE, universal_newlines=True)
    if proc.returncode != 0:
        log("could not build the %s base image" % controller)
        sys.exit(proc.returncode)
    return proc.stdout.strip().splitlines()[-1]


def run_in_container(version, controller, tests):
    python = CONTAINER_PYTHON[controller]
    wheels = fill_wheels(version, python)
    image = container_image(controller)
    home = os.path.join(MATRIX, "home-" + controller)
    seed_get_pip(home)
    venv = os.path.join(MATRIX, version, "venv-" + controller)
    # ansible-test passes few environment variables to the pip it runs; the
    # container's site-wide pip configuration reaches every pip there.
    pip_conf = os.path.join(MATRIX, "pip-%s.conf" % controller)
    with open(pip_conf, "w") as handle:
        handle.write("[global]\nno-index = true\nfind-links = %s\n"
                     "disable-pip-version-check = true\n" % wheels)
    steps = [
        "set -e",
        'if [ ! -e "%s/.installed" ]; then rm -rf "%s"; python3 -m venv "%s"; '
        '"%s/bin/pip" install --quiet ansible-core==%s; touch "%s/.installed"; fi'
        % (venv, venv, venv, venv, version, venv),
        'export PATH="%s/bin:$PATH"' % venv,
    ]
    for command in ansible_test_commands(tests, python):
        steps.append("ansible-test " + " ".join(command))
    # As root on a host: tests make PID namespaces (unshare) and read other
    # processes' /proc files, as the simulated hosts allow.
    cmd = [PODMAN, "run", "--rm", "--network", "none", "--pids-limit", PIDS_LIMIT,
           "--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE",
           "--label", "io.gpuops.matrix=%s" % version,
           "--volume", "%s:%s" % (ROOT, ROOT), "--workdir", tree_of(version),
           "--env", "HOME=" + home, "--env", "ANSIBLE_HOME=%s/.ansible" % home,
           "--volume", "%s:/etc/pip.conf:ro" % pip_conf, "--env", "LC_ALL=C.UTF-8",
           image, "bash", "-c", "\n".join(steps)]
    return run(cmd)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--tests", default="units,sanity",
                        help="comma-separated: units, sanity (default both)")
    parser.add_argument("--ends", action="store_true",
                        help="only the oldest and the newest release (make test)")
    parser.add_argument("versions", nargs="*", help="releases or minors, e.g. 2.16 2.21")
    args = parser.parse_args()
    tests = set(args.tests.split(","))
    if not tests or tests - {"units", "sanity"}:
        parser.error("--tests takes units and/or sanity, got %r" % args.tests)
    chosen = pick(read_versions(), args.versions)
    if args.ends:
        chosen = [chosen[0], chosen[-1]] if len(chosen) > 1 else chosen
    results = []
    for version, controller in chosen:
        copy_tree(version)
        started = time.time()
        log("=== ansible-core %s on %s: %s" % (version, controller, ", ".join(sorted(tests))))
        OUTPUT["path"] = os.path.join(MATRIX, version, "output.log")
        os.makedirs(os.path.dirname(OUTPUT["path"]), exist_ok=True)
        open(OUTPUT["path"], "w").close()
        if controller == "host":
            code = run_on_host(version, tests)
        elif controller in CONTAINER_PYTHON:
            code = run_in_container(version, controller, tests)
        else:
            log("unknown controller %r for %s in %s" % (controller, version, VERSIONS_FILE))
            code = 2
        results.append((version, controller, code, time.time() - started))
        OUTPUT["path"] = None
    for version, controller, code, seconds in results:
        if code != 0:
            print("\n=== ansible-core %s on %s failed; from build/matrix/%s/output.log:" % (version, controller, version))
            print("\n".join(failure_digest(os.path.join(MATRIX, version, "output.log"))))
    print("ansible-core  controller  tests         result  seconds")
    for version, controller, code, seconds in results:
        print("%-12s  %-10s  %-12s  %-6s  %.0f" % (
            version, controller, "+".join(sorted(tests)), "passed" if code == 0 else "FAILED", seconds))
    sys.exit(0 if all(result[2] == 0 for result in results) else 1)


if __name__ == "__main__":
    main()
