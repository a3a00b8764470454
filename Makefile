# csi_hostpath: run `make help` for the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
RUN_DIR ?= $(CURDIR)/.run
ENDPOINT ?= unix://$(RUN_DIR)/csi.sock
NODE_ID ?= $(shell hostname)
PYTEST_ARGS ?=
# The real csi-sanity, installed at its pinned version (tools/go-tools.txt) into the cache outside
# the checkout by tools/go-tools.sh; see tests/conformance.
CSI_SANITY ?= $(shell bash tools/go-tools.sh path csi-sanity)

.PHONY: help install system-deps go-tools proto run demo doctor test unit lint shell-scripts \
	typecheck clean clean-volumes

.DEFAULT_GOAL := help
# Deployment, reliability and benchmark targets live in their own fragments.
-include mk/*.mk

# Target names may hold digits (kind-e2e) and capitals.
help:  ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install: $(VENV)/.installed  ## create the venv and install the package with its dev tools

# pip shows its build backend's warnings, and setuptools warns on every editable install of a
# flat layout that a folder named like the package in the working directory would shadow it
# (here that folder is the package itself). Only that notice is dropped, by its title: any other
# warning of the build, and every error, still shows.
EDITABLE_NOTICE := -W 'ignore:Editable installation.:UserWarning'
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) $(EDITABLE_NOTICE) -m pip install -q -e '.[dev]'
	@touch $@

# A tool that can't be installed here (not root, no apt) is named with its package; the tests that
# need it skip, and the driver's doctor says the same.
system-deps:  ## install the system tools (e2fsprogs, xfsprogs, util-linux) if missing (root + apt)
	@bash tools/ensure-system-deps.sh --soft

# Without Go the conformance tests skip and name this command; .ci/run installs them strictly.
go-tools:  ## install the pinned Go test tools (csi-sanity) from the Go module proxy
	@bash tools/go-tools.sh --soft install csi-sanity

proto: install  ## regenerate csi_hostpath/_pb from proto/csi.proto (pinned grpcio-tools)
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH bash tools/genproto.sh

# tools/run-local.sh stops the driver on Ctrl-C or on a SIGTERM or SIGINT to make, then names the
# volumes still mounted.
run: install system-deps  ## serve the driver on a local socket, state in ./.run (Ctrl-C stops it)
	@mkdir -p $(RUN_DIR)
	@echo "csi-hostpath: socket $(RUN_DIR)/csi.sock, state $(RUN_DIR)/state"
	@bash tools/run-local.sh $(RUN_DIR) $(PY) $(VENV)/bin/csi-hostpath serve \
		--endpoint $(ENDPOINT) --node-id $(NODE_ID) --state-dir $(RUN_DIR)/state

demo: install  ## take a volume through every phase on the driver `make run` serves
	$(VENV)/bin/csi-hostpath demo --endpoint $(ENDPOINT) --state-dir $(RUN_DIR)/state

doctor: install  ## check this machine (loop devices, tools, kernel, pool) and say what to fix
	$(VENV)/bin/csi-hostpath doctor --state-dir $(RUN_DIR)/state --endpoint $(ENDPOINT)

# The venv's ruff, the one `install` put there, so the format check is the same everywhere.
lint: install  ## ruff check, ruff format --check (every Python file), mypy --strict, shellcheck (every shell script)
	$(VENV)/bin/ruff check csi_hostpath tests
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/shellcheck -x $(SHELL_SCRIPTS)

# Every shell script git tracks: each *.sh, and each file whose first line runs sh or bash (".!"
# stands for the shebang's two characters: a number sign would start a comment in older makes).
SHELL_SCRIPTS = $(shell git ls-files -z | xargs -0 awk \
	'FNR == 1 { if (FILENAME ~ /\.sh$$/ || $$0 ~ /^.!.*[\/ ](ba)?sh( |$$)/) print FILENAME; nextfile }')

shell-scripts:  ## list the shell scripts `make lint` runs shellcheck on
	@printf '%s\n' $(SHELL_SCRIPTS)

typecheck: lint  ## alias of lint

test: install system-deps go-tools lint  ## lint, then every test, the real csi-sanity included (real loop devices: needs root)
	CSI_SANITY=$(CSI_SANITY) $(PY) -m pytest -q $(PYTEST_ARGS)

# The fast tests keep their scratch files on tmpfs where there is one: none of them measures
# durability, and fsync on a busy shared disk was a third of their time.
unit: install  ## the fast tests only (no root needed, under a minute)
	TMPDIR=$$([ -w /dev/shm ] && echo /dev/shm || echo "$${TMPDIR:-/tmp}") \
		$(PY) -m pytest -q -m 'not real' $(PYTEST_ARGS)

# Every local volume and snapshot lives in $(RUN_DIR): clean never touches it.
clean:  ## remove the venv and the caches (never the volumes in ./.run: see clean-volumes)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis *.egg-info

# Runs without the venv (clean may have removed it): the code it needs is standard library only.
LOCAL_PY = $(if $(wildcard $(PY)),$(PY),python3)
clean-volumes:  ## delete ./.run with every local volume and snapshot; refused while in use (YES=1: don't ask)
	@PYTHONPATH=$(CURDIR) $(LOCAL_PY) -m csi_hostpath run-dir remove --run-dir $(RUN_DIR) \
		$(if $(YES),--yes)
