"""python -m autograder check: one notebook graded locally against the full tests."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, filled_release, solution_answers

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
    assert "replace `raise NotImplementedError()` with your code" in result.stdout


def test_check_of_a_missing_notebook_is_one_clear_line(tmp_path):
    result = _check(tmp_path / "nope.ipynb")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: no notebook at {tmp_path / 'nope.ipynb'}"]
