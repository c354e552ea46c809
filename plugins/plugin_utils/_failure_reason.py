# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Why a run of the role failed, said as the operator's next step.

The first task that reaches a host (the first look, or the release when it is
also the first look) fails when the role lacks root, when the modules'
libraries are missing or when NVML cannot be used; each says what to do. Any
other failure keeps its own message. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Ansible's missing_required_lib() text names the library in parentheses.
_LIBRARY = re.compile(r'required Python library \(([^)]+)\)')
HUNG_DRIVER = 'Only for a host whose driver is hung, set gpu_reclaim_require_nvml: false'

NOT_ROOT = ('{host}: the role runs as uid {uid}, not root, and needs root to release other users\' processes and to '
            'stop, harden, reset or install anything. Run the playbook with -b (--become) or set ansible_become: '
            'true for this host, with root as the become user; set gpu_reclaim_require_root: false to release only '
            'that user\'s own processes.')
NO_LIBRARY = ('{host}: the Python library {library} is missing from the target\'s Python ({python}), and the modules '
              'need it. Set gpu_reclaim_install_dependencies: true to install it (psutil from the distribution\'s '
              'packages, nvidia-ml-py into the virtualenv {venv}), or install it yourself.')
NO_NVML = ('{host}: NVML cannot be used, so GPU memory cannot be read and the GPUs cannot be proven free. {msg} '
           + HUNG_DRIVER + ': the release then works from /proc alone.')


def failure_reason(failed, host, python, venv, needs_root):
    """The message for the failed task's result ``failed`` on ``host``."""
    msg = (failed.get('msg') or '').strip()
    uid = failed.get('uid')
    if needs_root and uid is not None and uid != 0:
        return NOT_ROOT.format(host=host, uid=uid)
    library = _LIBRARY.search(msg)
    if library:
        text = NO_LIBRARY.format(host=host, library=library.group(1), python=python, venv=venv)
        if library.group(1) == 'nvidia-ml-py':
            text += ' ' + HUNG_DRIVER + ' to go on without NVML.'
        return text
    if failed.get('nvml_available') is False:
        return NO_NVML.format(host=host, msg=msg)
    return msg or '%s: a stage failed; see the task above' % host
