"""``release``: the student version of each assignment, generated into ``course/`` by nbgrader."""

from __future__ import annotations

from pathlib import Path

from autograder.course import Course


def release(course: Course, assignments: list[str] | None = None) -> list[Path]:
    """Generate the student version of each assignment into ``course/`` (no gradebook needed)."""
    written = []
    for assignment in assignments or course.assignments():
        course.check_assignment(assignment)
        course.nbgrader("generate_assignment", assignment, "--force", "--no-db", "--log-level=WARN")
        written += course.notebooks(assignment, released=True)
    return written
