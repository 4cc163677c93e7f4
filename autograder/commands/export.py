"""``python -m autograder export ASSIGNMENT``: grades for the LMS."""

from __future__ import annotations

import sys
from pathlib import Path

from autograder.commands import count
from autograder.course import Course

HELP = "write grades for the LMS: Canvas's CSV, a plain CSV, points per test"
DESCRIPTION = ("Write grading/exports/<assignment>/ (or --out): canvas.csv (Canvas's gradebook import: students "
               "matched by their Canvas user id, the roster's lms_user_id), grades.csv (student_id, lms_user_id, "
               "names, email, score after any late penalty, status, lateness) and per_test.csv (a row per student, "
               "a column per test, its points). Grade first.")


def add_arguments(parser) -> None:
    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("--out", type=Path, default=None, help="folder for the CSV files")
    parser.add_argument("--canvas-column", default=None, metavar="NAME",
                        help="the assignment's column in Canvas, as Canvas's own export names it, e.g. "
                             "'Assignment 1 (4567)' (default: the assignment id, which Canvas imports as a new column)")


def run(args, course: Course) -> int:
    from autograder.grading.results.export import export

    result = export(course, args.assignment, args.out or course.grading / "exports" / args.assignment,
                    canvas_column=args.canvas_column)
    for path in (result.canvas, result.plain, result.per_test):
        print(f"wrote {path}")
    print(f"{count(result.students, 'student')} exported")
    if result.without_lms_id:
        print(f"Canvas cannot match {count(len(result.without_lms_id), 'student')} without an lms_user_id in the roster "
              f"({', '.join(result.without_lms_id)}): add the column to the roster, import it again "
              "(`python -m autograder roster CSV`) and export again", file=sys.stderr)
    if result.to_grade_by_hand:
        waiting = sum(result.to_grade_by_hand.values())
        print(f"{count(waiting, 'answer')} of {count(len(result.to_grade_by_hand), 'student')} still to grade by "
              f"hand (formgrader), exported as 0: {', '.join(result.to_grade_by_hand)}", file=sys.stderr)
    return 0
