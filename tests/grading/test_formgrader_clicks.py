"""Hand grading is safe to click (issue 32, item 2): nbgrader's real formgrader, in a real headless
browser, on a hostile submission of 05_deriving_backward.

The formgrader's script finds each answer's score input by id (``$("#" + grade_id)``) and binds the
answer's buttons to the cell around it. eve's derive_softmax answer holds empty elements with the ids
of every other answer's and test's score and comment inputs, and the classes the script selects on;
her roster name and one of her outputs try the same. Before, one click on that answer's "Full
credit" scored all ten (3/29 became 29/29). Here the click, and a score typed into another answer,
each change that answer only, as the gradebook shows; her photo of a derivation is shown in its cell.
"""

from __future__ import annotations

import json
import shutil

import pytest
from nbgrader.api import Gradebook

from autograder.course import Course
from conftest import PNG, REPO, filled_release, jupyter_server, solution_answers
from test_grading import autograder

pytestmark = pytest.mark.slow

ASSIGNMENT = "05_deriving_backward"
GRADED = ["test_softmax", "derive_softmax", "test_log_softmax_nll", "derive_log_softmax_nll", "test_layer_norm",
          "derive_layer_norm", "test_attention", "derive_attention", "test_batch_norm_train",
          "derive_batch_norm_train", "test_batch_norm_layer"]
DERIVATIONS = [g for g in GRADED if g.startswith("derive_")]
# Every score, extra-credit and comment input of the page but derive_softmax's own, and the classes its script uses.
CLOBBER = "".join(f'<span id="{g}{suffix}"></span>' for g in GRADED if g != "derive_softmax"
                  for suffix in ("", "_extra_credit", "-comment")) + \
    '<span class="nbgrader_cell score tabbable full-credit" name="derive_attention" form="x">Full credit</span>'


def eve(course_root) -> dict:
    """A right softmax (3 points), a derivation with the clobbering markup, one as a photo, the rest blank."""
    answers = solution_answers(course_root, ASSIGNMENT)
    notebook = filled_release(course_root, ASSIGNMENT, {
        "softmax": answers["softmax"],
        "derive_softmax": answers["derive_softmax"] + "\n\n" + CLOBBER,
        "derive_layer_norm": "My derivation, on paper:\n\n![derivation](attachment:derivation.png)"})
    grade_ids = [c["metadata"].get("nbgrader", {}).get("grade_id") for c in notebook["cells"]]
    notebook["cells"][grade_ids.index("derive_layer_norm")]["attachments"] = {"derivation.png": {"image/png": PNG}}
    index = grade_ids.index("softmax")
    notebook["cells"].insert(index + 1, {
        "cell_type": "code", "id": "outputs", "metadata": {}, "execution_count": None, "outputs": [],
        "source": "from IPython.display import HTML, Markdown, display\ndisplay(Markdown('# test_attention'))\n"
                  "display(HTML('<b id=\"test_batch_norm_layer\" class=\"full-credit\">x</b>'))\n"})
    return notebook


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Course:
    root = tmp_path_factory.mktemp("formgrader")
    for folder in ("solutions", "course"):
        shutil.copytree(REPO / folder, root / folder)
    course = Course(root)
    (root / "download" / "eve").mkdir(parents=True)
    (root / "download" / "eve" / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(eve(REPO)))
    (root / "roster.csv").write_text('id,first_name,last_name\neve,Eve,"Lovelace"\n', encoding="utf-8")
    autograder(course, "roster", str(root / "roster.csv"))
    autograder(course, "collect", ASSIGNMENT, str(root / "download"))
    autograder(course, "grade", ASSIGNMENT)
    return course


def _grades(course) -> dict[str, tuple]:
    with Gradebook(course.config().CourseDirectory.db_url, "custom-autograd-functions") as gb:
        notebook = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "eve")
        grades = {g.name: (g.auto_score, g.manual_score, g.extra_credit) for g in notebook.grades}
        comments = {c.name: c.manual_comment for c in notebook.comments}
        return {"id": notebook.id, "grades": grades, "comments": comments, "score": notebook.score}


def test_a_click_scores_only_the_answer_it_belongs_to(graded, page):
    before = _grades(graded)
    assert before["score"] == 3, before  # the right softmax; every derivation 0 until scored by hand
    puts = []
    page.on("request", lambda request: puts.append(request.url) if request.method == "PUT" else None)
    with jupyter_server(graded) as (base, token):
        # Offline, as the instructor's own machine may be: the page's CDN MathJax is refused at once.
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())
        page.goto(f"{base}/login")  # logged in as an instructor is: Jupyter's login page, then its cookie
        page.fill("input[name=password]", token)
        page.click("#login_submit")
        page.wait_for_load_state()
        page.goto(f"{base}/formgrader/submissions/{before['id']}/")
        page.wait_for_function("() => window.formgrader && formgrader.grades && formgrader.grades.loaded "
                               "&& formgrader.comments.loaded")
        # Each input's id is on that input only, and each answer's buttons act for that answer.
        for grade_id in GRADED:
            tags = page.evaluate(f"() => [...document.querySelectorAll('[id=\"{grade_id}\"]')].map(e => e.tagName)")
            assert tags == ["INPUT"], (grade_id, tags)
        assert page.evaluate("() => formgrader.grade_uis.map(ui => ui.$el.find('input.score').attr('id') "
                             "=== ui.model.get('name')).every(x => x)")
        photo = page.locator(".nbgrader_cell", has=page.locator("input.score#derive_layer_norm"))
        assert photo.locator("img[src^='data:image/png;base64,']").count() == 1

        softmax = page.locator(".nbgrader_cell", has=page.locator("input.score#derive_softmax"))
        with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT"):
            softmax.locator("button.full-credit").click()
        page.wait_for_function("() => $.active === 0")
        layer_norm = photo.locator("input.score#derive_layer_norm")
        layer_norm.fill("1")
        with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT"):
            layer_norm.evaluate("input => input.blur()")
        page.wait_for_function("() => $.active === 0")

    after = _grades(graded)
    changed = {name: grade for name, grade in after["grades"].items() if grade != before["grades"][name]}
    assert changed == {"derive_softmax": (before["grades"]["derive_softmax"][0], 2, None),
                       "derive_layer_norm": (before["grades"]["derive_layer_norm"][0], 1, None)}, changed
    assert after["comments"] == before["comments"] and after["score"] == 3 + 2 + 1
    assert len(puts) == 2, puts
