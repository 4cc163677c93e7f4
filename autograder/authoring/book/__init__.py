"""The course as a book for self-study: ``python -m autograder book`` (``make book``).

Sphinx with MyST-NB and the PyData theme does the work (``conf.py`` beside this file): search,
sidebar and in-page tables of contents, light/dark mode, copy buttons, MathJax served from the
site itself, and execution cached by jupyter-cache. This module only prepares Sphinx's sources
in a work folder (``build/book/`` by default) and runs Sphinx with warnings as errors:

- one chapter per solution notebook of every assignment (``Course.assignments()``), with nbgrader's
  hidden tests removed (its ``ClearHiddenTests``) and the solution markers dropped; each answer cell
  is folded behind "Show the model answer";
- at the top of each chapter, below its title, links to work on the STUDENT notebook (``course/``):
  Open in Colab, Launch Binder, and downloads of the notebook alone and with the data files beside
  it; the notebooks' Colab setup cell (``colab``) is left out: it does nothing in the book, and the
  Colab link opens the student notebook, which has its own;
- a hidden first cell makes every matplotlib PNG carry its figure's titles, which ``conf.py``
  turns into the image's alt text with the chapter's title;
- the chapters' kernels talk to the build over CurveZMQ-encrypted sockets (``_encrypted_kernels``), so
  ipykernel has no reason to warn about plain TCP.

Files are rewritten only when their content changes, so Sphinx re-reads only what changed, and a
notebook is not executed again unless its code, its data files or ``autograder.student`` changed
(jupyter-cache matches on the code; the hidden cell carries a digest of the other two).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import shutil
import sys
import time
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearHiddenTests

from autograder.authoring.colab import CELL_ID, binder_url, colab_url, student_repository
from autograder.course import Course, CourseError, is_dropping

CONF_DIR = Path(__file__).resolve().parent  # conf.py lives beside this file
# The instructors' guide (grading, guarantees): Markdown pages of the book, linked from the README.
INSTRUCTOR_PAGES = [CONF_DIR / "instructors" / name for name in ("grading.md", "guarantees.md")]
TITLE = "Custom autograd Functions in PyTorch"
OLD_MARKER = ".autograder-book"  # left by the hand-written generator this replaced: such a book/ is removed
SPHINX_MARKER = ".buildinfo"  # Sphinx writes it into every HTML output folder
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
STUDENT = "student"  # where the student notebooks and their zips are staged (not pages: excluded in conf.py)

# The book's kernels run this first (a removed cell): every figure's PNG carries its titles in its
# "Title" text chunk, for conf.py to put in the alt text. Importing backend_inline first makes it
# register its PNG formatter before this one replaces it.
FIGURE_TITLES_CELL = '''\
def _titles_in_pngs():
    import matplotlib_inline.backend_inline
    from IPython import get_ipython
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    def png_with_titles(figure):
        titles = [figure.get_suptitle()] + [ax.get_title() for ax in figure.axes]
        return print_figure(figure, "png", bbox_inches="tight",
                            metadata={"Title": "; ".join(t for t in titles if t)})

    get_ipython().display_formatter.formatters["image/png"].for_type(Figure, png_with_titles)

_titles_in_pngs()
del _titles_in_pngs
'''


@dataclass
class Chapter:
    """One page of the book: a solution notebook, and its student version in course/."""

    assignment: str
    solution: Path
    student: Path | None  # None while the assignment is not released yet
    title: str  # the notebook's first heading

    @property
    def page(self) -> str:
        """The page's name in Sphinx (its HTML is this plus .html)."""
        return f"{self.assignment}/{self.solution.stem}"


@dataclass
class Built:
    """What a build did: the index page, and the notebooks it had to execute (not found in the cache)."""

    index: Path
    executed: list[str]


def chapters(course: Course, assignments: list[str] | None = None) -> list[Chapter]:
    """A chapter for every solution notebook of the given assignments (default: all), in course order."""
    found = []
    for assignment in assignments or course.assignments():
        course.check_assignment(assignment)
        for solution in course.notebooks(assignment):
            student = course.release / assignment / solution.name
            title = _title(nbformat.read(solution, as_version=4), fallback=solution.stem)
            found.append(Chapter(assignment, solution, student if student.is_file() else None, title))
    return found


