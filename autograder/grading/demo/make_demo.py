"""Build the demo class: one submission of 01_first_function per made-up student.

Run ``.venv/bin/python -m autograder.grading.demo.make_demo`` after changing assignment 01: every
notebook is the current release (``course/``) with answers taken from ``solutions/``, some with a
typical bug put in, so the demo always matches the course. The output is deterministic; a test
checks that the committed demo is exactly what this script writes. Expected scores are in
``expected_scores.json`` and README.md beside this file.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat

from autograder.course import Course, CourseError

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


# ivy answers in her own way, right but unlike the solution; jon hands in ivy's work with the names
# changed and comments added (what `python -m autograder similarity` is for).
IVY = {
    "cube": """class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        squared = torch.mul(x, x)
        ctx.save_for_backward(squared)
        return torch.mul(squared, x)

    @staticmethod
    def backward(ctx, grad_output):
        (squared,) = ctx.saved_tensors
        slope = squared.mul(3.0)
        return slope.mul(grad_output)""",
    "sqrt": """class Sqrt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        root = torch.pow(x, 0.5)
        ctx.save_for_backward(root)
        return root

    @staticmethod
    def backward(ctx, grad_output):
        (root,) = ctx.saved_tensors
        half_inverse = torch.reciprocal(root).mul(0.5)
        return half_inverse.mul(grad_output)""",
    "poly_function": """class PolyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2):
        ctx.save_for_backward(x1, x2)
        cubic = torch.pow(x1, 3)
        quadratic = torch.pow(x2, 2)
        return torch.add(cubic, quadratic)

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        d_x1 = torch.pow(x1, 2).mul(3.0).mul(grad_output)
        d_x2 = x2.mul(2.0).mul(grad_output)
        return d_x1, d_x2""",
}
RENAMED = {"squared": "sq", "slope": "factor", "root": "r", "half_inverse": "inv_half", "cubic": "first_term",
           "quadratic": "second_term", "d_x1": "grad1", "d_x2": "grad2"}


def copied(answers: dict[str, str]) -> dict[str, str]:
    """``answers`` as a student who copies them hands them in: names changed, a comment added."""
    result = {}
    for grade_id, code in answers.items():
        for old, new in RENAMED.items():
            code = re.sub(rf"\b{old}\b", new, code)
        result[grade_id] = "# my solution\n" + code.replace("    @staticmethod\n    def backward",
                                                              "    @staticmethod  # gradient\n    def backward")
    return result


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
        "ivy": filled_release(course, ASSIGNMENT, {**right, **IVY}),
        "jon": filled_release(course, ASSIGNMENT, {**right, **copied(IVY)}),
    }


# The demo's deadline (`python -m autograder deadline` in the demo) and when each student handed
# in, in nbgrader's timestamp.txt format: ben is late, dana later still but within her extension.
DUE = "2026-03-16T23:59:00+00:00"
DEADLINE_OPTIONS = ["--due", DUE, "--penalty", "10", "--per", "day", "--max", "30", "--extend", "dana=2d"]
HANDED_IN = {
    "ada": "2026-03-15 10:12:00", "ben": "2026-03-17 04:30:00", "chen": "2026-03-16 21:40:00",
    "dana": "2026-03-18 10:00:00", "eli": "2026-03-16 18:05:00", "fay": "2026-03-16 23:15:00",
    "gus": "2026-03-16 22:58:00", "ivy": "2026-03-14 16:20:00", "jon": "2026-03-16 23:50:00",
}


def make_demo(course: Course, root: Path = DEMO_ROOT) -> list[Path]:
    """(Re)write ``root/01_first_function/<student>/01_first_function.ipynb`` (and the time it was handed in,
    ``timestamp.txt``) for every demo student."""
    folder = root / ASSIGNMENT
    shutil.rmtree(folder, ignore_errors=True)
    written = []
    for student, text in demo_notebooks(course).items():
        path = folder / student / f"{ASSIGNMENT}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_text(text, encoding="utf-8")
        (path.parent / "timestamp.txt").write_text(f"{HANDED_IN[student]}.000000 UTC\n", encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in make_demo(Course.locate()):
        print(f"wrote {path.relative_to(DEMO_ROOT.parent.parent)}")
