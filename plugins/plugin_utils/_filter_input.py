# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Checks of a filter's input, each failing with the filter's name, the argument and what it received.

Errors are plain TypeError, which Ansible reports with the filter's name; the
controller's own exception classes are not imported, so the filters stay
importable anywhere. Controller side only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping


def truth(value):
    """A variable or an option as a boolean, as Ansible's ``bool`` filter reads it (``"false"`` is false)."""
    if isinstance(value, str):
        return value.strip().lower() in ('1', 'true', 'yes', 'on', 'y', 't')
    return bool(value)


def names(filter_name, argument, value, what='unit names'):
    """``value`` as a list of strings; None is an empty list."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise TypeError('%s: %s must be a list of %s; got: %r' % (filter_name, argument, what, value))
    return list(value)


def records(filter_name, argument, value):
    """``value`` as a list of mappings (holder or GPU records); None is an empty list."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, Mapping) for item in value):
        raise TypeError('%s: %s must be a list of records; got: %r' % (filter_name, argument, value))
    return list(value)


def result(filter_name, argument, value):
    """``value`` as a module result (a mapping); None is an empty one."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError('%s: %s must be a module result (a mapping); got: %s'
                        % (filter_name, argument, type(value).__name__))
    return dict(value)
