"""The instructor's command line: ``python -m autograder <command>`` (``make`` targets call it)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from pathlib import Path

from autograder.authoring.course import Course, CourseError, release


def _release(args, course: Course) -> int:
    for path in release(course, args.assignments):
        print(f"released {path.relative_to(course.root)}")
    return 0


def _validate(args, course: Course) -> int:
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


def _check(args, course: Course) -> int:
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


def _publish(args, course: Course) -> int:
    from autograder.authoring.publish import publish

    out = args.out or course.root / "dist" / ("self-study-edition" if args.self_study else "student-edition")
    written = publish(course, out, self_study=args.self_study, repository=args.repository,
                      assignments=args.assignments)
    files = sum(1 for p in written.rglob("*") if p.is_file())
    label = "self-study edition (WITH the solutions)" if args.self_study else "student distribution (no solutions)"
    print(f"wrote the {label}: {written} ({files} files) and {written}.zip")
    return 0


def _collect(args, course: Course) -> int:
    from autograder.grading.collect import collect

    results = collect(course, args.assignment, args.source, layout=args.layout, regexp=args.regexp)
    for r in results:
        print(r.summary())
    collected = sum(bool(r.collected) for r in results)
    attention = [r for r in results if r.needs_attention]
    print(f"{collected} students collected, {len(attention)} with problems")
    if not collected:
        print(f"error: no notebook of {args.assignment} was collected from {args.source}: check that it is this "
              "assignment's download, and give its layout with --layout or --regexp (see --help)", file=sys.stderr)
        return 1
    if attention:
        print("some files were not collected or need a look (lines above): fix the download or the roster and "
              "collect again; students without a usable notebook are graded 'invalid notebook'", file=sys.stderr)
        return 1
    return 0


def _roster(args, course: Course) -> int:
    from autograder.grading.roster import import_roster

    result = import_roster(course, args.roster)
    print(f"{len(result.added)} students added, {len(result.updated)} updated in the gradebook")
    if result.ignored_columns:
        print(f"ignored columns: {', '.join(result.ignored_columns)}")
    return 0


def _grade(args, course: Course) -> int:
    from autograder.grading.executor import Limits
    from autograder.grading.grade import GRADES_CSV, grade

    limits = Limits(cell_timeout=args.timeout, memory=int(args.memory * 1024**3) if args.memory else None,
                    threads=max(1, (os.cpu_count() or 1) // (args.jobs or os.cpu_count() or 1)),
                    sandbox="off" if args.no_sandbox else "auto")
    rows = grade(course, args.assignment, jobs=args.jobs, limits=limits, scheduler=args.scheduler,
                 force=args.force)
    if not rows:
        raise CourseError(f"no submissions of {args.assignment} in {course.grading / 'submitted'}: "
                          f"run `python -m autograder collect {args.assignment} SOURCE` first")
    from autograder.grading.terminal import print_table

    print_table(["student", "score", "status"],
                ([r.student_id, f"{r.score:g} / {r.max_score:g}", _grade_status(r)] for r in rows), right=["score"])
    counts = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(", ".join(f"{n} {status}" for status, n in counts.items()) + f"; wrote {course.grading / GRADES_CSV}")
    reasons: dict[str, list[str]] = {}
    for r in rows:
        if r.regraded:
            reasons.setdefault(r.regraded, []).append(r.student_id)
    # What this run did, on stderr: the grades above are the same whichever run graded them.
    for reason, students in reasons.items():
        print(f"regraded {len(students)} submission{'s' * (len(students) != 1)} because {reason}: "
              f"{', '.join(students)}", file=sys.stderr)
    reused = sum(r.reused for r in rows)
    if reused:
        print(f"{reused} already graded and unchanged (tests, grader and submission): not graded again "
              "(--force grades them again)", file=sys.stderr)
    return 0


def _grade_status(row) -> str:
    """A row's status as the grade table shows it: what happened, and how late (with the penalty)."""
    note = f" ({row.detail})" if row.detail else ""
    late = f"; late {row.late}" + (f", -{row.penalty:g} points" if row.penalty else "") if row.late else ""
    return f"{row.status}{note}{late}"


def _deadline(args, course: Course) -> int:
    from autograder.grading import deadlines

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


