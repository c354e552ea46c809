# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils._report_file import to_text, write_json


def test_text_is_indented_sorted_and_ends_with_a_newline():
    assert to_text({'b': 1, 'a': [1, 2]}) == '{\n    "a": [\n        1,\n        2\n    ],\n    "b": 1\n}\n'


def test_creates_the_folder_and_writes_with_its_modes(tmp_path):
    path = tmp_path / 'reports' / 'deep' / 'gpu07.json'
    write_json(str(path), {'free': True, 'gpus': [{'index': 0}]})
    assert json.loads(path.read_text()) == {'free': True, 'gpus': [{'index': 0}]}
    assert stat.S_IMODE(os.stat(str(path)).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(str(path.parent)).st_mode) & 0o755 == 0o755


def test_replaces_an_old_report_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / 'fleet.json'
    path.write_text('old')
    write_json(str(path), {'hosts': 2})
    assert json.loads(path.read_text()) == {'hosts': 2}
    assert os.listdir(str(tmp_path)) == ['fleet.json']


def test_data_json_cannot_represent_leaves_the_old_report(tmp_path):
    path = tmp_path / 'gpu07.json'
    path.write_text('{"old": true}\n')

    class Loop(dict):
        pass

    data = Loop()
    data['self'] = data
    with pytest.raises(ValueError):
        write_json(str(path), data)
    assert path.read_text() == '{"old": true}\n'
    assert os.listdir(str(tmp_path)) == ['gpu07.json']


def test_a_folder_that_cannot_be_made_raises(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('')
    with pytest.raises(OSError):
        write_json(str(blocker / 'gpu07.json'), {})


# Security: a report goes through the same writer as the metrics: no planted link is followed.
def test_a_link_at_the_report_name_is_replaced_not_followed(tmp_path):
    victim = tmp_path / 'victim'
    victim.write_text('keep\n')
    os.symlink(str(victim), str(tmp_path / 'gpu07.json'))
    write_json(str(tmp_path / 'gpu07.json'), {'free': True})
    assert victim.read_text() == 'keep\n'
    assert json.loads((tmp_path / 'gpu07.json').read_text()) == {'free': True}


def test_a_report_folder_others_can_write_is_refused(tmp_path):
    os.chmod(str(tmp_path), 0o777)
    with pytest.raises(OSError) as caught:
        write_json(str(tmp_path / 'reports' / 'gpu07.json'), {})
    assert 'another user can change it (writable by others (mode 0777))' in str(caught.value)
    assert os.listdir(str(tmp_path)) == []
