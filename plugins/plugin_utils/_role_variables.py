# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The role's variables, checked before its first task reaches a host.

``variable_errors(values, argument_specs)`` gives every error in the
``gpu_reclaim_*`` variables of one host, each naming the variable and the
value:

- a name the role does not know (``gpu_reclaim_scope_user``), with the
  nearest known name: a typo must not quietly widen the scope;
- every bound the modules apply to the value they will be given (the same
  functions, so a bound is changed in one place): seconds, the settle
  window, the poll interval, NVML's deadline, ``max_used_mib``, the ladder,
  the scope filters, list entries and globs, and the protection options
  against each other.

The known names are the options of every entry point of
``meta/argument_specs.yml``, plus the fact the role sets itself. Controller
side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
from collections.abc import Mapping

from ansible_collections.gpuops.reclaim.plugins.module_utils._base.checks import InputError, check_entries, check_globs
from ansible_collections.gpuops.reclaim.plugins.module_utils._base.checks import to_seconds
from ansible_collections.gpuops.reclaim.plugins.module_utils._base.checks import (
    MAX_WAIT_SECONDS,
    EscalationError,
    SettleError,
    check_poll_interval,
    check_seconds,
    check_settle_seconds,
    check_timeout,
)
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.ladder import parse_ladder
from ansible_collections.gpuops.reclaim.plugins.module_utils._plan.plan import build_scope
from ansible_collections.gpuops.reclaim.plugins.module_utils._proof.verdict import ProofError, check_limits
from ansible_collections.gpuops.reclaim.plugins.module_utils._discover.protection import (
    ProtectionError,
    check_protection_options,
)
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import truth

PREFIX = 'gpu_reclaim_'
# Public variables the role sets itself: a later run in the same play sees them.
ROLE_FACTS = ('gpu_reclaim_summary',)

# Variables in seconds, each with the bounds of the option that receives it: (name, minimum, maximum, above).
# ``above`` means the minimum itself is refused.
SECONDS = (
    ('gpu_reclaim_grace_seconds', 0.0, MAX_WAIT_SECONDS, False),
    ('gpu_reclaim_kill_seconds', 0.0, MAX_WAIT_SECONDS, True),
    ('gpu_reclaim_assert_timeout', 0.0, MAX_WAIT_SECONDS, False),
    ('gpu_reclaim_lock_timeout', 0.0, MAX_WAIT_SECONDS, False),
    ('gpu_reclaim_reset_timeout', 0.0, MAX_WAIT_SECONDS, True),
    ('gpu_reclaim_container_stop_seconds', 0.0, MAX_WAIT_SECONDS, False),
    ('gpu_reclaim_harden_timeout_stop_seconds', 0.0, MAX_WAIT_SECONDS, True),
)
# Seconds that go to a command line or a drop-in, which take whole numbers.
WHOLE_SECONDS = ('gpu_reclaim_reset_timeout', 'gpu_reclaim_container_stop_seconds',
                 'gpu_reclaim_harden_timeout_stop_seconds')

# Lists whose entries are shell-style globs; every other list only must have no empty entry.
GLOBS = ('gpu_reclaim_protect', 'gpu_reclaim_protect_units', 'gpu_reclaim_unprotect',
         'gpu_reclaim_scope_systemd_units', 'gpu_reclaim_stop_units', 'gpu_reclaim_harden_units')

# The scope filters, as gpu_reclaim's options.
SCOPE = (('users', 'gpu_reclaim_scope_users'), ('match', 'gpu_reclaim_scope_match'),
         ('systemd_units', 'gpu_reclaim_scope_systemd_units'), ('containers', 'gpu_reclaim_scope_containers'),
         ('kinds', 'gpu_reclaim_scope_kinds'), ('on_shared_holder', 'gpu_reclaim_on_shared_holder'))

PROTECTION_NAMES = dict(protect='gpu_reclaim_protect', protect_units='gpu_reclaim_protect_units',
                        unprotect='gpu_reclaim_unprotect',
                        unprotect_all_confirmed='gpu_reclaim_unprotect_all_confirmed')


class VariableError(ValueError):
    """One bad variable: the message names it and the value."""


