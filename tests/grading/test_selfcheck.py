"""python -m autograder check: one notebook graded locally against the full tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from autograder.student.checker.messages import NOT_DONE
from conftest import REPO, filled_release, solution_answers
from test_grading import hidden_test_lines

ASSIGNMENT = "01_first_function"


def _check(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", "check", str(path)],
                          capture_output=True, text=True, cwd=REPO)


@pytest.mark.slow
def test_check_reports_each_test_and_why_it_failed(tmp_path):
    """A notebook with one typical bug: every other test passes, the buggy one says why."""
    answers = solution_answers(REPO, ASSIGNMENT)
    # A typical bug: Cube's backward forgets the chain rule.
    assert "return grad_output * 3 * x ** 2" in answers["cube"]
    answers["cube"] = answers["cube"].replace("return grad_output * 3 * x ** 2", "return 3 * x ** 2")
    released = filled_release(REPO, ASSIGNMENT, answers)
    mine = tmp_path / f"{ASSIGNMENT}.ipynb"
    mine.write_text(json.dumps(released))

    result = _check(mine)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(l.startswith("FAIL  0/2  test_cube_backward") for l in lines)
    assert "you forgot to multiply by grad_output" in result.stdout
    assert any(l.startswith("PASS  3/3  test_sqrt") for l in lines)
    assert "score: 9 / 11" in result.stdout
    assert "BEGIN HIDDEN" not in result.stdout and "torch.randn(4, 5)" not in result.stdout


@pytest.mark.slow
def test_check_of_the_blank_release_fails_everything():
    result = _check(REPO / "course" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    assert result.returncode == 1
    assert "score: 0 / 11" in result.stdout
    # One message per test, the one the feedback page shows (and the grading kernels, and the notebook's checks).
    lines = result.stdout.splitlines()
    failing = [i for i, line in enumerate(lines) if line.startswith("FAIL")]
    assert len(failing) == 5
    assert [lines[i + 1] for i in failing] == [f"      NotImplementedError: {NOT_DONE}"] * 5
    assert all(lines[i + 2].startswith(("FAIL", "score:")) for i in failing)


def test_check_of_a_missing_notebook_is_one_clear_line(tmp_path):
    result = _check(tmp_path / "nope.ipynb")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: no notebook at {tmp_path / 'nope.ipynb'}"]


@pytest.mark.slow
def test_check_of_a_notebook_that_compiles_writes_nothing_on_stderr(tmp_path):
    """09 compiles with torch.compile, whose graphs run under a silent tqdm bar: check must not end with
    multiprocessing's "leaked semaphore objects" warning (or anything else) on the student's terminal."""
    assignment = "09_production_pytorch"
    mine = tmp_path / f"{assignment}.ipynb"
    mine.write_text(json.dumps(filled_release(REPO, assignment, solution_answers(REPO, assignment))))
    result = _check(mine)
    assert result.returncode == 0 and "6 passed, 0 failed" in result.stdout, result.stdout + result.stderr
    assert result.stderr == "", result.stderr


def _course_copy(tmp_path, with_solutions: bool = True):
    import shutil

    root = tmp_path / "course-copy"
    for folder in ("solutions", "course") if with_solutions else ("course",):
        shutil.copytree(REPO / folder, root / folder)
    return root


def _check_in(root, path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", "check", str(path)], capture_output=True, text=True,
                          cwd=root, env={**os.environ, "AUTOGRADER_COURSE_ROOT": str(root)})


UNTITLED = {"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@pytest.mark.slow
def test_check_ignores_other_notebooks_and_leaves_nothing_a_later_check_trips_on(tmp_path):
    root = _course_copy(tmp_path)
    solution = root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    mine = tmp_path / "mine" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"  # where a student keeps a copy
    mine.parent.mkdir(parents=True)
    mine.write_bytes(solution.read_bytes())
    before = _check_in(root, mine)
    assert before.returncode == 0 and "score: 11 / 11" in before.stdout, before.stdout + before.stderr
    blank = _check_in(root, root / "course" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")  # a check that fails
    assert blank.returncode == 1 and "score: 0 / 11" in blank.stdout
    for folder in ("solutions", "course"):  # JupyterLab's "+" in the assignment's folders
        (root / folder / ASSIGNMENT / "Untitled.ipynb").write_text(json.dumps(UNTITLED))
    again = _check_in(root, mine)
    assert (again.returncode, again.stdout) == (0, before.stdout), again.stdout + again.stderr
    renamed = mine.with_name("my copy of the assignment.ipynb")  # named by its folder instead
    mine.rename(renamed)
    assert _check_in(root, renamed).stdout == before.stdout
    assert not (root / "grading" / ".check").exists()


@pytest.mark.slow
def test_two_checks_at_once_and_a_check_after_the_tests_changed(tmp_path):
    root = _course_copy(tmp_path)
    solution = root / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    runs = [subprocess.Popen([sys.executable, "-m", "autograder", "check", str(solution)], cwd=root,
                             env={**os.environ, "AUTOGRADER_COURSE_ROOT": str(root)}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert all("score: 11 / 11" in out for out, _ in outputs)
    notebook = json.loads(solution.read_text())  # the instructor changes a hidden test
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "test_sqrt":
            cell["source"] = "".join(cell["source"]).replace(
                "### END HIDDEN TESTS", "assert False, 'a test added later'\n### END HIDDEN TESTS").splitlines(True)
    solution.write_text(json.dumps(notebook))
    mine = tmp_path / f"{ASSIGNMENT}.ipynb"
    mine.write_text(json.dumps(notebook))
    changed = _check_in(root, mine)
    assert changed.returncode == 1 and "a test added later" in changed.stdout, changed.stdout + changed.stderr


@pytest.mark.slow
def test_check_in_a_student_distribution_ignores_an_untitled_notebook(tmp_path):
    root = _course_copy(tmp_path, with_solutions=False)
    blank = root / "course" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    before = _check_in(root, blank)
    (blank.parent / "Untitled.ipynb").write_text(json.dumps(UNTITLED))
    after = _check_in(root, blank)
    assert (after.returncode, after.stdout) == (before.returncode, before.stdout) == (1, before.stdout)
    assert "score: 0 / " in after.stdout and "Traceback" not in after.stderr and "see the above" not in after.stderr


@pytest.mark.slow
def test_another_assignments_notebook_under_this_name_is_named_by_check_and_by_grade(tmp_path):
    root = _course_copy(tmp_path)
    other = "02_saving_for_backward"
    renamed = tmp_path / f"{ASSIGNMENT}.ipynb"
    renamed.write_bytes((root / "course" / other / f"{other}.ipynb").read_bytes())
    checked = _check_in(root, renamed)
    assert checked.returncode == 2 and "NameError" not in checked.stdout + checked.stderr
    assert f"this looks like assignment {other}'s notebook, not {ASSIGNMENT}'s" in checked.stderr
    submitted = root / "grading" / "submitted" / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    submitted.parent.mkdir(parents=True)
    submitted.write_bytes(renamed.read_bytes())
    graded = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--json"], cwd=root,
                            env={**os.environ, "AUTOGRADER_COURSE_ROOT": str(root)}, capture_output=True, text=True)
    [alice] = json.loads(graded.stdout)["students"]
    assert (alice["status"], alice["score"]) == ("invalid notebook", 0.0)
    assert f"looks like assignment {other}'s notebook" in alice["detail"]


@pytest.mark.slow
def test_with_solutions_present_hidden_tests_never_enter_the_notebooks_process(course, tmp_path):
    """A Function that shows the cell its process is running (IPython's In[-1]) finds no hidden test line there."""
    answers = solution_answers(REPO, ASSIGNMENT)
    answers["cube"] = ("class Cube(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
                       "        raise ValueError('RAN: ' + repr(get_ipython().user_ns['In'][-1]))\n\n"
                       "    @staticmethod\n    def backward(ctx, grad_output):\n        raise ValueError('none')\n")
    mine = tmp_path / f"{ASSIGNMENT}.ipynb"
    mine.write_text(json.dumps(filled_release(REPO, ASSIGNMENT, answers)))
    result = _check(mine)
    assert result.returncode == 1 and "RAN: " in result.stdout and "Cube.apply(x)" in result.stdout, result.stdout
    hidden = hidden_test_lines(course, ASSIGNMENT)
    assert hidden and not [line for line in hidden if line in result.stdout]
    # Not even blanked out (what the notebook's outputs do with a hidden line its process knows), nor a marker
    assert "<hidden test line>" not in result.stdout and "HIDDEN" not in result.stdout


@pytest.mark.slow
def test_check_refuses_a_notebook_of_no_assignment_and_names_the_one_expected(tmp_path):
    root = _course_copy(tmp_path)
    untitled = root / "course" / ASSIGNMENT / "Untitled.ipynb"  # JupyterLab's "+" in the assignment's folder
    untitled.write_text(json.dumps(UNTITLED))
    refused = _check_in(root, untitled)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.strip().splitlines() == [
        f"error: Untitled.ipynb holds no graded cell of any assignment: check {untitled.parent / ASSIGNMENT}.ipynb"]
    elsewhere = tmp_path / "notes.ipynb"
    elsewhere.write_text(json.dumps(UNTITLED))
    refused = _check_in(root, elsewhere)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines() == [
        "error: notes.ipynb holds no graded cell of any assignment: check an assignment's notebook "
        f"({', '.join(f'{a}.ipynb' for a in sorted(p.name for p in (root / 'solutions').iterdir()))})"]
    # Named otherwise but holding an assignment's graded cells: checked as that one, which check says.
    renamed = tmp_path / "my work.ipynb"
    renamed.write_bytes((root / "course" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes())
    checked = _check_in(root, renamed)
    assert checked.returncode == 1 and "score: 0 / 11" in checked.stdout
    assert checked.stderr.strip().splitlines() == [
        f"my work.ipynb is checked as {ASSIGNMENT} (its graded cells are that assignment's)"]
