# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Count the lines of Jinja under roles/ that decide, and fail above a limit.

    python3 scripts/check_role_jinja.py [--limit 20] [--list] [ROOT]

The role's decisions belong to its filters (plugins/plugin_utils/_role_plan.py
and the others); its Jinja should only format a value or pass one on. This
counts, per physical line of every .yml, .yaml and .j2 file under roles/, the
Jinja that decides:

- in ``{{ }}`` and in ``{% %}``: a comparison (``==``, ``!=``, ``<``, ``>``,
  ``<=``, ``>=``), a membership or identity test (``in``, ``is``, ``not in``,
  ``is not``), boolean logic (``and``, ``or``, ``not``), an inline
  ``if``/``else``, and the filters that select or combine (``select``,
  ``reject``, ``selectattr``, ``rejectattr``, ``difference``, ``union``,
  ``intersect``, ``symmetric_difference``, ``unique``, ``ternary``, ``min``,
  ``max``);
- the statements ``{% if %}`` and ``{% elif %}``; in task and variable files
  also ``{% for %}`` and ``{% set %}`` (there they compute a value); in
  templates a ``{% for %}`` only with an inline ``if`` (a plain loop prints
  one line per item);
- the values of ``when``, ``that``, ``failed_when``, ``changed_when`` and
  ``until``, which Ansible reads as Jinja without braces, by the same rules:
  a bare variable or a literal is no decision, ``x | length > 0`` is one.

Not counted: a variable, an attribute or an item; a filter that formats or
converts (``join``, ``map``, ``default``, including ``default(omit, true)``
for an optional argument, ``bool``, ``to_nice_json``, the collection's own
filters, which are unit-tested Python); ``{% raw %}``; comments. A line with
several decisions counts once. Strings inside the Jinja are not read, so a
word such as "in" in a message is no decision.

Every counted line must have a comment within the 4 lines above it, or at its
end, that says ``Jinja decides here`` and why it stays in Jinja. With
``--list`` every counted line is printed.
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import sys

import jinja2
import yaml

DECIDING_OPERATORS = frozenset(('==', '!=', '<', '>', '<=', '>='))
DECIDING_NAMES = frozenset(('and', 'or', 'not', 'in', 'is', 'if', 'else'))
DECIDING_FILTERS = frozenset(('select', 'reject', 'selectattr', 'rejectattr', 'difference', 'union', 'intersect',
                              'symmetric_difference', 'unique', 'ternary', 'min', 'max'))
CONDITION_KEYS = frozenset(('when', 'that', 'failed_when', 'changed_when', 'until'))
MARKER = 'Jinja decides here'
COMMENT_REACH = 4
ENVIRONMENT = jinja2.Environment()


def _tokens(source):
    """(line, type, value) of every token of ``source``, lines counted from 0; [] when it does not lex."""
    try:
        return [(line - 1, kind, value) for line, kind, value in ENVIRONMENT.lex(source)]
    except jinja2.TemplateSyntaxError:
        return []


def deciding_lines(source, template=False):
    """The line numbers (from 0) of ``source`` on which Jinja decides, by the rules of the module docstring."""
    lines = set()
    tokens = _tokens(source)
    statement = None
    previous = None
    in_raw = False
    for index, (line, kind, value) in enumerate(tokens):
        if kind == 'block_begin':
            statement = 'start'
            continue
        if kind == 'block_end':
            statement = None
            continue
        if statement == 'start' and kind == 'name':
            statement = value
            if value == 'raw':
                in_raw = True
            elif value == 'endraw':
                in_raw = False
            elif value in ('if', 'elif') or (not template and value in ('for', 'set')):
                lines.add(line)
            previous = (kind, value)
            continue
        if in_raw or kind in ('data', 'whitespace', 'string', 'comment', 'comment_begin', 'comment_end'):
            continue
        deciding = False
        if kind == 'operator' and value in DECIDING_OPERATORS:
            deciding = True
        elif kind == 'name' and value in DECIDING_NAMES:
            # The `in` of a for statement is the loop's, not a test.
            deciding = not (statement == 'for' and value == 'in' and not _seen_in(tokens, index))
        elif kind == 'name' and previous == ('operator', '|') and value in DECIDING_FILTERS:
            deciding = True
        if deciding:
            lines.add(line)
        previous = (kind, value)
    return lines


