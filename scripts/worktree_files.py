# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Copy the files of this work tree that git knows about, as scripts/collection-tree --copy does.

Tracked files and new ones that are not ignored, as they are in the work tree (a deleted file is
skipped). Used by scripts/matrix.py for its scratch copies.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess


def copy_work_tree(root, target):
    """Copy ``root``'s files into ``target`` (made anew), then give the copy a git repository of its own.

    The copy lies inside this repository's ignored build folder: without a repository of its own, tools
    that list files through git (ansible-test, antsibull-changelog) would apply the outer ignore rules."""
    if os.path.isdir(target):
        shutil.rmtree(target)
    os.makedirs(target)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root, check=True, stdout=subprocess.PIPE).stdout.split(b"\0")
    for raw in listed:
        source = os.path.join(root, raw.decode())
        if not raw or not os.path.isfile(source):
            continue
        destination = os.path.join(target, raw.decode())
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        shutil.copy2(source, destination)
    subprocess.run(["git", "init", "-q"], cwd=target, check=True)
