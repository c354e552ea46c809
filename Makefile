# gpuops.reclaim — set up, demonstrate and test the collection.
#
#   make demo   set everything up and free the GPUs of a simulated 8-GPU host
#   make test   set everything up and run every test
#
# Both targets install what they need (Debian packages, a Python venv, the
# simulated host image) and reuse it on the next run.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

ROOT := $(CURDIR)
VENV := $(ROOT)/.venv
BIN := $(VENV)/bin
PYTHON ?= python3
SIMHOST := $(ROOT)/tests/simhost/simhost
TEST_TREE := $(ROOT)/build/ansible-test/ansible_collections/gpuops/reclaim
SANITY_PYTHON := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')

export ANSIBLE_COLLECTIONS_PATH := $(ROOT)/build/collections
export ANSIBLE_HOME := $(ROOT)/build/ansible-home
export ANSIBLE_LOCAL_TEMP := $(ROOT)/build/ansible-home/tmp
# SSH connection sockets of this checkout's own, so that two checkouts never share a connection to
# simulated hosts of the same name.
export ANSIBLE_SSH_CONTROL_PATH_DIR := $(ROOT)/build/ansible-home/cp
export ANSIBLE_FORCE_COLOR ?= 0
export PATH := $(BIN):$(PATH)
export LC_ALL := C.UTF-8
# The simulated GPU hosts' podman configuration (runc, ulimits, a private store),
# written by tests/simhost/simhost setup; the podman connection plugin needs it too.
export CONTAINERS_CONF := $(ROOT)/build/simhost/containers.conf
export CONTAINERS_STORAGE_CONF := $(ROOT)/build/simhost/storage.conf

