"""``python -m autograder book``: the course rendered as a static website, for self-study."""

from __future__ import annotations

from pathlib import Path

from autograder.course import Course

HELP = "render the course, solutions run, as a static HTML site in book/"
DESCRIPTION = ("Build the course as a book with Sphinx and MyST-NB: every solution notebook run (hidden tests left "
               "out, answers folded), with search, offline math, light/dark mode, and links to each chapter's "
               "student notebook. Executions are cached. Colab and Binder links open the students' repository "
               "(student-repository in pyproject.toml, or $AUTOGRADER_STUDENT_REPOSITORY).")


def add_arguments(parser) -> None:
    parser.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="assignment ids (default: all)")
    parser.add_argument("--output", type=Path,
                        help="folder to build the book in (default: book/ in the repository); "
                             "a book built there before is updated")
    parser.add_argument("--work", type=Path,
                        help="folder for Sphinx's sources, doctrees and the execution cache (default: build/book/)")
    parser.add_argument("--serve", nargs="?", type=int, const=8000, default=None, metavar="PORT",
                        help="after building, serve the book at http://127.0.0.1:PORT/ (default 8000) until Ctrl-C, "
                             "as a web server would (opened from disk the book works too, search included)")


def run(args, course: Course) -> int:
    from autograder.authoring.book import build, server

    built = build(course, args.output or course.root / "book", args.assignments, args.work)
    print(f"notebooks executed: {len(built.executed)} ({', '.join(built.executed) or 'all from the cache'})")
    if args.serve is None:
        print(f"open {built.index} in a browser (it works from disk, offline; make book-serve serves it over HTTP)")
        return 0
    with server(built.index.parent, args.serve) as http:
        print(f"serving the book at http://127.0.0.1:{http.server_address[1]}/ (Ctrl-C stops it)", flush=True)
        try:
            http.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0