def _options(argument_specs):
    """(name, spec) of every option of every entry point of ``argument_specs`` (``meta/argument_specs.yml``)."""
    if isinstance(argument_specs, Mapping) and 'argument_specs' in argument_specs:
        argument_specs = argument_specs['argument_specs']
    if not isinstance(argument_specs, Mapping):
        raise TypeError('role_variable_errors: argument_specs must be the mapping of meta/argument_specs.yml; '
                        'got: %s' % type(argument_specs).__name__)
    for entry_point in argument_specs.values():
        for name, spec in ((entry_point or {}).get('options') or {}).items():
            yield name, spec or {}


def known_variables(argument_specs):
    """The option names of every entry point of ``argument_specs``, and the role's own facts."""
    return set(ROLE_FACTS) | set(name for name, spec in _options(argument_specs))


def list_variables(argument_specs):
    """The option names of type list of every entry point of ``argument_specs``."""
    return set(name for name, spec in _options(argument_specs) if spec.get('type') == 'list')


def _kind(value):
    # Ansible hands its values on in subclasses of the plain types (tagged strings and the like).
    for kind, word in ((bool, 'boolean'), (str, 'string'), (Mapping, 'mapping'), (int, 'number'), (float, 'number')):
        if isinstance(value, kind):
            return word
    return type(value).__name__


def _plain(value):
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def not_lists(values, names):
    """A line for each of ``names`` whose value in ``values`` is set and is not a list.

    Role argument validation takes a string for a list and splits it at its commas, but the role reads
    the variable itself too, and a string is no list of names there: given as ``-e name=value`` (or a
    survey's text answer), ``vllm-*.service`` must not become the patterns ``v``, ``l``, ..., ``*``, one
    of which matches every unit. So a list must be given as one."""
    lines = []
    for name in sorted(names):
        value = values.get(name)
        if value is None or isinstance(value, (list, tuple)):
            continue
        lines.append('%s: must be a list, such as ["vllm.service"]; got the %s %r. On the command line, give it as '
                     'JSON: -e \'{"%s": [...]}\'' % (name, _kind(value), _plain(value), name))
    return lines


def unknown_variables(names, known):
    """A line for each of ``names`` that starts with ``gpu_reclaim_`` and is not ``known``, with the nearest
    known name."""
    lines = []
    for name in sorted(set(names)):
        if not name.startswith(PREFIX) or name in known:
            continue
        nearest = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        hint = ('did you mean %s?' % nearest[0]) if nearest else 'the role\'s variables are in its meta/argument_specs.yml'
        lines.append('%s: not a variable of the role gpu_reclaim; %s' % (name, hint))
    return lines


def _renamed(message, option, name):
    """``message`` of a module check, with the module's ``option`` at its start replaced by the variable ``name``."""
    if message.startswith(option) and message[len(option):len(option) + 1] in (':', '[', '.', ' '):
        return name + message[len(option):]
    return message


def _seconds(values, name, minimum, maximum, above):
    number = to_seconds(name, values[name])
    if above and number <= minimum:
        raise VariableError('%s: must be more than %g seconds; got: %r' % (name, minimum, values[name]))
    check_seconds(name, number, maximum=maximum, minimum=minimum, error=VariableError)
    if name in WHOLE_SECONDS and number != int(number):
        raise VariableError('%s: must be a whole number of seconds; got: %r' % (name, values[name]))
    return number


