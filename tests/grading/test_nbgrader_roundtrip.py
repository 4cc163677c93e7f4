"""A real nbgrader round trip on assignment 01: release, submit, autograde, feedback, export."""

from __future__ import annotations

import csv
import json

import pytest
from nbgrader.api import Gradebook

from conftest import filled_release, nbgrader_meta, read_notebook, solution_answers, source

ASSIGNMENT = "01_first_function"

# A typical mistake: x2's gradient forgets the factor 2 of d(x2**2)/dx2 = 2 * x2.
WRONG_POLY = '''class PolyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2):
        ctx.save_for_backward(x1, x2)
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        return grad_output * 3 * x1 ** 2, grad_output * x2
'''


def _submit(course, student: str, answers: dict[str, str]) -> None:
    """Put a filled-in copy of the released notebook where nbgrader looks for submissions."""
    folder = course.grading / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(filled_release(course.root, ASSIGNMENT, answers), indent=1))


@pytest.mark.slow
def test_release_submit_autograde_feedback_export(course_copy):
    course = course_copy
    course.nbgrader("generate_assignment", ASSIGNMENT, "--force")
    right = solution_answers(course.root, ASSIGNMENT)
    _submit(course, "alice", right)
    _submit(course, "bob", {**right, "poly_function": WRONG_POLY})

    course.nbgrader("autograde", ASSIGNMENT)
    course.nbgrader("generate_feedback", ASSIGNMENT)
    course.nbgrader("export", f"--to={course.grading / 'grades.csv'}")

    points = {nbgrader_meta(c)["grade_id"]: nbgrader_meta(c)["points"]
              for c in read_notebook(course.solutions / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")["cells"]
              if nbgrader_meta(c).get("grade")}
    total = sum(points.values())
    # PolyFunction's own test fails, and so does Net's, which uses PolyFunction.
    bob_expected = total - points["test_poly_function"] - points["test_net"]
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}") as gb:
        alice = gb.find_submission(ASSIGNMENT, "alice")
        bob = gb.find_submission(ASSIGNMENT, "bob")
        assert alice.max_score == total
        assert alice.score == total
        bob_grades = {g.name: g.score for notebook in bob.notebooks for g in notebook.grades}
        assert bob_grades == {**points, "test_poly_function": 0, "test_net": 0}
        assert bob.score == bob_expected

    rows = {r["student_id"]: r for r in csv.DictReader((course.grading / "grades.csv").open())}
    assert float(rows["alice"]["score"]) == total
    assert float(rows["bob"]["score"]) == bob_expected

    feedback = (course.grading / "feedback" / "bob" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "the gradient for `x2` is wrong" in feedback
    assert "0.5 times the right gradient" in feedback
    assert "the gradient for `x1` is wrong" not in feedback

    # A line that only a hidden test has: it must not reach any student's feedback.
    hidden_only = "torch.randn(3, 4), torch.randn(3, 4))"
    solution_text = "".join(source(c) for c in read_notebook(course.solutions / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")["cells"])
    assert hidden_only in solution_text
    for student in ("alice", "bob"):
        html = (course.grading / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
        assert hidden_only not in html, f"hidden test source in {student}'s feedback"
