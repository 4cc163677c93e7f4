"""``python -m autograder check NOTEBOOK``: a student grades their own notebook, as the grader would."""

from __future__ import annotations

from pathlib import Path

from autograder.commands import add_json_flag, print_json
from autograder.course import Course

HELP = "grade one notebook locally (visible tests, or all where solutions/ is)"
DESCRIPTION = ("Autograde one notebook (your copy of an assignment) and print each test's points, PASS/FAIL and "
               "message. With the instructor's solutions/ present every test runs, hidden ones included; in a "
               "student distribution the visible tests run, and the grader runs more. Exits 1 unless every "
               "test passes.")
WILL_RUN_NOTEBOOKS = True  # the CLI starts the warm process (torch importing) before anything else


def add_arguments(parser) -> None:
    parser.add_argument("notebook", type=Path, help="path to your .ipynb (named like the assignment)")
    add_json_flag(parser)


def run(args, course: Course) -> int:
    from autograder.grading.selfcheck import check_notebook

    everything = check_notebook(args.notebook, course)
    results = [r for r in everything if not r.by_hand]
    by_hand = [r for r in everything if r.by_hand]
    score, total = sum(r.score for r in results), sum(r.max_score for r in results)
    failed = sum(not r.passed for r in results)
    if args.json:
        print_json({"notebook": str(args.notebook), "score": score, "max_score": total,
                    "passed": len(results) - failed, "failed": failed, "hidden_tests_ran": course.has_solutions,
                    "tests": [{"grade_id": r.grade_id, "description": r.description, "passed": r.passed,
                               "score": r.score, "max_score": r.max_score, "message": r.message} for r in results],
                    "graded_by_hand": [{"grade_id": r.grade_id, "max_score": r.max_score} for r in by_hand]})
        return 0 if failed == 0 else 1
    for r in results:
        print(f"{'PASS' if r.passed else 'FAIL'}  {r.score:g}/{r.max_score:g}  {r.grade_id}: {r.description}")
        if not r.passed and r.message:
            print("      " + r.message.replace("\n", "\n      "))
    for r in by_hand:
        print(f"HAND  -/{r.max_score:g}  {r.grade_id}: {r.description}")
    print(f"score: {score:g} / {total:g}" + (f" (and {sum(r.max_score for r in by_hand):g} points your "
                                           f"instructor grades by hand)" if by_hand else ""))
    print(f"{len(results) - failed} passed, {failed} failed")
    if not course.has_solutions:
        print("These are the visible tests of your notebook. The grader runs more (hidden tests: other "
              "shapes, values and random upstream gradients), so a passing check is not yet a full mark.")
    return 0 if failed == 0 else 1