def build(course: Course, output: Path, assignments: list[str] | None = None,
          work: Path | None = None) -> Built:
    """Build the book into ``output``; ``work`` (default build/book/) keeps the sources, doctrees and cache."""
    from jupyter_cache import get_cache
    from myst_nb.core.execute.base import ExecutionError
    from sphinx.application import Sphinx
    from sphinx.errors import SphinxError
    from sphinx.util.docutils import docutils_namespace, patch_docutils

    output = Path(output).resolve()
    work = Path(work).resolve() if work else course.root / "build" / "book"
    _prepare_output(output)
    book = chapters(course, assignments)
    if not book:
        raise CourseError(f"no solution notebooks in {course.solutions}: nothing to put in the book")
    source = work / "source"
    _stage(book, source, student_repository(course))
    cache = work / "jupyter_cache"
    before = {record.pk for record in get_cache(str(cache)).list_cache_records()}
    # The chapters' kernels inherit this: assignment 10's Triton kernels run in Triton's interpreter, as in
    # grading, so the book shows the same outputs on every machine, GPU or not.
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        # As sphinx-build does (a second build in one process works), with the kernels' sockets encrypted.
        with patch_docutils(CONF_DIR), docutils_namespace(), _encrypted_kernels():
            app = Sphinx(str(source), str(CONF_DIR), str(output), str(work / "doctrees"), "html",
                         confoverrides={"nb_execution_cache_path": str(cache), "author": course.authors,
                                        "copyright": course.authors}, status=None,
                         warning=sys.stderr, warningiserror=True)
            _Progress(app, sys.stdout)
            app.build()
    except (SphinxError, ExecutionError) as error:  # warnings are errors: a broken link, a cell that raises
        raise CourseError(f"the book did not build: {error}") from error
    if app.statuscode:
        raise CourseError(f"the book did not build (Sphinx exit status {app.statuscode}); see the messages above")
    executed = sorted(str(Path(record.uri).relative_to(source).with_suffix(""))
                      for record in get_cache(str(cache)).list_cache_records() if record.pk not in before)
    return Built(output / "index.html", executed)


class _Progress:
    """A line per page as Sphinx reads it, and the time each notebook that had to run took.

    In place of Sphinx's own messages (a screenful a build, MyST-NB's settings included); warnings
    still go to stderr. The first build runs every chapter's notebook, one after another."""

    def __init__(self, app, stream):
        self.stream, self.started, self.count, self.total = stream, time.time(), 0, 0
        app.connect("env-before-read-docs", self.before_reading)
        app.connect("source-read", self.reading)
        app.connect("doctree-read", self.read)
        app.connect("env-updated", self.writing)

    def say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def before_reading(self, app, env, docnames) -> None:
        self.total = len(docnames)
        if docnames:
            self.say(f"reading {len(docnames)} pages; a chapter runs its notebook when its code changed "
                     f"(every chapter on the first build)")

    def reading(self, app, docname, source) -> None:
        self.count += 1
        self.say(f"  [{self.count:{len(str(self.total))}}/{self.total}] {docname}")

    def read(self, app, doctree) -> None:
        from myst_nb.sphinx_ import NbMetadataCollector

        run = NbMetadataCollector.get_exec_data(app.env, app.env.docname) or {}
        if run.get("mtime", 0) >= self.started and run.get("runtime") is not None:  # run now, not from the cache
            self.say(f"      ran its notebook in {run['runtime']:.0f} s")

    def writing(self, app, env) -> None:
        self.say("writing the pages, the search index and the images")