def _export(args, course: Course) -> int:
    from autograder.grading.export import export

    result = export(course, args.assignment, args.out or course.grading / "exports" / args.assignment,
                    canvas_column=args.canvas_column)
    for path in (result.canvas, result.plain, result.per_test):
        print(f"wrote {path}")
    print(f"{result.students} students exported")
    if result.without_lms_id:
        print(f"Canvas cannot match {len(result.without_lms_id)} students without an lms_user_id in the roster "
              f"({', '.join(result.without_lms_id)}): add the column to the roster, import it again "
              "(`python -m autograder roster CSV`) and export again", file=sys.stderr)
    return 0


def _similarity(args, course: Course) -> int:
    from autograder.grading.similarity import similarity

    out = args.out or course.grading / "reports" / args.assignment / "similarity.html"
    result = similarity(course, args.assignment, out, threshold=args.threshold, top=args.top,
                        ignore_solution=not args.keep_solution)
    from autograder.grading.terminal import print_table

    if result.pairs:
        print_table(["rank", "students", "shared answer code", "tokens"],
                    ([i, f"{p.first} & {p.second}", f"{100 * p.similarity[0]:.0f}% / {100 * p.similarity[1]:.0f}%",
                      p.shared_tokens] for i, p in enumerate(result.pairs, 1)), right=["rank", "tokens"])
    for student, why in result.skipped.items():
        print(f"not compared: {student}: {why}")
    print(f"{len(result.students)} submissions, {len(result.pairs)} similar pairs flagged (no grade changed); "
          f"wrote {result.page}")
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

    from autograder.grading.terminal import print_markdown

    result = report(course, args.assignment, args.out or course.grading / "reports" / args.assignment)
    print_markdown(result.summary.read_text(encoding="utf-8").rstrip())
    for path in (result.summary, result.histogram, result.pass_rates):
        print(f"wrote {path}")
    return 0


