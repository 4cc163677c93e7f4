"""Build the demo class: one submission of 01_first_function per made-up student.

Run ``.venv/bin/python -m autograder.grading.demo.make_demo`` after changing assignment 01: every
notebook is the current release (``course/``) with answers taken from ``solutions/``, some with a
typical bug put in, so the demo always matches the course. The output is deterministic; a test
checks that the committed demo is exactly what this script writes. Expected scores are in
``expected_scores.json`` and README.md beside this file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

from autograder.authoring.course import Course, CourseError

ASSIGNMENT = "01_first_function"
DEMO_ROOT = Path(__file__).resolve().parent


def solution_answers(course: Course, assignment: str) -> dict[str, str]:
    """grade_id -> the instructor's answer without nbgrader's markers: what a right student writes."""
    [notebook] = course.notebooks(assignment)
    answers = {}
    for cell in nbformat.read(notebook, as_version=nbformat.NO_CONVERT).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            answers[meta["grade_id"]] = "\n".join(line for line in cell.source.splitlines()
                                                  if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line)
    return answers


def filled_release(course: Course, assignment: str, answers: dict[str, str]) -> str:
    """The released notebook, as text, with the solution cells named in ``answers`` filled in."""
    [notebook] = course.notebooks(assignment, released=True)
    released = nbformat.read(notebook, as_version=nbformat.NO_CONVERT)
    for cell in released.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return nbformat.writes(released) + "\n"


def _with_bug(answers: dict[str, str], grade_id: str, right: str, wrong: str) -> dict[str, str]:
    if right not in answers[grade_id]:
        raise CourseError(f"make_demo: '{right}' is no longer in the solution of '{grade_id}'; update make_demo.py")
    return {**answers, grade_id: answers[grade_id].replace(right, wrong)}


def demo_notebooks(course: Course) -> dict[str, str]:
    """student_id -> the text of the notebook that student hands in (see README.md for each)."""
    right = solution_answers(course, ASSIGNMENT)
    partly = {k: v for k, v in right.items() if k in ("cube", "sqrt")}
    all_right = filled_release(course, ASSIGNMENT, right)
    return {
        "ada": all_right,
        "ben": filled_release(course, ASSIGNMENT, partly),
        "chen": filled_release(course, ASSIGNMENT, _with_bug(
            right, "cube", "return grad_output * 3 * x ** 2", "return 3 * x ** 2")),
        "dana": filled_release(course, ASSIGNMENT, _with_bug(
            right, "sqrt", "return grad_output / (2 * result)", "return -grad_output / (2 * result)")),
        "eli": filled_release(course, ASSIGNMENT, _with_bug(
            right, "poly_function", "grad_output * 3 * x1 ** 2", "grad_output * 2 * x1 ** 2")),
        "fay": filled_release(course, ASSIGNMENT, _with_bug(
            right, "cube", "def backward(ctx, grad_output):", "def backward(ctx, grad_output)")),
        "gus": all_right[: len(all_right) // 2],  # an upload cut off halfway: not valid JSON
    }


def make_demo(course: Course, root: Path = DEMO_ROOT) -> list[Path]:
    """(Re)write ``root/01_first_function/<student>/01_first_function.ipynb`` for every demo student."""
    folder = root / ASSIGNMENT
    shutil.rmtree(folder, ignore_errors=True)
    written = []
    for student, text in demo_notebooks(course).items():
        path = folder / student / f"{ASSIGNMENT}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in make_demo(Course.locate()):
        print(f"wrote {path.relative_to(DEMO_ROOT.parent.parent)}")
