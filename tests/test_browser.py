"""A real JupyterLab in headless Chromium: the student's path and the instructor's, and the feedback
pages and class report as they open offline (the book as a reader sees it: tests/authoring/test_book.py).

Each test starts JupyterLab from this environment on a free localhost port, on a temporary copy
of the course, and drives Debian's chromium with Playwright (no browser download; `make browser`
installs chromium). Every step saves a screenshot under test-artifacts/browser/<test>/, and a
failure names the step that broke.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
from playwright.sync_api import expect

from autograder.course import Course
from autograder.grading.demo.make_demo import DEMO_ROOT
from autograder.grading.demo.workspace import WORKSPACE
from browsing import Steps
from conftest import filled_release, nbgrader_meta, read_notebook, running_jupyter, solution_answers, source

pytestmark = pytest.mark.slow

ASSIGNMENT = "01_first_function"
# How Lab shows a cell's error: on its error stream, a traceback or the one line of an exercise not done yet
# (message first); printed text that names an error (01's demonstrations) is not one.
ERROR_OUTPUT = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
CELL_ERROR = r"Traceback \(most recent call last\)|\b[A-Z]\w*(Error|Failure): "
LAB_START_TIMEOUT = 60  # seconds; a cold start on 2 busy cores takes about 10
KERNEL_TIMEOUT_MS = 120_000  # running the notebook or validating it (each about 10 s here)
# Lab settings for the tests: every cell in the DOM (no windowing), and no news toast over the page.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


@contextmanager
def jupyterlab(course: Course, scratch: Path) -> Iterator[tuple[str, str]]:
    """JupyterLab from this environment on the course at ``course.root``: yields (base URL, token).

    The environment is the course's (``Course.environment``: its nbgrader config and gradebook),
    so the nbgrader Lab extension's Validate button and formgrader work on this copy. Lab's own
    state (settings, workspaces, runtime files) stays in ``scratch``.
    """
    env = course.environment()
    for variable, folder in (("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "settings"),
                             ("JUPYTERLAB_WORKSPACES_DIR", "workspaces")):
        env[variable] = str(scratch / folder)
    for plugin, settings in LAB_SETTINGS.items():
        path = scratch / "settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(settings))
    with running_jupyter("lab", course, env, scratch / "jupyterlab.log", timeout=LAB_START_TIMEOUT) as server:
        yield server


def _cell_index(notebook: dict, grade_id: str) -> int:
    return next(i for i, cell in enumerate(notebook["cells"]) if nbgrader_meta(cell).get("grade_id") == grade_id)


def test_student_fills_an_exercise_runs_all_and_validates(course_copy, page, tmp_path_factory):
    """Open a released notebook, answer Cube, run all: its visible tests pass and figures render; Validate."""
    released = read_notebook(course_copy.release / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    cube, cube_tests = _cell_index(released, "cube"), ["test_cube_forward", "test_cube_backward"]
    next_test = _cell_index(released, "test_sqrt")  # the next exercise, still blank: Run All stops there
    answer = solution_answers(course_copy.root, ASSIGNMENT)["cube"]
    steps = Steps(page, "student")
    cells = page.locator(".jp-NotebookPanel:visible .jp-Notebook .jp-Cell")

    with jupyterlab(course_copy, tmp_path_factory.mktemp("lab")) as (base, token):
        with steps.step("open the released notebook"):
            page.goto(f"{base}/lab/tree/course/{ASSIGNMENT}/{ASSIGNMENT}.ipynb?token={token}")
            expect(cells).to_have_count(len(released["cells"]))
            page.locator(".jp-NotebookPanel:visible .jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
                timeout=KERNEL_TIMEOUT_MS)

        with steps.step("see the Cube hint collapsed, open it, and find no answer-level hint"):
            hints = cells.nth(cube - 1).locator(".jp-RenderedMarkdown details")
            expect(hints).to_have_count(1)  # the answer level ("Hint 2: the answer") is not in the graded release
            assert hints.evaluate_all("blocks => blocks.every(b => !b.open)"), "hints should start collapsed"
            expect(cells.nth(cube - 1).locator("code", has_text="grad_output * 3 * x ** 2")).to_have_count(0)
            hints.nth(0).locator("summary").scroll_into_view_if_needed()
            hints.nth(0).locator("summary").click()
            expect(hints.nth(0).locator("code", has_text="ctx.saved_tensors")).to_be_visible()

        with steps.step("answer the Cube exercise"):
            editor = cells.nth(cube).locator(".cm-content")
            editor.scroll_into_view_if_needed()
            editor.click()
            page.keyboard.press("Control+A")
            page.keyboard.insert_text(answer)
            assert "grad_output * 3 * x ** 2" in editor.inner_text()
            assert "NotImplementedError" not in editor.inner_text()

        with steps.step("run all cells"):
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
            page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
            # The kernel stops at the first error; it must be the next exercise, still blank.
            first_error = page.locator(".jp-NotebookPanel:visible .jp-Cell", has=page.locator(
                ERROR_OUTPUT, has_text=re.compile(CELL_ERROR))).first
            first_error.wait_for(timeout=KERNEL_TIMEOUT_MS)
            failing = cells.evaluate_all(
                "(cells, [shown, error]) => cells.map((c, i) => [...c.querySelectorAll(shown)].some("
                "o => new RegExp(error).test(o.innerText)) ? i : -1).filter(i => i >= 0)", [ERROR_OUTPUT, CELL_ERROR])
            assert failing == [next_test], f"cells with an error: {failing}, expected only the Sqrt test ({next_test})"
            first_error.scroll_into_view_if_needed()
            assert "NotImplementedError" in first_error.inner_text()

        with steps.step("see Cube's visible tests pass"):
            for grade_id, message in zip(cube_tests, ["Cube's forward passes", "Cube's backward passes"]):
                cell = cells.nth(_cell_index(released, grade_id))
                cell.scroll_into_view_if_needed()
                assert message in cell.locator(".jp-OutputArea").inner_text(), f"{grade_id} did not print {message!r}"

        with steps.step("see a matplotlib figure render"):
            figure = page.locator(".jp-NotebookPanel:visible .jp-RenderedImage img").first
            figure.scroll_into_view_if_needed()
            assert figure.get_attribute("src").startswith("data:image/png")
            width = figure.evaluate("img => img.complete ? img.naturalWidth : 0")
            assert width > 100, f"the figure has not rendered (natural width {width})"

        with steps.step("press Validate and read the verdict"):
            page.locator(".jp-NotebookPanel:visible .jp-Toolbar .validate-button").get_by_text("Validate", exact=True).click()
            dialog = page.locator(".jp-Dialog", has_text="Validation Results")
            dialog.wait_for(timeout=KERNEL_TIMEOUT_MS)
            verdict = dialog.locator(".jp-Dialog-body").inner_text()
            assert "The following cell failed" in verdict, verdict
            assert "# Test: Sqrt" in verdict, f"the blank Sqrt exercise should fail validation:\n{verdict}"
            assert "# Test: Cube" not in verdict, f"Cube, answered right, should not fail validation:\n{verdict}"
            assert "NotImplementedError" in verdict

        with steps.step("close the verdict"):
            dialog.get_by_role("button", name="Ok").click()
            dialog.wait_for(state="detached")




@pytest.fixture(scope="module")
def graded_class(demo_run) -> Path:
    """A course copy in which `python -m autograder demo` ran once: the demo class graded in the demo's own
    workspace (build/demo/), feedback and report written; the course's own grading/ untouched. (Each test copies it.)"""
    course = Course(demo_run.root)
    demo = Course(course.root / WORKSPACE)
    assert (demo.grading / "grades.csv").is_file() and not (course.grading / "grades.csv").exists()
    assert not (course.grading / "deadlines.json").exists() and not (course.grading / "submitted").exists()
    return demo_run.root


