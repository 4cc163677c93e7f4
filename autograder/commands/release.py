"""``python -m autograder release``: the student notebooks in course/, generated from solutions/."""

from __future__ import annotations

from autograder.course import Course

HELP = "generate the student notebooks in course/ from solutions/"
DESCRIPTION = "Generate the student version of each assignment into course/ (solutions and hidden tests removed)."


def add_arguments(parser) -> None:
    parser.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="assignment ids (default: all)")


def run(args, course: Course) -> int:
    from autograder.authoring.release import release

    for path in release(course, args.assignments):
        print(f"released {path.relative_to(course.root)}")
    return 0
