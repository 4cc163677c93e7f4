"""The instructor's command line: ``python -m autograder <command>`` (``make`` targets call it)."""

from __future__ import annotations

import argparse
import os
import sys

from pathlib import Path

from autograder.authoring.course import Course, CourseError, release
from autograder.grading.executor import Limits
from autograder.grading.selfcheck import check_notebook
from autograder.authoring.validation import validate


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


def _collect(args, course: Course) -> int:
    from autograder.grading.collect import collect

    results = collect(course, args.assignment, args.source)
    for r in results:
        print(r.summary())
    problems = sum(bool(r.problems or r.missing) for r in results)
    print(f"{sum(bool(r.collected) for r in results)} students collected, {problems} with problems")
    return 0


def _roster(args, course: Course) -> int:
    from autograder.grading.roster import import_roster

    result = import_roster(course, args.roster)
    print(f"{len(result.added)} students added, {len(result.updated)} updated in the gradebook")
    if result.ignored_columns:
        print(f"ignored columns: {', '.join(result.ignored_columns)}")
    return 0


def _grade(args, course: Course) -> int:
    from autograder.grading.grade import GRADES_CSV, grade

    limits = Limits(cell_timeout=args.timeout, memory=int(args.memory * 1024**3) if args.memory else None,
                    threads=max(1, (os.cpu_count() or 1) // (args.jobs or os.cpu_count() or 1)),
                    sandbox="off" if args.no_sandbox else "auto")
    rows = grade(course, args.assignment, jobs=args.jobs, limits=limits, scheduler=args.scheduler,
                 force=args.force)
    if not rows:
        raise CourseError(f"no submissions of {args.assignment} in {course.grading / 'submitted'}: "
                          f"run `python -m autograder collect {args.assignment} SOURCE` first")
    width = max(len("student"), *(len(r.student_id) for r in rows))
    print(f"{'student':<{width}}  {'score':>11}  status")
    for r in rows:
        note = f" ({r.detail})" if r.detail else ""
        print(f"{r.student_id:<{width}}  {r.score:>5g} / {r.max_score:<3g}  {r.status}{note}")
    counts = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(", ".join(f"{n} {status}" for status, n in counts.items()) + f"; wrote {course.grading / GRADES_CSV}")
    return 0


def _feedback(args, course: Course) -> int:
    from autograder.grading.feedback import feedback

    pages = feedback(course, args.assignment)
    for page in pages:
        print(f"wrote {page.relative_to(course.root)}")
    print(f"{len(pages)} feedback pages")
    return 0


def _report(args, course: Course) -> int:
    from autograder.grading.report import report

    result = report(course, args.assignment, args.out or course.grading / "reports" / args.assignment)
    print(result.summary.read_text(encoding="utf-8").rstrip())
    for path in (result.summary, result.histogram, result.pass_rates):
        print(f"wrote {path}")
    return 0


def _demo(args, course: Course) -> int:
    """Roster, collect, grade, give feedback on and report the bundled demo class of assignment 01."""
    from autograder.grading.demo.make_demo import ASSIGNMENT as DEMO_ASSIGNMENT, DEMO_ROOT

    steps = [["roster", str(DEMO_ROOT / "roster.csv")],
             ["collect", DEMO_ASSIGNMENT, str(DEMO_ROOT / DEMO_ASSIGNMENT)], ["grade", DEMO_ASSIGNMENT],
             ["feedback", DEMO_ASSIGNMENT], ["report", DEMO_ASSIGNMENT]]
    for step in steps:
        print(f"\n$ python -m autograder {' '.join(step)}")
        sys.stdout.flush()
        args = build_parser().parse_args(step)
        status = args.run(args, course)
        if status:
            return status
    return 0


def _bench(args, course: Course) -> int:
    from autograder.grading.bench import bench

    result = bench(args.students, args.jobs)
    return 1 if result["differences"] else 0


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

    from autograder.authoring import book  # the command's arguments and run() live there (python -m autograder.authoring.book)
    p = commands.add_parser("book", help="render the course, solutions run, as a static HTML site in book/",
                            description=book.DESCRIPTION)
    book.add_arguments(p)
    p.set_defaults(run=book.run)

    p = commands.add_parser("collect", help="put downloaded submissions where grading expects them",
                            description="Copy submissions from a folder with one sub-folder per student "
                                        "(SOURCE/<student_id>/<notebook>.ipynb) or from a zip of such folders "
                                        "(an LMS download) into grading/submitted/. Wrong or missing file "
                                        "names are reported per student.")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("source", type=Path, metavar="SOURCE", help="folder or .zip of student folders")
    p.set_defaults(run=_collect)

    p = commands.add_parser("roster", help="add the class list (names, emails) to the gradebook",
                            description="Add or update the students of a CSV class list in the gradebook: "
                                        "a header row with an `id` column and optionally first_name, "
                                        "last_name, email, lms_user_id (nbgrader's roster format). "
                                        "Students on the roster who hand in nothing are graded 'missing'. "
                                        "No student is ever removed.")
    p.add_argument("roster", type=Path, metavar="CSV")
    p.set_defaults(run=_roster)

    p = commands.add_parser("grade", help="autograde every collected submission, in parallel",
                            description="Autograde every submission in grading/submitted/ into the gradebook "
                                        "and grading/autograded/, several at once, each in its own fresh "
                                        "process with a time and memory limit. Writes grading/grades.csv "
                                        "(student_id, assignment, score, max_score, status). Submissions "
                                        "already graded and unchanged are not graded again.")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("--jobs", "-j", type=int, default=None, help="notebooks graded at once (default: CPU cores)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="longest a cell may run (default 60); after one cell times out, later cells get 10 s")
    p.add_argument("--memory", type=float, default=4.0, metavar="GB",
                   help="memory a notebook may use beyond its start (default 4; 0 for no limit)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the notebooks on a Dask cluster (e.g. tcp://10.0.0.5:8786) instead of here")
    p.add_argument("--force", action="store_true", help="grade again even what is already graded")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run student code without a sandbox, as you, able to read solutions/ and the gradebook, "
                        "change grades and use the network (only where no sandbox is available; see README)")
    p.set_defaults(run=_grade)

    p = commands.add_parser("feedback", help="write per-student HTML feedback",
                            description="Write grading/feedback/<student>/<assignment>/<notebook>.html for "
                                        "every graded student: scores, and each failing test's message "
                                        "(never the hidden tests' source).")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.set_defaults(run=_feedback)

    p = commands.add_parser("report", help="summarise how the class did, with figures",
                            description="Write a score histogram and per-exercise pass rates (PNG) and a "
                                        "summary to grading/reports/<assignment>/ (or --out).")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("--out", type=Path, default=None, help="folder for the report")
    p.set_defaults(run=_report)

    p = commands.add_parser("demo", help="roster, collect, grade, give feedback on and report the demo class",
                            description="Run the instructor workflow on the bundled demo class of "
                                        "assignment 01 (autograder/demo/): roster, collect, grade, feedback, report.")
    p.set_defaults(run=_demo)

    p = commands.add_parser("bench", help="time this grader against sequential nbgrader autograde",
                            description="Grade N generated submissions of assignment 01 twice, with "
                                        "`python -m autograder grade` and with plain sequential `nbgrader "
                                        "autograde`, in throwaway course copies; print both times and the "
                                        "ratio. Exits 1 if any score differs.")
    p.add_argument("--students", type=int, default=40, help="submissions to grade (default 40)")
    p.add_argument("--jobs", "-j", type=int, default=None, help="notebooks graded at once (default: CPU cores)")
    p.set_defaults(run=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args, Course.from_environment())
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
