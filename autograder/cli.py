"""The instructor's command line: ``python -m autograder <command>`` (``make`` targets call it)."""

from __future__ import annotations

import argparse
import sys

from pathlib import Path

from autograder.course import Course, CourseError, release
from autograder.selfcheck import check_notebook
from autograder.validation import validate


def _release(args, course: Course) -> int:
    for path in release(course, args.assignments):
        print(f"released {path.relative_to(course.root)}")
    return 0


def _validate(args, course: Course) -> int:
    verdicts = validate(course, args.assignments)
    for v in verdicts:
        role = "release (must pass nothing)" if v.released else "solution (must pass everything)"
        print(f"{'ok  ' if v.ok else 'FAIL'}  {v.notebook.relative_to(course.root)}  {role}")
        for problem in v.problems:
            print(f"      - {problem}")
    failed = sum(not v.ok for v in verdicts)
    print(f"{len(verdicts) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _check(args, course: Course) -> int:
    results = check_notebook(args.notebook, course)
    for r in results:
        print(f"{'PASS' if r.passed else 'FAIL'}  {r.score:g}/{r.max_score:g}  {r.grade_id}: {r.description}")
        if not r.passed and r.message:
            print("      " + r.message.replace("\n", "\n      "))
    score, total = sum(r.score for r in results), sum(r.max_score for r in results)
    failed = sum(not r.passed for r in results)
    print(f"score: {score:g} / {total:g}")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m autograder",
        description="Release, validate and grade the course 'Custom autograd Functions in PyTorch'.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = commands.add_parser("release", help="generate the student notebooks in course/ from solutions/",
                            description="Generate the student version of each assignment into course/ "
                                        "(solutions and hidden tests removed).")
    p.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="assignment ids (default: all)")
    p.set_defaults(run=_release)

    p = commands.add_parser("validate", help="solutions earn full marks, the blank release earns none",
                            description="Execute every solution notebook (every graded test must pass "
                                        "and no cell may raise) and every released notebook (no graded "
                                        "test may pass). Exits 1 if any notebook fails.")
    p.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="assignment ids (default: all)")
    p.set_defaults(run=_validate)

    p = commands.add_parser("check", help="grade one notebook locally against the full tests",
                            description="Autograde one notebook (your copy of an assignment) with every "
                                        "test, hidden ones included, and print each test's result and "
                                        "message. Exits 1 unless every test passes.")
    p.add_argument("notebook", type=Path, help="path to your .ipynb (named like the assignment)")
    p.set_defaults(run=_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args, Course())
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