@contextmanager
def _encrypted_kernels():
    """Kernels started meanwhile get CurveZMQ keys from their manager, as ipykernel asks.

    ipykernel (7.4) warns on stderr, once per kernel, that it runs over TCP without encryption unless its
    manager provisions keys (jupyter_client's ``KernelManager.transport_encryption``, "disabled" by
    default). MyST-NB runs each chapter through jupyter-cache and nbclient, which make their kernel
    manager with no configuration, so the policy is the managers' default while the book builds:
    "auto" gives keys to every kernel whose kernelspec says it takes them (ipykernel's does).
    """
    import zmq
    from jupyter_client.manager import KernelManager

    policy = KernelManager.class_traits()["transport_encryption"]
    before = policy.default_value
    if zmq.has("curve"):  # a libzmq built without libsodium has no CurveZMQ: the kernels then run as before
        policy.default_value = "auto"
    try:
        yield
    finally:
        policy.default_value = before


def server(folder: Path, port: int = 8000):
    """An HTTP server for the built book on 127.0.0.1:``port`` (0: any free port), not yet serving.

    Opened from disk the book works offline, search and its excerpts included (browsers refuse the requests
    Sphinx's search makes for excerpts from a ``file://`` page: conf.py's page texts stand in); served over HTTP
    it works as it will once published."""
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # one line per request is noise in a terminal
            pass

    return ThreadingHTTPServer(("127.0.0.1", port), partial(Quiet, directory=str(folder)))


def _prepare_output(output: Path) -> None:
    """Build over a Sphinx book or into an empty folder; remove an old generator's book; refuse anything else."""
    if output.is_file():
        raise CourseError(f"{output} is a file: choose another --output")
    if (output / OLD_MARKER).is_file():
        shutil.rmtree(output)  # the hand-written generator's pages: none of them is kept
    elif output.exists() and any(output.iterdir()) and not (output / SPHINX_MARKER).is_file():
        raise CourseError(f"{output} is not empty and is not a book built by this command: choose another --output")


