# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether the controller is still there: a parent that ends, an output nobody reads, with real processes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys
import time

from ansible_collections.gpuops.reclaim.plugins.module_utils._host.controller import ControllerWatch, output_closed


def test_a_parent_that_changes_is_a_controller_gone():
    parents = [4242]
    watch = ControllerWatch(getppid=lambda: parents[0])
    assert watch.gone() is None
    parents[0] = 1
    assert watch.gone() == ("the controller went away: the module's parent (PID 4242) ended and it now has PID 1 "
                            "as parent")


def test_a_parent_that_was_pid_1_cannot_tell(tmp_path):
    with open(str(tmp_path / 'out'), 'w') as out:
        watch = ControllerWatch(output_fd=out.fileno(), getppid=lambda: 1)
        assert not watch.can_tell and watch.gone() is None


def test_an_output_nobody_reads_is_closed():
    reader, writer = os.pipe()
    try:
        assert not output_closed(writer)
        watch = ControllerWatch(output_fd=writer, getppid=lambda: 1)
        assert watch.can_tell and watch.gone() is None
        os.close(reader)
        reader = None
        assert output_closed(writer)
        assert watch.gone() == "the controller went away: nothing reads the module's output any more"
    finally:
        os.close(writer)
        if reader is not None:
            os.close(reader)


def test_a_file_is_never_a_closed_output(tmp_path):
    with open(str(tmp_path / 'result.json'), 'w') as out:
        assert not output_closed(out.fileno())
        assert not ControllerWatch(output_fd=out.fileno()).output_watched


# The module's shell dies (a dropped connection): a real child sees its parent change within a poll.
WATCHER = ('import os, sys, time\n'
           'from ansible_collections.gpuops.reclaim.plugins.module_utils._host.controller import ControllerWatch\n'
           'watch = ControllerWatch(output_fd=2)\n'
           'print("ready", flush=True)\n'
           'deadline = time.monotonic() + 20\n'
           'while time.monotonic() < deadline:\n'
           '    reason = watch.gone()\n'
           '    if reason:\n'
           # Written whole, then renamed: the test never reads a file half written.
           '        open(sys.argv[1] + ".tmp", "w").write(reason)\n'
           '        os.rename(sys.argv[1] + ".tmp", sys.argv[1])\n'
           '        break\n'
           '    time.sleep(0.02)\n')


def test_a_real_module_sees_its_shell_die(tmp_path):
    report = str(tmp_path / 'reason')
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    shell = subprocess.Popen(['/bin/sh', '-c', '"$0" -c "$1" "$2" & wait', sys.executable, WATCHER, report],
                             stdout=subprocess.PIPE, env=environment)
    try:
        assert shell.stdout.readline() == b'ready\n'
        shell.kill()
        shell.wait()
        deadline = time.monotonic() + 10
        while not os.path.exists(report) and time.monotonic() < deadline:
            time.sleep(0.02)
        text = open(report).read()
        assert text.startswith("the controller went away: the module's parent (PID %d) ended" % shell.pid)
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
        shell.stdout.close()
