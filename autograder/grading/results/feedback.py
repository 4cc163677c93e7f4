"""Per-student HTML feedback for a graded assignment (nbgrader generate_feedback, checked).

nbgrader renders each autograded notebook to HTML with the scores; this course's config strips
hidden tests' source from it (``ClearHiddenTests``) and the grader keeps hidden tests out of
tracebacks. A submission that could not be run still has an autograded notebook saying why, so
its student gets a page too.

Each student's pages are made in a process of their own, forked from this one once nbgrader is imported,
within ``FEEDBACK_PAGE_SECONDS`` (``--page-timeout``): past it they are stopped and the student gets a short
page saying so. No notebook holds the class: ``feedback`` takes at most that long per student, however large
the notebook (an honest page takes under a second; the process costs about 0.2 s of CPU a student).
"""

from __future__ import annotations

import csv
import html
import multiprocessing
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbgrader.coursedir import CourseDirectory
from traitlets import Any, Bool, List, Unicode

from autograder.authoring.hints import strip_answer_hints
from autograder.course import Course, CourseError
from autograder.grading.records import deadlines
from autograder.grading.records.grades import refresh_scores
from autograder.grading.results.markup import STUDENT_ATTRIBUTES, STUDENT_TAGS, markdown_to_html
from autograder.grading.running.confinement.limits import FEEDBACK_PAGE_SECONDS
from autograder.grading.running.messages.protocol import HIDDEN_TESTS_BEGIN, HIDDEN_TESTS_END, defuse_markers

HIDDEN_MARKERS = (HIDDEN_TESTS_BEGIN, HIDDEN_TESTS_END)
# nbgrader's own comment on an answer cell left as released (SaveAutoGrades' auto_comment): its failing test already
# says so, and the page's contents list would show it as one more "Comment" entry.
NO_RESPONSE = "No response."


class SanitizeStudentHTML(SanitizeHTML):
    """nbconvert's SanitizeHTML (bleach), with markdown cells rendered to cleaned HTML and MathML first.

    Student markdown and outputs are untrusted. SanitizeHTML cleans the HTML tags in a markdown
    cell but not its markdown links, so ``[x](javascript:...)`` would survive. Here a markdown
    cell is rendered first (``markup.markdown_to_html``), so its links are ``<a href>`` that bleach
    keeps only for http, https and mailto, its maths is MathML, and the cleaned HTML replaces its
    source. A markdown cell the course released as it is (or without its answer-level hints) may
    keep the course's hint markup (``<details>``); any other markdown is the student's, and its
    ``<details>`` is shown as text. A student's markup and outputs keep no ``id``, ``name`` or
    ``class`` (``markup.STUDENT_ATTRIBUTES``: the formgrader finds its score inputs by id and class),
    a markdown output is rendered the same way, images pasted into a markdown cell are shown from
    its attachments, and hidden-test markers in anything a student wrote are defused.
    (Configured in ``autograder/authoring/nbgrader_config.py``.)
    """

    enabled = Bool(True).tag(config=True)
    tags = List(Unicode(), default_value=sorted(STUDENT_TAGS)).tag(config=True)
    attributes = Any(STUDENT_ATTRIBUTES).tag(config=True)

    def preprocess(self, nb, resources):
        self._course_markdown = released_markdown(CourseDirectory(config=self.config), resources)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            from_course = _normalised(cell.source) in getattr(self, "_course_markdown", set())
            try:
                cleaned = markdown_to_html(cell.source, course_markup=from_course, attachments=cell.get("attachments"))
            except Exception:  # markdown its renderer cannot take (nested thousands deep): shown as text
                cleaned = f"<pre>{html.escape(cell.source)}</pre>"
            # One HTML block without blank lines: the page's own markdown rendering passes it through as it is.
            cell.source = "<div>" + re.sub(r"\n\s*\n", "\n", defuse_markers(cleaned)) + "</div>"
            return cell, resources
        cell, resources = super().preprocess_cell(cell, resources, index)
        if "outputs" in cell:
            cell.outputs = nbformat.from_dict(defuse_markers(cell.outputs))
        return cell, resources

    def sanitize_code_outputs(self, outputs):
        """nbconvert's cleaning of outputs, with a markdown output rendered (and cleaned) as the student's
        markdown is (nbconvert's own rendering would give its headings ids), and no file names in an output's
        metadata (the page would load an image from wherever they point)."""
        markdown = {}
        for index, output in enumerate(outputs):
            data = output.get("data") if output.get("output_type") in ("display_data", "execute_result") else None
            if isinstance(output.get("metadata"), dict):
                output.metadata.pop("filenames", None)
            if isinstance(data, dict) and isinstance(data.get("text/markdown"), str):
                markdown[index] = data.pop("text/markdown")
        outputs = super().sanitize_code_outputs(outputs)
        for index, text in markdown.items():
            data = outputs[index].data
            try:
                data.setdefault("text/html", markdown_to_html(text))
            except Exception:  # shown as text, as any markdown its renderer cannot take
                data.setdefault("text/plain", text)
        return outputs


