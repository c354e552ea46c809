# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in failure_reason.yml.
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._failure_reason import failure_reason as reason
from ansible_collections.gpuops.reclaim.plugins.plugin_utils._filter_input import result

NAME = 'failure_reason'


def failure_reason(failed, host, python='', venv='', needs_root=True):
    if not isinstance(needs_root, bool):
        raise TypeError('%s: needs_root must be a boolean; got: %r' % (NAME, needs_root))
    return reason(result(NAME, 'the failed result', failed), str(host), str(python), str(venv), needs_root)


class FilterModule(object):
    def filters(self):
        return {NAME: failure_reason}
