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
    written = []
    for assignment in assignments or course.assignments():
        course.check_assignment(assignment)
        course.nbgrader("generate_assignment", assignment, "--force", "--no-db", "--log-level=WARN")
        if answer_hints(course) == "strip":
            for notebook in course.notebooks(assignment, released=True):
                strip_notebook(notebook)
        written += course.notebooks(assignment, released=True)
    return written
