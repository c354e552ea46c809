"""Print one JSON snapshot of a simulated GPU host, for the release scenario.

  snapshot.py [CURSOR]

- processes: every process of the host but this one and its ancestors, with
  pid, ppid, create_time, status, title and key ("pid@start", the start in
  clock ticks since boot from /proc/PID/stat, which stays the same while
  create_time moves with the boot time the kernel derives from the wall
  clock), so that two snapshots show whether a process went away, was
  replaced under its pid, or was stopped;
- cursor: the journal cursor of the last entry read (or of the newest entry
  when no CURSOR is given), to pass to the next snapshot;
- signals: the "sent SIG... to pid N ..." lines that gpu_reclaim logged after
  CURSOR, each journal entry counted in exactly one snapshot.

Reads only: it signals nothing.
"""
import json
import os
import subprocess
import sys

import psutil

IDENTIFIER = "ansible-gpuops.reclaim.gpu_reclaim"


def own_lineage():
    pids = set()
    pid = os.getpid()
    while pid and pid not in pids:
        pids.add(pid)
        try:
            pid = psutil.Process(pid).ppid()
        except psutil.Error:
            break
    return pids


def start_ticks(pid):
    """Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def processes():
    own = own_lineage()
    found = []
    for proc in psutil.process_iter(["pid", "ppid", "create_time", "status", "cmdline", "name"]):
        info = proc.info
        start = start_ticks(info["pid"])
        if info["pid"] in own or info["create_time"] is None or start is None:
            continue
        title = " ".join(info["cmdline"] or []) or info["name"] or ""
        found.append({
            "pid": info["pid"],
            "ppid": info["ppid"],
            "create_time": info["create_time"],
            "status": info["status"],
            "title": title,
            "key": "%d@%d" % (info["pid"], start),
        })
    return sorted(found, key=lambda entry: entry["pid"])


def journal(cursor):
    argv = ["journalctl", "--no-pager", "-q", "-o", "json"]
    argv += ["--after-cursor", cursor] if cursor else ["-n", "1"]
    out = subprocess.run(argv, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    signals = []
    for line in out.splitlines():
        entry = json.loads(line)
        cursor = entry["__CURSOR"]
        message = entry.get("MESSAGE")
        if not isinstance(message, str):
            continue
        if entry.get("SYSLOG_IDENTIFIER") == IDENTIFIER and message.startswith("sent "):
            signals.append(message)
    return cursor, signals


def main():
    given = sys.argv[1] if len(sys.argv) > 1 else ""
    cursor, signals = journal(given)
    print(json.dumps({"processes": processes(), "cursor": cursor,
                      "signals": signals if given else []}, sort_keys=True))


if __name__ == "__main__":
    main()
