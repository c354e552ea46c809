"""Check a built collection tarball the way a user meets it.

    python3 scripts/check_tarball.py build/dist/gpuops-reclaim-X.Y.Z.tar.gz

- The README's opening (everything before its first second-level heading)
  names no `make` target: the tarball ships no Makefile.
- No file of the development tree ships: Makefile, tests/, scripts/, bench/,
  extensions/, build/, test requirements.
- MANIFEST.json's version is galaxy.yml's, and it names no placeholder URL.
"""

import json
import os
import re
import sys
import tarfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
NOT_SHIPPED = ("Makefile", "tests/", "scripts/", "bench/", "extensions/", "build/",
               "test-requirements.txt", "build-requirements.txt", ".ci/",
               "changelogs/.plugin-cache.yaml")


def problems_of(path):
    problems = []
    with tarfile.open(path) as archive:
        names = archive.getnames()
        readme = archive.extractfile("README.md").read().decode("utf-8")
        manifest = json.loads(archive.extractfile("MANIFEST.json").read().decode("utf-8"))
    opening = re.split(r"^## ", readme, maxsplit=1, flags=re.MULTILINE)[0]
    for match in re.finditer(r"\bmake [a-z][a-z0-9-]*", opening):
        problems.append("README.md opens with `%s`, a target the tarball does not ship" % match.group(0))
    for name in names:
        for entry in NOT_SHIPPED:
            if name == entry.rstrip("/") or (entry.endswith("/") and name.startswith(entry)):
                problems.append("%s ships in the tarball" % name)
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        version = str(yaml.safe_load(handle)["version"])
    info = manifest.get("collection_info", {})
    if info.get("version") != version:
        problems.append("MANIFEST.json says version %s, galaxy.yml %s" % (info.get("version"), version))
    for key in ("repository", "documentation", "homepage", "issues"):
        if info.get(key) and "invalid" in info[key]:
            problems.append("MANIFEST.json %s is a placeholder: %s" % (key, info[key]))
    return problems


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 scripts/check_tarball.py TARBALL")
    problems = problems_of(sys.argv[1])
    for problem in problems:
        sys.stderr.write("check-tarball: %s\n" % problem)
    if problems:
        sys.exit(1)
    print("check-tarball: %s: README opens without make targets; no development files; version %s"
          % (os.path.basename(sys.argv[1]), sys.argv[1].rsplit("-", 1)[-1][:-len(".tar.gz")]))


if __name__ == "__main__":
    main()
