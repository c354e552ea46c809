# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kill_mid_grace.py SUPERVISOR_PID SIGNAL|none

Waits until the release froze SUPERVISOR_PID, finds the module (the parent of
its guardian), sends it SIGNAL (or, with none, waits for something else to
kill it), and prints as JSON how long after the module's death the
supervisor was running again.
"""
import json
import os
import signal
import sys
import time


def state(pid):
    try:
        with open('/proc/%d/stat' % pid) as handle:
            fields = handle.read().rpartition(')')[2].split()
        return fields[0], int(fields[1])
    except (OSError, ValueError):
        return None, None


def guardian():
    # By its stat and cmdline only: no process on this host blocks its readers now.
    for name in os.listdir('/proc'):
        if name.isdigit():
            try:
                with open('/proc/%s/cmdline' % name, 'rb') as handle:
                    if b'gpuops-reclaim-guardian' in handle.read():
                        return int(name)
            except OSError:
                continue
    return None


def wait(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            print(json.dumps({'error': what}))
            sys.exit(1)
        time.sleep(0.005)


def main():
    supervisor, how = int(sys.argv[1]), sys.argv[2]
    wait(lambda: state(supervisor)[0] == 'T', 30, 'the supervisor was never frozen')
    deadline = time.monotonic() + 5
    watcher = guardian()
    while watcher is None and time.monotonic() < deadline:
        time.sleep(0.01)
        watcher = guardian()
    if watcher is None:
        print(json.dumps({'error': 'no guardian'}))
        sys.exit(1)
    module = state(watcher)[1]
    if how != 'none':
        os.kill(module, getattr(signal, how))
    wait(lambda: state(module)[0] in (None, 'Z'), 60, 'the module did not die')
    died = time.monotonic()
    wait(lambda: state(supervisor)[0] != 'T', 10, 'the supervisor stayed frozen')
    print(json.dumps({'module': module, 'guardian': watcher, 'signal': how,
                      'supervisor_state': state(supervisor)[0],
                      'thawed_after_seconds': round(time.monotonic() - died, 3)}))


if __name__ == '__main__':
    main()
