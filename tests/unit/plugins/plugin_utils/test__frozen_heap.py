# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gc

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._frozen_heap import frozen_heap


class _Cycle(object):
    def __init__(self):
        self.me = self


def test_what_exists_is_frozen_in_the_block_and_given_back_after():
    before = gc.get_freeze_count()
    with frozen_heap():
        assert gc.get_freeze_count() > before
    assert gc.get_freeze_count() == before


def test_what_the_block_makes_is_still_collected():
    with frozen_heap():
        _Cycle()
        assert gc.collect() >= 1


def test_an_exception_in_the_block_still_gives_the_heap_back():
    before = gc.get_freeze_count()
    with pytest.raises(RuntimeError):
        with frozen_heap():
            raise RuntimeError('the module failed')
    assert gc.get_freeze_count() == before


def test_what_was_frozen_before_stays_frozen():
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with frozen_heap():
            pass
        assert gc.get_freeze_count() >= before
    finally:
        gc.unfreeze()
