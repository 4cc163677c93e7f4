# Custom autograd Functions in PyTorch: every command a student, instructor or CI needs.
# Each target that needs the environment depends on `install`, so `make lab` and `make test`
# work on a fresh clone. CI runs exactly `make test` (see .ci/run).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# nbgrader reads autograder/nbgrader_config.py from here (it ignores --config=), and runs
# `alembic` from PATH when it creates a gradebook: the venv's bin/ must come first.
export JUPYTER_CONFIG_PATH := $(CURDIR)/autograder
export PATH := $(CURDIR)/$(BIN):$(PATH)

.DEFAULT_GOAL := help
.PHONY: help install lab test release validate clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(STAMP)  ## Create .venv and install the pinned stack (idempotent)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11 or newer is needed, found " + sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

# Jupyter refuses to start as root unless told to (containers often run as root).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: install  ## Open the student notebooks (course/) in JupyterLab
	$(BIN)/jupyter lab --ServerApp.root_dir=course $(ALLOW_ROOT)

test: install  ## Run the whole test suite (what CI runs)
	$(BIN)/python -m pytest

release: install  ## Regenerate course/ from solutions/ with nbgrader
	$(BIN)/python -m autograder release

validate: install  ## Solutions earn full marks; the blank release earns none
	$(BIN)/python -m autograder validate

clean:  ## Remove the instructor workspace (grading/) and caches; keeps .venv
	rm -rf grading .pytest_cache test-artifacts
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
