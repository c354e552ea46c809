# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Make ``ansible_collections.gpuops.reclaim`` importable under plain pytest.

ansible-test lays the collection out itself. Plain pytest gets the same
import path from ``build/collections``, whose ``gpuops/reclaim`` entry links
back to the repository root.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

_REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
_COLLECTIONS = os.path.join(_REPO_ROOT, 'build', 'collections')
_LINK = os.path.join(_COLLECTIONS, 'ansible_collections', 'gpuops', 'reclaim')

try:
    import ansible_collections.gpuops.reclaim  # noqa: F401  pylint: disable=unused-import
except ImportError:
    if os.path.basename(os.path.dirname(os.path.dirname(_REPO_ROOT))) != 'ansible_collections':
        if not os.path.lexists(_LINK):
            os.makedirs(os.path.dirname(_LINK), exist_ok=True)
            os.symlink(os.path.join('..', '..', '..', '..'), _LINK)
        if _COLLECTIONS not in sys.path:
            sys.path.insert(0, _COLLECTIONS)
