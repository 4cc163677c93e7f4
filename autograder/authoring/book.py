"""The course as a static HTML book for self-study: ``python -m autograder.authoring.book`` (``make book``).

Every solution notebook is executed as nbgrader runs notebooks (the course's kernel settings)
and rendered to one HTML page, outputs and figures embedded, with previous/index/next links.
Hidden tests are left out and nbgrader's solution markers removed, so a chapter reads like the
student notebook with the exercises answered: a reader who has done an exercise can compare.
The index lists the chapters and links each to a copy of its student notebook (from
``course/``), to download and work in JupyterLab.
"""

from __future__ import annotations

import argparse
import html
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from jinja2 import DictLoader
from nbclient.exceptions import CellExecutionError
from nbconvert import HTMLExporter
from nbgrader.preprocessors import ClearHiddenTests, Execute

from autograder.authoring.course import Course, CourseError

TITLE = "Custom autograd Functions in PyTorch"
MARKER = ".autograder-book"  # marks a folder as a built book, so a rebuild may replace it
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")

CSS = """
.book-nav { display: flex; justify-content: space-between; gap: 1em; max-width: 1100px;
  margin: 0 auto; padding: 0.6em 1em; font: 15px/1.4 system-ui, sans-serif;
  border-bottom: 1px solid #ddd; background: #f7f7f7; }
.book-nav.bottom { border-top: 1px solid #ddd; border-bottom: none; margin-top: 2em; }
.book-nav a { text-decoration: none; color: #1a5fb4; }
.book-note a { color: #1a5fb4; text-decoration: underline; }
.book-nav span { min-width: 12em; }
.book-nav .next { text-align: right; }
.book-note { max-width: 1100px; margin: 0.8em auto; padding: 0 1em; font: 15px/1.4 system-ui, sans-serif; }
"""

# Extends nbconvert's "lab" template: navigation above and below the notebook, no require.js
# (nothing here needs it; MathJax stays so formulas render when the reader is online).
PAGE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{% block extra_css %}<style type="text/css">""" + CSS + """</style>{% endblock extra_css %}
{%- block body_header -%}
{{ super() }}
{{ resources.book.nav_top }}
{%- endblock body_header -%}
{% block body_footer %}
{{ resources.book.nav_bottom }}
{{ super() }}
{% endblock body_footer %}
"""


@dataclass
class Chapter:
    """One page of the book: a solution notebook, and where its student version is."""

    assignment: str
    solution: Path
    student: Path | None  # the released notebook in course/, None if not released yet
    title: str  # the notebook's first heading

    @property
    def page(self) -> str:
        return f"{self.solution.stem}.html"

    @property
    def student_copy(self) -> str:
        """The student notebook's path inside the book (a download link)."""
        return f"notebooks/{self.assignment}/{self.solution.name}"


def chapters(course: Course, assignments: list[str] | None = None) -> list[Chapter]:
    """A chapter for every solution notebook of the given assignments (default: all), in course order."""
    found = []
    for assignment in assignments or course.assignments():
        course.check_assignment(assignment)
        for solution in course.notebooks(assignment):
            student = course.release / assignment / solution.name
            title = _title(nbformat.read(solution, as_version=nbformat.NO_CONVERT), fallback=solution.stem)
            found.append(Chapter(assignment, solution, student if student.is_file() else None, title))
    pages = [c.page for c in found]
    if len(set(pages)) != len(pages):
        raise CourseError(f"two solution notebooks share a name, so their pages would too: {pages}")
    return found


def build(course: Course, output: Path, assignments: list[str] | None = None) -> list[Path]:
    """Execute and render the chapters into ``output`` (replacing a book built there before)."""
    output = Path(output).resolve()
    _check_replaceable(output)
    book = chapters(course, assignments)
    notebooks = [_executed(course, chapter) for chapter in book]  # first: a failure keeps the old book
    shutil.rmtree(output, ignore_errors=True)
    output.mkdir(parents=True)
    (output / MARKER).write_text("Built by `python -m autograder.authoring.book`; rebuilt from scratch each time.\n")
    written = []
    for i, (chapter, notebook) in enumerate(zip(book, notebooks)):
        previous = book[i - 1] if i > 0 else None
        following = book[i + 1] if i + 1 < len(book) else None
        written.append(_render(chapter, notebook, previous, following, output))
        if chapter.student is not None:
            copy = output / chapter.student_copy
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(chapter.student, copy)
    index = output / "index.html"
    index.write_text(_index_page(book), encoding="utf-8")
    return [index] + written


def _check_replaceable(output: Path) -> None:
    """Only an empty folder or a book built before may be replaced; never someone's other files."""
    if output.is_file() or (output.exists() and any(output.iterdir()) and not (output / MARKER).is_file()):
        raise CourseError(f"{output} is not empty and is not a book built by this command: "
                          "choose another --output")


