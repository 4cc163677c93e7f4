"""Similar submissions: answer cells compared with copydetect, a ranked and escaped HTML report."""

from __future__ import annotations

import pytest

from autograder.course import CourseError
from autograder.grading.demo.make_demo import ASSIGNMENT, IVY, copied, filled_release, solution_answers
from autograder.grading.results.similarity import similarity

NOTEBOOK = f"{ASSIGNMENT}.ipynb"
SCRIPT = "</pre><script>alert('x')</script>"


def _hand_in(course, student: str, text: str) -> None:
    folder = course.grading / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / NOTEBOOK).write_text(text, encoding="utf-8")


def test_a_copied_pair_is_flagged_the_solution_and_template_are_not(course_copy, tmp_path):
    course = course_copy
    right = solution_answers(course, ASSIGNMENT)
    ivy = {**right, **IVY}
    _hand_in(course, "ada", filled_release(course, ASSIGNMENT, right))          # the solution, word for word
    _hand_in(course, "ben", filled_release(course, ASSIGNMENT, right))          # ... and again
    _hand_in(course, "blank", filled_release(course, ASSIGNMENT, {}))           # the template, unanswered
    _hand_in(course, "blank2", filled_release(course, ASSIGNMENT, {}))
    _hand_in(course, "ivy", filled_release(course, ASSIGNMENT, ivy))
    _hand_in(course, "jon", filled_release(course, ASSIGNMENT, {**right, **copied(IVY)}))
    mallory = {**ivy, "cube": ivy["cube"] + f"\n\nNOTE = \"{SCRIPT}\""}
    _hand_in(course, "mallory", filled_release(course, ASSIGNMENT, mallory))
    _hand_in(course, "gus", '{"cells": [')
    grades_before = sorted(p.name for p in course.grading.iterdir())

    result = similarity(course, ASSIGNMENT, tmp_path / "similarity.html")

    flagged = {(p.first, p.second): p for p in result.pairs}
    assert set(flagged) == {("ivy", "jon"), ("ivy", "mallory"), ("jon", "mallory")}, result.skipped or \
        {k: p.similarity for k, p in flagged.items()}
    assert flagged["ivy", "jon"].similarity[0] > 0.9 and flagged["ivy", "jon"].similarity[1] > 0.9
    assert result.pairs[0].score >= result.pairs[-1].score
    assert set(result.skipped) == {"gus"} and "not valid JSON" in result.skipped["gus"]
    page = result.page.read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;alert(" in page
    assert page.count("<mark>") >= 3 and "torch.reciprocal" in page
    assert "no grade was changed" in page
    assert sorted(p.name for p in course.grading.iterdir()) == grades_before  # nothing written beside grades


def test_fewer_than_two_submissions_is_one_clear_error(course_copy, tmp_path):
    with pytest.raises(CourseError, match="fewer than two submissions"):
        similarity(course_copy, ASSIGNMENT, tmp_path / "s.html")
