"""``python -m autograder report ASSIGNMENT``: how the class did, with figures."""

from __future__ import annotations

from pathlib import Path

from autograder.commands import add_json_flag, print_json
from autograder.course import Course

HELP = "summarise how the class did, with figures"
DESCRIPTION = ("Write a score histogram and per-exercise pass rates (PNG) and a summary, as Markdown and as one "
               "HTML file with the figures in it, to grading/reports/<assignment>/ (or --out).")


def add_arguments(parser) -> None:
    parser.add_argument("assignment", metavar="ASSIGNMENT")
    parser.add_argument("--out", type=Path, default=None, help="folder for the report")
    add_json_flag(parser)


def run(args, course: Course) -> int:
    from autograder.grading.results.report import report
    from autograder.grading.results.terminal import print_markdown

    result = report(course, args.assignment, args.out or course.grading / "reports" / args.assignment)
    if args.json:
        print_json({"assignment": result.assignment, "max_score": result.max_score, "scores": result.scores,
                    "exercises": [{"name": e.name, "max_score": e.max_score, "passed": e.passed, "graded": e.graded,
                                   "pass_rate": e.pass_rate, "by_hand": e.by_hand, "to_grade": e.to_grade}
                                  for e in result.exercises],
                    "not_graded": result.not_graded, "statuses": result.statuses,
                    "late": {s: {"late": late, "penalty": penalty} for s, (late, penalty) in result.late.items()},
                    "files": {"summary": result.summary, "page": result.page, "histogram": result.histogram,
                              "pass_rates": result.pass_rates}})
        return 0
    print_markdown(result.summary.read_text(encoding="utf-8").rstrip())
    for path in (result.summary, result.page, result.histogram, result.pass_rates):
        print(f"wrote {path}")
    return 0
