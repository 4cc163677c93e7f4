"""``python -m autograder grade ASSIGNMENT``: autograde every collected submission, in parallel."""

from __future__ import annotations

import os
import sys

from autograder.commands import add_json_flag, count, print_json
from autograder.course import Course, CourseError

HELP = "autograde every collected submission, in parallel"
DESCRIPTION = ("Autograde every submission in grading/submitted/ into the gradebook and grading/autograded/, several "
               "at once, each in its own fresh process with a time and memory limit. Writes grading/grades.csv "
               "(student_id, assignment, score, max_score, status). Submissions already graded and unchanged are "
               "not graded again. Whatever one notebook holds or does, it ends in its student's own row (status and "
               "detail say why) and every other student is graded; the last line counts the students per status and "
               "those with problems (any status but graded and missing). Exit status: 0 when every student has a "
               "row; 2 when grading could not run (no such assignment, nothing collected, no sandbox).")


def add_arguments(parser) -> None:
    from autograder.grading.running.confinement import memory
    from autograder.grading.running.confinement.limits import BUDGET_CELLS

    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("--jobs", "-j", type=int, default=None, help="notebooks graded at once (default: CPU cores)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="longest a cell may run (default 60); after one cell times out, later cells get 10 s")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="most one notebook may take, all its cells and the grader's checks together, in "
                             "wall-clock time and in CPU time of all its processes (default: "
                             f"{BUDGET_CELLS} times --timeout); past it the notebook is stopped and its row says "
                             "'over budget', naming the cell; no process of a notebook outlives it")
    parser.add_argument("--memory", type=float, default=4.0, metavar="GB",
                        help="memory a notebook may use beyond its start (default 4; 0 for no limit); on this "
                             f"machine, {memory.describe(memory.bound(True, 4 * 1024**3), 4 * 1024**3)}")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="run the notebooks on a Dask cluster (e.g. tcp://10.0.0.5:8786) instead of here")
    parser.add_argument("--force", action="store_true", help="grade again even what is already graded")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run student code without a sandbox, as you, able to read solutions/ and the gradebook, "
                             "change grades and use the network (only where no sandbox is available; see README)")
    add_json_flag(parser)


def will_run_notebooks(args: list[str], course: Course) -> bool:
    """Whether grading will run notebooks (a guess from the folders, made before nbgrader is imported): then the
    CLI starts the warm process first, so torch imports on another core while this one imports nbgrader."""
    if "--scheduler" in args:
        return False
    submitted = course.grading / "submitted"
    return "--force" in args or any(
        not (course.grading / "autograded" / folder.relative_to(submitted) / ".autograder.json").exists()  # resume.MARKER
        for folder in submitted.glob("*/*") if folder.is_dir())


def run(args, course: Course) -> int:
    from autograder.grading.grade import grade
    from autograder.grading.records.grades import GRADES_CSV
    from autograder.grading.results.terminal import print_table
    from autograder.grading.running.confinement.limits import Limits

    limits = Limits(cell_timeout=args.timeout, budget=args.budget,
                    memory=int(args.memory * 1024**3) if args.memory else None,
                    threads=max(1, (os.cpu_count() or 1) // (args.jobs or os.cpu_count() or 1)),
                    sandbox="off" if args.no_sandbox else "auto")
    rows = grade(course, args.assignment, jobs=args.jobs, limits=limits, scheduler=args.scheduler,
                 force=args.force)
    if not rows:
        raise CourseError(f"no submissions of {args.assignment} in {course.grading / 'submitted'}: "
                          f"run `python -m autograder collect {args.assignment} SOURCE` first")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    if args.json:
        print_json({"assignment": args.assignment, "grades_csv": course.grading / GRADES_CSV, "counts": counts,
                    "students_with_problems": len(with_problems(rows)),
                    "points_in_process": max((r.points_in_process for r in rows), default=0.0),
                    "points_by_hand": max((r.points_by_hand for r in rows), default=0.0),
                    "students": [{"student_id": r.student_id, "score": r.score, "max_score": r.max_score,
                                  "status": r.status, "detail": r.detail, "late": r.late, "penalty": r.penalty,
                                  "regraded": r.regraded, "reused": r.reused, "to_grade_by_hand": r.to_grade_by_hand}
                                 for r in rows]})
        return 0
    print_table(["student", "score", "status"],
                ([r.student_id, f"{r.score:g} / {r.max_score:g}", status(r)] for r in rows), right=["score"])
    print(decided_by_whom(rows))
    problems = len(with_problems(rows))  # (the table above names them, with why)
    print(", ".join(f"{n} {s}" for s, n in counts.items()) + f"; wrote {course.grading / GRADES_CSV}; "
          f"{count(problems, 'student')} with problems")
    penalised = sum(1 for r in rows if r.penalty)
    if penalised:
        print(f"{count(penalised, 'late penalty', 'late penalties')} taken: the scores above, {GRADES_CSV}, feedback, "
              "report and export are after them; nbgrader's formgrader shows scores and averages before them")
    reasons: dict[str, list[str]] = {}
    for r in rows:
        if r.regraded:
            reasons.setdefault(r.regraded, []).append(r.student_id)
    # What this run did, on stderr: the grades above are the same whichever run graded them.
    for reason, students in reasons.items():
        print(f"regraded {count(len(students), 'submission')} because {reason}: "
              f"{', '.join(students)}", file=sys.stderr)
    reused = sum(r.reused for r in rows)
    if reused:
        print(f"{reused} already graded and unchanged (tests, grader and submission): not graded again "
              "(--force grades them again)", file=sys.stderr)
    return 0


def with_problems(rows) -> list:
    """Rows whose submission did not run as handed in to the end: their status and detail say why."""
    return [r for r in rows if r.status not in ("graded", "missing")]


def decided_by_whom(rows) -> str:
    """One line for the instructor: how many points the referee decides, and how many the student's process."""
    graded = [r for r in rows if r.status != "missing"]
    in_process = max((r.points_in_process for r in graded), default=0.0)
    total = max((r.max_score for r in graded), default=0.0)
    by_hand = max((r.points_by_hand for r in graded), default=0.0)
    if not in_process:
        line = (f"every test cell's points ({total - by_hand:g}) decided by the referee, outside the students' "
                f"processes")
    else:
        line = (f"{in_process:g} of {total - by_hand:g} points decided in the student's process (test cells "
                f"the referee cannot check outside it; guarded by the tamper guard only: see the book's Guarantees "
                f"page)")
    if by_hand:
        waiting = sum(r.to_grade_by_hand for r in graded)
        line += (f"; {by_hand:g} points are answers graded by hand"
                 + (f": {count(waiting, 'answer')} of {count(sum(r.to_grade_by_hand > 0 for r in graded), 'student')} "
                    f"await you in the formgrader (0 until scored; feedback, report and export read your scores)"
                    if waiting else ", all scored"))
    return line


def status(row) -> str:
    """A row's status as the grade table shows it: what happened, and how late (with the penalty)."""
    from autograder.grading.records.deadlines import TIME_NOT_RECORDED, TIME_UNKNOWN

    note = f" ({row.detail})" if row.detail else ""
    how_late = row.late if row.late in (TIME_UNKNOWN, TIME_NOT_RECORDED) else f"late {row.late}"
    late = f"; {how_late}" + (f", -{row.penalty:g} points" if row.penalty else "") if row.late else ""
    by_hand = f"; {row.to_grade_by_hand} to grade by hand" if row.to_grade_by_hand else ""
    return f"{row.status}{note}{late}{by_hand}"
