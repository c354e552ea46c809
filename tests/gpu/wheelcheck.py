"""Check that a folder of wheels holds everything its packages need to run.

    python3 tests/gpu/wheelcheck.py [--python-version 3.12] WHEEL_DIR [LIST]

Every requirement named in LIST (one ``name==version`` a line) must be there as
exactly one wheel, and every ``Requires-Dist`` of every wheel must be met by a
wheel of the folder, with environment markers evaluated for CPython on x86_64
Linux at the given Python version. Exits 1 and says what is missing otherwise.
Uses the copy of ``packaging`` that pip vendors, so it needs nothing but pip.
"""

import argparse
import email.parser
import os
import re
import sys
import zipfile

try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:  # pragma: no cover - depends on the machine
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version


def normalize(name):
    return re.sub(r'[-_.]+', '-', name).lower()


def marker_environment(python_version):
    major_minor = '.'.join(python_version.split('.')[:2])
    full = python_version if python_version.count('.') >= 2 else major_minor + '.0'
    return {
        'implementation_name': 'cpython',
        'implementation_version': full,
        'os_name': 'posix',
        'platform_machine': 'x86_64',
        'platform_python_implementation': 'CPython',
        'platform_release': '',
        'platform_system': 'Linux',
        'platform_version': '',
        'python_full_version': full,
        'python_version': major_minor,
        'sys_platform': 'linux',
        'extra': '',
    }


def read_wheel(path):
    """(name, version, [requirement strings]) from a wheel's METADATA."""
    with zipfile.ZipFile(path) as archive:
        metadata = [name for name in archive.namelist()
                    if name.count('/') == 1 and name.endswith('.dist-info/METADATA')]
        if len(metadata) != 1:
            raise ValueError('%s: expected one .dist-info/METADATA, found %d' % (path, len(metadata)))
        text = archive.read(metadata[0]).decode('utf-8')
    message = email.parser.Parser().parsestr(text, headersonly=True)
    return message['Name'], message['Version'], message.get_all('Requires-Dist') or []


def read_list(path):
    wanted = []
    with open(path) as handle:
        for line in handle:
            line = line.split('#', 1)[0].strip()
            if line:
                wanted.append(Requirement(line))
    return wanted


def check(wheel_dir, wanted, python_version):
    """Return a list of problems; empty when the set is complete."""
    problems = []
    environment = marker_environment(python_version)
    wheels = {}
    for name in sorted(os.listdir(wheel_dir)):
        if not name.endswith('.whl'):
            continue
        dist, version, requires = read_wheel(os.path.join(wheel_dir, name))
        key = normalize(dist)
        if key in wheels:
            problems.append('two wheels of %s: %s and %s; keep one' % (dist, wheels[key][2], name))
            continue
        wheels[key] = (Version(version), requires, name)
    for requirement in wanted:
        found = wheels.get(normalize(requirement.name))
        if found is None:
            problems.append('%s: no wheel in %s' % (requirement, wheel_dir))
        elif not requirement.specifier.contains(found[0], prereleases=True):
            problems.append('%s: the wheel is %s' % (requirement, found[2]))
    for key, (version, requires, filename) in sorted(wheels.items()):
        for text in requires:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            found = wheels.get(normalize(requirement.name))
            if found is None:
                problems.append('%s requires %s: no wheel for it' % (filename, text))
            elif not requirement.specifier.contains(found[0], prereleases=True):
                problems.append('%s requires %s: the wheel is %s' % (filename, text, found[2]))
    return problems, wheels


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--python-version', default='3.12')
    parser.add_argument('wheel_dir')
    parser.add_argument('list', nargs='?')
    args = parser.parse_args(argv)
    wanted = read_list(args.list) if args.list else []
    problems, wheels = check(args.wheel_dir, wanted, args.python_version)
    if problems:
        for problem in problems:
            sys.stderr.write('wheelcheck: %s\n' % problem)
        return 1
    print('wheelcheck: %d wheels in %s cover every requirement for Python %s on x86_64 Linux'
          % (len(wheels), args.wheel_dir, args.python_version))
    return 0


if __name__ == '__main__':
    sys.exit(main())
