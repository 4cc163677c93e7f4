"""``python -m autograder check NOTEBOOK``: a student grades their own notebook, as the grader would."""

from __future__ import annotations

from pathlib import Path

from autograder.course import Course

HELP = "grade one notebook locally (visible tests, or all where solutions/ is)"
DESCRIPTION = ("Autograde one notebook (your copy of an assignment) and print each test's points, PASS/FAIL and "
               "message. With the instructor's solutions/ present every test runs, hidden ones included; in a "
               "student distribution the visible tests run, and the grader runs more. Exits 1 unless every "
               "test passes.")
WILL_RUN_NOTEBOOKS = True  # the CLI starts the warm process (torch importing) before anything else


def add_arguments(parser) -> None:
    parser.add_argument("notebook", type=Path, help="path to your .ipynb (named like the assignment)")


def run(args, course: Course) -> int:
    from autograder.grading.selfcheck import check_notebook

    results = check_notebook(args.notebook, course)
    for r in results:
        print(f"{'PASS' if r.passed else 'FAIL'}  {r.score:g}/{r.max_score:g}  {r.grade_id}: {r.description}")
        if not r.passed and r.message:
            print("      " + r.message.replace("\n", "\n      "))
    score, total = sum(r.score for r in results), sum(r.max_score for r in results)
    failed = sum(not r.passed for r in results)
    print(f"score: {score:g} / {total:g}")
    print(f"{len(results) - failed} passed, {failed} failed")
    if not course.has_solutions:
        print("These are the visible tests of your notebook. The grader runs more (hidden tests: other "
              "shapes, values and random upstream gradients), so a passing check is not yet a full mark.")
    return 0 if failed == 0 else 1
