# Custom autograd Functions in PyTorch: every command a student, instructor or CI needs.
# Each target that needs the environment depends on `install`, so `make lab` and `make test`
# work on a fresh clone. CI runs exactly `make test` (see .ci/run).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# nbgrader reads autograder/authoring/nbgrader_config.py from here (it ignores --config=), and runs
# `alembic` from PATH when it creates a gradebook: the venv's bin/ must come first.
export JUPYTER_CONFIG_PATH := $(CURDIR)/autograder/authoring
export PATH := $(CURDIR)/$(BIN):$(PATH)

.DEFAULT_GOAL := help
.PHONY: help install lab test release validate clean browser postgres book book-serve benchmark gpu-check \
        roster collect deadline grade feedback report similarity export-grades demo bench-grade bench-check bench-cells \
        student-dist self-study-dist

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

install: $(STAMP)  ## Create .venv and install the tested versions (constraints.txt; idempotent)

# pyproject.toml names ranges; constraints.txt holds the exact versions tested together.
$(STAMP): pyproject.toml constraints.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11 or newer is needed, found " + sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[jupyter,grading,book,test]'
	@# The instructor's JupyterLab (make lab) asks nothing about Jupyter's news (the students' edition's settings do the same)
	$(BIN)/jupyter labextension disable --level=sys_prefix @jupyterlab/apputils-extension:announcements >/dev/null
	touch $@

# Jupyter refuses to start as root unless told to (containers often run as root).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: install  ## Open the student notebooks (course/) in JupyterLab
	$(BIN)/jupyter lab --ServerApp.root_dir=course $(ALLOW_ROOT)

# The test files run in parallel, one worker per core (TEST_WORKERS=1: one after the other); each
# file's tests stay on one worker, so a file's costly fixtures (a graded class, the book) are made
# once per file; the longest files start first (tests/conftest.py: pytest_collection_modifyitems;
# --no-loadscope-reorder keeps that order, which xdist otherwise replaces by the number of tests a file has).
# `logical`, not xdist's `auto`: `auto` counts physical cores (psutil), so a machine of 2 hyperthreads on one core, or
# a virtual machine whose /proc/cpuinfo names no cores (psutil finds none: xdist then falls back to 1), runs ONE
# worker, and the suite takes about twice as long. The end of the run says how many workers ran (tests/timings.py).
TEST_WORKERS ?= logical

test: install browser postgres  ## Run the whole test suite (what CI runs)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

release: install  ## Regenerate course/ from solutions/ with nbgrader
	$(BIN)/python -m autograder release

validate: install  ## Solutions earn full marks; the blank release earns none
	$(BIN)/python -m autograder validate

# The instructor's grading steps: make collect A=01_first_function SOURCE=downloads.zip, then
# grade, feedback and report with the same A (see `python -m autograder COMMAND --help`).
A ?= 01_first_function
SOURCE ?=
LAYOUT ?=
DUE ?=
# The late penalty make deadline sets, as the grading guide and the demo do: PENALTY percent of the score per PER
# (hour or day) started late, never more than MAX percent in all; PENALTY=0 marks late work without a penalty.
PENALTY ?= 10
PER ?= day
MAX ?= 30
ROSTER ?=
JOBS ?=
N ?= 40

roster: install  ## Add the class list ROSTER (a roster CSV, or Canvas's, Moodle's or Blackboard's export) to the gradebook
	@test -n "$(ROSTER)" || { echo "usage: make roster ROSTER=<class list .csv>"; exit 2; }
	$(BIN)/python -m autograder roster $(ROSTER)

collect: install  ## Put submissions from SOURCE (LMS zip or folder; LAYOUT=canvas|moodle|blackboard|folders) into grading/
	@test -n "$(SOURCE)" || { echo "usage: make collect A=<assignment> SOURCE=<folder or .zip> [LAYOUT=canvas]"; exit 2; }
	$(BIN)/python -m autograder collect $(A) $(SOURCE) $(if $(LAYOUT),--layout $(LAYOUT))

deadline: install  ## Set A's due date DUE and late penalty: PENALTY (10) percent per PER (day), at most MAX (30) percent
	@test -n "$(DUE)" || { echo "usage: make deadline A=<assignment> DUE='2026-03-15 23:59' [PENALTY=10] [PER=day] [MAX=30]"; exit 2; }
	$(BIN)/python -m autograder deadline $(A) --due "$(DUE)" --penalty "$(PENALTY)" --per "$(PER)" --max "$(MAX)"