class WithoutNoResponse(Preprocessor):
    """nbgrader's automatic comment on an unanswered cell (``NO_RESPONSE``) left off the feedback page and its
    contents list; a comment the instructor wrote stays. (After nbgrader's GetGrades, which puts comments on cells:
    ``autograder/authoring/nbgrader_config.py``.)"""

    enabled = Bool(True)

    def preprocess_cell(self, cell, resources, index):
        grading = cell.metadata.get("nbgrader", {})
        if grading.get("comment") == NO_RESPONSE:
            grading["comment"] = None
        return cell, resources


def released_markdown(coursedir: CourseDirectory, resources: dict) -> set[str]:
    """The released notebook's markdown cells, whitespace-normalised, with and without answer-level hints.

    ``resources`` names the notebook: nbgrader's feedback puts it under ``nbgrader``, the formgrader
    at the top. An unknown or missing release gives the empty set: every cell is treated as the student's.
    """
    names = resources.get("nbgrader") or {}
    assignment = names.get("assignment") or resources.get("assignment_id")
    notebook = names.get("notebook") or resources.get("notebook_id")
    if not assignment or not notebook:
        return set()
    path = Path(coursedir.format_path(coursedir.release_directory, ".", assignment)) / f"{notebook}.ipynb"
    try:
        cells = nbformat.read(path, as_version=4).cells
    except (OSError, ValueError):
        return set()
    sources = [c.source for c in cells if c.cell_type == "markdown"]
    return {_normalised(s) for s in sources} | {_normalised(strip_answer_hints(s)) for s in sources}


def _normalised(source: str) -> str:
    return " ".join(source.split())


@dataclass
class Feedback:
    pages: list[Path]
    problems: dict[str, str]  # student -> why their page says only that their feedback could not be made


def feedback(course: Course, assignment: str, page_seconds: float = FEEDBACK_PAGE_SECONDS) -> Feedback:
    """Write grading/feedback/<student>/<assignment>/*.html for every graded student.

    One student's notebook never costs another student their page: a student whose page nbgrader
    could not make within ``page_seconds``, or whose page would show hidden tests' markers, gets a page
    that says so, with their score, and is listed in ``problems``; every other page is finished as usual.
    """
    course.check_assignment(assignment)
    autograded = course.grading / "autograded"
    students = sorted(p.parent.name for p in autograded.glob(f"*/{assignment}")
                      if p.is_dir() and not p.parent.name.startswith("."))
    if not students:
        raise CourseError(f"nothing graded yet for {assignment}: run `python -m autograder grade {assignment}` first")
    problems = {}
    for student in students:
        folder = course.grading / "feedback" / student / assignment
        for stale in folder.glob("*.html"):  # (a page of an earlier run is not this run's)
            stale.unlink()
        said, exit_code = _student_pages(course, assignment, student, page_seconds)
        for notebook in sorted((autograded / student / assignment).glob("*.ipynb")):
            page = folder / f"{notebook.stem}.html"
            text = page.read_text(encoding="utf-8", errors="replace") if page.is_file() and exit_code is not None else None
            why = ""
            if exit_code is None:
                problems[student] = why = (f"making the page took longer than {page_seconds:g} s, so the grader "
                                           "stopped it")
            elif text is None:
                problems[student] = _nbgrader_error(said, student) or f"nbgrader could not make the page (exit {exit_code})"
            elif any(marker in text for marker in HIDDEN_MARKERS):
                problems[student] = "the page would show text marking hidden tests"
            else:
                page.write_text(self_contained(text), encoding="utf-8")
                continue
            folder.mkdir(parents=True, exist_ok=True)
            page.write_text(_unfinished_page(course, assignment, student, notebook.stem, why), encoding="utf-8")
    refresh_scores(course, assignment)  # grades.csv agrees with the pages: scores given by hand since `grade`
    pages = sorted((course.grading / "feedback").glob(f"*/{assignment}/*.html"))
    _mark_late_pages(course, assignment, pages)
    return Feedback(pages, problems)


def _student_pages(course: Course, assignment: str, student: str, seconds: float) -> tuple[str, int | None]:
    """nbgrader's ``generate_feedback`` for one student, in a process forked from this one (nbgrader imported once,
    here), stopped after ``seconds``: (what it logged, its exit status, None if it was stopped)."""
    from nbgrader.apps.nbgraderapp import NbGraderApp  # noqa: F401  (imported here once, not by each page's process)

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
        process = multiprocessing.get_context("fork").Process(
            target=_generate_feedback, args=(course.root, course.environment(), log.fileno(),
                                             ["generate_feedback", assignment, "--student", student, "--force",
                                              "--log-level=ERROR"]), daemon=True)
        process.start()
        process.join(seconds)
        stopped = process.is_alive()
        if stopped:
            process.kill()
        process.join()
        log.seek(0)
        return log.read(100_000), None if stopped else process.exitcode


