"""``python -m autograder demo``: the instructor's whole term on the bundled demo class of assignment 01."""

from __future__ import annotations

import os
import sys

from autograder.course import ROOT_VARIABLE, Course

HELP = "run the instructor's whole workflow on the demo class"
DESCRIPTION = ("Run the instructor workflow on the bundled demo class of assignment 01 (autograder/grading/demo/): "
               "roster, collect, deadline (a late student, an extension), grade, feedback, report, similarity (a "
               "copied pair) and export (Canvas's CSV), in a workspace of its own (build/demo/): the course's "
               "grading/, where a real class is graded, is not touched.")


def add_arguments(parser) -> None:
    pass


def run(args, course: Course) -> int:
    from autograder.cli import build_parser
    from autograder.grading.demo.make_demo import ASSIGNMENT, DEADLINE_OPTIONS, DEMO_ROOT
    from autograder.grading.demo.workspace import demo_workspace

    demo = demo_workspace(course)
    os.environ[ROOT_VARIABLE] = str(demo.root)  # nbgrader's settings read the course's root from here
    steps = [["roster", str(DEMO_ROOT / "roster.csv")], ["collect", ASSIGNMENT, str(DEMO_ROOT / ASSIGNMENT)],
             ["deadline", ASSIGNMENT, *DEADLINE_OPTIONS], ["grade", ASSIGNMENT], ["feedback", ASSIGNMENT],
             ["report", ASSIGNMENT], ["similarity", ASSIGNMENT], ["export", ASSIGNMENT]]
    for step in steps:
        print(f"\n$ python -m autograder {' '.join(step)}")
        sys.stdout.flush()
        step_args = build_parser().parse_args(step)
        status = step_args.run(step_args, demo)
        if status:
            return status
    shown = os.path.relpath(demo.root)
    print(f"\nThe demo class was graded in its own workspace, {shown}/ (grades.csv, feedback/, reports/ and "
          f"exports/ in {shown}/grading/); the course's grading/ is untouched, so a real class never meets the "
          f"demo's students or deadline. See it in the formgrader: AUTOGRADER_COURSE_ROOT={shown} make lab. "
          f"Remove it: rm -rf {shown}")
    return 0
