"""Per-student HTML feedback for a graded assignment (nbgrader generate_feedback, checked).

nbgrader renders each autograded notebook to HTML with the scores; this course's config strips
hidden tests' source from it (``ClearHiddenTests``) and the grader keeps hidden tests out of
tracebacks. A submission that could not be run still has an autograded notebook saying why, so
its student gets a page too.
"""

from __future__ import annotations

from pathlib import Path

from autograder.authoring.course import Course, CourseError

HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


def feedback(course: Course, assignment: str) -> list[Path]:
    """Write grading/feedback/<student>/<assignment>/*.html for every graded student; return the pages."""
    course.check_assignment(assignment)
    autograded = course.grading / "autograded"
    if not any(autograded.glob(f"*/{assignment}")):
        raise CourseError(f"nothing graded yet for {assignment}: run `python -m autograder grade {assignment}` first")
    course.nbgrader("generate_feedback", assignment, "--force", "--log-level=ERROR")
    pages = sorted((course.grading / "feedback").glob(f"*/{assignment}/*.html"))
    for page in pages:
        text = page.read_text(encoding="utf-8")
        if any(marker in text for marker in HIDDEN_MARKERS):
            page.unlink()
            raise CourseError(f"{page} would show hidden tests; it was deleted (check the feedback settings)")
    return pages
