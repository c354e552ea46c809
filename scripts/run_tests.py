"""Run every test of `make test` after the set-up, several at a time.

    python3 scripts/run_tests.py [--jobs N] [--only NAME[,NAME...]] [--list]

The set-up (venv, collection tree, simulated-host images, shellcheck, the
ansible-test bootstrap stand-in) has run before, serially, in `make test`.
What is left is a list of independent jobs: the unit tests, sanity, lint, the
packaging checks, the version matrix, the bench tools and one job per molecule
scenario. Most of their time is waiting (on grace and settle windows, on
systemd, on SSH round trips), so a 2-core machine runs three at once.

Jobs that share a resource run in one job, one after the other:
- `incident` and its Debian 13 run use hosts of the same name;
- `docs` and `build` both write build/dist.

Each job's output goes to build/test-logs/NAME.log; this prints one line when
a job starts and one when it ends, with its time, and at the end the tail of
every failed job's log and a table of all jobs. The slowest jobs start first,
by the durations of the last run (build/test-logs/durations.json), else by the
estimates below. A job that runs past --job-timeout is stopped (its whole
session) and fails. The exit status is 1 when any job failed.
Python 3 standard library only.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
LOGS = os.path.join(ROOT, "build", "test-logs")
DURATIONS = os.path.join(LOGS, "durations.json")
SCENARIOS = os.path.join(ROOT, "extensions", "molecule")
# Seconds of one busy run on a 2-core machine, for the order of a first run
# only (the containers host image and the Debian 13 images build inside their
# jobs the first time).
ESTIMATES = {"matrix": 880, "sanity": 300, "lint": 135, "units": 95, "packaging": 40, "bench-tests": 5,
             "molecule-containers": 420, "molecule-release": 385, "molecule-stuck": 330,
             "molecule-incident": 300, "molecule-fleet": 195, "molecule-hostsetup": 190,
             "molecule-holders": 190, "molecule-faults": 175, "molecule-testbed": 175}
SCENARIO_ESTIMATE = 130
TAIL_LINES = 80


def scenarios():
    names = []
    for name in sorted(os.listdir(SCENARIOS)):
        if os.path.isfile(os.path.join(SCENARIOS, name, "molecule.yml")):
            names.append(name)
    return names


def make(*targets):
    return ["make", "--no-print-directory"] + list(targets)


def jobs():
    """(name, argv) of every job."""
    found = [
        ("units", make("units")),
        ("sanity", make("sanity")),
        ("lint", make("lint")),
        ("packaging", make("docs", "build")),
        ("matrix", make("matrix-test")),
        ("bench-tests", make("bench-tests")),
    ]
    for name in scenarios():
        if name == "incident":
            found.append(("molecule-incident", make("molecule", "SCENARIOS=incident", "molecule-debian13")))
        else:
            found.append(("molecule-" + name, make("molecule", "SCENARIOS=" + name)))
    return found


def load_durations():
    try:
        with open(DURATIONS) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def estimate(name, durations):
    if name in durations:
        return durations[name]
    return ESTIMATES.get(name, SCENARIO_ESTIMATE)


class Runner:
    def __init__(self, selected, width, timeout):
        self.pending = list(selected)
        self.width = width
        self.timeout = timeout
        self.lock = threading.Lock()
        self.results = {}
        self.started = time.monotonic()
        self.live = {}
        self.stopping = False

    def say(self, text):
        with self.lock:
            sys.stdout.write("[%5.0f s] %s\n" % (time.monotonic() - self.started, text))
            sys.stdout.flush()

    def take(self):
        with self.lock:
            if not self.pending or self.stopping:
                return None
            return self.pending.pop(0)

    def stop(self, signum, frame):
        """On SIGINT or SIGTERM: start nothing more, and stop every running job with all it started."""
        with self.lock:
            self.stopping = True
            self.pending = []
            live = list(self.live.values())
        for proc in live:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass

    def work(self):
        env = dict(os.environ, GPUOPS_SETUP_DONE="1")
        while True:
            job = self.take()
            if job is None:
                return
            name, argv = job
            path = os.path.join(LOGS, name + ".log")
            self.say("start %s" % name)
            begun = time.monotonic()
            with open(path, "w") as log:
                # A session of its own, so that a job past its time is stopped with all it started.
                proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                with self.lock:
                    self.live[name] = proc
                try:
                    code = proc.wait(timeout=self.timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                    log.write("\nrun_tests: stopped after %d s, the limit of one job\n" % self.timeout)
                    code = 124
            seconds = time.monotonic() - begun
            with self.lock:
                self.live.pop(name, None)
                self.results[name] = (code, seconds)
            self.say("%s %s in %.0f s%s" % ("pass" if code == 0 else "FAIL", name, seconds,
                                            "" if code == 0 else " (log: build/test-logs/%s.log)" % name))

    def run(self):
        threads = [threading.Thread(target=self.work) for unused in range(self.width)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.monotonic() - self.started


def tail(path, lines):
    with open(path, errors="replace") as handle:
        return handle.readlines()[-lines:]


def default_width():
    """The CPUs this process may use, plus one, between 2 and 6."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return min(6, max(2, cpus + 1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS", default_width())),
                        help="jobs at once (default TEST_JOBS, else the usable CPUs plus one, 2 to 6)")
    parser.add_argument("--job-timeout", type=int, default=1800,
                        help="seconds one job may run before it is stopped and fails (default 1800)")
    parser.add_argument("--only", default="", help="comma-separated job names")
    parser.add_argument("--list", action="store_true", help="print the job names and exit")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1, got %d" % args.jobs)

    everything = jobs()
    if args.list:
        for name, command in everything:
            print("%-24s %s" % (name, " ".join(command)))
        return 0
    selected = everything
    if args.only:
        wanted = [name for name in args.only.split(",") if name]
        known = {job[0] for job in everything}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            parser.error("--only names no job: %s (see --list)" % ", ".join(unknown))
        selected = [job for job in everything if job[0] in wanted]

    os.makedirs(LOGS, exist_ok=True)
    durations = load_durations()
    selected.sort(key=lambda job: -estimate(job[0], durations))
    runner = Runner(selected, args.jobs, args.job_timeout)
    signal.signal(signal.SIGINT, runner.stop)
    signal.signal(signal.SIGTERM, runner.stop)
    print("%d jobs, %d at a time; logs in build/test-logs/" % (len(selected), args.jobs))
    sys.stdout.flush()
    wall = runner.run()

    for name, (code, seconds) in runner.results.items():
        if code == 0:
            durations[name] = round(seconds, 1)
    with open(DURATIONS, "w") as handle:
        json.dump(durations, handle, indent=1, sort_keys=True)

    names = [job[0] for job in selected]
    failed = [name for name in names if runner.results.get(name, (1, 0))[0] != 0]
    for name in failed:
        path = os.path.join(LOGS, name + ".log")
        print("\n===== %s failed; the last %d lines of build/test-logs/%s.log:" % (name, TAIL_LINES, name))
        sys.stdout.writelines(tail(path, TAIL_LINES))
    print("\n%-24s %8s  %s" % ("job", "seconds", "result"))
    for name in names:
        code, seconds = runner.results.get(name, (1, 0.0))
        print("%-24s %8.0f  %s" % (name, seconds, "pass" if code == 0 else "FAIL (exit %d)" % code))
    print("%d of %d jobs passed in %.0f s of wall time" % (len(selected) - len(failed), len(selected), wall))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