def _demo(args, course: Course) -> int:
    """The whole term on the bundled demo class of assignment 01: roster, collect, deadline, grade, feedback,
    report, similarity, export."""
    from autograder.grading.demo.make_demo import ASSIGNMENT as DEMO_ASSIGNMENT, DEADLINE_OPTIONS, DEMO_ROOT

    steps = [["roster", str(DEMO_ROOT / "roster.csv")],
             ["collect", DEMO_ASSIGNMENT, str(DEMO_ROOT / DEMO_ASSIGNMENT)],
             ["deadline", DEMO_ASSIGNMENT, *DEADLINE_OPTIONS], ["grade", DEMO_ASSIGNMENT],
             ["feedback", DEMO_ASSIGNMENT], ["report", DEMO_ASSIGNMENT], ["similarity", DEMO_ASSIGNMENT],
             ["export", DEMO_ASSIGNMENT]]
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

    if args.profile:
        from autograder.grading.bench import profile

        profile(course, args.students)
        return 0
    result = bench(course, args.students, args.jobs)
    return 1 if result["differences"] else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m autograder",
        description="Release, validate and grade the course 'Custom autograd Functions in PyTorch'.",
    )
    parser.add_argument("--course", type=Path, metavar="DIR", default=None,
                        help="the course folder (with solutions/ or course/); default: $AUTOGRADER_COURSE_ROOT, "
                             "else the current folder")
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

    p = commands.add_parser("check", help="grade one notebook locally (visible tests, or all where solutions/ is)",
                            description="Autograde one notebook (your copy of an assignment) and print each "
                                        "test's points, PASS/FAIL and message. With the instructor's "
                                        "solutions/ present every test runs, hidden ones included; in a "
                                        "student distribution the visible tests run, and the grader runs "
                                        "more. Exits 1 unless every test passes.")
    p.add_argument("notebook", type=Path, help="path to your .ipynb (named like the assignment)")
    p.set_defaults(run=_check)

    if importlib.util.find_spec("autograder.authoring.publish") is not None:
        p = commands.add_parser("publish", help="write the student distribution (no solutions) to dist/",
                                description="Write what students get and nothing else: course/, the "
                                            "student's library, a README for students, the environment "
                                            "files and binder/, as a folder and a zip (default "
                                            "dist/student-edition). No solution or hidden test is in it.")
        p.add_argument("assignments", nargs="*", metavar="ASSIGNMENT",
                       help="the assignments released so far (default: all of course/); later notebooks build on "
                            "earlier answers, so release each once the ones before it are due")
        p.add_argument("--out", type=Path, default=None, metavar="DIR", help="folder to write (replaced)")
        p.add_argument("--repository", metavar="URL", default=None,
                       help="the GitHub repository the edition will be pushed to (https://github.com/OWNER/NAME): "
                            "its notebooks install the library from there on Colab and its README links there "
                            "(default: student-repository in pyproject.toml, or $AUTOGRADER_STUDENT_REPOSITORY)")
        p.add_argument("--self-study", action="store_true",
                       help="write the self-study edition instead: the same plus solutions/, labelled as such")
        p.set_defaults(run=_publish)

    # The command's arguments and run() live in autograder.authoring.book (python -m autograder.authoring.book);
    # a student distribution ships no authoring tools, so no `book` there.
    if importlib.util.find_spec("autograder.authoring.book") is not None:
        from autograder.authoring import book
        p = commands.add_parser("book", help="render the course, solutions run, as a static HTML site in book/",
                                description=book.DESCRIPTION)
        book.add_arguments(p)
        p.set_defaults(run=book.run)

    p = commands.add_parser("collect", help="put downloaded submissions where grading expects them",
                            description="Copy submissions from an LMS download (zip or folder) into "
                                        "grading/submitted/. Understands Canvas (a flat zip of "
                                        "name_USERID_FILEID_notebook.ipynb, with _LATE_ marks), Moodle "
                                        "(Name_USERID_assignsubmission_file_/ folders), Blackboard "
                                        "(NAME_attempt_DATE_notebook.ipynb) and a folder per student "
                                        "(SOURCE/<student_id>/<notebook>.ipynb); --regexp reads any other "
                                        "layout. LMS user ids and names are mapped to student ids through "
                                        "the roster's lms_user_id (import it first with `roster`). Of several "
                                        "attempts, the latest is collected. Wrong or missing file names are "
                                        "reported per student. Exits 1 if anything was skipped or nothing "
                                        "was collected.")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("source", type=Path, metavar="SOURCE", help="folder or .zip downloaded from the LMS")
    p.add_argument("--layout", choices=["canvas", "moodle", "blackboard", "folders"], default=None,
                   help="the download's layout (default: the one that reads most notebooks)")
    p.add_argument("--regexp", metavar="REGEXP", default=None,
                   help="nbgrader's named_regexp for any other layout, read on each file name (or on its path "
                        "inside the download if REGEXP has a /): named groups student_id (or lms_user_id, or "
                        "email) and file_id; optional timestamp, first_name, last_name, e.g. "
                        r"'(?P<student_id>\w+)_attempt_(?P<timestamp>[0-9-]+)_(?P<file_id>\w+\.ipynb)'")
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

    p = commands.add_parser("deadline", help="set an assignment's due date, extensions and late penalty",
                            description="Set (or, with no option, show) an assignment's due date, per-student "
                                        "extensions and late penalty, kept in grading/deadlines.json and put "
                                        "into nbgrader's gradebook (duedate, extensions) when grading. A "
                                        "submission is late when its time (timestamp.txt, written by collect "
                                        "from the LMS download) is after the due date plus its extension; "
                                        "grades.csv, the feedback page and the report say how late and the "
                                        "penalty. Changing any of it regrades the students it affects.")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("--due", metavar="WHEN", help="due date, e.g. '2026-03-15 23:59' (local time) or with a zone "
                                                 "'2026-03-15T23:59:00+01:00'")
    p.add_argument("--extend", action="append", metavar="STUDENT=DURATION",
                   help="an extension, e.g. ben=2d, ada=36h, eli=90m; =0 removes it (repeat for more students)")
    p.add_argument("--penalty", dest="percent", type=float, metavar="PERCENT",
                   help="percent of the score taken per hour or day started late (default 0: marked only)")
    p.add_argument("--per", choices=["hour", "day"], default=None, help="the penalty's period (default hour)")
    p.add_argument("--max", dest="max_percent", type=float, metavar="PERCENT",
                   help="the penalty never takes more than this percent of the score (default 100)")
    p.add_argument("--grace", dest="grace_minutes", type=float, metavar="MINUTES",
                   help="lateness forgiven before the penalty starts (default 0)")
    p.add_argument("--zero", action=argparse.BooleanOptionalAction, default=None,
                   help="late work scores 0 (nbgrader's 'zero' penalty); --no-zero turns it off")
    p.add_argument("--clear", action="store_true", help="remove the due date, extensions and penalty first")
    p.set_defaults(run=_deadline)

    p = commands.add_parser("export", help="write grades for the LMS: Canvas's CSV, a plain CSV, points per test",
                            description="Write grading/exports/<assignment>/ (or --out): canvas.csv (Canvas's "
                                        "gradebook import: students matched by their Canvas user id, the "
                                        "roster's lms_user_id), grades.csv (student_id, lms_user_id, names, "
                                        "email, score after any late penalty, status, lateness) and "
                                        "per_test.csv (a row per student, a column per test, its points). "
                                        "Grade first.")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("--out", type=Path, default=None, help="folder for the CSV files")
    p.add_argument("--canvas-column", default=None, metavar="NAME",
                   help="the assignment's column in Canvas, as Canvas's own export names it, e.g. "
                        "'Assignment 1 (4567)' (default: the assignment id, which Canvas imports as a new column)")
    p.set_defaults(run=_export)

    p = commands.add_parser("similarity", help="flag pairs of students with similar answers (HTML report)",
                            description="Compare every pair of students' answer cells (not the tests, not "
                                        "the released template, and by default not the instructor's "
                                        "solution) with copydetect, and write a ranked HTML report of the most "
                                        "similar pairs with their shared code marked side by side to "
                                        "grading/reports/<assignment>/similarity.html. It flags pairs for "
                                        "you to read; it never changes a grade.")
    p.add_argument("assignment", metavar="ASSIGNMENT")
    p.add_argument("--threshold", type=float, default=0.5,
                   help="report pairs where at least this share of one's answer code is in the other's (default 0.5)")
    p.add_argument("--top", type=int, default=30, help="at most this many pairs (default 30)")
    p.add_argument("--keep-solution", action="store_true",
                   help="count code that is also in the instructor's solution as shared")
    p.add_argument("--out", type=Path, default=None, help="where to write the HTML page")
    p.set_defaults(run=_similarity)

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

    p = commands.add_parser("demo", help="run the instructor's whole workflow on the demo class",
                            description="Run the instructor workflow on the bundled demo class of "
                                        "assignment 01 (autograder/grading/demo/): roster, collect, deadline "
                                        "(a late student, an extension), grade, feedback, report, similarity "
                                        "(a copied pair) and export (Canvas's CSV).")
    p.set_defaults(run=_demo)

    p = commands.add_parser("bench", help="time this grader against sequential nbgrader autograde",
                            description="Grade N generated submissions of assignment 01 twice, with "
                                        "`python -m autograder grade` and with plain sequential `nbgrader "
                                        "autograde`, in throwaway course copies, each timed as the whole "
                                        "command-line process; print both times, the ratio, seconds per "
                                        "notebook and the machine's load. Exits 1 if any score differs.")
    p.add_argument("--students", type=int, default=40, help="submissions to grade (default 40)")
    p.add_argument("--jobs", "-j", type=int, default=None, help="notebooks graded at once (default: CPU cores)")
    p.add_argument("--profile", action="store_true",
                   help="instead, show where one notebook's time goes in grade (start, cells, scoring, gradebook)")
    p.set_defaults(run=_bench)
    return parser


