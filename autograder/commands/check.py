"""``python -m autograder check NOTEBOOK``: a student grades their own notebook, as the grader would."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autograder.commands import add_json_flag, print_json
from autograder.course import Course, CourseError

HELP = "grade one notebook locally (visible tests, or all where solutions/ is)"
DESCRIPTION = ("Autograde one notebook (your copy of an assignment) exactly as the instructor's grade does (same "
               "sandbox, limits and referee) and print each test's points, PASS/FAIL and message. With the "
               "instructor's solutions/ present every test runs, hidden ones included; in a student distribution "
               "the visible tests run, and the grader runs more. The first check starts a warm process that "
               "imports torch once; later checks reuse it (it ends after 10 idle minutes, or with --stop). "
               "Exits 1 unless every test passes.")
NO_SANDBOX = ("note: this machine allows no sandbox (neither namespaces nor Landlock, or no libseccomp2), so your "
              "notebook ran without one, as you; grade refuses to run it that way")


def add_arguments(parser) -> None:
    parser.add_argument("notebook", type=Path, nargs="?", help="path to your .ipynb (named like the assignment)")
    parser.add_argument("--stop", action="store_true", help="end check's warm process now (it ends when idle anyway)")
    parser.add_argument("--serve", metavar="SOCKET", type=Path, help=argparse.SUPPRESS)  # the warm process itself
    add_json_flag(parser)


def will_run_notebooks(args: list[str], course: Course) -> bool:
    """Only the warm process runs notebooks (it starts grade's warm process first, as grade does)."""
    return "--serve" in args


def run(args, course: Course) -> int:
    from autograder.grading import check_server

    if args.serve:
        check_server.serve(course, args.serve)
        return 0
    if args.stop:
        print("check's warm process stopped" if check_server.stop(course) else "no warm process of check was running")
        return 0
    if args.notebook is None:
        raise CourseError("name the notebook to check: python -m autograder check NOTEBOOK")
    checked = check_server.check(course, args.notebook)
    if checked["sandbox"] == "off":
        print(NO_SANDBOX, file=sys.stderr)
    if checked["named"]:
        print(checked["named"], file=sys.stderr)
    results = [r for r in checked["results"] if not r["by_hand"]]
    by_hand = [r for r in checked["results"] if r["by_hand"]]
    score, total = sum(r["score"] for r in results), sum(r["max_score"] for r in results)
    failed = sum(not r["passed"] for r in results)
    if args.json:
        print_json({"notebook": str(args.notebook), "assignment": checked["assignment"], "score": score,
                    "max_score": total, "passed": len(results) - failed, "failed": failed,
                    "hidden_tests_ran": checked["hidden_tests_ran"], "sandbox": checked["sandbox"],
                    "memory": checked["memory"],
                    "tests": [{k: r[k] for k in ("grade_id", "description", "passed", "score", "max_score", "message")}
                              for r in results],
                    "graded_by_hand": [{"grade_id": r["grade_id"], "max_score": r["max_score"]} for r in by_hand]})
        return 0 if failed == 0 else 1
    for r in results:
        print(f"{'PASS' if r['passed'] else 'FAIL'}  {r['score']:g}/{r['max_score']:g}  {r['grade_id']}: {r['description']}")
        if not r["passed"] and r["message"]:
            print("      " + r["message"].replace("\n", "\n      "))
    for r in by_hand:
        print(f"HAND  -/{r['max_score']:g}  {r['grade_id']}: {r['description']}")
    print(f"score: {score:g} / {total:g}" + (f" (and {sum(r['max_score'] for r in by_hand):g} points your "
                                           f"instructor grades by hand)" if by_hand else ""))
    print(f"{len(results) - failed} passed, {failed} failed")
    print(f"sandbox: {checked['sandbox']}; memory: {checked['memory']}")  # what grade's first line says
    if not checked["hidden_tests_ran"]:
        print("These are the visible tests of your notebook. The grader runs more (hidden tests: other "
              "shapes, values and random upstream gradients), so a passing check is not yet a full mark.")
    return 0 if failed == 0 else 1
