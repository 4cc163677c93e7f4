"""``python -m autograder similarity ASSIGNMENT``: pairs of students with similar answers, for you to read."""

from __future__ import annotations

from pathlib import Path

from autograder.commands import count
from autograder.course import Course

HELP = "flag pairs of students with similar answers (HTML report)"
DESCRIPTION = ("Compare every pair of students' answer cells (not the tests, not the released template, and by "
               "default not the instructor's solution) with copydetect, and write a ranked HTML report of the most "
               "similar pairs with their shared code marked side by side to "
               "grading/reports/<assignment>/similarity.html. It flags pairs for you to read; it never changes a "
               "grade.")


def add_arguments(parser) -> None:
    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("--threshold", type=float, default=0.5,
                        help="report pairs where at least this share of one's answer code is in the other's "
                             "(default 0.5)")
    parser.add_argument("--top", type=int, default=30, help="at most this many pairs (default 30)")
    parser.add_argument("--keep-solution", action="store_true",
                        help="count code that is also in the instructor's solution as shared")
    parser.add_argument("--out", type=Path, default=None, help="where to write the HTML page")


def run(args, course: Course) -> int:
    from autograder.grading.results.similarity import similarity
    from autograder.grading.results.terminal import print_table

    out = args.out or course.grading / "reports" / args.assignment / "similarity.html"
    result = similarity(course, args.assignment, out, threshold=args.threshold, top=args.top,
                        ignore_solution=not args.keep_solution)
    if result.pairs:
        print_table(["rank", "students", "shared answer code", "tokens"],
                    ([i, f"{p.first} & {p.second}", f"{100 * p.similarity[0]:.0f}% / {100 * p.similarity[1]:.0f}%",
                      p.shared_tokens] for i, p in enumerate(result.pairs, 1)), right=["rank", "tokens"])
    for student, why in result.skipped.items():
        print(f"not compared: {student}: {why}")
    print(f"{count(len(result.students), 'submission')}, {count(len(result.pairs), 'similar pair')} flagged "
          "(no grade changed); "
          f"wrote {result.page}")
    return 0
