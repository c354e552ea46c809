# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.reclaim.plugins.plugin_utils import _payload_cache

PREFIX = 'ansible_collections.gpuops.reclaim.plugins.modules.gpu_reclaim-'
NAME = PREFIX + 'ZIP_DEFLATED-none'


def _write(path, data=b'x'):
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder)
    with open(path, 'wb') as handle:
        handle.write(data)
    return path


@pytest.fixture
def home(tmp_path):
    """A private folder, as ANSIBLE_HOME is: tmp_path's parents may be shared, so trust is judged from here down."""
    os.chmod(str(tmp_path), 0o700)
    return tmp_path


@pytest.fixture
def trees(home):
    module = _write(str(home / 'c' / 'modules' / 'gpu_reclaim.py'), b'# module\n')
    ours = str(home / 'c' / 'module_utils')
    _write(os.path.join(ours, '_base', '_deadline.py'), b'A = 1\n')
    theirs = str(home / 'ansible' / 'module_utils')
    _write(os.path.join(theirs, 'basic.py'), b'B = 1\n')
    return module, ours, theirs


def _key(trees, version='2.19.14'):
    module, ours, theirs = trees
    return _payload_cache.payload_key(module, [ours], [theirs], [os.path.join(os.path.dirname(theirs), 'packer.py')],
                                      version)


def _keep(home, run_cache, key='key'):
    return _payload_cache.keep(str(home), ['kept', 'gpu_reclaim', key], run_cache, PREFIX)


def test_the_key_is_stable_while_nothing_changes(trees):
    assert _key(trees) == _key(trees)


def test_the_key_changes_with_the_content_of_a_module_util_of_the_same_size(trees):
    before = _key(trees)
    _write(os.path.join(trees[1], '_base', '_deadline.py'), b'A = 2\n')
    assert _key(trees) != before


def test_the_key_changes_with_the_module_a_new_file_and_ansible(trees):
    keys = {_key(trees), _key(trees, version='2.21.5')}
    _write(trees[0], b'# module, changed\n')
    keys.add(_key(trees))
    _write(os.path.join(trees[1], '_new.py'))
    keys.add(_key(trees))
    basic = os.path.join(trees[2], 'basic.py')
    os.utime(basic, ns=(1, 1))
    keys.add(_key(trees))
    # What packs the payload, appearing.
    _write(os.path.join(os.path.dirname(trees[2]), 'packer.py'))
    keys.add(_key(trees))
    assert len(keys) == 6


def test_a_kept_payload_is_restored_into_the_next_run(home):
    run_cache = str(home / 'run1' / 'ansiballz_cache')
    _write(os.path.join(run_cache, NAME), b'payload')
    _write(os.path.join(run_cache, NAME + '.lock'))
    _write(os.path.join(run_cache, 'ansible_collections.other.x.plugins.modules.y-ZIP_DEFLATED-none'))
    entry = str(home / 'kept' / 'gpu_reclaim' / 'key1')
    assert _keep(home, run_cache, 'key1') == 1
    assert sorted(os.listdir(entry)) == ['SHA256SUMS.json', NAME]
    assert os.stat(os.path.join(entry, NAME)).st_mode & 0o777 == 0o600

    later = str(home / 'run2' / 'ansiballz_cache')
    assert _payload_cache.restore(entry, later, PREFIX) == 1
    with open(os.path.join(later, NAME), 'rb') as handle:
        assert handle.read() == b'payload'
    assert os.listdir(later) == [NAME]
    # Once there, it is Ansible's: not copied again.
    assert _payload_cache.restore(entry, later, PREFIX) == 0


def test_keeping_a_new_key_drops_the_older_ones_but_not_one_being_written(home):
    run_cache = str(home / 'run' / 'ansiballz_cache')
    _write(os.path.join(run_cache, NAME))
    module_folder = home / 'kept' / 'gpu_reclaim'
    _write(str(module_folder / 'old' / NAME))
    _write(str(module_folder / '.part-other' / NAME))
    _write(str(module_folder / '.part-dead' / NAME))
    os.utime(str(module_folder / '.part-dead'), (1, 1))
    assert _keep(home, run_cache, 'new') == 1
    assert sorted(os.listdir(str(module_folder))) == ['.part-other', 'new']


def test_a_key_kept_already_is_left_as_it_is(home):
    run_cache = str(home / 'run' / 'ansiballz_cache')
    _write(os.path.join(run_cache, NAME), b'new')
    entry = str(home / 'kept' / 'gpu_reclaim' / 'key')
    _write(os.path.join(entry, NAME), b'first')
    assert _keep(home, run_cache) == 0
    with open(os.path.join(entry, NAME), 'rb') as handle:
        assert handle.read() == b'first'


def test_nothing_to_keep_keeps_nothing(home):
    assert _keep(home, str(home / 'no-run')) == 0
    run_cache = str(home / 'run' / 'ansiballz_cache')
    _write(os.path.join(run_cache, NAME + '-part'))
    assert _keep(home, run_cache) == 0
    assert not os.path.exists(str(home / 'kept'))


@pytest.mark.parametrize('spoil', ['group_writable_entry', 'world_writable_parent', 'group_writable_file',
                                   'linked_file', 'cut_short', 'changed'])
