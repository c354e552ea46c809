"""Check that galaxy.yml, changelogs/changelog.yaml and CHANGELOG.rst tell the same story.

    python3 scripts/check_release.py

Needs only PyYAML and packaging, which ansible-core brings, so `make build`
runs it without the test tools. The release itself is antsibull-changelog's
normal flow (`make changelog-release`): it records the version in
changelogs/changelog.yaml, consumes the fragments and writes CHANGELOG.rst.

- CHANGELOG.rst has one section per release of changelog.yaml, newest first,
  and no other.
- galaxy.yml's version is either the newest release, with no fragment waiting
  (the tarball is that release), or a later version that is being prepared
  (its fragments wait in changelogs/fragments/).
"""

import os
import re
import sys

import yaml
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def load_yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def rst_versions(text):
    """The release headings of CHANGELOG.rst (``v0.1.0`` underlined with ``=``), in order."""
    return re.findall(r"^v(\S+)\n=+$", text, flags=re.MULTILINE)


def waiting_fragments(folder):
    if not os.path.isdir(folder):
        return []
    return sorted(name for name in os.listdir(folder) if name.endswith((".yml", ".yaml")))


def problems_of(galaxy_version, releases, rst_text, fragments):
    """What disagrees, as sentences; empty when the three files agree."""
    problems = []
    released = sorted(releases, key=Version, reverse=True)
    in_rst = rst_versions(rst_text)
    if in_rst != released:
        problems.append("CHANGELOG.rst has the releases %s, changelogs/changelog.yaml %s: run `make changelog`"
                        % (in_rst, released))
    if not released:
        problems.append("changelogs/changelog.yaml records no release")
        return problems
    newest = released[0]
    if Version(galaxy_version) < Version(newest):
        problems.append("galaxy.yml says version %s, older than the newest release %s" % (galaxy_version, newest))
    elif Version(galaxy_version) == Version(newest) and fragments:
        problems.append("galaxy.yml says version %s, which is released, yet fragments wait for a release: %s; "
                        "set galaxy.yml to the next version" % (galaxy_version, ", ".join(fragments)))
    return problems


def main():
    galaxy_version = str(load_yaml(os.path.join(ROOT, "galaxy.yml"))["version"])
    releases = (load_yaml(os.path.join(ROOT, "changelogs", "changelog.yaml")) or {}).get("releases") or {}
    with open(os.path.join(ROOT, "CHANGELOG.rst")) as handle:
        rst_text = handle.read()
    fragments = waiting_fragments(os.path.join(ROOT, "changelogs", "fragments"))
    problems = problems_of(galaxy_version, [str(version) for version in releases], rst_text, fragments)
    for problem in problems:
        sys.stderr.write("check-release: %s\n" % problem)
    if problems:
        sys.exit(1)
    newest = max(releases, key=lambda version: Version(str(version)))
    state = ("release %s" % galaxy_version if not fragments
             else "%s in preparation, %d fragment(s) waiting" % (galaxy_version, len(fragments)))
    print("check-release: galaxy.yml, changelog.yaml and CHANGELOG.rst agree (newest release %s; %s)"
          % (newest, state))


if __name__ == "__main__":
    main()