def _stage(book: list[Chapter], source: Path, repository: str | None) -> None:
    """Write Sphinx's sources: index, chapters (with the data they read) and student downloads.

    ``repository``: the students' repository for the Colab and Binder links (None: downloads only).
    """
    wanted: dict[Path, bytes] = {source / "index.md": _index(book).encode()}
    for page in INSTRUCTOR_PAGES:  # the instructors' guide, beside the course
        wanted[source / "instructors" / page.name] = page.read_bytes()
    for chapter in book:
        folder = chapter.solution.parent
        wanted[source / f"{chapter.page}.ipynb"] = _chapter_notebook(chapter, repository).encode()
        for data in _data_files(folder):  # read by the notebook when it runs (cwd is its folder)
            wanted[source / chapter.assignment / data.relative_to(folder)] = data.read_bytes()
        if chapter.student is not None:
            released = chapter.student.parent
            wanted[source / STUDENT / chapter.assignment / chapter.student.name] = chapter.student.read_bytes()
            wanted[source / STUDENT / f"{chapter.assignment}.zip"] = _zip(released, _data_files(released))
    for path, content in wanted.items():
        if not path.is_file() or path.read_bytes() != content:  # unchanged files keep their mtime
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
    for path in sorted(source.rglob("*"), reverse=True):  # what an earlier build staged and is gone now
        if path.is_file() and path not in wanted:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _data_files(folder: Path) -> list[Path]:
    """The files beside an assignment's notebooks that are not notebooks (data a notebook reads)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix != ".ipynb"
                  and not is_dropping(p.relative_to(folder)))


def _zip(folder: Path, data: list[Path]) -> bytes:
    """The student notebook(s) and data of ``folder`` as a zip with one top folder; same input, same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(list(folder.glob("*.ipynb")) + data):
            info = zipfile.ZipInfo(f"{folder.name}/{path.relative_to(folder).as_posix()}", (2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def _chapter_notebook(chapter: Chapter, repository: str | None) -> str:
    """The solution notebook as a chapter: no hidden tests, answers folded, links to work on it."""
    notebook = nbformat.read(chapter.solution, as_version=4)
    notebook.cells = [cell for cell in notebook.cells if cell.get("id") != CELL_ID]  # Colab's setup: not for the book
    notebook, _ = ClearHiddenTests().preprocess(notebook, {})
    for cell in notebook.cells:
        grading = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and any(m in cell.source for m in SOLUTION_MARKERS):
            cell.source = "\n".join(line for line in cell.source.splitlines() if line.strip() not in SOLUTION_MARKERS)
        if grading.get("solution"):
            if cell.cell_type == "code":
                cell.metadata.setdefault("tags", []).append("hide-input")  # MyST-NB folds it (conf.py names the button)
            else:
                cell.source = f"<details class=\"model-answer\">\n<summary>Show the model answer</summary>\n\n{cell.source}\n\n</details>"
    first = next((cell for cell in notebook.cells if cell.cell_type == "markdown"), None)
    if first is not None:
        lines = first.source.splitlines()
        heading = next((i for i, line in enumerate(lines) if line.startswith("#")), -1)
        lines.insert(heading + 1, "\n" + _work_on_it(chapter, repository) + "\n")
        first.source = "\n".join(lines)
    setup = nbformat.v4.new_code_cell(f"# outputs depend on: {_inputs_digest(chapter)}\n{FIGURE_TITLES_CELL}",
                                      metadata={"tags": ["remove-cell"]})
    notebook.cells.insert(0, setup)
    for cell in notebook.cells:
        cell.pop("id", None)  # nbformat 4.5 ids are not needed and would make every write differ
    notebook.nbformat_minor = 4
    return nbformat.writes(notebook)


def _inputs_digest(chapter: Chapter) -> str:
    """A digest of what a chapter's outputs depend on besides its code: the data files beside it and
    the package its notebook imports. jupyter-cache matches notebooks on their code, so putting
    this in a cell makes a change to either run the chapter again."""
    digest = hashlib.sha256()
    folder = chapter.solution.parent
    # Found, not imported: importing it imports torch, which the command line never needs itself.
    package = Path(importlib.util.find_spec("autograder.student").origin).parent
    for path in _data_files(folder) + sorted(package.rglob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _work_on_it(chapter: Chapter, repository: str | None) -> str:
    """The note at the top of a chapter: this is the model answer; links to the student notebook.

    Colab and Binder open it from the students' repository (``colab.student_repository``); while
    the course names none, the chapter offers the downloads only.
    """
    released = f"course/{chapter.assignment}/{chapter.solution.name}"
    if chapter.student is None:
        links = "Its student notebook is not released yet."
    else:
        online = (f"[Open in Colab]({colab_url(repository, released)}) · "
                  f"[Launch Binder]({binder_url(repository, released)}) · " if repository else "")
        links = (online +
                 f"{{download}}`Download the notebook <../{STUDENT}/{chapter.assignment}/{chapter.solution.name}>` · "
                 f"{{download}}`Download it with its data files (zip) <../{STUDENT}/{chapter.assignment}.zip>`")
    return (":::{admonition} Try it yourself first\n:class: tip\n"
            "This page is the model answer, run, with its outputs; each answer is folded until you click "
            "*Show the model answer*. Work on the student notebook first:\n\n"
            f"{links}\n\n"
            f"Then grade your notebook against the full tests, hidden ones included, with "
            f"`python -m autograder check {released}`, and compare it with this page.\n:::")


def _index(book: list[Chapter]) -> str:
    toctree = "\n".join(chapter.page for chapter in book)
    instructors = "\n".join(f"instructors/{page.stem}" for page in INSTRUCTOR_PAGES)
    return f"""# {TITLE}

An interactive course on writing your own `backward` with `torch.autograd.Function`. Each chapter
is a notebook of the course with every cell run: its explanations, figures and tests, and the
model answers folded until you open them. Work on the chapter's student notebook first (each
chapter links it: Colab, Binder, or a download to open in JupyterLab), grade it with
`python -m autograder check`, then compare with the model answer here.

```{{toctree}}
:maxdepth: 1
:caption: Chapters

{toctree}
```

```{{toctree}}
:maxdepth: 1
:caption: For instructors

{instructors}
```
"""


def _title(notebook: nbformat.NotebookNode, fallback: str) -> str:
    """The notebook's first Markdown heading, as the chapter's title."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return fallback
