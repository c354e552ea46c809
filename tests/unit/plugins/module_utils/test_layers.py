# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The shape of module_utils: subpackages by the boxes of the pipeline, imports only downwards.

Each subpackage imports only from itself and from the subpackages below it; ``_release`` and ``_proof`` sit
side by side and never import each other. Every import inside module_utils is relative, nothing in it
imports Ansible, and no file grows past about 500 lines.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os

import pytest

MODULE_UTILS = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'plugins', 'module_utils')

# Lower layers first. A subpackage may import from its own layer's subpackage and any layer below.
LAYERS = (
    ('_base',),
    ('_host',),
    ('_discover',),
    ('_plan',),
    ('_sources',),
    ('_release', '_proof'),
    ('_flows',),
)
LEVEL = dict((package, level) for level, packages in enumerate(LAYERS) for package in packages)
MAX_LINES = 500


def _files():
    found = []
    for folder, dirs, names in os.walk(MODULE_UTILS):
        dirs[:] = sorted(name for name in dirs if name != '__pycache__')
        for name in sorted(names):
            if name.endswith('.py'):
                found.append(os.path.relpath(os.path.join(folder, name), MODULE_UTILS))
    return found


FILES = _files()
SOURCES = [path for path in FILES if os.path.basename(path) != '__init__.py']


def _imports(path):
    with open(os.path.join(MODULE_UTILS, path)) as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            yield node.level, node.module or '', [alias.name for alias in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield 0, alias.name, [], node.lineno


def _imported_packages(path):
    """``(subpackage, lineno)`` for each subpackage of module_utils that ``path`` imports from."""
    own = path.split(os.sep)[0]
    for level, module, names, lineno in _imports(path):
        if level == 1:
            yield own, lineno
        elif level == 2:
            yield (module.split('.')[0] if module else names[0]), lineno


def test_every_file_lives_in_a_subpackage_of_a_layer():
    assert SOURCES
    for path in FILES:
        assert os.sep in path, '%s: module_utils files live in a subpackage' % path
        assert path.split(os.sep)[0] in LEVEL, '%s: a subpackage of no layer' % path


def test_every_subpackage_has_an_empty_init():
    for package in LEVEL:
        init = os.path.join(MODULE_UTILS, package, '__init__.py')
        assert os.path.isfile(init), init
        assert os.path.getsize(init) == 0, init


@pytest.mark.parametrize('path', SOURCES)
def test_imports_are_relative_and_run_down_the_layers(path):
    own = path.split(os.sep)[0]
    for level, module, names, lineno in _imports(path):
        assert level in (0, 1, 2), '%s:%d: from a relative level of %d' % (path, lineno, level)
        if level == 0:
            assert not module.startswith('ansible'), '%s:%d: imports %s: module_utils imports by relative path, ' \
                'and nothing from Ansible' % (path, lineno, module)
    for package, lineno in _imported_packages(path):
        assert package in LEVEL, '%s:%d: imports from %s, no subpackage' % (path, lineno, package)
        if package == own:
            continue
        assert LEVEL[package] < LEVEL[own], '%s:%d: %s imports from %s, which is not below it' % (
            path, lineno, own, package)


@pytest.mark.parametrize('path', SOURCES)
def test_files_stay_small(path):
    with open(os.path.join(MODULE_UTILS, path)) as handle:
        lines = len(handle.read().splitlines())
    assert lines <= MAX_LINES, '%s has %d lines; split it by concept' % (path, lines)


def test_only_the_advice_texts_name_role_variables():
    for path in SOURCES:
        if path == os.path.join('_base', 'advice.py'):
            continue
        with open(os.path.join(MODULE_UTILS, path)) as handle:
            assert 'gpu_reclaim_' not in handle.read(), '%s names a role variable; its text goes in _base/advice.py' % path