def _generate_feedback(root: Path, environment: dict, log: int, argv: list[str]) -> None:
    """What ``python -m nbgrader ARGV`` does, in this (forked) process, its output written to descriptor ``log``."""
    from nbgrader.apps.nbgraderapp import NbGraderApp

    os.dup2(log, 1)
    os.dup2(log, 2)
    os.chdir(root)
    os.environ.clear()
    os.environ.update(environment)
    NbGraderApp.launch_instance(argv=argv)


def _nbgrader_error(log: str, student: str) -> str:
    """The last line of the error nbgrader logged for ``student``'s notebook, if it logged one."""
    found = re.search(rf"error processing assignment: \S*/{re.escape(student)}/\S*\n(.*?)(?=\n\[|\Z)", log, re.S)
    lines = found.group(1).strip().splitlines() if found else []
    text = " ".join(lines[-1].split())[:300] if lines else ""
    return text if text.isprintable() else repr(text)[1:-1]  # it may quote the notebook: no terminal escapes


def _unfinished_page(course: Course, assignment: str, student: str, notebook: str, why: str = "") -> str:
    """The page of a student whose feedback could not be made: their score, that the instructor knows, and ``why``
    where it is the grader's own reason (a time limit; nbgrader's errors may quote the notebook: they are not shown)."""
    try:
        with course.gradebook() as gb:
            graded = gb.find_submission_notebook(notebook, assignment, student)
            score = f"{graded.score:g} / {graded.max_score:g}"
    except Exception:  # not in the gradebook: the page still says what happened
        score = "not recorded"
    return self_contained(
        f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(notebook)}</title></head><body>"
        f"<h1>{html.escape(notebook)}</h1><p>Score: {html.escape(score)}</p>"
        "<p>Your detailed feedback for this notebook could not be shown: something in the notebook kept the "
        f"grader from making this page{': ' + html.escape(why) if why else ''}. Your instructor has been told and can "
        "show you your graded notebook.</p>"
        "</body></html>")


# nbgrader's feedback template loads MathJax from a CDN, whatever HTMLExporter.mathjax_url says; the
# maths is MathML already (markup.py), so the page needs no script at all.
MATHJAX_BLOCK = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
# Long error lines, outputs and code lines wrap inside the page's width instead of running off it; a markdown
# table's cells are spaced and ruled (the page's Bootstrap sets their padding to 0: "Exercise 1LayerNorm").
PAGE_STYLE = ("<style>div.output_area pre, div.input_area pre, code.tex "
              "{white-space: pre-wrap; overflow-wrap: anywhere;} math[display=block] {margin: .5em 0;} "
              "details > summary {display: list-item; cursor: pointer;} "
              ".rendered_html table {border-collapse: collapse; margin: .5em 0;} "
              ".rendered_html th, .rendered_html td {padding: .3em .8em; border: 1px solid #ccc; text-align: left; "
              "vertical-align: top;}</style>")


def self_contained(page: str) -> str:
    """The page without its CDN MathJax, with the wrapping style: it opens offline and in an LMS that strips scripts."""
    page = MATHJAX_BLOCK.sub("", page)
    if re.search(r"<script[^>]*mathjax", page, re.I):
        raise CourseError("the feedback page loads MathJax in a way this version does not remove: check nbgrader's "
                          "feedback template")
    return page.replace("</head>", PAGE_STYLE + "\n</head>", 1)


def _mark_late_pages(course: Course, assignment: str, pages: list[Path]) -> None:
    """A late student's page says, at the top, how late and what it cost (from grades.csv)."""
    grades = course.grading / "grades.csv"
    if not grades.exists():
        return
    with grades.open(newline="", encoding="utf-8") as stream:
        late = {r["student_id"]: r for r in csv.DictReader(stream)
                if r.get("assignment") == assignment and r.get("late")}
    policy = deadlines.load(course, assignment)
    for page in pages:
        row = late.get(page.parts[-3])
        if not row:
            continue
        deadline = policy.deadline_for(row["student_id"])
        due = f" (due {deadline:%Y-%m-%d %H:%M} UTC{', with your extension' if row['student_id'] in policy.extensions else ''})" \
            if deadline else ""
        cost = f"; late penalty: {row['penalty']} points, already taken from the score below" if row.get("penalty") \
            else "; no points were taken for it"
        how_late = ("Marked late by the course's LMS, which does not say when: counted as late by the least the late "
                    "policy counts" if row["late"] == deadlines.TIME_UNKNOWN
                    else "The course's LMS recorded no time for this submission: it is not counted as late"
                    if row["late"] == deadlines.TIME_NOT_RECORDED else f"Handed in {row['late']} late")
        notice = (f'<div class="late-notice" style="margin:1em;padding:.5em 1em;border:2px solid #c60;">'
                  f"{html.escape(how_late)}{html.escape(due)}{html.escape(cost)}.</div>")
        text = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + notice, text, count=1), encoding="utf-8")
