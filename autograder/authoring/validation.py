"""Check that solutions earn full marks and the blank release earns none (nbgrader's Validator).

``nbgrader validate`` exits 0 even when tests fail, so this module uses the Validator API and
turns its results into a list of problems. A solution must also run top to bottom without an
error in any cell, graded or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.validator import Validator

from autograder.course import Course


@dataclass
class Verdict:
    notebook: Path
    released: bool
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _first_line(source: str) -> str:
    return source.strip().splitlines()[0] if source.strip() else "(empty cell)"


def validate_solution(course: Course, notebook: Path) -> Verdict:
    """Every graded test passes and no cell of the solution notebook raises."""
    results = Validator(config=course.config(), validate_all=True).validate(str(notebook))
    verdict = Verdict(notebook, released=False)
    for cell in results.get("failed", []):
        error = (cell.get("raw_error") or "").strip().splitlines()
        verdict.problems.append(f"cell '{_first_line(cell['source'])}' fails: {error[-1] if error else 'error'}")
    for key in ("changed", "type_changed"):
        for cell in results.get(key, []):
            verdict.problems.append(f"cell '{_first_line(cell['source'])}' has a stale checksum ({key})")
    return verdict


def validate_release(course: Course, notebook: Path) -> Verdict:
    """No graded test of the blank student notebook passes."""
    results = Validator(config=course.config(), invert=True).validate(str(notebook))
    verdict = Verdict(notebook, released=True)
    for cell in results.get("passed", []):
        verdict.problems.append(f"test '{_first_line(cell['source'])}' passes without any student code")
    return verdict


def validate(course: Course, assignments: list[str] | None = None) -> list[Verdict]:
    verdicts = []
    for assignment in assignments or course.assignments():
        course.check_assignment(assignment)
        verdicts += [validate_solution(course, nb) for nb in course.notebooks(assignment)]
        verdicts += [validate_release(course, nb) for nb in course.notebooks(assignment, released=True)]
    return verdicts
