"""``python -m autograder deadline ASSIGNMENT``: due date, extensions and late penalty."""

from __future__ import annotations

import argparse

from autograder.course import Course, CourseError

HELP = "set an assignment's due date, extensions and late penalty"
DESCRIPTION = ("Set (or, with no option, show) an assignment's due date, per-student extensions and late penalty, "
               "kept in grading/deadlines.json and put into nbgrader's gradebook (duedate, extensions) when grading. "
               "A submission is late when its time (timestamp.txt, written by collect from the LMS's record) is "
               "after the due date plus its extension; one the LMS marked late without a time (Canvas) counts as "
               "late by the least the penalty counts; grades.csv, the feedback page and the report say how late "
               "and the penalty. Changing any of it regrades the students it affects.")


def add_arguments(parser) -> None:
    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("--due", metavar="WHEN", help="due date, e.g. '2026-03-15 23:59' (local time) or with a zone "
                                                      "'2026-03-15T23:59:00+01:00'")
    parser.add_argument("--extend", action="append", metavar="STUDENT=DURATION",
                        help="an extension, e.g. ben=2d, ada=36h, eli=90m; =0 removes it (repeat for more students)")
    parser.add_argument("--penalty", dest="percent", type=float, metavar="PERCENT",
                        help="percent of the score taken per hour or day started late (default 0: marked only)")
    parser.add_argument("--per", choices=["hour", "day"], default=None, help="the penalty's period (default hour)")
    parser.add_argument("--max", dest="max_percent", type=float, metavar="PERCENT",
                        help="the penalty never takes more than this percent of the score (default 100)")
    parser.add_argument("--grace", dest="grace_minutes", type=float, metavar="MINUTES",
                        help="lateness forgiven before the penalty starts (default 0)")
    parser.add_argument("--zero", action=argparse.BooleanOptionalAction, default=None,
                        help="late work scores 0 (nbgrader's 'zero' penalty); --no-zero turns it off")
    parser.add_argument("--clear", action="store_true", help="remove the due date, extensions and penalty first")


def run(args, course: Course) -> int:
    from autograder.grading.records import deadlines

    course.check_assignment(args.assignment)
    policy = deadlines.load(course, args.assignment)
    changed = False
    if args.clear:
        policy, changed = deadlines.Policy(), True
    if args.due:
        policy.due, changed = deadlines.parse_due(args.due), True
    for text in args.extend or []:
        student, hours = deadlines.parse_extension(text)
        if hours:
            policy.extensions[student] = hours
        else:
            policy.extensions.pop(student, None)
        changed = True
    for name in ("percent", "per", "max_percent", "grace_minutes"):
        value = getattr(args, name)
        if value is not None:
            setattr(policy, name, value)
            changed = True
    if args.zero is not None:
        policy.zero, changed = args.zero, True
    if (policy.extensions or policy.percent or policy.zero) and not policy.due:
        raise CourseError(f"{args.assignment} has no due date: give one with --due '2026-03-15 23:59'")
    if changed:
        deadlines.save(course, args.assignment, policy)
    print(f"{args.assignment}: {policy.describe()}")
    if changed:
        print(f"saved in {course.grading / deadlines.FILE}; `python -m autograder grade {args.assignment}` "
              "applies it (only the students it changes are graded again)")
    return 0