def prepare_graded_class(graded_class: Path, tmp_path: Path) -> tuple[Course, dict[str, tuple[float, float]]]:
    """A test's own copy of the graded demo class: the demo's course (its workspace) and {student: (score, max)}.

    The scores expected are the ones the demo documents (measured with plain nbgrader); the
    student whose file is not a notebook is graded 0.
    """
    expected = json.loads((DEMO_ROOT / "expected_scores.json").read_text())
    shutil.copytree(graded_class, tmp_path / "course")
    demo = Course(tmp_path / "course" / WORKSPACE)
    return demo, {student: (score or 0, expected["max_score"]) for student, score in expected["scores"].items()}


def test_instructor_opens_the_formgrader(graded_class, page, tmp_path, tmp_path_factory):
    """The formgrader, opened from Lab's Nbgrader menu, lists the assignments and the graded students."""
    demo, scores = prepare_graded_class(graded_class, tmp_path)
    with open(DEMO_ROOT / "roster.csv", newline="") as roster:
        names = {r["id"]: f"{r['last_name']}, {r['first_name']}" for r in csv.DictReader(roster)}
    steps = Steps(page, "instructor")

    with jupyterlab(demo, tmp_path_factory.mktemp("lab")) as (base, token):
        with steps.step("open JupyterLab"):
            page.goto(f"{base}/lab?token={token}")
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Nbgrader$")).wait_for()

        with steps.step("open the formgrader from the Nbgrader menu"):
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Nbgrader$")).click()
            page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Formgrader$")).click()
            formgrader = page.frame_locator("iframe").first
            formgrader.locator("h1", has_text="Manage Assignments").wait_for()

        with steps.step("see every assignment listed"):
            rows = formgrader.locator("tbody tr", has=formgrader.locator(".num-submissions"))
            expect(rows.filter(has_text=ASSIGNMENT)).to_have_count(1)
            listed = [name.strip() for name in rows.locator(".name").all_inner_texts()]
            assert set(demo.assignments()) <= set(listed), f"formgrader lists {listed}"
            graded_row = rows.filter(has=formgrader.get_by_text(ASSIGNMENT, exact=True))
            assert graded_row.locator(".num-submissions").inner_text().strip() == str(len(scores))

        with steps.step("open the graded submissions"):
            graded_row.locator(".num-submissions a").click()
            formgrader.locator("h1", has_text="Manage Submissions").wait_for()
            for student, (score, max_score) in scores.items():
                row = formgrader.locator("tbody tr", has=formgrader.locator(".student-id", has_text=student))
                expect(row.locator(".student-name")).to_have_text(names[student])
                expect(row.locator(".score")).to_have_text(f"{score:g} / {max_score:g}")
                expect(row.locator(".status")).to_have_text("graded")


