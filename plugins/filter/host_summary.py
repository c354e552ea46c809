# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The worked-out parts of the role's per-host summary; the role's templates only format them.
from collections.abc import Mapping

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._host_summary import gpu_rows, left_behind, protected_holders


def _result(name, what, value):
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError('%s: %s must be a module result (a mapping); got: %s' % (name, what, type(value).__name__))
    return dict(value)


def _records(name, what, value):
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, Mapping) for item in value):
        raise TypeError('%s: %s must be a list of records; got: %r' % (name, what, value))
    return list(value)


def _names(name, what, value):
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise TypeError('%s: %s must be a list of names; got: %r' % (name, what, value))
    return list(value)


def summary_gpus(first_gpus, proof_gpus=None, released=None, protected=None):
    name = 'summary_gpus'
    return gpu_rows(_records(name, 'the first look\'s gpus', first_gpus), _records(name, 'proof_gpus', proof_gpus),
                    _records(name, 'released', released), _records(name, 'protected', protected))


def left_behind_of(release, stopped_units=None, stopped_containers=None):
    name = 'left_behind'
    return left_behind(_result(name, 'the release', release), _names(name, 'stopped_units', stopped_units or []),
                       _names(name, 'stopped_containers', stopped_containers or []))


def protected_holders_of(release, first_holders=None):
    name = 'protected_holders'
    return protected_holders(_result(name, 'the release', release), _records(name, 'first_holders', first_holders))


class FilterModule(object):
    def filters(self):
        return {
            'summary_gpus': summary_gpus,
            'left_behind': left_behind_of,
            'protected_holders': protected_holders_of,
        }
