"""One module per command of ``python -m autograder``: its help, its arguments and what it runs.

Each module has ``HELP`` (one line for the command list), ``DESCRIPTION`` (its ``--help``),
``add_arguments(parser)`` and ``run(args, course) -> exit status``. ``autograder.cli`` lists the
commands and only dispatches; a command whose module is not shipped (the students' edition ships
``check`` alone) does not exist there. Heavy imports stay inside ``run``, so ``--help`` is fast.
"""


def add_json_flag(parser) -> None:
    """``--json``: one JSON document on stdout and nothing else there (for scripts and LMS glue)."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document instead of the table, and nothing else on stdout (for scripts and LMS glue)")


def print_json(document) -> None:
    import json

    print(json.dumps(document, indent=2, default=str))



def count(n: int, noun: str, plural: str = "") -> str:
    """``n`` and its noun, in words: '1 student', '3 students', '0 students' (``plural`` when not noun + 's')."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
