"""``python -m autograder roster CSV``: the class list into the gradebook."""

from __future__ import annotations

from pathlib import Path

from autograder.commands import count
from autograder.course import Course
from autograder.grading.records.lms import STUDENT_ID_RULE

HELP = "add the class list (names, emails) to the gradebook"
DESCRIPTION = ("Add or update the students of a CSV class list in the gradebook: a header row with an `id` column "
               "and optionally first_name, last_name, email, lms_user_id (nbgrader's roster format). Students on "
               "the roster who hand in nothing are graded 'missing'. No student is ever removed. Every id is "
               f"checked first ({STUDENT_ID_RULE}), and no name, email or LMS id may hold < or > (nbgrader's "
               "formgrader shows them as HTML): one bad line is named and nothing is written (exit status 2).")


def add_arguments(parser) -> None:
    parser.add_argument("roster", type=Path, metavar="CSV")


def run(args, course: Course) -> int:
    from autograder.grading.records.roster import import_roster

    result = import_roster(course, args.roster)
    print(f"{count(len(result.added), 'student')} added, {len(result.updated)} updated in the gradebook")
    if result.ignored_columns:
        print(f"ignored columns: {', '.join(result.ignored_columns)}")
    return 0
