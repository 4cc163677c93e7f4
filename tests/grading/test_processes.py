"""One budget per notebook, and no process of a notebook survives grading (issue 32, items 9 and 10).

Real processes throughout: ``processes`` and ``Budget`` on process trees started here, then real
``python -m autograder grade`` runs of 01_first_function whose notebooks sleep, stall the referee's
checks, detach processes that ignore signals or stop themselves, and loop ignoring their time limit;
afterwards /proc must hold none of them, also when ``grade`` itself was killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.grading.running.confinement import processes
from autograder.grading.running.confinement.budget import Budget
from test_robustness import (ASSIGNMENT, MAX_SCORE, Notebooks, _course, autograded, cell_index, code_cell, grades_csv,
                             write_submissions)

TOKEN = "issue32survivor"  # the name of the notebooks' own processes below: how /proc finds them
SLEEP = "3601.32032"       # and of their sleepers, in the command line


def _tree(code: str) -> subprocess.Popen:
    """A Python process running ``code`` (which starts more), ready when it printed a line."""
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    process.stdout.readline()
    return process


def _named(token: str) -> list[int]:
    """Running processes (not zombies) named ``token``, or running ``sleep token``."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
            name = Path(f"/proc/{entry}/comm").read_text().strip()
            command = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if state != "Z" and (name == token or command[:2] == ["sleep", token]):
            found.append(int(entry))
    return found


def leaves(name: str, sleep: str) -> str:
    """Code that ignores SIGTERM, SIGHUP and SIGINT and leaves two processes: a sleeper detached in a session of
    its own by a double fork (``sleep`` in its command line), and a process that stopped itself (named ``name``)."""
    return f"""
import os, signal
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp('sleep', ['sleep', {sleep!r}])
    os._exit(0)
if os.fork() == 0:
    open('/proc/self/comm', 'w').write({name!r})
    os.kill(os.getpid(), signal.SIGSTOP)  # stopped: it runs no more code, not even a signal handler
    os._exit(0)
"""


