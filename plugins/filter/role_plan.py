# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in role_settings.yml, role_plan.yml and role_summary.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import names, result
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import host_summary
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._role_plan import (
    role_plan as _role_plan, role_settings as _role_settings, role_summary_run)

STATE_KEYS = ('host', 'check_mode', 'variables', 'settings', 'results')


def role_settings(variables, run_tags=None, skip_tags=None, check_mode=False, interpreter=None):
    return _role_settings(result('role_settings', 'the variables', variables),
                          names('role_settings', 'run_tags', run_tags, 'tags') or ['all'],
                          names('role_settings', 'skip_tags', skip_tags, 'tags'), bool(check_mode), interpreter)


def _state(name, state):
    state = result(name, 'the state', state)
    missing = [key for key in STATE_KEYS if key not in state]
    if missing:
        raise TypeError('%s: the state lacks %s' % (name, ', '.join(missing)))
    state['variables'] = result(name, 'variables', state['variables'])
    state['settings'] = result(name, 'settings', state['settings'])
    state['results'] = dict((key, result(name, 'results.%s' % key, value))
                            for key, value in result(name, 'results', state['results']).items())
    return state


def role_plan(state):
    try:
        return _role_plan(_state('role_plan', state))
    except (KeyError, ValueError) as exc:
        raise TypeError('role_plan: %s' % (exc,))


def role_summary(state, start, now):
    state = _state('role_summary', state)
    try:
        return host_summary(role_summary_run(state, _role_plan(state), float(start), float(now)))
    except (KeyError, ValueError) as exc:
        raise TypeError('role_summary: %s' % (exc,))


class FilterModule(object):
    def filters(self):
        return {'role_settings': role_settings, 'role_plan': role_plan, 'role_summary': role_summary}
