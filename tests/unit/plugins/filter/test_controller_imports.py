# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The controller loads every filter file of the collection once per run, before its first task: what they
import is paid by every playbook. The host's libraries (psutil, NVML's binding) are not among it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

FILTERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..', 'plugins', 'filter')

CODE = r'''
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module('ansible_collections.gpuops.reclaim.plugins.filter.' + name)
print(json.dumps(sorted(name for name in sys.modules if name.split('.')[0] in ('psutil', 'pynvml'))))
'''


def test_the_filters_import_none_of_the_hosts_libraries():
    names = sorted(name[:-3] for name in os.listdir(FILTERS) if name.endswith('.py') and name != '__init__.py')
    assert 'fleet_summary' in names and 'role_plan' in names
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    proc = subprocess.run([sys.executable, '-c', CODE] + names, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env, universal_newlines=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