def _seen_in(tokens, index):
    # Whether an `in` came before this one in the same statement (the first is the loop's).
    for line, kind, value in reversed(tokens[:index]):
        if kind == 'block_begin':
            return False
        if kind == 'name' and value == 'in':
            return True
    return False


def _condition_source(raw):
    """The expression of a braceless condition, as written (block scalar header and quotes removed)."""
    text = raw
    if text[:1] in ('>', '|'):
        rest = text.partition('\n')[2]
        return '\n' + rest
    if text[:1] in ('"', "'") and text[-1:] == text[:1]:
        return ' ' + text[1:-1]
    return text


def _scalars(node, key=None):
    """Every scalar node of a YAML node tree, with the mapping key it is the value of (list items inherit it)."""
    if isinstance(node, yaml.ScalarNode):
        yield node, key
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _scalars(item, key)
    elif isinstance(node, yaml.MappingNode):
        for name, value in node.value:
            yield from _scalars(value, name.value if isinstance(name, yaml.ScalarNode) else None)


def yaml_deciding_lines(text):
    """The line numbers (from 0) of a YAML file on which Jinja decides."""
    lines = set()
    for document in yaml.compose_all(text, Loader=yaml.SafeLoader):
        if document is None:
            continue
        for node, key in _scalars(document):
            raw = text[node.start_mark.index:node.end_mark.index]
            first = node.start_mark.line
            if key in CONDITION_KEYS and '{{' not in raw and '{%' not in raw and isinstance(node.value, str):
                source = '{{ ' + _condition_source(raw) + ' }}'
            elif '{{' in raw or '{%' in raw:
                source = raw
            else:
                continue
            lines.update(first + line for line in deciding_lines(source))
    return lines


def _has_marker(lines, number):
    start = max(0, number - COMMENT_REACH)
    if MARKER in lines[number].partition('#')[2]:
        return True
    return any(line.strip().startswith('#') and MARKER in line for line in lines[start:number]) or any(
        MARKER in line for line in lines[start:number] if line.strip().startswith(('{#', '#')))


def count(root):
    """[(path, line number from 1, text, has its comment)] of every deciding line under ``root``/roles."""
    found = []
    for directory, dirnames, filenames in os.walk(os.path.join(root, 'roles')):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(directory, name)
            if name.endswith(('.yml', '.yaml')):
                with open(path) as handle:
                    text = handle.read()
                numbers = yaml_deciding_lines(text)
            elif name.endswith('.j2'):
                with open(path) as handle:
                    text = handle.read()
                numbers = deciding_lines(text, template=True)
            else:
                continue
            lines = text.splitlines()
            for number in sorted(numbers):
                found.append((os.path.relpath(path, root), number + 1, lines[number].strip(),
                              _has_marker(lines, number)))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('root', nargs='?', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument('--limit', type=int, default=20)
    parser.add_argument('--list', action='store_true', help='print every deciding line')
    args = parser.parse_args(argv)
    found = count(args.root)
    unexplained = [entry for entry in found if not entry[3]]
    for path, number, text, explained in found:
        if args.list or not explained:
            print('%s:%d: %s%s' % (path, number, '' if explained else '(no "%s" comment) ' % MARKER, text))
    print('check_role_jinja: %d line(s) of Jinja under roles/ decide (limit %d), %d without their comment'
          % (len(found), args.limit, len(unexplained)))
    return 1 if len(found) > args.limit or unexplained else 0


if __name__ == '__main__':
    sys.exit(main())