# Every molecule scenario except the shared utilities folder.
SCENARIOS ?= $(sort $(filter-out utils,$(notdir $(patsubst %/molecule.yml,%,$(wildcard extensions/molecule/*/molecule.yml)))))

.PHONY: help
help:
	@echo "make demo    free the GPUs of the built-in simulated 8-GPU host"
	@echo "make test    run every test (unit, sanity, lint, changelog, docs, molecule, bench tools)"
	@echo "make bench   run the CPU-side benchmarks and write bench/results/latest.json"

# --- set-up ---------------------------------------------------------------

$(BIN)/.installed: test-requirements.txt build-requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r test-requirements.txt
	touch $@

.PHONY: venv
venv: $(BIN)/.installed

# make test sets up once, then runs its jobs with GPUOPS_SETUP_DONE set: a job
# that runs several at once must not redo (or race) the set-up.
.PHONY: tree
tree: venv
	@[ -n "$${GPUOPS_SETUP_DONE:-}" ] || scripts/collection-tree >/dev/null

.PHONY: testbed
testbed: venv tree
	@[ -n "$${GPUOPS_SETUP_DONE:-}" ] || $(SIMHOST) setup

# --- tests ----------------------------------------------------------------

.PHONY: units
units: tree
	cd $(ROOT) && PYTHONPATH=$(ROOT)/build/collections $(BIN)/python -m pytest -q -p no:cacheprovider tests/unit tests/gpu

# ansible-test downloads a pip bootstrap script from a host that may be out of
# reach; seed its cache with a stand-in that uses the standard library's pip.
ANSIBLE_TEST_GET_PIP := $(HOME)/.ansible/test/cache/get_pip_24_2.py
$(ANSIBLE_TEST_GET_PIP): scripts/get-pip-offline.py
	mkdir -p $(dir $@)
	cp $< $@

# ansible-test's shellcheck test runs only where shellcheck is installed.
.PHONY: shellcheck
shellcheck:
	command -v shellcheck >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null; }

.PHONY: sanity
sanity: tree shellcheck $(ANSIBLE_TEST_GET_PIP)
	scripts/collection-tree --copy >/dev/null
	cd $(TEST_TREE) && $(BIN)/ansible-test sanity --venv --python $(SANITY_PYTHON) --color no $(SANITY_ARGS)

.PHONY: lint
lint: venv
	$(BIN)/ansible-lint --offline --profile production
	$(BIN)/python scripts/check_role_jinja.py

.PHONY: changelog-lint
changelog-lint: venv
	$(BIN)/antsibull-changelog lint

# Build the collection tarball, install it into a scratch path, and check that
# every module's documentation renders from the installed copy, with at most
# 120 lines before its first option and a short text per option in -s.
.PHONY: docs
docs: venv
	rm -rf build/dist build/installed
	mkdir -p build/dist build/installed
	$(BIN)/ansible-galaxy collection build --force --output-path build/dist .
	$(BIN)/ansible-galaxy collection install --force -p build/installed build/dist/gpuops-reclaim-*.tar.gz
	for module in $$(ls plugins/modules/*.py 2>/dev/null | xargs -rn1 basename | sed 's/\.py$$//'); do \
	  ANSIBLE_COLLECTIONS_PATH=$(ROOT)/build/installed $(BIN)/ansible-doc gpuops.reclaim.$$module >/dev/null; \
	  echo "ansible-doc gpuops.reclaim.$$module: ok"; \
	done
	$(BIN)/python scripts/check_docs.py $(ROOT)/build/installed

.PHONY: molecule
molecule: testbed
	for scenario in $(SCENARIOS); do \
	  echo "=== molecule scenario $$scenario"; \
	  $(BIN)/molecule test -s $$scenario || exit 1; \
	done

# bench/nshosts.py (the fleet benchmark's namespace hosts) needs the stand-in NVML that the testbed builds.
.PHONY: bench-tests
bench-tests: testbed
	cd $(ROOT) && $(BIN)/python -m pytest -q -p no:cacheprovider tests/bench

# --- versions, packaging, release --------------------------------------------

# Units and sanity on every ansible-core release of tests/matrix/versions.txt
# (MATRIX_VERSIONS="2.16 2.21" for some); 2.20 and later in a Debian 13 container.
MATRIX_VERSIONS ?=
.PHONY: matrix
matrix: testbed
	$(PYTHON) scripts/matrix.py $(MATRIX_VERSIONS)

# The oldest and the newest release of the matrix.
.PHONY: matrix-test
matrix-test: testbed
	$(PYTHON) scripts/matrix.py --ends

# One scenario on a Debian 13 simulated host (GPUSIM_DISTRIBUTION reaches
# tests/simhost/simhost up through the scenario's create playbook).
DEBIAN13_SCENARIO ?= incident
.PHONY: molecule-debian13
molecule-debian13: testbed
	GPUSIM_DISTRIBUTION=debian13 $(BIN)/molecule test -s $(DEBIAN13_SCENARIO)

# The collection tarball, in build/dist/, built by ansible-core alone (a venv of
# its own: no test tool is installed). Before building, galaxy.yml, the
# changelog and CHANGELOG.rst must agree; the tarball's README must not send a
# user to make targets that the tarball does not ship.
BUILD_VENV := $(ROOT)/build/build-venv
$(BUILD_VENV)/.installed: build-requirements.txt
	$(PYTHON) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/pip install --quiet --disable-pip-version-check -r build-requirements.txt
	touch $@

.PHONY: build
build: $(BUILD_VENV)/.installed
	$(BUILD_VENV)/bin/python scripts/check_release.py
	rm -rf build/dist
	mkdir -p build/dist
	$(BUILD_VENV)/bin/ansible-galaxy collection build --force --output-path build/dist .
	$(BUILD_VENV)/bin/python scripts/check_tarball.py build/dist/gpuops-reclaim-*.tar.gz

# The release, antsibull-changelog's normal flow: the version of galaxy.yml is
# recorded in changelogs/changelog.yaml with the waiting fragments, which are
# consumed, and CHANGELOG.rst is written. Commit the result, then tag it.
.PHONY: changelog-release
changelog-release: venv
	$(BIN)/antsibull-changelog release

# Regenerate CHANGELOG.rst from changelogs/changelog.yaml.
.PHONY: changelog
changelog: venv
	$(BIN)/antsibull-changelog generate

# The fragments and changelog.yaml are valid, CHANGELOG.rst is what
# changelog.yaml generates, and galaxy.yml's version agrees with both.
.PHONY: changelog-check
changelog-check: changelog-lint
	mkdir -p build
	cp CHANGELOG.rst build/CHANGELOG.rst.committed
	$(BIN)/antsibull-changelog generate
	if ! cmp -s CHANGELOG.rst build/CHANGELOG.rst.committed; then \
	  diff -u build/CHANGELOG.rst.committed CHANGELOG.rst | head -40; \
	  cp build/CHANGELOG.rst.committed CHANGELOG.rst; \
	  echo "CHANGELOG.rst is not what antsibull-changelog generate writes from changelogs/changelog.yaml: run make changelog" >&2; \
	  exit 1; \
	fi
	$(BIN)/python scripts/check_release.py

# The set-up first, once (the stand-in NVML's own unit tests need the nvml.h
# the testbed unpacks); then units, sanity, lint, docs, build, every molecule
# scenario, the Debian 13 run, the version matrix and the bench tools, several
# at a time (scripts/run_tests.py; TEST_JOBS=1 runs them one by one).
.PHONY: test
test: venv tree testbed shellcheck $(ANSIBLE_TEST_GET_PIP) changelog-check
	$(PYTHON) scripts/run_tests.py
	@echo "make test: all passed"

# --- demonstration ---------------------------------------------------------

.PHONY: demo
demo: testbed
	scripts/demo

.PHONY: bench
bench: testbed
	$(BIN)/python bench/run.py

.PHONY: gpu-acceptance
gpu-acceptance:
	tests/gpu/run

.PHONY: clean
clean:
	-$(SIMHOST) down --all-created 2>/dev/null
	rm -rf build tests/output
