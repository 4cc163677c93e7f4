"""``python -m autograder <command>``: lists the commands and dispatches to them (``make`` targets call it).

Each command lives in its own module of ``autograder.commands`` (help, arguments, run). A command
whose module is not installed does not exist: the students' edition ships ``check`` alone, so its
``--help`` shows only what a student can run.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path

from autograder.course import Course, CourseError

# In the order --help lists them: the student's command, then the course author's, then grading's.
COMMANDS = ("check", "release", "validate", "publish", "book", "roster", "collect", "deadline", "grade", "feedback",
            "report", "similarity", "export", "demo", "bench")
DISTRIBUTION = "custom-autograd-course"


def available_commands() -> list[str]:
    """The commands whose modules are installed here."""
    return [name for name in COMMANDS if importlib.util.find_spec(f"autograder.commands.{name}") is not None]


def _command(name: str):
    return importlib.import_module(f"autograder.commands.{name}")


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    names = available_commands()
    instructor = "release", "grade"
    parser = argparse.ArgumentParser(
        prog="python -m autograder",
        description=("Release, validate and grade the course 'Custom autograd Functions in PyTorch'."
                     if any(n in names for n in instructor) else
                     "Check your notebooks of the course 'Custom autograd Functions in PyTorch' as the grader would."),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()} ({DISTRIBUTION})")
    parser.add_argument("--course", type=Path, metavar="DIR", default=None,
                        help="the course folder (with solutions/ or course/); default: $AUTOGRADER_COURSE_ROOT, "
                             "else the current folder")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in names:
        module = _command(name)
        sub = commands.add_parser(name, help=module.HELP, description=module.DESCRIPTION)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def _will_run_notebooks(argv: list[str]) -> bool:
    """Whether this command will run notebooks (a guess from the command line and the folders, made before
    anything heavy is imported, nbgrader included): then the warm process starts first."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--course", type=Path, default=None)
    early.add_argument("command", nargs="?")
    known, rest = early.parse_known_args(argv)
    if known.command not in available_commands():
        return False
    module = _command(known.command)
    if getattr(module, "WILL_RUN_NOTEBOOKS", False):
        return True
    if not hasattr(module, "will_run_notebooks"):
        return False
    try:
        course = Course.locate(known.course)
    except CourseError:
        return False  # said properly when the command runs
    return module.will_run_notebooks(rest, course)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if _will_run_notebooks(argv):
        from autograder.grading.running.executor import warm_up

        warm_up()  # the warm process imports torch on another core while this one imports nbgrader
    args = build_parser().parse_args(argv)
    try:
        return args.run(args, Course.locate(args.course))
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
