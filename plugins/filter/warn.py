# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in warn.yml. Nothing of Ansible's is imported with the plugin (a plain TypeError, as
# plugin_utils/_filter_input.py raises, is reported with the filter's name), so that it imports anywhere.
from collections.abc import Mapping

NAME = 'warn'


def _display():
    # Imported when a warning is shown, not with the plugin: importing Ansible's display sets up the
    # controller's own in whatever process imports it.
    from ansible.utils.display import Display  # pylint: disable=import-outside-toplevel
    return Display()


def warn(value, key=None):
    # A mistake of the user's (a unit name that matches nothing) is an Ansible warning, shown with the task
    # that templates this, and once: Ansible drops a warning it has already shown. With a key, the input is a
    # mapping (the role's summary) whose list under that key is shown, so that the task that keeps the summary
    # shows its warnings without working it out a second time.
    if key is None:
        lines = value
    elif not isinstance(key, str):
        raise TypeError('%s: the key must be a string; got: %r' % (NAME, key))
    elif not isinstance(value, Mapping):
        raise TypeError('%s: with a key, the input must be a mapping; got: %s' % (NAME, type(value).__name__))
    else:
        lines = value.get(key, [])
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise TypeError('%s: the %s must be a list of strings; got: %r'
                        % (NAME, 'input' if key is None else 'value of %s' % key, lines))
    display = _display() if lines else None
    for line in lines:
        display.warning(line)
    return value


class FilterModule(object):
    def filters(self):
        return {NAME: warn}
