# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Short texts for a row: a title cut to a column's width.

The source kinds name their entries with it (``_sources``), and the controller's summary its columns.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

ELLIPSIS = u'\u2026'


def truncate(text, length):
    """``text`` cut to ``length`` characters with an ellipsis; up to 5 characters over are kept whole."""
    text = text or ''
    if len(text) <= length + 5:
        return text
    return text[:length - len(ELLIPSIS)] + ELLIPSIS