def _executed(course: Course, chapter: Chapter) -> nbformat.NotebookNode:
    """The solution notebook without hidden tests or solution markers, executed like nbgrader does."""
    notebook = nbformat.read(chapter.solution, as_version=nbformat.NO_CONVERT)
    config = course.config()
    notebook, _ = ClearHiddenTests(config=config).preprocess(notebook, {})
    for cell in notebook.cells:
        if cell.cell_type == "code" and any(m in cell.source for m in SOLUTION_MARKERS):
            cell.source = "\n".join(line for line in cell.source.splitlines()
                                    if line.strip() not in SOLUTION_MARKERS)
    print(f"executing {chapter.solution.relative_to(course.root)}", file=sys.stderr, flush=True)
    try:
        Execute(config=config, allow_errors=False).preprocess(
            notebook, {"metadata": {"path": str(chapter.solution.parent)}})
    except CellExecutionError as error:
        raise CourseError(f"{chapter.solution} fails when run: {error.ename}: {error.evalue}") from error
    return notebook


def _title(notebook: nbformat.NotebookNode, fallback: str) -> str:
    """The notebook's first Markdown heading, as the chapter's title."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback


def _link(chapter: Chapter | None, text: str) -> str:
    if chapter is None:
        return "<span></span>"
    return f'<a href="{chapter.page}">{html.escape(text + chapter.title)}</a>'


def _render(chapter: Chapter, notebook, previous: Chapter | None, following: Chapter | None,
            output: Path) -> Path:
    links = (f'<span class="previous">{_link(previous, "← ")}</span>'
             f'<a href="index.html">Index</a>'
             f'<span class="next">{_link(following, "→ ")}</span>')
    path = f"course/{chapter.assignment}/{chapter.solution.name}"
    if chapter.student is not None:
        student = (f'the student notebook (<a href="{chapter.student_copy}" download>download it</a>, or open '
                   f'<code>{path}</code> with <code>make lab</code>)')
    else:
        student = "the student notebook (not released yet)"
    note = (f'<p class="book-note">This page is the model answer, run with its outputs. Try the exercises '
            f'yourself first, in JupyterLab, on {student}; then grade your answers with '
            f'<code>python -m autograder check {path}</code> and compare them with this page.</p>')
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"book.html.j2": PAGE_TEMPLATE})],
                            template_file="book.html.j2")
    resources = {"metadata": {"name": f"{chapter.title} · {TITLE}"},
                 "book": {"nav_top": f'<nav class="book-nav">{links}</nav>{note}',
                          "nav_bottom": f'<nav class="book-nav bottom">{links}</nav>'}}
    body, _ = exporter.from_notebook_node(notebook, resources=resources)
    page = output / chapter.page
    page.write_text(body, encoding="utf-8")
    return page


def _index_page(book: list[Chapter]) -> str:
    rows = []
    for chapter in book:
        student = (f'<a href="{chapter.student_copy}" download>student notebook</a>'
                   if chapter.student is not None else "not released yet")
        rows.append(f'<tr><td><a href="{chapter.page}">{html.escape(chapter.title)}</a></td>'
                    f'<td><code>{chapter.assignment}</code></td><td>{student}</td></tr>')
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{TITLE}</title>
<style>
body {{ font: 16px/1.5 system-ui, sans-serif; max-width: 900px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ text-align: left; padding: 0.4em 0.6em; border-bottom: 1px solid #ddd; }}
a {{ color: #1a5fb4; }}
code {{ background: #f3f3f3; padding: 0 0.2em; }}
</style>
</head>
<body>
<h1>{TITLE}</h1>
<p>Each chapter is a notebook of the course with the exercises answered and every cell run, figures
included. To learn from it, work through the student notebook first:</p>
<ol>
<li>Open the student notebook in JupyterLab (<code>make lab</code> in the repository opens
<code>course/</code>; or download it below) and answer the exercises; the visible tests under each
one tell you whether your answer is right.</li>
<li>Grade your notebook against the full tests, hidden ones included, for example
<code>python -m autograder check course/01_first_function/01_first_function.ipynb</code>.</li>
<li>Then read the chapter here to compare your answers with the model answer.</li>
</ol>
<table>
<thead><tr><th>Chapter (model answer, run)</th><th>Assignment</th><th>To work on</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody>
</table>
</body>
</html>
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="assignment ids (default: all)")
    parser.add_argument("--output", type=Path,
                        help="folder to build the book in (default: book/ in the repository); "
                             "a book built there before is replaced")


def run(args: argparse.Namespace, course: Course) -> int:
    pages = build(course, args.output or course.root / "book", args.assignments)
    for page in pages:
        print(f"wrote {page}")
    print(f"open {pages[0]} in a browser")
    return 0


DESCRIPTION = ("Execute every solution notebook (hidden tests left out) and render the course as a static "
               "HTML site: one page per chapter with outputs and figures, navigation, and an index that "
               "links each chapter's student notebook.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.authoring.book", description=DESCRIPTION)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args, Course.locate())
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
