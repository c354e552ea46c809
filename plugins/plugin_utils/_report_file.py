# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Write a JSON document atomically, without following a link another user could have planted.

The writing itself is ``module_utils._safe_file.write_text``, the one that
the metrics on the target use too.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpuops.reclaim.plugins.module_utils._safe_file import FILE_MODE, write_text


def to_text(data):
    """The JSON text of a report: indented, keys sorted, one trailing newline (as to_nice_json)."""
    return json.dumps(data, indent=4, sort_keys=True, separators=(',', ': '), default=str) + '\n'


def write_json(path, data):
    """Create the folder of ``path`` if needed, then write ``data`` there as JSON, atomically.

    Raises ``OSError`` (``_safe_file.UnsafePath`` for a directory on the way that another user can write).
    """
    text = to_text(data)
    write_text(os.path.abspath(path), text, mode=FILE_MODE, create=True)
    return path
