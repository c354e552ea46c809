"""Check that every module's documentation stays short where a user reads it first.

    python3 scripts/check_docs.py COLLECTIONS_PATH

For each module of plugins/modules/, as `ansible-doc` prints it from the
collection installed under COLLECTIONS_PATH (output to a pipe, so at Ansible's
narrowest width, 79 columns):

- at most MAX_LINES_BEFORE_OPTIONS lines come before the first option (the
  long prose lives in docs/modules.md);
- in `ansible-doc -s`, no option's comment runs over MAX_SNIPPET_LINES lines,
  so that the snippet reads as a task to paste.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
MAX_LINES_BEFORE_OPTIONS = 120
MAX_SNIPPET_LINES = 10
# ansible-doc marks the heading in bold when it thinks the output is a terminal; match it either way.
OPTIONS_HEADING = re.compile(r'^(\x1b\[[0-9;]*m)?OPTIONS(\x1b\[[0-9;]*m)? ')
SNIPPET_OPTION = re.compile(r'^      (\w+):')


def ansible_doc(collections_path, *args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections_path, ANSIBLE_NOCOLOR='1')
    tool = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), 'ansible-doc')
    result = subprocess.run([tool] + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            universal_newlines=True, check=False)
    if result.returncode != 0 or '[ERROR]' in result.stderr:
        raise SystemExit('check-docs: ansible-doc %s failed: %s' % (' '.join(args), result.stderr.strip()))
    return result.stdout.splitlines()


def lines_before_options(text_lines):
    for number, line in enumerate(text_lines):
        if OPTIONS_HEADING.match(line):
            return number
    return None


def snippet_lines_per_option(snippet_lines):
    counts, current = {}, None
    for line in snippet_lines:
        match = SNIPPET_OPTION.match(line)
        if match:
            current = match.group(1)
            counts[current] = 0
        if current:
            counts[current] += 1
    return counts


def problems_of(module, text_lines, snippet_lines):
    problems = []
    before = lines_before_options(text_lines)
    if before is None:
        problems.append('%s: ansible-doc prints no OPTIONS heading' % module)
    elif before > MAX_LINES_BEFORE_OPTIONS:
        problems.append('%s: %d lines before the first option, more than %d: move prose to docs/modules.md'
                        % (module, before, MAX_LINES_BEFORE_OPTIONS))
    for option, count in sorted(snippet_lines_per_option(snippet_lines).items()):
        if count > MAX_SNIPPET_LINES:
            problems.append('%s: option %s takes %d lines in ansible-doc -s, more than %d: shorten its description'
                            % (module, option, count, MAX_SNIPPET_LINES))
    return problems, before


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: python3 scripts/check_docs.py COLLECTIONS_PATH')
    modules = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, 'plugins', 'modules'))
                     if name.endswith('.py') and not name.startswith('_'))
    problems = []
    for module in modules:
        name = 'gpuops.reclaim.' + module
        found, before = problems_of(module, ansible_doc(sys.argv[1], name), ansible_doc(sys.argv[1], '-s', name))
        problems.extend(found)
        print('check-docs: %s: %s lines before the first option' % (name, before))
    for problem in problems:
        sys.stderr.write('check-docs: %s\n' % problem)
    if problems:
        sys.exit(1)
    print('check-docs: %d modules, at most %d lines before the first option and %d per option in -s'
          % (len(modules), MAX_LINES_BEFORE_OPTIONS, MAX_SNIPPET_LINES))


if __name__ == '__main__':
    main()