grade: install  ## Autograde every collected submission of A in parallel; writes grading/grades.csv
	$(BIN)/python -m autograder grade $(A) $(if $(JOBS),--jobs $(JOBS))

feedback: install  ## Per-student HTML feedback for A in grading/feedback/
	$(BIN)/python -m autograder feedback $(A)

report: install  ## Score histogram and per-exercise pass rates for A in grading/reports/
	$(BIN)/python -m autograder report $(A)

similarity: install  ## Flag pairs of students of A with similar answers: grading/reports/A/similarity.html
	$(BIN)/python -m autograder similarity $(A)

export-grades: install  ## Grades of A for the LMS in grading/exports/A/: Canvas CSV, CSV with lms_user_id, per test
	$(BIN)/python -m autograder export $(A)

demo: install  ## Instructor quick start: the whole workflow (deadline, similarity, export too) on the demo class
	$(BIN)/python -m autograder demo

bench-grade: install  ## CPU and time of `grade` and sequential `nbgrader autograde` on N (40) of 01, 3 right of 10 and 11
	$(BIN)/python -m autograder bench --students $(N)

bench-check: install  ## CPU and time of the student's `check` (whole command) on blank and filled-in 01, 05, 09, 10, 11; then check_function
	$(BIN)/python -m autograder bench --check

bench-cells: install  ## CPU and Triton programs of each cell and check of A's solution (make bench-cells A=11_flash_attention)
	$(BIN)/python -m autograder bench --cells $(A)

benchmark: install  ## Time CPU vs GPU; write assignment 07's reference data and figures
	$(BIN)/python -m autograder.authoring.record_timings
	$(BIN)/python -m autograder release 07_gpu_timing

# On a bare GPU machine (python3 with torch, numpy, matplotlib and pytest; no install): no .venv needed.
GPU_CHECK_OUT ?= gpu-check-output
gpu-check:  ## Check the GPU half on a GPU: checker, 07, recorder, GPU tests; report in GPU_CHECK_OUT (README)
	PYTHONPATH=. $(PYTHON) -m autograder.authoring.gpu_check $(GPU_CHECK_OUT)

# The browser tests drive Debian's chromium (no Playwright browser download); $CHROMIUM overrides
# its path. Without apt-get (not Debian) nothing is installed and those tests skip, saying why.
CHROMIUM ?= /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

browser:  ## Install Debian's chromium for the browser tests (apt-get, only when missing)
	@test -x $(CHROMIUM) \
	  || { ! command -v apt-get >/dev/null && echo "no $(CHROMIUM) and no apt-get: browser tests will skip"; } \
	  || DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y chromium \
	  || { $(SUDO) apt-get update && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y chromium; }

postgres:  ## Install Debian's PostgreSQL server for the gradebook tests (apt-get, only when missing)
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	  || { ! command -v apt-get >/dev/null && echo "no PostgreSQL and no apt-get: PostgreSQL tests will skip"; } \
	  || DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y postgresql \
	  || { $(SUDO) apt-get update && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y postgresql; }

# The editions hold every assignment unless A=... is typed (A's default above is for the grading targets).
RELEASED = $(if $(filter-out file default undefined,$(origin A)),$(A))

student-dist: install  ## What students get, no solutions: dist/student-edition/ and .zip (all assignments, or A=...)
	$(BIN)/python -m autograder publish $(RELEASED) $(if $(REPOSITORY),--repository $(REPOSITORY))

self-study-dist: install  ## The self-study edition, WITH solutions: dist/self-study-edition/ and .zip (all, or A=...)
	$(BIN)/python -m autograder publish --self-study $(RELEASED) $(if $(REPOSITORY),--repository $(REPOSITORY))

book: install  ## Build the course as a website in book/ (Sphinx + MyST-NB; runs cached in build/book/)
	$(BIN)/python -m autograder book

book-serve: install  ## Build the book, then serve it at http://127.0.0.1:8000/ (as a web server would) until Ctrl-C
	$(BIN)/python -m autograder book --serve

clean:  ## Remove the instructor workspace (grading/), book/, dist/, the demo (build/demo) and caches; keeps .venv
	rm -rf grading book build/book build/demo dist .pytest_cache test-artifacts
	find . -name __pycache__ -not -path './$(VENV)/*' -prune -exec rm -rf {} +
