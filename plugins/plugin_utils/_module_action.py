# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The action behind a module that may wait long: it runs the module as Ansible would, with a heartbeat.

Check mode, diff mode and ``async`` (when a task sets it) behave as for any
module. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import ansible
from ansible import constants as C
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import module_utils_loader
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._frozen_heap import frozen_heap
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._heartbeat import Heartbeat
from ansible_collections.gpuops.reclaim.plugins.plugin_utils import _payload_cache

display = Display()


def _to_stderr(line):
    display.display(line, stderr=True)


_PLUGINS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ANSIBLE = os.path.dirname(os.path.abspath(ansible.__file__))


class _KeptPayload:
    """The module's payload kept between runs (plugin_utils/_payload_cache.py); every failure means: build it as usual."""

    def __init__(self, module_name):
        self.module_name = module_name
        self.prefix = 'ansible_collections.gpuops.reclaim.plugins.modules.%s-' % module_name
        self.key = self.run_cache = None
        try:
            self.home = getattr(C, 'ANSIBLE_HOME', None) or os.path.expanduser('~/.ansible')
            self.run_cache = os.path.join(C.DEFAULT_LOCAL_TMP, 'ansiballz_cache')
            self.key = self._key()
            _payload_cache.restore(os.path.join(self.home, *self._parts()), self.run_cache, self.prefix)
        except Exception as error:  # pylint: disable=broad-except
            # Whatever goes wrong here, Ansible builds the payload itself.
            display.vvvv('gpuops.reclaim: building the payload of %s (none kept: %s)' % (module_name, error))
            self.key = None

    def _parts(self):
        return ['gpuops.reclaim', 'payloads', self.module_name, self.key]

    def _key(self):
        # Folders of module_utils that Ansible searches besides its own (ANSIBLE_MODULE_UTILS, a playbook's or a
        # role's module_utils) can shadow what it packs: they count too. Without that list, nothing is kept.
        own = os.path.realpath(os.path.join(_ANSIBLE, 'module_utils'))
        shadows = [path for path in module_utils_loader._get_paths()  # pylint: disable=protected-access
                   if not (os.path.realpath(path) + os.sep).startswith(own + os.sep)]
        return _payload_cache.payload_key(
            os.path.join(_PLUGINS, 'modules', self.module_name + '.py'), [os.path.join(_PLUGINS, 'module_utils')],
            [os.path.join(_ANSIBLE, 'module_utils'), os.path.join(_ANSIBLE, '_internal')] + shadows,
            [os.path.join(_ANSIBLE, 'executor', 'module_common.py'),
             os.path.join(_ANSIBLE, 'config', 'ansible_builtin_runtime.yml')], ansible.__version__)

    def keep(self):
        if not self.key:
            return
        try:
            # Changed while this run used it: the payload Ansible built is not the one of the new key.
            if self._key() == self.key:
                _payload_cache.keep(self.home, self._parts(), self.run_cache, self.prefix)
        except Exception as error:  # pylint: disable=broad-except
            display.vvvv('gpuops.reclaim: the payload was not kept: %s' % error)


class WaitingModuleAction(ActionBase):
    """Subclasses set ``what``: a function of the task's arguments that says what the module waits for."""

    what = None

    def run(self, tmp=None, task_vars=None):
        self._supports_check_mode = True
        self._supports_async = True
        result = super(WaitingModuleAction, self).run(tmp, task_vars)
        del tmp
        wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
        host = (task_vars or {}).get('inventory_hostname') or self._play_context.remote_addr
        what = self.what(self._task.args or {})
        # On stderr, as Ansible's warnings: a callback that writes results to stdout stays readable.
        payload = _KeptPayload((self._task.resolved_action or self._task.action).rsplit('.', 1)[-1])
        with frozen_heap(), Heartbeat(_to_stderr, host, what):
            result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
        payload.keep()
        if not wrap_async:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result