def test_a_sandbox_ends_whole_whatever_its_processes_do():
    # Its outer process is a subreaper, as in the sandbox's Landlock mode (in namespaces mode PID 1 of the
    # pid namespace is): the detached sleeper's parent ends, and it becomes the outer process's child.
    subreaper = "import ctypes\nctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER\n"
    tree = _tree(subreaper + leaves("issue32unit", "3600.7123") + "print('ready', flush=True)\nimport time\n"
                 "time.sleep(3600)\n")
    started = processes.start_time(tree.pid)
    deadline = time.monotonic() + 10
    while len(_named("issue32unit") + _named("3600.7123")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert len(_named("issue32unit")) == len(_named("3600.7123")) == 1
    finally:
        assert processes.end_sandbox(tree.pid, started) == []
    tree.wait(timeout=10)
    assert _named("issue32unit") + _named("3600.7123") == []


def test_a_pid_used_again_by_another_process_is_never_killed():
    tree = _tree("import time\nprint('ready', flush=True)\ntime.sleep(60)")
    try:
        processes.end_sandbox(tree.pid, processes.start_time(tree.pid) + 1)  # another start time: not ours
        assert tree.poll() is None
    finally:
        tree.kill()
        tree.wait()


BURNS = """
import os
for _ in range(2):
    if os.fork() == 0:                   # the CPU is burnt by children, not by the process watched
        while True:
            pass
print('ready', flush=True)
os.wait()
"""


def test_a_budget_counts_the_cpu_of_every_process_under_a_sandbox_and_stops_them():
    tree = _tree(BURNS)
    budget = Budget(wall=120.0, cpu=1.0, roots=[(tree.pid, processes.start_time(tree.pid))])
    try:
        tree.wait(timeout=60)
    finally:
        budget.stop()
    assert budget.exceeded == "its processes used more than its budget of 1 s of CPU time"
    assert processes.cpu_seconds([(os.getpid(), processes.start_time(os.getpid()))]) > 0


def test_a_budget_of_wall_clock_time_stops_a_sleeping_sandbox():
    tree = _tree("import time\nprint('ready', flush=True)\ntime.sleep(60)")
    budget = Budget(wall=1.0, cpu=120.0, roots=[(tree.pid, processes.start_time(tree.pid))])
    try:
        tree.wait(timeout=30)
    finally:
        budget.stop()
    assert budget.exceeded == "it ran past its budget of 1 s of wall-clock time" and tree.returncode == -signal.SIGKILL


# ----------------------------------------------------------------------------------------
# Real grade runs


SLEEPS = "import time\ntime.sleep(2.2)\n"
STUBBORN = f"""
import os, signal, time
open('/proc/self/comm', 'w').write('{TOKEN}')
for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)
while True:
    pass
"""
DETACHES = leaves(TOKEN, SLEEP)


def _left() -> list[int]:
    return _named(TOKEN) + _named(SLEEP)


def _grade(course, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, *args], cwd=course.root,
                            env=course.environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One class: a right notebook, and notebooks that overrun their budget or leave processes behind."""
    course = _course(tmp_path_factory.mktemp("budget"))
    notebooks = Notebooks(course.root)
    slow_cells = notebooks.answers()  # 12 cells just under the cell limit, and 4 sleepers forked beside them
    slow_cells["cells"] += [code_cell("forks", "import subprocess\nfor _ in range(4):\n"
                                               f"    subprocess.Popen(['sleep', '{SLEEP}'])\n")]
    slow_cells["cells"] += [code_cell(f"slow-{i}", SLEEPS) for i in range(12)]
    # Every check of the referee waits just under the cell limit: a check calls backward twice (the second call on the
    # same graph must give the same gradients: checker.overwrites), so 2 x 1.2 s of a limit of 3 s.
    slow_answers = notebooks.answers(
        cube=notebooks.in_backward("cube", "import time\nif __name__ != '__main__':\n    time.sleep(1.2)"),
        sqrt=notebooks.in_backward("sqrt", "import time\nif __name__ != '__main__':\n    time.sleep(1.2)"))
    leaves = notebooks.answers()
    leaves["cells"].insert(cell_index(leaves, "cube"), code_cell("detaches", DETACHES))
    leaves["cells"].append(code_cell("stubborn", STUBBORN))
    write_submissions(course, {"right": notebooks.answers(), "slow_cells": slow_cells, "slow_answers": slow_answers,
                               "leaves_processes": leaves})
    run = _grade(course, "--timeout", "3", "--budget", "9", "--memory", "1", "--jobs", "2")
    stdout, stderr = run.communicate(timeout=600)
    time.sleep(1)
    return course, run.returncode, stdout + stderr, grades_csv(course), _left()


@pytest.mark.slow
def test_a_notebook_over_its_budget_is_stopped_and_its_row_says_where(graded):
    course, returncode, output, rows, _ = graded
    assert returncode == 0, output
    assert (float(rows["right"]["score"]), rows["right"]["status"]) == (MAX_SCORE, "graded")
    for student in ("slow_cells", "slow_answers"):
        row = rows[student]
        assert row["status"] == "over budget", row
        assert "budget of 9 s of wall-clock time (cells and the grader's checks together)" in row["detail"], row
        assert "cell " in row["detail"], row
    nb = autograded(course, "slow_cells")
    errors = {c.get("id"): [o["evalue"] for o in c.get("outputs", []) if o["output_type"] == "error"]
              for c in nb["cells"] if c["cell_type"] == "code"}
    stopped = [cell for cell, found in errors.items() if any(e.startswith("over budget: it ran past") for e in found)]
    assert len(stopped) == 1 and stopped[0].startswith("slow-"), errors  # the cell it was in says so
    assert errors["slow-11"][0].startswith("not run: grading of this notebook stopped earlier (over budget")
    assert float(rows["slow_cells"]["score"]) == MAX_SCORE  # its tests ran before the budget was spent
    # Right answers whose checks the budget cut short score 0 for those checks.
    assert float(rows["slow_answers"]["score"]) < MAX_SCORE


@pytest.mark.slow
def test_no_process_of_a_notebook_survives_grade(graded):
    _, _, output, rows, left = graded
    assert left == [], left
    # Its stubborn last cell was stopped (by its time limit or, on a loaded machine, by the budget).
    assert rows["leaves_processes"]["status"] in ("timed out", "over budget"), rows["leaves_processes"]
    assert float(rows["leaves_processes"]["score"]) == MAX_SCORE


@pytest.mark.slow
def test_killing_grade_kills_every_notebook_it_was_running(tmp_path):
    """Issue 32: a notebook that ignores SIGALRM and loops ran on 40 minutes after grade ended."""
    course = _course(tmp_path)
    notebooks = Notebooks(course.root)
    stuck = notebooks.answers()
    stuck["cells"].insert(cell_index(stuck, "cube"), code_cell("detaches", DETACHES))
    stuck["cells"].insert(cell_index(stuck, "cube"), code_cell("stubborn", STUBBORN))
    write_submissions(course, {"stuck": stuck})
    log = tmp_path / "grade.log"  # not a pipe: a survivor holding it open would block reading it
    with log.open("w") as output:
        run = subprocess.Popen([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--timeout", "600",
                                "--memory", "1"], cwd=course.root, env=course.environment(), stdout=output,
                               stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while len(_left()) < 3 and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        assert len(_left()) == 3, log.read_text()  # the loop, the stopped process and the detached sleeper
        os.kill(run.pid, signal.SIGKILL)  # grade alone: its warm process and the notebook are left to themselves
        run.wait()
        deadline = time.monotonic() + 30
        while _left() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _left() == []
    finally:
        for pid in _left():  # what a failure left behind
            os.kill(pid, signal.SIGKILL)