def _checks(values):
    """Each check of the variables as a callable, in the order the role's tasks would meet them."""
    def present(name):
        return name in values and values[name] is not None

    checks = []
    for name, minimum, maximum, above in SECONDS:
        if present(name):
            checks.append(lambda name=name, minimum=minimum, maximum=maximum, above=above:
                          _seconds(values, name, minimum, maximum, above))
    if present('gpu_reclaim_poll_interval'):
        checks.append(lambda: check_poll_interval(to_seconds('gpu_reclaim_poll_interval',
                                                             values['gpu_reclaim_poll_interval']),
                                                  option='gpu_reclaim_poll_interval', error=VariableError))
    if present('gpu_reclaim_nvml_timeout'):
        checks.append(lambda: _nvml_timeout(values))
    if present('gpu_reclaim_settle_seconds'):
        checks.append(lambda: check_settle_seconds(to_seconds('gpu_reclaim_settle_seconds',
                                                              values['gpu_reclaim_settle_seconds']),
                                                   option='gpu_reclaim_settle_seconds'))
    if present('gpu_reclaim_max_used_mib'):
        checks.append(lambda: _max_used_mib(values['gpu_reclaim_max_used_mib']))
    for name in sorted(values):
        if name.startswith(PREFIX) and isinstance(values[name], (list, tuple)) and name != 'gpu_reclaim_ladder':
            checks.append(lambda name=name: (check_globs if name in GLOBS else check_entries)(name, values[name]))
    if values.get('gpu_reclaim_keep_units'):
        checks.append(lambda: _unit_names(values, 'gpu_reclaim_keep_units'))
    if values.get('gpu_reclaim_metrics_textfile_dir'):
        checks.append(lambda: _absolute(values, 'gpu_reclaim_metrics_textfile_dir'))
    if values.get('gpu_reclaim_ladder'):
        checks.append(lambda: _ladder(values))
    checks.append(lambda: _scope(values))
    checks.append(lambda: check_protection_options(
        values.get('gpu_reclaim_protect'), values.get('gpu_reclaim_protect_units'),
        values.get('gpu_reclaim_unprotect'), truth(values.get('gpu_reclaim_unprotect_all_confirmed')),
        names=PROTECTION_NAMES))
    return checks


def _absolute(values, name):
    if not str(values[name]).startswith('/'):
        raise VariableError('%s: must be an absolute path on the target; got: %r' % (name, values[name]))


def _unit_names(values, name):
    # A unit kept running is one the deploy names itself: a glob could keep a stray unit's holders.
    for index, entry in enumerate(values[name]):
        if not isinstance(entry, str) or any(char in entry for char in '*?[') or '.' not in entry:
            raise VariableError('%s[%d]: must be a full unit name such as vllm.service, without globs; got: %r'
                                % (name, index, entry))


def _nvml_timeout(values):
    error = check_timeout(to_seconds('gpu_reclaim_nvml_timeout', values['gpu_reclaim_nvml_timeout']),
                          option='gpu_reclaim_nvml_timeout')
    if error:
        raise VariableError(error)


def _max_used_mib(value):
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None:
        raise VariableError('gpu_reclaim_max_used_mib: must be a whole number of MiB; got: %r' % (value,))
    try:
        check_limits(number)
    except ProofError as exc:
        raise VariableError(_renamed(str(exc), 'max_used_mib', 'gpu_reclaim_max_used_mib'))


def _ladder(values):
    try:
        parse_ladder(values['gpu_reclaim_ladder'], values.get('gpu_reclaim_grace_seconds', 10),
                     values.get('gpu_reclaim_kill_seconds', 10))
    except EscalationError as exc:
        raise VariableError(_renamed(str(exc), 'ladder', 'gpu_reclaim_ladder'))


def _scope(values):
    options = dict((option, values.get(name)) for option, name in SCOPE if name in values)
    if not options.get('match'):
        options['match'] = None
    try:
        build_scope([], **options)
    except EscalationError as exc:
        message = str(exc)
        for option, name in SCOPE:
            message = _renamed(message, option, name)
        raise VariableError(message)


def value_errors(values):
    """Each bad value among ``values`` ({variable: value}), as a line naming the variable and the value."""
    lines = []
    for check in _checks(values):
        try:
            check()
        except (VariableError, InputError, EscalationError, ProofError, ProtectionError, SettleError) as exc:
            if str(exc) not in lines:
                lines.append(str(exc))
    return lines


def variable_errors(values, argument_specs):
    """``unknown_variables`` of the names in ``values``, then ``value_errors``: empty when the role may start."""
    if not isinstance(values, Mapping):
        raise TypeError('role_variable_errors: the input must map the role\'s variables to their values; got: %s'
                        % type(values).__name__)
    unknown = unknown_variables(values, known_variables(argument_specs))
    lists = not_lists(values, list_variables(argument_specs))
    # The other checks read these as lists.
    return unknown + (lists or value_errors(dict(values)))