LONG_ERROR = "gradient_" + "x" * 600  # one unbroken word, far wider than a 1280 px window
HOSTILE_MARKDOWN = ("<script>alert('x-script')</script>\n\n<img src=\"x-img.png\" onerror=\"alert('x-img')\">\n\n"
                    "<details><summary>x-mine</summary>x-hidden</details>")


def hand_in_a_right_notebook_with_markup_and_a_long_error(course: Course, download: Path) -> None:
    """zed's notebook: every answer right, plus a markdown cell of hostile markup and a cell raising a long error."""
    notebook = filled_release(course.root, ASSIGNMENT, solution_answers(course.root, ASSIGNMENT))
    notebook["cells"][1:1] = [
        {"cell_type": "markdown", "metadata": {}, "source": HOSTILE_MARKDOWN},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": f"raise ValueError('{LONG_ERROR}')"},
    ]
    (download / "zed").mkdir(parents=True)
    (download / "zed" / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(notebook))


def test_feedback_page_and_class_report_offline(graded_class, page, tmp_path):
    """A feedback page from the real pipeline, offline at 1280 px: hints folded, maths rendered, a long error
    wrapped, the student's markup inert; then the HTML class report with its figures."""
    demo, _ = prepare_graded_class(graded_class, tmp_path)  # the demo class, graded in its workspace: feedback, report
    hand_in_a_right_notebook_with_markup_and_a_long_error(demo, tmp_path / "download")
    for step in (["collect", ASSIGNMENT, str(tmp_path / "download")], ["grade", ASSIGNMENT], ["feedback", ASSIGNMENT],
                 ["report", ASSIGNMENT]):
        done = subprocess.run([sys.executable, "-m", "autograder", *step], cwd=demo.root,
                              env=demo.environment(), capture_output=True, text=True, timeout=600)
        # zed is not on the demo's roster: collect says so (exit 1) and collects the notebook all the same.
        assert done.returncode == 0 or step[0] == "collect" and "zed: collected" in done.stdout, done.stderr
    feedback = demo.grading / "feedback" / "zed" / ASSIGNMENT / f"{ASSIGNMENT}.html"
    released = read_notebook(demo.release / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")["cells"]
    hints_written = sum(source(c).count("<details>") for c in released if c["cell_type"] == "markdown")
    fetched, dialogs = [], []
    page.context.route(re.compile(r"^https?://"), lambda route: (fetched.append(route.request.url), route.abort()))
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.set_viewport_size({"width": 1280, "height": 900})
    steps = Steps(page, "feedback")

    with steps.step("open zed's feedback page offline"):
        page.goto(feedback.as_uri())
        page.locator("h4", has_text="Score:").wait_for()
        assert page.evaluate("document.scripts.length") == 0, "the page should need no script"

    with steps.step("see the course's hints folded until clicked"):
        hints = page.locator("details")
        assert hints_written and hints.count() == hints_written, f"{hints.count()} hints shown, {hints_written} written"
        assert hints.evaluate_all("blocks => blocks.every(b => !b.open)"), "hints should start folded"
        first = hints.first
        first.scroll_into_view_if_needed()
        expect(first.locator("summary")).to_be_visible()
        expect(first.locator("summary")).to_have_text("Hint 1")
        body = first.locator("p").first
        expect(body).to_be_hidden()
        first.locator("summary").click()
        expect(body).to_be_visible()

    with steps.step("see the maths rendered, with no TeX left"):
        formulas = page.locator(".text_cell_render math")
        assert formulas.count() >= 10, f"only {formulas.count()} formulas rendered"
        displays = set(formulas.evaluate_all("ms => ms.map(m => getComputedStyle(m).display)"))
        assert displays <= {"math", "block math", "inline math"}, f"not drawn as MathML: {displays}"
        formulas.first.scroll_into_view_if_needed()
        box = formulas.first.bounding_box()
        assert box and box["width"] > 0 and box["height"] > 0
        prose = " ".join(page.locator(".text_cell_render").all_inner_texts())
        assert "$" not in prose and "\\frac" not in prose and "\\sqrt" not in prose, "raw TeX is visible"

    with steps.step("see the long error line wrapped inside 1280 px"):
        error = page.locator(".output_error pre", has_text="ValueError: " + LONG_ERROR[:40]).first
        error.scroll_into_view_if_needed()
        assert LONG_ERROR in error.inner_text().replace("\n", "")  # all of it, not cut off
        width, visible = error.evaluate("e => [e.scrollWidth, e.clientWidth]")
        assert width <= visible, f"the error scrolls: {width} px wide in {visible} px"
        assert error.bounding_box()["height"] > 100, "the line should wrap over several lines"
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "the page scrolls sideways"

    with steps.step("see the student's markup shown as text, inert"):
        cell = page.locator(".text_cell_render", has_text="x-mine").first
        cell.scroll_into_view_if_needed()
        text = cell.inner_text()
        assert "<script>alert('x-script')</script>" in text and "<details><summary>x-mine</summary>" in text, text
        assert "x-hidden" in text  # not folded: their <details> is not markup
        assert cell.locator("details, img, script").count() == 0
        assert page.locator("[onerror], [onload], [onclick], [ontoggle]").count() == 0
        assert dialogs == []

    with steps.step("nothing was fetched from the network"):
        assert fetched == [], f"the page fetched {fetched}"

    with steps.step("open the HTML class report with its figures"):
        report = demo.grading / "reports" / ASSIGNMENT / "summary.html"
        page.goto(report.as_uri())
        expect(page.locator("h1")).to_have_text(re.compile(f"^{ASSIGNMENT}: class report"))
        expect(page.locator("table tbody tr")).to_have_count(5)
        figures = page.locator("img")
        expect(figures).to_have_count(2)
        for i in range(2):
            figures.nth(i).scroll_into_view_if_needed()
            width = figures.nth(i).evaluate("img => img.complete ? img.naturalWidth : 0")
            assert width > 100, f"figure {i + 1} has not rendered (natural width {width})"
        assert fetched == [] and dialogs == []
