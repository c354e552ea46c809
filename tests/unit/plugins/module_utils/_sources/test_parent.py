# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import parent as _parent
from ansible_collections.gpuops.reclaim.plugins.module_utils._sources import registry as _sources


def test_parent_entries_and_leftovers():
    parents = [{'pid': 100, 'title': 'bash -c loop', 'children': [50], 'systemd_unit': None, 'container': None,
                'outcome': 'left alone', 'reason': 'outside the scope filters (title does not match): never signalled'},
               {'pid': 101, 'title': 'sv', 'children': [51], 'systemd_unit': 'a.service', 'container': None,
                'outcome': 'frozen and killed', 'reason': 'x'}]
    entries = _parent.parent_entries(parents)
    assert [(e['kind'], e['pid'], e['unit'], e['action']) for e in entries] == [
        ('parent', 100, None, 'left alone'), ('parent', 101, 'a.service', 'frozen and killed')]
    lines = _sources.leftover_lines(entries)
    assert len(lines) == 1 and lines[0].startswith('pid 100 (bash -c loop), parent of pid 50, was left running')
