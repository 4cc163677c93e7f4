"""``python -m autograder publish``: the students' edition (no solutions), or the self-study edition."""

from __future__ import annotations

import sys
from pathlib import Path

from autograder.commands import count
from autograder.course import Course

HELP = "write the student distribution (no solutions) to dist/"
DESCRIPTION = ("Write what students get and nothing else: course/, the student's library, a README for students, "
               "the environment files and binder/, as a folder and a zip (default dist/student-edition). No "
               "solution or hidden test is in it.")


def add_arguments(parser) -> None:
    parser.add_argument("assignments", nargs="*", metavar="ASSIGNMENT",
                        help="the assignments released so far (default: all of course/); later notebooks build on "
                             "earlier answers, so release each once the ones before it are due")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR", help="folder to write (replaced)")
    parser.add_argument("--repository", metavar="URL", default=None,
                        help="the GitHub repository the edition will be pushed to (https://github.com/OWNER/NAME): "
                             "its notebooks install the library from there on Colab and its README links there "
                             "(default: student-repository in pyproject.toml, or $AUTOGRADER_STUDENT_REPOSITORY)")
    parser.add_argument("--self-study", action="store_true",
                        help="write the self-study edition instead: the same plus solutions/, labelled as such")


def run(args, course: Course) -> int:
    from autograder.authoring.colab import UNSET, student_repository
    from autograder.authoring.publish import publish

    out = args.out or course.root / "dist" / ("self-study-edition" if args.self_study else "student-edition")
    written = publish(course, out, self_study=args.self_study, repository=args.repository,
                      assignments=args.assignments)
    files = sum(1 for p in written.rglob("*") if p.is_file())
    label = "self-study edition (WITH the solutions)" if args.self_study else "student distribution (no solutions)"
    print(f"wrote the {label}: {written} ({count(files, 'file')}) and {written}.zip")
    if student_repository(course) is None and not args.repository:
        print(f"note: the edition has no Colab or Binder links (hand out the zip, or use JupyterHub): {UNSET}",
              file=sys.stderr)
    return 0
