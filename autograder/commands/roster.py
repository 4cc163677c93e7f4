"""``python -m autograder roster CSV``: the class list into the gradebook."""

from __future__ import annotations

from pathlib import Path

from autograder.commands import count
from autograder.course import Course
from autograder.grading.records.lms import STUDENT_ID_RULE

HELP = "add the class list (names, emails, LMS ids) to the gradebook"
DESCRIPTION = ("Add or update the students of a class list in the gradebook, read as it comes: nbgrader's roster "
               "(a header row with an `id` column and optionally first_name, last_name, email, lms_user_id), "
               "Canvas's gradebook export (id from SIS User ID, else SIS Login ID, else ID; lms_user_id from ID), "
               "Blackboard's Grade Center download (id from Username), Moodle's participants or grades export (id "
               "from ID number, else Username, else Email address), or export's canvas.csv and grades.csv; comma, "
               "semicolon or tab separated, UTF-8 or UTF-16. Students on the roster who hand in nothing are graded "
               "'missing'. No student is ever removed. Every id is "
               f"checked first ({STUDENT_ID_RULE}), and no name, email or LMS id may hold < or > (nbgrader's "
               "formgrader shows them as HTML): one bad line is named and nothing is written (exit status 2).")


def add_arguments(parser) -> None:
    parser.add_argument("roster", type=Path, metavar="CLASS_LIST")


def run(args, course: Course) -> int:
    from autograder.grading.records.roster import import_roster

    result = import_roster(course, args.roster)
    print(f"read as {result.read_as}: {count(len(result.added), 'student')} added, {len(result.updated)} updated "
          "in the gradebook")
    if result.ignored_columns:
        print(f"ignored columns: {', '.join(result.ignored_columns)}")
    return 0
