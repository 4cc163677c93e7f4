"""``release``: the student version of each assignment, generated into ``course/`` by nbgrader.

The answer-level hints go too, unless the course's ``answer-hints`` setting keeps them
(``autograder.authoring.hints``): ``course/`` is what students are graded on, here, in the
students' edition and through a JupyterHub's exchange alike.
"""

from __future__ import annotations

from pathlib import Path

from autograder.authoring.hints import answer_hints, strip_notebook
from autograder.course import Course


def release(course: Course, assignments: list[str] | None = None) -> list[Path]:
    """Generate the student version of each assignment into ``course/`` (no gradebook needed)."""
    chosen = assignments or course.assignments()
    for assignment in chosen:
        course.check_assignment(assignment)
    # All of them in one nbgrader process when all are asked for ("*", nbgrader's glob, is every folder of
    # solutions/ not starting with a dot, as course.assignments()): each process costs ~2 s of imports.
    every = sorted(set(chosen)) == course.assignments()
    for pattern in ["*"] if every else chosen:
        course.nbgrader("generate_assignment", pattern, "--force", "--no-db", "--log-level=WARN")
    written = []
    for assignment in chosen:
        if answer_hints(course) == "strip":
            for notebook in course.notebooks(assignment, released=True):
                strip_notebook(notebook)
        written += course.notebooks(assignment, released=True)
    return written
