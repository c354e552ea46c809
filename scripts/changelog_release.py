"""Release the changelog in a scratch copy, check it, and compare CHANGELOG.rst.

    python3 scripts/changelog_release.py           check (make changelog-release-check)
    python3 scripts/changelog_release.py --write   also write the generated CHANGELOG.rst
                                        into the work tree (make changelog)

The work tree's fragments are never consumed: `antsibull-changelog release`
runs on a copy under build/changelog-release/, for the version in galaxy.yml.
The check fails when the release section misses a module, the role, a
fragment or the release summary (a version_added that differs from the
collection's version drops a module or the role from "New ..."), or when the
CHANGELOG.rst in the work tree is not what the release generates.
"""

import argparse
import datetime
import os
import shutil
import subprocess
import sys

import yaml

from worktree_files import copy_work_tree

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
SCRATCH_BASE = os.path.join(ROOT, "build", "changelog-release")
SCRATCH = os.path.join(SCRATCH_BASE, "ansible_collections", "gpuops", "reclaim")


def fail(problems):
    for problem in problems:
        sys.stderr.write("changelog-release: %s\n" % problem)
    sys.exit(1)


def copy_tree():
    """Tracked and new (not ignored) files, as the collection tree script copies them."""
    if os.path.isdir(SCRATCH_BASE):
        shutil.rmtree(SCRATCH_BASE)
    # antsibull-changelog (vcs: auto) lists files through the copy's own git index.
    copy_work_tree(ROOT, SCRATCH)
    subprocess.run(["git", "add", "-A"], cwd=SCRATCH, check=True)


def load_yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle)


def expected_objects():
    modules = sorted(name[:-3] for name in os.listdir(os.path.join(ROOT, "plugins", "modules"))
                     if name.endswith(".py") and not name.startswith("_"))
    roles = sorted(name for name in os.listdir(os.path.join(ROOT, "roles"))
                   if os.path.isfile(os.path.join(ROOT, "roles", name, "meta", "argument_specs.yml")))
    fragments = sorted(name for name in os.listdir(os.path.join(ROOT, "changelogs", "fragments"))
                       if name.endswith((".yml", ".yaml")))
    # Other plugins, by type: a Python file or, for filters and tests, a YAML documentation file.
    plugins = {}
    for plugin_type in sorted(os.listdir(os.path.join(ROOT, "plugins"))):
        # An action plugin is documented, and released, as the module of its name.
        if plugin_type in ("modules", "module_utils", "doc_fragments", "action"):
            continue
        folder = os.path.join(ROOT, "plugins", plugin_type)
        names = set()
        for name in os.listdir(folder):
            stem, extension = os.path.splitext(name)
            if extension in (".py", ".yml") and not stem.startswith("_") and stem != "__init__":
                names.add(stem)
        if names:
            plugins[plugin_type] = sorted(names)
    return modules, roles, fragments, plugins


def check_release(version, changelog):
    release = (changelog.get("releases") or {}).get(version)
    if not release:
        return ["changelogs/changelog.yaml of the scratch release has no release %s" % version]
    modules, roles, fragments, plugins = expected_objects()
    problems = []
    released_modules = sorted(entry["name"] for entry in release.get("modules", []))
    if released_modules != modules:
        problems.append(
            "release %s lists the new modules %s, expected %s: every module's version_added must be %s"
            % (version, released_modules, modules, version))
    released_roles = sorted(entry["name"] for entry in (release.get("objects") or {}).get("role", []))
    if released_roles != roles:
        problems.append(
            "release %s lists the new roles %s, expected %s: each role's meta/argument_specs.yml main "
            "entry point needs version_added: %s" % (version, released_roles, roles, version))
    for plugin_type, names in plugins.items():
        released = sorted(entry["name"] for entry in (release.get("plugins") or {}).get(plugin_type, []))
        if released != names:
            problems.append("release %s lists the new %s plugins %s, expected %s: each one's version_added must be %s"
                            % (version, plugin_type, released, names, version))
    released_fragments = sorted(release.get("fragments", []))
    if released_fragments != fragments:
        problems.append("release %s holds the fragments %s, expected %s"
                        % (version, released_fragments, fragments))
    if not (release.get("changes") or {}).get("release_summary"):
        problems.append("release %s has no release_summary fragment" % version)
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--write", action="store_true",
                        help="write the generated CHANGELOG.rst into the work tree")
    args = parser.parse_args()

    version = str(load_yaml(os.path.join(ROOT, "galaxy.yml"))["version"])
    copy_tree()
    collections = SCRATCH_BASE
    # antsibull-changelog and the ansible-doc it runs sit beside this Python (the venv).
    tools = os.path.dirname(os.path.abspath(sys.executable))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections,
               PATH=tools + os.pathsep + os.environ.get("PATH", ""))
    subprocess.run([os.path.join(tools, "antsibull-changelog"), "release", "--version", version,
                    "--date", datetime.date.today().isoformat()],
                   cwd=SCRATCH, env=env, check=True)
    problems = check_release(version, load_yaml(os.path.join(SCRATCH, "changelogs", "changelog.yaml")))
    if problems:
        fail(problems)

    with open(os.path.join(SCRATCH, "CHANGELOG.rst")) as handle:
        generated = handle.read()
    current_path = os.path.join(ROOT, "CHANGELOG.rst")
    current = None
    if os.path.exists(current_path):
        with open(current_path) as handle:
            current = handle.read()
    if args.write:
        if current != generated:
            with open(current_path, "w") as handle:
                handle.write(generated)
            print("changelog-release: CHANGELOG.rst written (release %s)" % version)
        else:
            print("changelog-release: CHANGELOG.rst already up to date (release %s)" % version)
        return
    if current != generated:
        fail(["CHANGELOG.rst is not what `antsibull-changelog release` generates from the fragments; "
              "run `make changelog` and commit it"])
    modules, roles, dummy, plugins = expected_objects()
    print("changelog-release: release %s lists %d modules, %d other plugins, %d role(s) and every fragment; "
          "CHANGELOG.rst is up to date" % (version, len(modules), sum(len(names) for names in plugins.values()),
                                           len(roles)))


if __name__ == "__main__":
    main()
