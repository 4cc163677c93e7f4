"""``python -m autograder report ASSIGNMENT``: how the class did, with figures."""

from __future__ import annotations

from pathlib import Path

from autograder.course import Course

HELP = "summarise how the class did, with figures"
DESCRIPTION = ("Write a score histogram and per-exercise pass rates (PNG) and a summary, as Markdown and as one "
               "HTML file with the figures in it, to grading/reports/<assignment>/ (or --out).")


def add_arguments(parser) -> None:
    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("--out", type=Path, default=None, help="folder for the report")


def run(args, course: Course) -> int:
    from autograder.grading.results.report import report
    from autograder.grading.results.terminal import print_markdown

    result = report(course, args.assignment, args.out or course.grading / "reports" / args.assignment)
    print_markdown(result.summary.read_text(encoding="utf-8").rstrip())
    for path in (result.summary, result.page, result.histogram, result.pass_rates):
        print(f"wrote {path}")
    return 0