def test_a_kept_payload_others_could_have_changed_is_not_used(home, spoil):
    source = str(home / 'run0' / 'ansiballz_cache')
    _write(os.path.join(source, NAME), b'payload')
    assert _keep(home, source) == 1
    entry = home / 'kept' / 'gpu_reclaim' / 'key'
    kept = str(entry / NAME)
    used = str(entry)
    if spoil == 'group_writable_entry':
        os.chmod(str(entry), 0o770)
    elif spoil == 'world_writable_parent':
        os.chmod(str(home / 'kept'), 0o777)
    elif spoil == 'group_writable_file':
        os.chmod(kept, 0o660)
    elif spoil == 'linked_file':
        elsewhere = str(home / 'elsewhere')
        os.rename(kept, elsewhere)
        os.symlink(elsewhere, kept)
    elif spoil == 'cut_short':
        with open(kept, 'wb') as handle:
            handle.write(b'pay')
    elif spoil == 'changed':
        with open(kept, 'wb') as handle:
            handle.write(b'PAYLOAD')
    run_cache = str(home / 'run' / 'ansiballz_cache')
    assert _payload_cache.restore(used, run_cache, PREFIX) == 0
    assert not os.path.exists(run_cache) or not os.listdir(run_cache)


def test_a_sticky_world_writable_parent_is_trusted(home):
    os.chmod(str(home), 0o1777)
    entry = home / 'key'
    entry.mkdir(mode=0o700)
    assert _payload_cache.trusted_folder(str(entry)) == os.path.realpath(str(entry))


def test_a_payload_kept_by_another_user_is_not_used(home):
    source = str(home / 'run0' / 'ansiballz_cache')
    _write(os.path.join(source, NAME))
    assert _keep(home, source) == 1
    entry = home / 'kept' / 'gpu_reclaim' / 'key'
    run_cache = str(home / 'run' / 'ansiballz_cache')
    assert _payload_cache.restore(str(entry), run_cache, PREFIX) == 1
    run_cache = str(home / 'run2' / 'ansiballz_cache')
    # The same files, judged for a user who does not own them.
    assert _payload_cache.restore(str(entry), run_cache, PREFIX, uid=os.geteuid() + 4242) == 0
    assert _payload_cache.trusted_folder(str(entry), uid=os.geteuid() + 4242) is None


def test_a_folder_above_the_key_others_could_change_keeps_nothing(home):
    run_cache = str(home / 'run' / 'ansiballz_cache')
    _write(os.path.join(run_cache, NAME))
    module_folder = home / 'kept' / 'gpu_reclaim'
    module_folder.mkdir(parents=True)
    os.chmod(str(module_folder), 0o777)
    assert _keep(home, run_cache) == 0
    assert os.listdir(str(module_folder)) == []


def test_a_home_that_is_not_this_users_alone_gets_nothing_made_in_it(home):
    run_cache = str(home / 'run' / 'ansiballz_cache')
    _write(os.path.join(run_cache, NAME))
    other = home / 'someone-elses'
    other.mkdir()
    os.chmod(str(other), 0o777)
    assert _payload_cache.keep(str(other), ['kept', 'gpu_reclaim', 'key'], run_cache, PREFIX) == 0
    assert os.listdir(str(other)) == []
    # Owned by another user: judged for a user who does not own it.
    os.chmod(str(other), 0o755)
    assert _payload_cache.keep(str(other), ['kept', 'gpu_reclaim', 'key'], run_cache, PREFIX,
                               uid=os.geteuid() + 4242) == 0
    assert os.listdir(str(other)) == []


def test_a_link_to_the_kept_folder_is_followed_once_and_what_it_names_is_judged(home):
    source = str(home / 'run0' / 'ansiballz_cache')
    _write(os.path.join(source, NAME), b'payload')
    assert _keep(home, source) == 1
    entry = str(home / 'kept' / 'gpu_reclaim' / 'key')
    # A link in a folder others can write to: whatever it names when it is read, that folder is judged, and
    # read by its real path; the link can be turned afterwards without changing what is read.
    shared = home / 'shared'
    shared.mkdir()
    os.chmod(str(shared), 0o777)
    link = str(shared / 'link')
    os.symlink(entry, link)
    assert _payload_cache.trusted_folder(link) == os.path.realpath(entry)
    assert _payload_cache.restore(link, str(home / 'run1' / 'ansiballz_cache'), PREFIX) == 1
    # Named into a folder others can change: refused.
    theirs = shared / 'theirs'
    theirs.mkdir()
    _write(str(theirs / NAME), b'not ours')
    os.remove(link)
    os.symlink(str(theirs), link)
    assert _payload_cache.restore(link, str(home / 'run2' / 'ansiballz_cache'), PREFIX) == 0


def test_a_digest_file_that_is_no_mapping_restores_nothing(home):
    source = str(home / 'run0' / 'ansiballz_cache')
    _write(os.path.join(source, NAME), b'payload')
    assert _keep(home, source) == 1
    digests = str(home / 'kept' / 'gpu_reclaim' / 'key' / 'SHA256SUMS.json')
    os.chmod(digests, 0o600)
    with open(digests, 'w') as handle:
        handle.write('["not", "a", "mapping"]')
    assert _payload_cache.restore(str(home / 'kept' / 'gpu_reclaim' / 'key'), str(home / 'run1' / 'c'), PREFIX) == 0
