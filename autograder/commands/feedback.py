"""``python -m autograder feedback ASSIGNMENT``: an HTML feedback page per student."""

from __future__ import annotations

import sys

from autograder.commands import count
from autograder.course import Course

HELP = "write per-student HTML feedback"
DESCRIPTION = ("Write grading/feedback/<student>/<assignment>/<notebook>.html for every graded student: scores, and "
               "each failing test's message (never the hidden tests' source). A student whose page cannot be made "
               "(nbgrader fails on their notebook, or takes longer than --page-timeout) gets a page with their score "
               "saying so, and every other student still gets theirs. Exit status: 0 when every graded student has "
               "their feedback page; 1 when some students got only that short page (named on stderr, counted in the "
               "last line); 2 when nothing could be done (no such assignment, nothing graded).")


def add_arguments(parser) -> None:
    from autograder.grading.running.confinement.limits import FEEDBACK_PAGE_SECONDS

    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("--page-timeout", type=float, default=FEEDBACK_PAGE_SECONDS, metavar="SECONDS",
                        help=f"the most one student's pages may take to make (default {FEEDBACK_PAGE_SECONDS:g})")


def run(args, course: Course) -> int:
    from autograder.grading.results.feedback import feedback

    result = feedback(course, args.assignment, page_seconds=args.page_timeout)
    for page in result.pages:
        print(f"wrote {page.relative_to(course.root)}")
    for student, why in result.problems.items():
        print(f"{student}: only a page saying the feedback could not be made ({why})", file=sys.stderr)
    print(f"{count(len(result.pages), 'feedback page')}, {count(len(result.problems), 'student')} with problems")
    return 1 if result.problems else 0
