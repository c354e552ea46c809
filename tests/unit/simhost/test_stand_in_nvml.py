# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The simulated hosts' stand-in NVML against nvml.h and the real pynvml.

Builds tests/simhost/nvml/nvml_sim.c with the nvml.h that
``tests/simhost/simhost setup`` extracted, and checks that:
- every C function pynvml resolves for the calls the modules make exists;
- the structs pynvml passes have the sizes nvml.h gives them;
- without /dev/nvidiactl, initialisation fails as "driver not loaded".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import inspect
import os
import re
import shutil
import subprocess

import pytest

pynvml = pytest.importorskip('pynvml')

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
SOURCE = os.path.join(REPO, 'tests', 'simhost', 'nvml', 'nvml_sim.c')
INCLUDE = os.path.join(REPO, 'build', 'simhost', 'nvml-include')
PRODUCT_NVML = os.path.join(REPO, 'plugins', 'module_utils', '_host', 'nvml.py')

pytestmark = pytest.mark.skipif(
    not (shutil.which('gcc') and os.path.exists(os.path.join(INCLUDE, 'nvml.h'))),
    reason='needs gcc and nvml.h (tests/simhost/simhost setup)')


@pytest.fixture(scope='module')
def library(tmp_path_factory):
    out = str(tmp_path_factory.mktemp('nvml') / 'libnvidia-ml.so.1')
    subprocess.check_call(['gcc', '-O2', '-Wall', '-Wextra', '-Werror', '-fPIC', '-shared',
                           '-I', INCLUDE, '-Wl,-soname,libnvidia-ml.so.1', '-o', out, SOURCE])
    return out


def exported(path):
    text = subprocess.check_output(['nm', '-D', '--defined-only', path],
                                   universal_newlines=True)
    return {line.split()[-1] for line in text.splitlines() if ' T ' in line}


def resolved_symbols(name, seen=None):
    """The C functions a pynvml wrapper looks up, following wrappers it calls."""
    seen = set() if seen is None else seen
    if name in seen or not hasattr(pynvml, name):
        return set()
    seen.add(name)
    function = getattr(pynvml, name)
    function = getattr(function, '__wrapped__', function)
    try:
        source = inspect.getsource(function)
    except (TypeError, OSError):
        return set()
    symbols = set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', source))
    body = source.split(':', 1)[1] if ':' in source else source
    for called in set(re.findall(r'\b(nvml\w+)\(', body)) - {name}:
        symbols |= resolved_symbols(called, seen)
    return symbols


def product_calls():
    if not os.path.exists(PRODUCT_NVML):
        pytest.skip('plugins/module_utils/_host/nvml.py is not there')
    with open(PRODUCT_NVML) as handle:
        names = set(re.findall(r'\b(nvml[A-Z]\w+)', handle.read()))
    return sorted(name for name in names if callable(getattr(pynvml, name, None)))


def test_every_function_the_modules_call_resolves(library):
    symbols = exported(library)
    missing = {}
    for name in product_calls():
        lacking = resolved_symbols(name) - symbols
        if lacking:
            missing[name] = sorted(lacking)
    assert missing == {}


@pytest.mark.parametrize('symbol', [
    'nvmlInit_v2', 'nvmlInitWithFlags', 'nvmlShutdown', 'nvmlErrorString',
    'nvmlSystemGetDriverVersion', 'nvmlSystemGetNVMLVersion', 'nvmlDeviceGetCount_v2',
    'nvmlDeviceGetHandleByIndex_v2', 'nvmlDeviceGetName', 'nvmlDeviceGetUUID',
    'nvmlDeviceGetMinorNumber', 'nvmlDeviceGetPciInfo_v3', 'nvmlDeviceGetMemoryInfo',
    'nvmlDeviceGetMemoryInfo_v2', 'nvmlDeviceGetComputeRunningProcesses_v3',
    'nvmlDeviceGetComputeRunningProcesses_v2', 'nvmlDeviceGetGraphicsRunningProcesses_v3',
    'nvmlDeviceGetGraphicsRunningProcesses_v2', 'nvmlDeviceGetMPSComputeRunningProcesses_v3',
    'nvmlDeviceGetPersistenceMode', 'nvmlDeviceGetDisplayActive', 'nvmlDeviceGetMigMode',
    'nvmlDeviceGetIndex',
])
def test_documented_symbols_exist(library, symbol):
    assert symbol in exported(library)


def test_struct_sizes_match_nvml_h(tmp_path):
    program = tmp_path / 'sizes.c'
    program.write_text(
        '#include <stdio.h>\n#include <nvml.h>\n'
        'int main(void) { printf("%zu %zu %zu %zu %u\\n", sizeof(nvmlMemory_t), '
        'sizeof(nvmlMemory_v2_t), sizeof(nvmlProcessInfo_t), sizeof(nvmlPciInfo_t), '
        '(unsigned)nvmlMemory_v2); return 0; }\n')
    binary = str(tmp_path / 'sizes')
    subprocess.check_call(['gcc', '-I', INCLUDE, '-o', binary, str(program)])
    sizes = [int(value) for value in subprocess.check_output([binary]).split()]
    assert sizes == [
        ctypes.sizeof(pynvml.c_nvmlMemory_t),
        ctypes.sizeof(pynvml.c_nvmlMemory_v2_t),
        ctypes.sizeof(pynvml.c_nvmlProcessInfo_v3_t),
        ctypes.sizeof(pynvml.nvmlPciInfo_t),
        pynvml.nvmlMemory_v2,
    ]


@pytest.mark.skipif(os.path.exists('/dev/nvidiactl'), reason='this machine has an NVIDIA driver')
def test_without_device_nodes_the_driver_is_not_loaded(library):
    nvml = ctypes.CDLL(library)
    nvml.nvmlErrorString.restype = ctypes.c_char_p
    assert nvml.nvmlInit_v2() == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert nvml.nvmlErrorString(pynvml.NVML_ERROR_DRIVER_NOT_LOADED) == b'Driver Not Loaded'
    count = ctypes.c_uint(7)
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == pynvml.NVML_ERROR_UNINITIALIZED
