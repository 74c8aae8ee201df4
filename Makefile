# gpuops.nvidia: `make demo` and `make test` work on a fresh machine (root, Debian/Ubuntu host).
# Everything is installed by the targets below: Python tools (pinned) into venvs in ~/.cache/gpuops-lab, linked at
# .venv, the lab's host packages with apt, lab images into ~/.cache/gpuops-lab (reused while fresh).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
COLL_ROOT := .build/collections
COLL_LINK := $(COLL_ROOT)/ansible_collections/gpuops/nvidia
SANITY_DIR := .build/sanity/ansible_collections/gpuops/nvidia
SANITY_VENV := .build/ansible-test-venv
# The lowest ansible-core the collection claims (meta/runtime.yml), with what the tests that run plays need.
MIN_VENV := .build/min-ansible-venv
# ansible-core 2.20 for the Ubuntu 26.04 scenario (its Python 3.14 is a target from 2.20 on), on a Python of 3.12 or later
# (2.20's controllers): the first of python3.14 to python3.12 that runs, else pyenv's newest 3.12 to 3.14.
NEWER_VENV := .build/ansible-2.20-venv
ifndef NEWER_PYTHON
NEWER_PYTHON := $(shell for p in python3.14 python3.13 python3.12 $(sort $(wildcard $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions/3.1[234]*/bin/python3)); do \
  "$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { command -v "$$p"; break; }; done)
endif
NEWER_SCENARIO := ubuntu2604
# Its own toolkit repository port: the runtime scenario serves the lab repository in another lane at the same time.
NEWER_REPO_PORT := 8465
LAB := $(PY) -m lab
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/$(COLL_ROOT)
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Host packages the lab needs: systemd-nspawn, debootstrap, ssh client, zstd, a C compiler for the
# simulated NVML library (and cgo in nvidia-ctk), and gpg to sign the lab's toolkit repository.
LAB_HOST_PACKAGES := systemd-container debootstrap openssh-client zstd gcc libc6-dev gpg
# Timing (docs/development.md, "Time budget"): each step of `make test` appends a line to $(TIMING), the
# table is printed at the end. `molecule test --all` ran the scenarios in this (alphabetical) order.
TIMING := .build/timing.tsv
TIMING_BEGIN := .build/timing-begin
TIME = $(LAB) time run --log $(TIMING) --name
# Each lane of side-by-side in a CPU cgroup of its own (lab/lanes.py): its weight, and its CPU time in the table.
LANES := .build/lanes.tsv
LANE = $(LAB) time lane --log $(LANES)
MOLECULE_SCENARIOS := cluster default hardware runtime
FAST_SCENARIO ?= hardware
# The report runs even when the venv step failed; it never changes make's exit status.
REPORT = "$$([ -x $(PY) ] && echo $(PY) || echo $(PYTHON))" -m lab time report --log $(TIMING) --begin-file $(TIMING_BEGIN) \
	--lanes-log $(LANES)
# After a failed run, the last failures of each failed step again, next to the table (CI shows only the end).
FAILURES = "$$([ -x $(PY) ] && echo $(PY) || echo $(PYTHON))" -m lab time failures --log $(TIMING) --build-dir .build

.PHONY: help versions venv lab-deps collection demo test test-steps checks caches side-by-side test-fast test-fast-steps unit lint sanity sanity-run min-ansible lab-test lab-test-real-node molecule-ubuntu2604 first-install-lane \
	molecule bench lab-up lab-down lab-status lab-toolchain lab-cluster-up lab-cluster-down lab-kubeconfig clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | sort

# The venvs are built once per requirements into the lab's cache, outside the repository, and linked here: a fresh
# clone (CI) finds them there instead of installing again (half a minute each). The key hashes the requirements files
# and the Python's version; a lock keeps two checkouts from building the same one at once, and a venv whose install
# did not finish (no .complete) is built again.
LAB_CACHE := $(or $(GPUOPS_LAB_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpuops-lab)
VENV_CACHE := $(LAB_CACHE)/venv
# $(call cached_venv,LINK,REQUIREMENTS...): the last requirements file is the one installed (it includes the others).
define cached_venv
	key=$$({ cat $(2); $(PYTHON) -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16); \
	  d=$(VENV_CACHE)/$(patsubst .%,%,$(notdir $(1)))-$$key; mkdir -p $(VENV_CACHE) $(dir $(1)); \
	  ( flock 9; [ -f $$d/.complete ] || { rm -rf $$d && $(PYTHON) -m venv $$d && $$d/bin/pip install -q --upgrade pip \
	    && $$d/bin/pip install -q -r $(lastword $(2)) && touch $$d/.complete; } ) 9>$$d.lock; \
	  rm -rf $(1) && ln -sfn $$d $(1) && echo "$(1): $$d"
endef

$(BIN)/.installed: requirements.txt requirements-test.txt
	$(call cached_venv,$(VENV),requirements.txt requirements-test.txt)
	touch $@

venv: $(BIN)/.installed ## install the pinned Python tools into .venv

lab-deps: ## install the lab's host packages (apt) when missing
	@command -v go >/dev/null || { echo "lab-deps: Go not found; the lab cluster builds its control plane with the machine's Go (1.26 or later)"; exit 1; }
	@if command -v systemd-nspawn >/dev/null && command -v debootstrap >/dev/null \
	    && command -v ssh >/dev/null && command -v zstd >/dev/null && command -v gcc >/dev/null \
	    && command -v gpg >/dev/null; then \
	  echo "lab host packages: present"; \
	else \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(LAB_HOST_PACKAGES); \
	fi

$(COLL_LINK):
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

collection: $(COLL_LINK) ## make gpuops.nvidia importable from this checkout

lab-up: venv lab-deps ## boot the default lab machines and write inventories/lab/hosts.yml
	$(LAB) up

lab-down: venv ## stop the lab cluster, toolkit repository and machines (by PID) and remove them
	$(LAB) cluster status --json | grep -q '"running": true' && $(LAB) cluster down || true
	$(LAB) repo down
	$(LAB) down

lab-status: venv ## list the lab machines
	$(LAB) status

lab-toolchain: venv ## build (or find in ~/.cache/gpuops-lab/cluster) the lab cluster's binaries with Go
	$(LAB) cluster build

lab-cluster-up: venv lab-toolchain ## start the lab cluster, one KWOK node per lab machine
	$(LAB) cluster up

lab-cluster-down: venv ## stop the lab cluster's processes (by PID) and remove its state
	$(LAB) cluster down

lab-kubeconfig: ## print the lab cluster's kubeconfig path
	@$(LAB) cluster kubeconfig

demo: venv lab-deps collection lab-up ## set everything up, boot the lab, run playbooks/site.yml against it
	# The lab cluster, a KWOK node per machine, for cluster.yml (a cluster left running is kept).
	$(LAB) cluster status --json | grep -q '"running": true' || $(LAB) cluster up
	# The toolkit's signed apt repository on 127.0.0.1, built from NVIDIA's Go module, and containerd.
	$(LAB) repo up
	$(BIN)/ansible-playbook molecule/shared/kernel.yml -i inventories/lab
	$(BIN)/ansible-playbook molecule/shared/runtime.yml -i inventories/lab
	$(BIN)/ansible-playbook playbooks/site.yml -i inventories/lab -e gpuops_cluster_kubeconfig=$$($(LAB) cluster kubeconfig) \
	  -e gpuops_node_feature_discovery_crds_url=file://$$(dirname $$($(LAB) cluster kubeconfig))/nfd-api-crds.yaml
	@echo "The lab is still running: 'python -m lab ssh lab-noble' to look around, 'make lab-down' to stop it."

# The containerd config edits are tested again on each python3-tomlkit the lab's distributions ship
# (Ubuntu 22.04, Debian 12, Ubuntu 24.04): tomlkit's handling of tables out of order differs by version. The
# field configs meet those tomlkits in the runtime scenario, through the module on each distribution.
DISTRO_TOMLKITS := 0.9.2 0.11.7 0.12.4
TOMLKIT_TESTS := tests/unit/node/test_container_runtime.py

# The collection's unit tests (tests/unit) and the lab's own (tests/lab/unit): pyproject.toml's testpaths, no machine.
unit: venv collection ## unit tests, the collection's and the lab's (the containerd config edits once more per distribution tomlkit)
	$(TIME) unit bash -c 'set -e; $(BIN)/pytest; for v in $(DISTRO_TOMLKITS); do \
	  [ -d $(LAB_CACHE)/tomlkit/$$v/tomlkit ] || $(BIN)/pip install -q --no-deps --target $(LAB_CACHE)/tomlkit/$$v tomlkit==$$v; \
	  echo "tomlkit $$v:"; PYTHONPATH=$(LAB_CACHE)/tomlkit/$$v $(BIN)/pytest -q -p no:cacheprovider $(TOMLKIT_TESTS); done'

lint: venv collection ## ruff, mypy on plugins/ (Python 3.10, typed defs), ansible-lint (production profile)
	$(TIME) lint/ruff $(BIN)/ruff check .
	$(TIME) lint/mypy $(BIN)/mypy
	$(TIME) lint/ansible-lint $(BIN)/ansible-lint --offline
	$(TIME) lint/antsibull-changelog $(BIN)/antsibull-changelog lint

# The collection on the lowest ansible-core it claims (requires_ansible in meta/runtime.yml, pinned in
# tests/min-ansible/requirements.txt): every playbook's syntax, the tests that run plays on this machine (node.yml in
# check mode against localhost, the roles' input checks, the templates' lookup) and the role variables templated by it.
MIN_TESTS := tests/unit/test_playbooks_localhost.py tests/unit/common/test_role_inputs.py \
	tests/unit/cluster/test_objects_template_lookup.py tests/unit/node/test_one_read.py tests/unit/node/test_container_toolkit_variables.py
$(MIN_VENV)/.installed: tests/min-ansible/requirements.txt
	$(call cached_venv,$(MIN_VENV),tests/min-ansible/requirements.txt)
	touch $@

min-ansible: collection $(MIN_VENV)/.installed ## the playbooks and the plays' tests on the lowest ansible-core claimed
	$(TIME) min-ansible $(MIN_VENV)/bin/pytest -q -p no:cacheprovider $(MIN_TESTS)

$(NEWER_VENV)/.installed: PYTHON = $(NEWER_PYTHON)
$(NEWER_VENV)/.installed: tests/ansible-2.20/requirements.txt
	@[ -n "$(NEWER_PYTHON)" ] || { echo "$(NEWER_VENV): no Python 3.12 or later here (ansible-core 2.20's controllers); set NEWER_PYTHON"; exit 1; }
	$(call cached_venv,$(NEWER_VENV),tests/ansible-2.20/requirements.txt)
	touch $@

$(SANITY_VENV)/.installed: requirements-sanity.txt
	$(call cached_venv,$(SANITY_VENV),requirements-sanity.txt)
	touch $@

sanity: venv ## ansible-test sanity on a copy of the collection at its namespace path
	$(TIME) sanity $(MAKE) --no-print-directory sanity-run

# The sanity step itself, timed as one by `sanity` (its venv included).
sanity-run: $(SANITY_VENV)/.installed
	# ansible-test bootstraps pip in each test venv with a script from a host outside the package
	# registries; give it our stand-in (tests/sanity/get_pip_standin.py) under the name it looks for.
	pipver=$$($(SANITY_VENV)/bin/python -c 'import inspect, re; from ansible_test._internal import python_requirements as m; print(re.search(r"pip=.([0-9.]+).", inspect.getsource(m.get_venv_packages))[1])'); \
	  mkdir -p ~/.ansible/test/cache && cp tests/sanity/get_pip_standin.py ~/.ansible/test/cache/get_pip_$${pipver//./_}.py
	rm -rf $(SANITY_DIR) && mkdir -p $(SANITY_DIR)
	git ls-files -z --cached --others --exclude-standard | tar --null --ignore-failed-read -T - -cf - | tar -xf - -C $(SANITY_DIR)
	# ansible-test lists files with git; inside this checkout it would see .build/ as ignored.
	cd $(SANITY_DIR) && git init -q && git add -A
	# Its own venv first on PATH, so python3.11 is the one with ansible-test's requirements. (--venv
	# would fetch a pip bootstrap script from a host that is not reachable here.)
	cd $(SANITY_DIR) && PATH=$(CURDIR)/$(SANITY_VENV)/bin:$$PATH ansible-test sanity --requirements --python 3.11 --color no

lab-test: venv lab-deps ## lab tests: boot machines, check them over SSH, tear down (not the real-node lane)
	$(TIME) lab-test $(BIN)/pytest -p no:cacheprovider --durations=30 -m "not real_node" tests/integration

# The real-node lane (issue 61, docs/lab.md "A real node"): a machine running a real kubelet joined to the lab cluster,
# set up by the collection's playbooks. Its settings are checked first: a port in use or a missing tool is one line.
# make test runs it in lab-test's lane, after lab-test (about 3 minutes alone).
REAL_NODE_BASE_PORT ?= 2361
REAL_NODE_REPO_PORT ?= 8473
lab-test-real-node: venv lab-deps collection ## the real-node lane: a real kubelet in a lab machine, the device plugin and GFD on it
	$(LAB) real-node-check --base-port $(REAL_NODE_BASE_PORT) --repo-port $(REAL_NODE_REPO_PORT)
	GPUOPS_REAL_NODE_BASE_PORT=$(REAL_NODE_BASE_PORT) GPUOPS_REAL_NODE_REPO_PORT=$(REAL_NODE_REPO_PORT) \
	  $(TIME) lab-test-real-node $(BIN)/pytest -p no:cacheprovider --durations=30 -m real_node tests/integration/test_real_node.py

# Each scenario's output is also kept in .build/molecule-NAME.log, where `lab time failures` reads it.
molecule: venv lab-deps collection ## molecule scenarios on lab machines, one at a time (MOLECULE_SCENARIOS=...)
	@mkdir -p .build
	for s in $(MOLECULE_SCENARIOS); do $(TIME) molecule/$$s $(BIN)/molecule test -s $$s 2>&1 | tee .build/molecule-$$s.log; done

# The Ubuntu 26.04 scenario, run by ansible-core 2.20 (molecule/ubuntu2604/molecule.yml says why): that venv's molecule and
# ansible-playbook first on PATH.
molecule-ubuntu2604: lab-deps collection $(NEWER_VENV)/.installed ## the Ubuntu 26.04 scenario, on ansible-core 2.20
	@mkdir -p .build
	PATH=$(CURDIR)/$(NEWER_VENV)/bin:$$PATH GPUOPS_LAB_REPO_PORT=$(NEWER_REPO_PORT) $(TIME) molecule/$(NEWER_SCENARIO) \
	  $(NEWER_VENV)/bin/molecule test -s $(NEWER_SCENARIO) 2>&1 | tee .build/molecule-$(NEWER_SCENARIO).log

test: ## everything CI runs, then the timing table (budget: 40 min warm)
	@mkdir -p $(dir $(TIMING_BEGIN)) && rm -f $(TIMING) $(LANES) && { date +%s.%N; grep '^cpu' /proc/stat || true; } > $(TIMING_BEGIN)
	@rc=0; $(MAKE) --no-print-directory test-steps || rc=$$?; \
	  echo; [ $$rc -eq 0 ] || $(FAILURES) || true; $(REPORT) --budget-min 40 || true; exit $$rc

# Three lanes at once (side-by-side): lab-test; the first install (FIRST_INSTALL: default, the longest scenario, busy
# building DKMS modules, then waiting on its one-node-at-a-time rollout); and the other scenarios one after another
# (SIDE_SCENARIOS, which mostly wait on SSH round trips and lab clusters). Measured on 2026-11-29: lab-test 26:10, the
# first install 28:20 and the others 16:12, and with two lanes the first install ran its last 21 minutes alone, a core
# mostly idle. Both molecule lanes and lab-test use the lab's caches, filled before by `caches`, so none builds an image
# or binary another is building; they take different ports (lab-test's machines from 2300, the side scenarios' from
# 2241, the first install's from FIRST_INSTALL_PORT, lab clusters any free one). lab-test's and the first install's
# output go to files, printed after.
SIDE_SCENARIOS := cluster hardware runtime
# The first install was the long pole (2026-12-03: 48:31 against 29:54 for lab-test and 33:49 for the side scenarios,
# its last 15 minutes alone), so it gets the CPU first: each lane runs in a CPU cgroup of its own (lab/lanes.py), the
# first install at FIRST_INSTALL_WEIGHT, the side scenarios at SIDE_WEIGHT, lab-test at LAB_TEST_WEIGHT, with the
# machines and clusters each starts. `nice` did not do it:
# with the kernel's autogroup scheduling each session weighs the same whatever its nice value, and every lab machine,
# SSH login and cluster component is a session of its own.
FIRST_INSTALL_WEIGHT := 300
# Measured with 300/100/100 on 73c41c1 (docs/development.md, "Time budget"): lab-test ended 31:08 into the run, the
# first install 34:03, the side scenarios 38:31 (runtime's last 4.5 minutes alone): the side lane gets a little more.
SIDE_WEIGHT := 150
LAB_TEST_WEIGHT := 100
FIRST_INSTALL := $(filter-out $(SIDE_SCENARIOS),$(MOLECULE_SCENARIOS))
FIRST_INSTALL_PORT := 2271
LAB_TEST_LOG := .build/lab-test.log
FIRST_INSTALL_LOG := .build/first-install-lane.log
test-steps: venv lab-deps collection checks caches side-by-side

# unit, lint, sanity and min-ansible at once, each into .build/NAME.log (where `lab time failures` looks), printed after in this
# order: each is mostly one busy process, so on 2 cores the three take about as long as the longest, not their sum.
CHECKS := unit lint sanity min-ansible
checks: venv collection ## unit, lint, sanity and min-ansible side by side, their output printed after
	@mkdir -p .build; pids=; for s in $(CHECKS); do \
	  $(MAKE) --no-print-directory $$s > .build/$$s.log 2>&1 & pids="$$pids $$!"; done; rc=0; \
	  for p in $$pids; do wait $$p || rc=1; done; \
	  for s in $(CHECKS); do echo "==== $$s: .build/$$s.log ===="; cat .build/$$s.log; done; exit $$rc

caches: venv lab-deps ## build (or find in ~/.cache/gpuops-lab) the lab's images, cluster binaries, real-node builds and toolkit repository
	$(TIME) caches bash -c '$(LAB) image && $(LAB) cluster build && $(LAB) cluster node-build && $(LAB) repo build'

side-by-side: venv lab-deps collection
	@mkdir -p $(dir $(LAB_TEST_LOG)); rc=0; \
	  $(LANE) --name lab-test --weight $(LAB_TEST_WEIGHT) -- $(MAKE) --no-print-directory lab-test lab-test-real-node > $(LAB_TEST_LOG) 2>&1 & lab=$$!; \
	  GPUOPS_MOLECULE_BASE_PORT=$(FIRST_INSTALL_PORT) $(LANE) --name "$(FIRST_INSTALL) $(NEWER_SCENARIO)" --weight $(FIRST_INSTALL_WEIGHT) -- \
	    $(MAKE) --no-print-directory first-install-lane > $(FIRST_INSTALL_LOG) 2>&1 & first=$$!; \
	  $(LANE) --name "$(SIDE_SCENARIOS)" --weight $(SIDE_WEIGHT) -- \
	    $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS="$(SIDE_SCENARIOS)" || rc=$$?; \
	  wait $$first || rc=$$((rc ? rc : $$?)); wait $$lab || rc=$$((rc ? rc : $$?)); \
	  echo "==== $(FIRST_INSTALL) $(NEWER_SCENARIO) (ran beside the other scenarios and lab-test): $(FIRST_INSTALL_LOG) ===="; cat $(FIRST_INSTALL_LOG); \
	  echo "==== lab-test (ran beside the molecule scenarios): $(LAB_TEST_LOG) ===="; cat $(LAB_TEST_LOG); exit $$rc

# The first install, then the Ubuntu 26.04 scenario on its machine ports (a first install too, on ansible-core 2.20), each
# run whether or not the other passed.
first-install-lane: venv lab-deps collection
	@rc=0; $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS="$(FIRST_INSTALL)" || rc=$$?; \
	  $(MAKE) --no-print-directory molecule-ubuntu2604 || rc=$$((rc ? rc : $$?)); exit $$rc

test-fast: ## the inner loop: unit, lint, sanity, one molecule scenario (FAST_SCENARIO=hardware), timing table
	@mkdir -p $(dir $(TIMING_BEGIN)) && rm -f $(TIMING) $(LANES) && { date +%s.%N; grep '^cpu' /proc/stat || true; } > $(TIMING_BEGIN)
	@rc=0; $(MAKE) --no-print-directory test-fast-steps MOLECULE_SCENARIOS="$(FAST_SCENARIO)" || rc=$$?; \
	  echo; [ $$rc -eq 0 ] || $(FAILURES) || true; $(REPORT) --budget-min 15 || true; exit $$rc

test-fast-steps: venv lab-deps collection checks molecule

bench: venv lab-deps collection ## the measured figures (no-op runs, first install, upgrade, 1000 nodes) into docs/bench.md
	$(PY) -m lab.bench $(BENCH_ARGS)

versions: venv ## write versions.yml's pins into the roles' defaults and argument specs, and render docs/versions.md
	$(PY) -m lab.versions

clean: ## remove build output (not the image cache)
	rm -rf .build tests/output
