# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Write a JSON document atomically: beside its final name, then renamed into place."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile

FOLDER_MODE = 0o755
FILE_MODE = 0o644


def to_text(data):
    """The JSON text of a report: indented, keys sorted, one trailing newline (as to_nice_json)."""
    return json.dumps(data, indent=4, sort_keys=True, separators=(',', ': '), default=str) + '\n'


def write_json(path, data):
    """Create the folder of ``path`` if needed, then write ``data`` there as JSON, atomically."""
    text = to_text(data)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        os.makedirs(folder, FOLDER_MODE)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix='.' + os.path.basename(path) + '.')
    try:
        with os.fdopen(handle, 'w') as out:
            out.write(text)
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    return path
