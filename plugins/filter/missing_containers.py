# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in missing_containers.yml.
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._missing_containers import (
    missing_containers as message,
)

NAME = 'missing_containers'


def missing_containers(inspections, runtime, host, ignored=False):
    if not isinstance(inspections, list) or not all(isinstance(entry, dict) for entry in inspections):
        raise AnsibleFilterError('%s: the input must be the list of the inspect task\'s results; got: %r'
                                 % (NAME, inspections))
    return message(inspections, str(runtime), str(host), bool(ignored))


class FilterModule(object):
    def filters(self):
        return {NAME: missing_containers}
