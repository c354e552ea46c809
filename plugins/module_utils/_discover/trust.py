# -*- coding: utf-8 -*-
# Copyright (c) gpuops.reclaim contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The facts a protection counts on: the names a process goes by, and why a name cannot be trusted.

``names_of`` gives the names a process is known by (its executable, the script an interpreter runs, and,
where the executable cannot be read, its command and ``comm``). ``doubts_of`` says, for each way a name
was found, why it proves nothing: an executable or script another user than root could have put there
(``untrusted_file``, walked from the process's own root directory without following a link a writable
directory holds), a script the kernel did not start, a process that runs as a person. ``protection.judge``
decides from these.

This file imports nothing from Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re
import stat

from .._host.safe_file import untrusted_reason

PROC_ROOT = '/proc'

# The kernel keeps TASK_COMM_LEN - 1 characters of a name in comm.
COMM_LENGTH = 15

# Accounts of people start here (login.defs' UID_MIN); below are root and the system's accounts.
FIRST_PERSON_UID = 1000

# Symbolic links followed in one path, as the kernel allows (MAXSYMLINKS).
MAX_LINKS = 40

# The first line of a script the kernel runs (#! and its interpreter): the kernel reads at most 256 bytes.
SHEBANG_BYTES = 256

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)

# Programs that run another program's code: the script they run names the process.
INTERPRETER = re.compile(r'^(python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|'
                         r'bash|sh|dash|java)$')

# Interpreter options followed by a value, and those followed by code (no script then).
VALUE_OPTIONS = ('-X', '-W', '-Q', '-I', '-r', '--require', '-cp', '-classpath')
CODE_OPTIONS = ('-c', '-e', '-E', '--eval')


def script_argument(title):
    """``(word, how)``: what an interpreter's command line says it runs, or ``(None, None)``.

    ``how`` is ``script`` (the first argument that is no option: a path) or
    ``module`` (``-m NAME``). Code given on the command line (``-c``) names
    nothing.
    """
    words = (title or '').split()
    position = 1
    while position < len(words):
        word = words[position]
        if word in CODE_OPTIONS:
            return None, None
        if word == '-m' and position + 1 < len(words):
            return words[position + 1], 'module'
        if word in VALUE_OPTIONS:
            position += 2
            continue
        if word.startswith('-'):
            position += 1
            continue
        return word, 'script'
    return None, None


def script_of(title):
    """Basename of the script an interpreter runs, from its command line, or None.

    ``python3 -u /usr/bin/dcgm-exporter --port 9400`` gives ``dcgm-exporter``;
    ``python3 -m dcgm_exporter`` gives ``dcgm_exporter``.
    """
    word, how = script_argument(title)
    if how == 'module':
        return word
    return (os.path.basename(word) or None) if word else None


def names_of(exe=None, comm=None, title=None):
    """The names a process is known by for protection: ``[(name, how)]``.

    ``how`` is ``executable``, ``script`` (the script of an interpreter),
    ``command`` (the first word of the command line, only where the
    executable cannot be read) or ``comm`` (likewise).
    """
    names = []
    executable = os.path.basename(exe) if exe else None
    if executable:
        names.append((executable, 'executable'))
    else:
        first = (title or '').split()[:1]
        if first and os.path.basename(first[0]):
            names.append((os.path.basename(first[0]), 'command'))
        if comm:
            names.append((comm, 'comm'))
    # The script counts only while the command line still starts with the
    # interpreter: a process that retitled itself (setproctitle) names no script.
    interpreter = executable or (names[0][0] if names else None)
    first = os.path.basename(((title or '').split() or [''])[0])
    if interpreter and INTERPRETER.match(interpreter) and INTERPRETER.match(first):
        script = script_of(title)
        if script:
            names.append((script, 'script'))
    return names


# --- the facts ----------------------------------------------------------------------

def doubts_of(record, proc_root=PROC_ROOT):
    """``doubt(name, how)`` for ``judge``: why a process's name cannot be trusted, read once from ``proc_root``."""
    found = {}

    def doubt(name, how):
        if how not in found:
            if how == 'executable':
                found[how] = executable_doubt(record.get('pid'), record.get('exe'), proc_root)
            elif how == 'script':
                found[how] = script_doubt(record, proc_root)
            else:
                found[how] = 'its executable cannot be read, so nothing shows that it runs that program'
        return found[how]
    return doubt


def executable_doubt(pid, exe, proc_root=PROC_ROOT):
    """Why the executable ``pid`` runs is not one only root could have put at ``exe``, or None."""
    if not exe:
        return 'its executable cannot be read'
    try:
        running = os.stat('%s/%d/exe' % (proc_root, pid))
    except (OSError, TypeError) as exc:
        return 'its executable cannot be read (%s)' % getattr(exc, 'strerror', exc)
    return untrusted_file(exe, '%s/%d/root' % (proc_root, pid), running)


