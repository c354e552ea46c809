# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Options as the user gave them: numbers of seconds and their bounds, and lists of names and globs.

Ansible's ``float`` type turns ``true`` into 1.0, so ``grace_seconds: true``
would quietly become a one-second grace and signals would follow. Options
that take seconds are therefore declared ``type: raw`` (``SECONDS``) and
converted here, where a boolean, a text that is no number, NaN or infinity
is an error naming the option and the value. Every bound of a number of
seconds lives here too: ``check_seconds`` (any wait, up to an hour),
``check_poll_interval``, ``check_settle_seconds`` and ``check_timeout`` (the
NVML deadline), so that the modules and the role's checks agree.

A list of names is checked entry by entry before anything is done: an empty
entry (``allow: ['']``) names nothing and is an error, and a glob that
``fnmatch`` would read differently from what was meant (an unclosed ``[``,
which it quietly takes as a literal) or cannot compile is an error too.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import math
import re


DEFAULT_POLL_INTERVAL = 0.05
MAX_WAIT_SECONDS = 3600.0
MIN_POLL_INTERVAL = 0.005
MAX_POLL_INTERVAL = 5.0
MAX_SETTLE_SECONDS = 600.0
MAX_TIMEOUT = 600.0


class EscalationError(ValueError):
    """Bad input: the message names the option and the value received."""


class SettleError(ValueError):
    """Bad input: the message names the option and the value received."""


def check_seconds(option, value, maximum=MAX_WAIT_SECONDS, minimum=0.0, error=EscalationError):
    """Return ``value`` as a float, or raise ``error`` naming ``option`` and the value.

    Every option in seconds of every module is bounded here.
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if isinstance(value, bool) or number is None or math.isnan(number) or number < minimum or number > maximum:
        raise error('%s: must be a number of seconds from %g to %g; got: %r' % (option, minimum, maximum, value))
    return number


def check_poll_interval(value, option='poll_interval', error=EscalationError):
    """``value`` as a float within the poll bounds, or raise ``error`` naming ``option`` and the value."""
    return check_seconds(option, value, maximum=MAX_POLL_INTERVAL, minimum=MIN_POLL_INTERVAL, error=error)


def check_settle_seconds(value, option='settle_seconds'):
    return check_seconds(option, value, maximum=MAX_SETTLE_SECONDS, error=SettleError)


def check_timeout(value, option='nvml_timeout'):
    """Return an error message for an unusable deadline, or None when it is fine."""
    if value is None or math.isnan(value) or value <= 0 or value > MAX_TIMEOUT:
        return '%s must be greater than 0 and at most %d seconds; got: %r' % (
            option, int(MAX_TIMEOUT), value)
    return None


def seconds_spec(default):
    """The argument spec entry of an option that takes seconds."""
    return dict(type='raw', default=default)


class InputError(ValueError):
    """The message names the option and the value received."""


def to_seconds(option, value):
    """``value`` as a float, or raise ``InputError`` naming ``option``.

    ``None`` stays ``None`` (an option left unset).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError('%s: must be a number of seconds, not a boolean; got: %r' % (option, value))
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError, AttributeError):
        raise InputError('%s: must be a number of seconds; got: %r' % (option, value))
    if math.isnan(number) or math.isinf(number):
        raise InputError('%s: must be a finite number of seconds; got: %r' % (option, value))
    return number


def convert_seconds(params, options):
    """Convert ``params[option]`` in place for each option; return an error text or None."""
    for option in options:
        if option not in params:
            continue
        try:
            params[option] = to_seconds(option, params[option])
        except InputError as exc:
            return str(exc)
    return None


def check_entries(option, values):
    """Raise ``InputError`` for the first empty entry of the list option ``option``."""
    for position, value in enumerate(values or ()):
        if value is None or (isinstance(value, str) and not value.strip()):
            raise InputError('%s[%d]: must not be empty; got: %r' % (option, position, value))


def _unclosed_bracket(pattern):
    """Where ``pattern`` opens a ``[`` that fnmatch finds no end for (and so takes literally), or None."""
    position = 0
    while position < len(pattern):
        if pattern[position] == '[':
            end = position + 1
            if end < len(pattern) and pattern[end] == '!':
                end += 1
            if end < len(pattern) and pattern[end] == ']':
                end += 1
            while end < len(pattern) and pattern[end] != ']':
                end += 1
            if end >= len(pattern):
                return position
            position = end
        position += 1
    return None


def check_globs(option, patterns):
    """Raise ``InputError`` for the first entry of ``option`` that is empty or no usable shell-style glob."""
    check_entries(option, patterns)
    for position, pattern in enumerate(patterns or ()):
        pattern = str(pattern)
        where = _unclosed_bracket(pattern)
        if where is not None:
            raise InputError("%s[%d]: the glob %r opens a '[' at %d that is never closed (write '[[]' for a "
                             "literal '['); got: %r" % (option, position, pattern, where, pattern))
        try:
            re.compile(fnmatch.translate(pattern))
        except re.error as exc:
            raise InputError('%s[%d]: the glob %r does not compile: %s' % (option, position, pattern, exc))


def check_lists(params, globs=()):
    """Check every list option of ``params`` (no empty entry) and the ``globs`` among them; return an error text
    or None."""
    try:
        for option in sorted(params):
            values = params[option]
            if isinstance(values, (list, tuple)):
                if option in globs:
                    check_globs(option, values)
                else:
                    check_entries(option, values)
    except InputError as exc:
        return str(exc)
    return None
