# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Numbers of seconds as the user gave them.

Ansible's ``float`` type turns ``true`` into 1.0, so ``grace_seconds: true``
would quietly become a one-second grace and signals would follow. Options
that take seconds are therefore declared ``type: raw`` (``SECONDS``) and
converted here, where a boolean, a text that is no number, NaN or infinity
is an error naming the option and the value. Range checks stay with the
options' own code (``_escalation.check_seconds``, ``_nvml.check_timeout``,
``_proof.check_limits``).

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math


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
