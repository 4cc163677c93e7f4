"""``python -m autograder validate``: every solution earns full marks, every blank release none."""

from __future__ import annotations

from autograder.course import Course

HELP = "solutions earn full marks, the blank release earns none"
DESCRIPTION = ("Execute every solution notebook (every graded test must pass and no cell may raise) and every "
               "released notebook (no graded test may pass). Exits 1 if any notebook fails.")


def add_arguments(parser) -> None:
    parser.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="assignment ids (default: all)")


def run(args, course: Course) -> int:
    from autograder.authoring.validation import validate

    verdicts = validate(course, args.assignments)
    for v in verdicts:
        role = "release (must pass nothing)" if v.released else "solution (must pass everything)"
        print(f"{'ok  ' if v.ok else 'FAIL'}  {v.notebook.relative_to(course.root)}  {role}")
        for problem in v.problems:
            print(f"      - {problem}")
    failed = sum(not v.ok for v in verdicts)
    print(f"{len(verdicts) - failed} passed, {failed} failed")
    return 1 if failed else 0
