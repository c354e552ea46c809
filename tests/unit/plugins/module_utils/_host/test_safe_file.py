# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Files written where another user cannot redirect them: real directories, links and modes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
from types import SimpleNamespace

import pytest

from ansible_collections.gpuops.reclaim.plugins.module_utils._host.safe_file import (
    UnsafePath,
    open_directory,
    untrusted_reason,
    write_text,
)

AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason='needs root to make a directory another user owns')
NOBODY = 65534


def test_writes_the_file_with_its_mode_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / 'gpu_reclaim.prom')
    assert write_text(path, 'gpu_reclaim_last_run_success 1\n') == path
    assert open(path).read() == 'gpu_reclaim_last_run_success 1\n'
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(str(tmp_path)) == ['gpu_reclaim.prom']


def test_replaces_the_old_file(tmp_path):
    path = tmp_path / 'gpu_reclaim.prom'
    path.write_text('old\n')
    write_text(str(path), 'new\n')
    assert path.read_text() == 'new\n'


# Security: a link planted at the final name is replaced, never followed.
def test_a_link_at_the_final_name_is_replaced_not_followed(tmp_path):
    victim = tmp_path / 'shadow'
    victim.write_text('root:secret\n')
    path = tmp_path / 'gpu_reclaim.prom'
    os.symlink(str(victim), str(path))
    write_text(str(path), 'metrics\n')
    assert victim.read_text() == 'root:secret\n'
    assert not path.is_symlink() and path.read_text() == 'metrics\n'


def test_a_link_to_a_directory_at_the_final_name_is_replaced(tmp_path):
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    path = tmp_path / 'gpu_reclaim.prom'
    os.symlink(str(elsewhere), str(path))
    write_text(str(path), 'metrics\n')
    assert os.listdir(str(elsewhere)) == [] and path.read_text() == 'metrics\n'


# Security: a directory another user can write is refused before anything is looked up in it.
@pytest.mark.parametrize('mode, why', [(0o777, 'writable by others (mode 0777)'),
                                       (0o775, 'writable by its group (mode 0775)'),
                                       (0o1777, None)])
def test_a_directory_others_can_write_is_refused(tmp_path, mode, why):
    shared = tmp_path / 'shared'
    shared.mkdir()
    os.chmod(str(shared), mode)
    if why is None:
        # Sticky, but not root's: others may still replace what is in it only if it is theirs; refused unless root's.
        if os.geteuid() == 0:
            write_text(str(shared / 'gpu_reclaim.prom'), 'x\n')
            return
        why = 'writable by others (mode 1777)'
    with pytest.raises(UnsafePath) as caught:
        write_text(str(shared / 'textfile' / 'gpu_reclaim.prom'), 'x\n', create=True)
    assert '%s: another user can change it (%s)' % (shared, why) in str(caught.value)
    assert os.listdir(str(shared)) == []


@AS_ROOT
def test_a_directory_another_user_owns_is_refused(tmp_path):
    theirs = tmp_path / 'theirs'
    theirs.mkdir(mode=0o755)
    os.chown(str(theirs), NOBODY, NOBODY)
    with pytest.raises(UnsafePath) as caught:
        write_text(str(theirs / 'gpu_reclaim.prom'), 'x\n')
    assert 'owned by uid %d, not by root' % NOBODY in str(caught.value)
    assert os.listdir(str(theirs)) == []


# Security: the metrics directory replaced by a link planted in a directory others can write.
def test_a_link_planted_where_others_can_write_is_never_followed(tmp_path):
    target = tmp_path / 'target'
    target.mkdir()
    drop = tmp_path / 'drop'
    drop.mkdir()
    os.symlink(str(target), str(drop / 'textfile'))
    os.chmod(str(drop), 0o777)
    with pytest.raises(UnsafePath):
        write_text(str(drop / 'textfile' / 'gpu_reclaim.prom'), 'x\n')
    assert os.listdir(str(target)) == []


@AS_ROOT
def test_a_link_owned_by_root_in_a_sticky_root_directory_is_followed(tmp_path):
    # As /var/run -> /run: a link only a trusted user could have made is walked, target checked by the same rule.
    sticky = tmp_path / 'sticky'
    sticky.mkdir()
    os.chmod(str(sticky), 0o1777)
    real = tmp_path / 'real'
    real.mkdir()
    os.symlink('../real', str(sticky / 'textfile'))
    write_text(str(sticky / 'textfile' / 'gpu_reclaim.prom'), 'x\n')
    assert (real / 'gpu_reclaim.prom').read_text() == 'x\n'


def test_a_link_in_a_trusted_directory_is_walked_and_its_target_checked(tmp_path):
    real = tmp_path / 'real'
    real.mkdir()
    os.symlink(str(real), str(tmp_path / 'link'))
    write_text(str(tmp_path / 'link' / 'gpu_reclaim.prom'), 'x\n')
    assert (real / 'gpu_reclaim.prom').read_text() == 'x\n'
    # The target is checked too: a trusted link to a directory others can write is refused.
    os.chmod(str(real), 0o777)
    with pytest.raises(UnsafePath):
        write_text(str(tmp_path / 'link' / 'again.prom'), 'x\n')


def test_creates_missing_directories_when_asked(tmp_path):
    path = tmp_path / 'reports' / 'deep' / 'gpu07.json'
    write_text(str(path), '{}\n', create=True)
    assert path.read_text() == '{}\n'
    assert stat.S_IMODE(os.stat(str(path.parent)).st_mode) == 0o755
    with pytest.raises(OSError):
        write_text(str(tmp_path / 'missing' / 'x.prom'), 'x\n')


@pytest.mark.parametrize('path', ['relative/gpu_reclaim.prom', '/tmp/', '', None, '/tmp/..'])
def test_a_path_that_is_not_an_absolute_file_is_refused(path):
    with pytest.raises(UnsafePath):
        write_text(path, 'x\n')


def test_a_loop_of_links_ends(tmp_path):
    os.symlink('b', str(tmp_path / 'a'))
    os.symlink('a', str(tmp_path / 'b'))
    with pytest.raises(OSError):
        os.close(open_directory(str(tmp_path / 'a')))


@pytest.mark.parametrize('uid, mode, euid, reason', [
    (0, 0o40755, 0, None),
    (0, 0o41777, 0, None),
    (1000, 0o40755, 1000, None),
    (1000, 0o40755, 0, 'owned by uid 1000, not by root'),
    (1000, 0o41777, 0, 'owned by uid 1000, not by root'),
    (0, 0o40777, 0, 'writable by others (mode 0777)'),
    (0, 0o40770, 0, 'writable by its group (mode 0770)'),
    (1000, 0o41777, 1000, 'writable by others (mode 1777)'),
])
def test_untrusted_reason(uid, mode, euid, reason):
    assert untrusted_reason(SimpleNamespace(st_uid=uid, st_mode=mode), euid) == reason
