"""``python -m autograder bench``: this grader against sequential ``nbgrader autograde``, timed."""

from __future__ import annotations

from autograder.course import Course

HELP = "time this grader against sequential nbgrader autograde"
DESCRIPTION = ("Grade N generated submissions of assignment 01, then a few right notebooks of 10 and of 11, twice, "
               "with `python -m autograder grade` and with plain sequential `nbgrader autograde`, in throwaway "
               "course copies, each measured as the whole command-line process; print both times and CPU seconds "
               "(every process of the command), per notebook, the ratio and the machine's load. Exits 1 if any "
               "score differs.")


def add_arguments(parser) -> None:
    parser.add_argument("--students", type=int, default=40, help="submissions to grade (default 40)")
    parser.add_argument("--kernel-students", type=int, default=3,
                        help="right submissions of each Triton assignment (10, 11) to grade after 01's (default 3)")
    parser.add_argument("--jobs", "-j", type=int, default=None, help="notebooks graded at once (default: CPU cores)")
    parser.add_argument("--profile", action="store_true",
                        help="instead, show where one notebook's time goes in grade (start, cells, scoring, gradebook)")
    parser.add_argument("--check", action="store_true",
                        help="instead, time the student's `check` end to end on blank and filled-in 01, 05, 09, 10 "
                             "and 11 (after the first check, which starts its warm process), then one check_function "
                             "call")
    parser.add_argument("--runs", type=int, default=5, help="with --check: checks of each notebook (default 5)")
    parser.add_argument("--cells", metavar="ASSIGNMENT_OR_NOTEBOOK",
                        help="instead, what each cell and each check of one notebook costs, in CPU seconds and in "
                             "programs Triton's interpreter runs: the notebook's cells (the test cells' visible part), "
                             "then its tests as the referee judges them, the examinee's answers made here (an "
                             "assignment's name: its solution notebook)")


def run(args, course: Course) -> int:
    from autograder.grading.bench import bench, bench_check, profile

    if args.cells:
        from autograder.grading.bench import bench_cells

        bench_cells(course, args.cells)
        return 0
    if args.check:
        bench_check(course, args.runs)
        return 0
    if args.profile:
        profile(course, args.students)
        return 0
    result = bench(course, args.students, args.jobs, kernel_students=args.kernel_students)
    return 1 if result["differences"] else 0