def _will_run_notebooks(argv: list[str]) -> bool:
    """Whether this command will run notebooks (a guess from the command line and the folders,
    made before anything heavy is imported, nbgrader included): then the warm process starts first."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--course", type=Path, default=None)
    early.add_argument("command", nargs="?")
    known, rest = early.parse_known_args(argv)
    if known.command == "check":
        return True
    if known.command != "grade" or "--scheduler" in rest:
        return False
    try:
        course = Course.locate(known.course)
    except CourseError:
        return False  # said properly when the command runs
    submitted = course.grading / "submitted"
    return "--force" in rest or any(
        not (course.grading / "autograded" / folder.relative_to(submitted) / ".autograder.json").exists()  # grade.MARKER
        for folder in submitted.glob("*/*") if folder.is_dir())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if _will_run_notebooks(argv):
        from autograder.grading.executor import warm_up
        from autograder.grading.speed import skip_iri_format_checks

        skip_iri_format_checks()  # before anything imports jsonschema
        warm_up()  # the warm process imports torch on another core while this one imports nbgrader
    args = build_parser().parse_args(argv)
    try:
        return args.run(args, Course.locate(args.course))
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        if not (error.name or "").startswith("autograder."):
            raise
        # A student distribution ships the student's library and `check`, not the instructor's tools.
        print(f"error: `{args.command}` is an instructor's command, not part of this student distribution "
              f"(it has `check`)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
