# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SPEC = importlib.util.spec_from_file_location('check_role_jinja', os.path.join(ROOT, 'scripts', 'check_role_jinja.py'))
CHECK = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(CHECK)


@pytest.mark.parametrize('text, lines', [
    # Formatting and passing on values decide nothing.
    ('- name: A\n  debug:\n    msg: "{{ x.lines | join(\', \') }}"\n  when: _plan.stages.prove\n', []),
    ('x: "{{ y | default(omit, true) }}"\n', []),
    ('x: "{{ \'a in b\' }}"\n', []),
    # Comparisons, tests, logic, inline ifs and selections do.
    ('- when: x | length > 0\n', [0]),
    ('- when:\n    - a\n    - b is changed\n', [2]),
    ('- that: a.rc not in [0, 1]\n', [0]),
    ('x: "{{ a if b else omit }}"\n', [0]),
    ('x: >-\n  {{ a\n     | selectattr(\'b\')\n     | list }}\n', [2]),
    ('x: >-\n  {%- set e = [] -%}\n  {{ e }}\n', [1]),
])
def test_yaml_lines_that_decide(text, lines):
    assert sorted(CHECK.yaml_deciding_lines(text)) == lines


def test_a_template_loop_prints_and_an_if_decides():
    text = '{% for g in s.gpus %}\n{{ g.index }}\n{% endfor %}\n{% if s.kept %}\nkept\n{% endif %}\n'
    assert sorted(CHECK.deciding_lines(text, template=True)) == [3]
    assert sorted(CHECK.deciding_lines('{% for g in s.gpus if g.free %}{% endfor %}', template=True)) == [0]


def test_the_role_stays_within_the_limit_and_explains_each_line():
    found = CHECK.count(ROOT)
    assert len(found) <= 20
    assert all(entry[3] for entry in found)
