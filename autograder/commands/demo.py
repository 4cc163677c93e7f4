"""``python -m autograder demo``: the instructor's whole term on the bundled demo class of assignment 01."""

from __future__ import annotations

import sys

from autograder.course import Course

HELP = "run the instructor's whole workflow on the demo class"
DESCRIPTION = ("Run the instructor workflow on the bundled demo class of assignment 01 (autograder/grading/demo/): "
               "roster, collect, deadline (a late student, an extension), grade, feedback, report, similarity (a "
               "copied pair) and export (Canvas's CSV).")


def add_arguments(parser) -> None:
    pass


def run(args, course: Course) -> int:
    from autograder.cli import build_parser
    from autograder.grading.demo.make_demo import ASSIGNMENT, DEADLINE_OPTIONS, DEMO_ROOT

    steps = [["roster", str(DEMO_ROOT / "roster.csv")], ["collect", ASSIGNMENT, str(DEMO_ROOT / ASSIGNMENT)],
             ["deadline", ASSIGNMENT, *DEADLINE_OPTIONS], ["grade", ASSIGNMENT], ["feedback", ASSIGNMENT],
             ["report", ASSIGNMENT], ["similarity", ASSIGNMENT], ["export", ASSIGNMENT]]
    for step in steps:
        print(f"\n$ python -m autograder {' '.join(step)}")
        sys.stdout.flush()
        step_args = build_parser().parse_args(step)
        status = step_args.run(step_args, course)
        if status:
            return status
    return 0
