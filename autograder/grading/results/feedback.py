"""Per-student HTML feedback for a graded assignment (nbgrader generate_feedback, checked).

nbgrader renders each autograded notebook to HTML with the scores; this course's config strips
hidden tests' source from it (``ClearHiddenTests``) and the grader keeps hidden tests out of
tracebacks. A submission that could not be run still has an autograded notebook saying why, so
its student gets a page too.
"""

from __future__ import annotations

import csv
import html
import re
from pathlib import Path

from nbconvert.filters.markdown_mistune import markdown2html_mistune
from bleach import ALLOWED_ATTRIBUTES, ALLOWED_TAGS
from nbconvert.preprocessors.sanitize import SanitizeHTML
from traitlets import Any, Bool, List, Unicode

from autograder.course import Course, CourseError
from autograder.grading.records import deadlines

HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


class SanitizeStudentHTML(SanitizeHTML):
    """nbconvert's SanitizeHTML (bleach), with markdown cells rendered to HTML before they are cleaned.

    Student markdown and outputs are untrusted. SanitizeHTML cleans the HTML tags in a markdown
    cell but not its markdown links, so ``[x](javascript:...)`` would survive. Here a markdown
    cell is rendered first, so its links are ``<a href>`` that bleach keeps only for http, https
    and mailto, and the cleaned HTML replaces its source (math is left as text, for MathJax).
    (Configured in ``autograder/authoring/nbgrader_config.py``.)
    """

    enabled = Bool(True).tag(config=True)
    tags = List(Unicode(), default_value=sorted(set(ALLOWED_TAGS) | {
        "p", "div", "span", "br", "hr", "pre", "h1", "h2", "h3", "h4", "h5", "h6", "img", "sub", "sup",
        "table", "thead", "tbody", "tr", "th", "td", "del", "dl", "dt", "dd"})).tag(config=True)
    attributes = Any({**ALLOWED_ATTRIBUTES, "*": ["id", "class", "title"], "img": ["src", "alt"]}).tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "markdown":
            cleaned = self.sanitize_html_tags(markdown2html_mistune(cell.source))
            # One HTML block without blank lines: the page's own markdown rendering passes it through as it is.
            cell.source = "<div>" + re.sub(r"\n\s*\n", "\n", cleaned) + "</div>"
            return cell, resources
        return super().preprocess_cell(cell, resources, index)


def feedback(course: Course, assignment: str) -> list[Path]:
    """Write grading/feedback/<student>/<assignment>/*.html for every graded student; return the pages."""
    course.check_assignment(assignment)
    autograded = course.grading / "autograded"
    if not any(autograded.glob(f"*/{assignment}")):
        raise CourseError(f"nothing graded yet for {assignment}: run `python -m autograder grade {assignment}` first")
    course.nbgrader("generate_feedback", assignment, "--force", "--log-level=ERROR")
    pages = sorted((course.grading / "feedback").glob(f"*/{assignment}/*.html"))
    for page in pages:
        text = page.read_text(encoding="utf-8")
        if any(marker in text for marker in HIDDEN_MARKERS):
            page.unlink()
            raise CourseError(f"{page} would show hidden tests; it was deleted (check the feedback settings)")
    _mark_late_pages(course, assignment, pages)
    return pages


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
        notice = (f'<div class="late-notice" style="margin:1em;padding:.5em 1em;border:2px solid #c60;">'
                  f"Handed in {html.escape(row['late'])} late{html.escape(due)}{html.escape(cost)}.</div>")
        text = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + notice, text, count=1), encoding="utf-8")