def script_doubt(record, proc_root=PROC_ROOT):
    """Why the script an interpreter's command line names is not shown to be what the kernel started, or None."""
    pid, title, comm = record.get('pid'), record.get('title') or '', record.get('name') or ''
    words = title.split()
    first = os.path.basename(words[0]) if words else ''
    if not INTERPRETER.match(first):
        return 'its command line does not start with an interpreter (it was retitled)'
    word, how = script_argument(title)
    if how != 'script':
        return 'it runs no script file (%s)' % ('a module, -m %s' % word if how == 'module' else 'code')
    if not word.startswith('/'):
        return 'its script %s is no absolute path' % word
    if comm != os.path.basename(word)[:COMM_LENGTH]:
        return ('its comm is %s, not %s: the kernel did not start %s as a #! script, so its command line may be '
                'a title' % (comm, os.path.basename(word)[:COMM_LENGTH], word))
    uid = record.get('uid')
    if not isinstance(uid, int) or uid >= FIRST_PERSON_UID:
        return 'it runs as uid %s, not as root or a system account' % uid
    interpreter = executable_doubt(pid, record.get('exe'), proc_root)
    if interpreter:
        return 'its interpreter %s: %s' % (record.get('exe'), interpreter)
    root = '%s/%d/root' % (proc_root, pid)
    found = untrusted_file(word, root)
    if found:
        return found
    try:
        with open(root + word, 'rb') as handle:
            line = handle.read(SHEBANG_BYTES).split(b'\n')[0]
        program = line[2:].split()[0].decode('utf-8', 'replace') if line.startswith(b'#!') and line[2:].split() \
            else None
        if program is None:
            return '%s is no #! script, so the kernel cannot have started an interpreter for it' % word
        named, running = os.stat(root + program), os.stat('%s/%d/exe' % (proc_root, pid))
    except OSError as exc:
        return '%s cannot be read (%s)' % (word, exc.strerror)
    if (named.st_dev, named.st_ino) != (running.st_dev, running.st_ino):
        return 'the first line of %s names %s, not the interpreter it runs' % (word, program)
    return None


def untrusted_file(path, root='/', running=None):
    """Why another user than root could have put (or changed) the file at ``path``, or None.

    ``path`` is walked from ``root`` (a process's ``/proc/PID/root``: its own
    view of the files), one directory at a time without following a link a
    directory another user can write holds: each directory must be root's and
    writable by nobody else, or sticky and root's (``/tmp``) except the
    file's own directory, where anyone could add a name for a file of root's;
    the file must be a regular file of root's that only root can write.
    ``running`` is the ``os.stat`` of the file a process runs
    (``/proc/PID/exe``), which decides instead of the name's entry: the name
    may have been replaced since (a package upgrade).
    """
    if not isinstance(path, str) or not path.startswith('/'):
        return 'its path %r is not absolute' % (path,)
    pending = [part for part in path.split('/') if part and part != '.']
    walked = []
    links = 0
    try:
        current = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))
    except OSError as exc:
        return 'its root directory cannot be read (%s)' % exc.strerror
    try:
        while True:
            folder = os.fstat(current)
            reason = untrusted_reason(folder, euid=0)
            if reason:
                return '%s is %s' % ('/' + '/'.join(walked), reason)
            if not pending:
                return '%s is a directory' % path
            name = pending.pop(0)
            if name == '..':
                # Walked again from the root, so that no directory above the root is ever reached.
                pending = walked[:-1] + pending
                walked = []
                following = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))
                os.close(current)
                current = following
                continue
            if not pending and running is not None:
                entry = running
            else:
                entry = os.stat(name, dir_fd=current, follow_symlinks=False)
            if stat.S_ISLNK(entry.st_mode):
                # Its directory passed the test: only root could have made it. Its target by the same rule.
                links += 1
                if links > MAX_LINKS:
                    return 'too many symbolic links in %s' % path
                target = os.readlink(name, dir_fd=current)
                pending = [part for part in target.split('/') if part and part != '.'] + pending
                if target.startswith('/'):
                    walked = []
                    following = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, 'O_CLOEXEC', 0))
                    os.close(current)
                    current = following
                continue
            if not pending:
                here = '/' + '/'.join(walked + [name])
                if folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    return '%s is in a directory others can write (mode %04o)' % (here, stat.S_IMODE(folder.st_mode))
                if not stat.S_ISREG(entry.st_mode):
                    return '%s is not a regular file' % here
                if entry.st_uid != 0:
                    return '%s is owned by uid %d, not by root' % (here, entry.st_uid)
                if entry.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    return '%s is writable by others (mode %04o)' % (here, stat.S_IMODE(entry.st_mode))
                return None
            if not stat.S_ISDIR(entry.st_mode):
                return '%s is not a directory' % ('/' + '/'.join(walked + [name]))
            following = os.open(name, _DIRECTORY_FLAGS, dir_fd=current)
            os.close(current)
            current = following
            walked.append(name)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return '%s does not exist' % path
        return '%s cannot be checked (%s)' % (path, exc.strerror)
    finally:
        os.close(current)
