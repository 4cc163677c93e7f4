"""The markup of the grader's pages: the course's hints fold, a student's markup stays inert, maths is MathML."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import nbformat
import pytest
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from autograder.grading.results.feedback import (NO_RESPONSE, SanitizeStudentHTML, WithoutNoResponse,
                                                 released_markdown, self_contained)
from autograder.grading.results.markup import markdown_to_html, render_math
from autograder.course import Course
from conftest import PNG, REPO

ASSIGNMENT = "01_first_function"
HINT = "<details><summary>Hint 1</summary>\n\nUse $\\sqrt{x}$ and `ctx.saved_tensors`.\n\n</details>"
ANSWER = "<details><summary>Hint 2: the answer</summary>\n\n`return grad_output * 3 * x ** 2`\n\n</details>"


def test_course_hints_keep_their_markup_and_student_markup_is_shown_as_text():
    course = markdown_to_html(HINT, course_markup=True)
    assert re.search(r"<details><summary>Hint 1</summary>\s*<p>Use <math", course), course
    student = markdown_to_html(HINT, course_markup=False)
    assert "<details" not in student and "&lt;details&gt;&lt;summary&gt;Hint 1&lt;/summary&gt;" in student, student


class _Active(HTMLParser):
    """Elements of a fragment that could run, load or cover anything: scripts, frames, events, javascript: links."""

    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "iframe", "object", "embed", "style", "link", "form"):
            self.found.append(tag)
        for name, value in attrs:
            if name.startswith("on") or name in ("style", "srcdoc") or "javascript:" in (value or "").lower():
                self.found.append(f"{tag} {name}={value}")


def _active(fragment: str) -> list[str]:
    parser = _Active()
    parser.feed(fragment)
    return parser.found


@pytest.mark.parametrize("hostile", [
    "<script>alert('x-md')</script>",
    '<img src="x.png" onerror="alert(1)">',
    "[click](javascript:alert(1))",
    '<a href="#" onclick="alert(1)">a</a>',
    '<a href="JaVaScRiPt:alert(1)">a</a>',
    '<iframe src="https://example.org"></iframe>',
    '<div style="position:fixed;top:0">cover</div>',
    '<details open ontoggle="alert(1)"><summary>x</summary>y</details>',
    '<svg onload="alert(1)"></svg><math><mi onclick="alert(1)">x</mi></math>',
])
def test_hostile_markup_is_inert_at_both_levels_of_trust(hostile):
    assert _active(markdown2html_mistune(hostile)), "rendered without cleaning, the case must be active"
    for course_markup in (False, True):
        html = markdown_to_html(hostile, course_markup=course_markup)
        assert _active(html) == [], html


def test_a_student_s_image_is_text_so_the_page_fetches_nothing():
    student = markdown_to_html('<img src="https://example.org/pixel.png"> ![x](https://example.org/p.png)')
    assert "<img" not in student and "&lt;img" in student, student
    assert "<img" in markdown_to_html("![Figure 1](figure.png)", course_markup=True)


def test_maths_is_mathml_and_tex_it_cannot_read_is_shown_escaped():
    html = markdown_to_html("Inline $x^3$ and display $$\\frac{\\partial L}{\\partial x} = 3x^2 g$$")
    assert html.count("<math") == 2 and 'display="block"' in html and "<mfrac>" in html and "$" not in html
    broken = render_math("\\left( <b>")
    assert "<math" not in broken and "<b>" not in broken and "&lt;b&gt;" in broken, broken
    href = "\\href{javascript:alert(1)}{x}"
    assert _active(latex_to_mathml(href)) and _active(render_math(href)) == []
    assert render_math("\\alpha") == '<math display="inline"><mrow><mi>&#x003B1;</mi></mrow></math>'  # no xmlns: HTML


def test_maths_in_an_attribute_never_breaks_out_of_it():
    for course_markup in (False, True):
        html = markdown_to_html('![a $x"$ b](f.png) [t](https://a.org "$y$") $z$', course_markup=course_markup)
        assert _active(html) == [] and html.count("<math") <= 2, html


def test_a_student_cannot_forge_a_maths_placeholder():
    guessed = "math0123456789abcdefn0"  # the shape of a placeholder, with a nonce the student cannot know
    html = markdown_to_html(f"{guessed} $y$")
    assert guessed in html and html.count("<math") == 1
    assert not re.search(r"math[0-9a-f]{16}n[0-9]", markdown_to_html("$a$ and $b$"))  # none left behind


def _feedback_resources() -> dict:
    return {"nbgrader": {"assignment": ASSIGNMENT, "notebook": ASSIGNMENT}}


def _preprocessor(course_copy) -> SanitizeStudentHTML:
    config = Config()
    config.CourseDirectory.root = str(course_copy.root)
    config.CourseDirectory.release_directory = "course"
    return SanitizeStudentHTML(config=config)


def test_released_cells_are_the_course_s_and_answer_hints_may_be_left_out(course_copy):
    released = nbformat.read(course_copy.release / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    hint_cell = next(c for c in released.cells if c.cell_type == "markdown" and "<details>" in c.source)
    hint_cell.source += "\n\n" + ANSWER  # as an exercise of issue 27 has it: its last level the answer
    nbformat.write(released, course_copy.release / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    without_answer = hint_cell.source.replace(ANSWER, "")

    student = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell(hint_cell.source),   # the graded edition shows the answer level
        nbformat.v4.new_markdown_cell(without_answer),     # the graded edition leaves it out
        nbformat.v4.new_markdown_cell(hint_cell.source + "\n\n<details><summary>mine</summary>x</details>"),
        nbformat.v4.new_markdown_cell(HINT),               # the course's markup, written by the student
    ])
    cleaned, _ = _preprocessor(course_copy).preprocess(student, _feedback_resources())
    shown = [c.source for c in cleaned.cells]
    assert "<details><summary>Hint 2: the answer</summary>" in shown[0]
    assert "<details>" in shown[1] and "the answer" not in shown[1]
    assert "<details>" not in shown[2] and "&lt;details&gt;" in shown[2]
    assert "<details>" not in shown[3] and "&lt;details&gt;" in shown[3]
    assert all("<math" in s for s in shown if "$" in hint_cell.source)


def test_without_a_release_every_cell_is_the_student_s(course_copy):
    coursedir = CourseDirectory(config=_preprocessor(course_copy).config)
    assert released_markdown(coursedir, {}) == set()
    assert released_markdown(coursedir, {"nbgrader": {"assignment": "nope", "notebook": "nope"}}) == set()
    formgrader = released_markdown(coursedir, {"assignment_id": ASSIGNMENT, "notebook_id": ASSIGNMENT})
    assert any("<details>" in s for s in formgrader)  # the formgrader names the notebook its own way


def test_a_page_loses_its_cdn_mathjax_and_gains_the_wrapping_style():
    page = ("<html><head><!-- Load mathjax -->\n<script src=\"https://cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/"
            "latest.js\"> </script><script type=\"text/x-mathjax-config\">init_mathjax()</script>\n"
            "<!-- End of mathjax configuration --></head><body></body></html>")
    finished = self_contained(page)
    assert "<script" not in finished and "white-space: pre-wrap; overflow-wrap: anywhere;" in finished


def test_a_page_spaces_and_rules_a_table_s_cells():
    # The page's Bootstrap sets table cells' padding to 0: "Exercise 1LayerNorm's forward kernel" read as one word.
    finished = self_contained("<html><head></head><body></body></html>")
    assert ".rendered_html th, .rendered_html td {padding: .3em .8em; border: 1px solid #ccc;" in finished


def test_nbgrader_s_no_response_comment_is_left_off_and_an_instructor_s_comment_stays():
    cells = [nbformat.v4.new_code_cell("raise NotImplementedError()", metadata={"nbgrader": {
                 "solution": True, "grade_id": "sqrt", "comment": NO_RESPONSE}}),
             nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {
                 "solution": True, "grade_id": "cube", "comment": "Good: no extra copy."}})]
    cleaned, _ = WithoutNoResponse().preprocess(nbformat.v4.new_notebook(cells=cells), {})
    assert [c.metadata.nbgrader["comment"] for c in cleaned.cells] == [None, "Good: no extra copy."]
    preprocessors = Course(REPO).config().GenerateFeedback.preprocessors  # after GetGrades, which sets comments
    assert preprocessors.index("autograder.grading.results.feedback.WithoutNoResponse") == \
        preprocessors.index("nbgrader.preprocessors.GetGrades") + 1


def test_a_student_s_markup_names_no_element_and_the_course_s_keeps_its_anchors():
    clobbering = ('<span id="derive_attention" class="full-credit score" name="x" form="f" data-link="y">a</span> '
                  '<a href="#t" id="t2" class="tabbable">b</a>\n\n# test_net')
    student = markdown_to_html(clobbering)
    assert not re.search(r"\s(id|class|name|form|data-link)=", student), student
    assert "<span>a</span>" in student and "test_net" in student
    assert 'id="Heading"' in markdown_to_html("# Heading", course_markup=True)  # the course's own headings


def test_maths_keeps_form_only_as_mathml_means_it():
    assert 'form="prefix"' in render_math("\\left( x \\right)")
    assert "form=" not in render_math("\\mathrm{x}")


def test_attached_images_are_shown_from_their_checked_bytes_and_others_named():
    attachments = {"d.png": {"image/png": PNG}, "s.svg": {"image/svg+xml": "<svg onload=alert(1)/>"},
                   "bad.jpg": {"image/jpeg": '" onerror="alert(1)'}, "unused.gif": {"image/gif": "R0lGODlh"}}
    html = markdown_to_html("![photo](attachment:d.png) ![v](attachment:s.svg) ![b](attachment:bad.jpg) "
                            "![gone](attachment:none.png)", attachments=attachments)
    assert f'<img src="data:image/png;base64,{PNG}" alt="d.png">' in html
    assert '[attachment "s.svg": not an image this page can show (image/svg+xml)]' in html
    assert '[attachment "bad.jpg": not an image this page can show (image/jpeg)]' in html
    assert '[attachment "none.png": not in the notebook]' in html
    assert "Attached: " in html and 'src="data:image/gif;base64,R0lGODlh"' in html  # not shown in the text: listed
    assert _active(html) == [] and html.count("<img") == 2


def test_markdown_with_thousands_of_tags_is_shown_as_text():
    html = markdown_to_html("<div>" * 30_000 + "x")
    assert html.startswith("<pre>&lt;div&gt;") and "<div>" not in html
