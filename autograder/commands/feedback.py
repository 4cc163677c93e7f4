"""``python -m autograder feedback ASSIGNMENT``: an HTML feedback page per student."""

from __future__ import annotations

from autograder.commands import count
from autograder.course import Course

HELP = "write per-student HTML feedback"
DESCRIPTION = ("Write grading/feedback/<student>/<assignment>/<notebook>.html for every graded student: scores, and "
               "each failing test's message (never the hidden tests' source).")


def add_arguments(parser) -> None:
    parser.add_argument("assignment", metavar="ASSIGNMENT")


def run(args, course: Course) -> int:
    from autograder.grading.results.feedback import feedback

    pages = feedback(course, args.assignment)
    for page in pages:
        print(f"wrote {page.relative_to(course.root)}")
    print(count(len(pages), "feedback page"))
    return 0
