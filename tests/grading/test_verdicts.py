"""A test cell's points come from the referee's verdict only: never from a number its outputs show.

nbgrader's partial credit scores a test cell from the first ``execute_result`` among its outputs,
and student code can emit one from anywhere (``sys.displayhook`` inside ``forward``, an IPython
hook that runs before or after every cell). One batch of 01 is graded through the real command
line: a blank, a wrong and a right notebook, and each of them again with one emitter of each kind
(values: negative, nan, lists, strings, huge, fractions). Every emitter's notebook must score
exactly what its plain notebook scores, test by test, in the gradebook, grades.csv and the
feedback page (except that an answer calling ``sys.displayhook`` is not run for the referee's
checks, so its tests score 0); and the plain ones score 0 (blank), what the referee finds (wrong)
and full (right).
"""

from __future__ import annotations

import html
import re
import subprocess
import sys

import pytest

from autograder.course import Course
from conftest import REPO, filled_release, nbgrader_meta, solution_answers, source
from test_robustness import (ASSIGNMENT, FORGOT_GRAD_OUTPUT, WRONG_CUBE, _course, autograded, cell_index, code_cell,
                             gradebook_scores, grades_csv, write_submissions)

pytestmark = pytest.mark.slow

POINTS = {"test_cube_forward": 1, "test_cube_backward": 2, "test_sqrt": 3, "test_poly_function": 3, "test_net": 2}
# The wrong notebook: Cube's forward and backward wrong, Sqrt's backward forgets grad_output.
WRONG = {"cube": [WRONG_CUBE["forward"], WRONG_CUBE["backward"]], "sqrt": [FORGOT_GRAD_OUTPUT]}
WRONG_SCORES = {"test_cube_forward": 0, "test_cube_backward": 0, "test_sqrt": 0, "test_poly_function": 3, "test_net": 2}

# Ways student code puts an execute_result (or display data) with a number into every later cell,
# test cells included: ("forward", code) runs inside Cube's forward, ("cell", code) in a cell of its own.
EMITTERS = {
    "displayhook_in_forward": ("forward", "import sys\nsys.displayhook({value})"),
    "pre_run_hook": ("cell", "import sys\nget_ipython().events.register('pre_run_cell', lambda *a: sys.displayhook({value}))"),
    "post_run_hook": ("cell", "get_ipython().events.register('post_run_cell', lambda *a: get_ipython().displayhook({value}))"),
    "pre_execute_shell_displayhook": ("cell", "get_ipython().events.register('pre_execute', "
                                              "lambda: get_ipython().displayhook({value}))"),
    "display_of_a_number": ("cell", "from IPython.display import display\n"
                                    "get_ipython().events.register('pre_run_cell', lambda *a: display({value}))"),
    "publish_display_data": ("cell", "from IPython.core.display_functions import publish_display_data\n"
                                     "get_ipython().events.register('pre_run_cell', lambda *a: "
                                     "publish_display_data({{'text/plain': repr({value})}}))"),
}
VALUES = ["-1", "float('nan')", "[1, 2]", "'11'", "1e9", "0.5", "-float('inf')"]


def _with_emitter(answers: dict[str, str], blank: bool, kind: str, value: str) -> dict:
    where, code = EMITTERS[kind]
    code = code.format(value=value)
    if where == "forward":
        cube = answers.get("cube")
        indented = "\n".join("        " + line for line in code.splitlines())
        if blank:
            released = filled_release(REPO, ASSIGNMENT, {})
            cube = source(released["cells"][cell_index(released, "cube")])
            cube = cube.replace("        raise NotImplementedError()", indented + "\n        raise NotImplementedError()", 1)
        else:
            cube = cube.replace("def forward(ctx, x):\n", "def forward(ctx, x):\n" + indented + "\n", 1)
        return filled_release(REPO, ASSIGNMENT, {**answers, "cube": cube})
    nb = filled_release(REPO, ASSIGNMENT, answers)
    nb["cells"].insert(cell_index(nb, "cube"), code_cell("emitter", code))
    return nb


def _bases() -> dict[str, dict[str, str]]:
    right = solution_answers(REPO, ASSIGNMENT)
    wrong = dict(right)
    for grade_id, edits in WRONG.items():
        for old, new in edits:
            assert old in wrong[grade_id], f"'{old}' is no longer in the answer to {grade_id}: update the test"
            wrong[grade_id] = wrong[grade_id].replace(old, new)
    return {"blank": {}, "wrong": wrong, "right": right}


def submissions() -> dict[str, dict]:
    subs = {}
    for b, (base, answers) in enumerate(_bases().items()):
        subs[base] = filled_release(REPO, ASSIGNMENT, answers)
        for k, kind in enumerate(EMITTERS):
            subs[f"{base}-{kind}"] = _with_emitter(answers, base == "blank", kind, VALUES[(b + k) % len(VALUES)])
    return subs


def _autograder(course: Course, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root, env=course.environment(),
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = _course(tmp_path_factory.mktemp("verdicts"))
    subs = submissions()
    write_submissions(course, subs)
    _autograder(course, "grade", ASSIGNMENT)
    _autograder(course, "feedback", ASSIGNMENT)
    return course, subs, gradebook_scores(course), grades_csv(course)


def test_the_plain_notebooks_score_what_the_referee_decides(graded):
    _, _, scores, rows = graded
    assert scores["blank"] == {name: 0 for name in POINTS}
    assert scores["wrong"] == WRONG_SCORES
    assert scores["right"] == POINTS
    assert [float(rows[s]["score"]) for s in ("blank", "wrong", "right")] == [0, 5, 11]


@pytest.mark.parametrize("base", ["blank", "wrong", "right"])
@pytest.mark.parametrize("kind", list(EMITTERS))
def test_a_number_emitted_into_test_cells_changes_no_score(graded, base, kind):
    course, subs, scores, rows = graded
    student = f"{base}-{kind}"
    # The emitter did reach the test cells: an output of some test cell shows its value (as a result, display
    # data, or printed: Python's own displayhook prints when IPython's is not installed).
    tests = [c for c in autograded(course, student)["cells"] if nbgrader_meta(c).get("grade_id") in POINTS]
    emitted = repr(eval(VALUES[(["blank", "wrong", "right"].index(base) + list(EMITTERS).index(kind)) % len(VALUES)]))
    outputs = [o for c in tests for o in c.get("outputs", [])]
    assert any(emitted in "".join(o.get("text") or o.get("data", {}).get("text/plain", "")) for o in outputs), \
        (student, emitted)
    # And scored nothing: test by test in the gradebook, in grades.csv, on the feedback page. An answer cell that
    # calls sys.displayhook is one the grader does not run for its checks (it reaches the interpreter: running/judging/scan.py),
    # so Cube's tests get what the referee says of an answer it could not run: 0, saying why.
    expected = dict(scores[base])
    if EMITTERS[kind][0] == "forward":
        expected.update(test_cube_forward=0, test_cube_backward=0)
        cube_test = next(c for c in tests if nbgrader_meta(c)["grade_id"] == "test_cube_forward")
        said = " ".join(o.get("evalue", "") for o in cube_test["outputs"] if o["output_type"] == "error")
        assert base != "right" or "it uses line 5: `sys.displayhook`" in said, said  # (else its own error)
    assert scores[student] == expected, student
    total = sum(expected.values())
    assert float(rows[student]["score"]) == total and rows[student]["status"] == "graded", rows[student]
    page = (course.grading / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text(encoding="utf-8")
    assert f"{total:g} / 11" in _page_scores(page)[0] or f"{total} / 11.0" in _page_scores(page)[0], _page_scores(page)
    assert _page_scores(page)[1] == [f"{expected[name]:g}" for name in POINTS], student


def _page_scores(page: str) -> tuple[str, list[str]]:
    """The feedback page's total line, and each test cell's score as nbgrader writes it (in notebook order)."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    total = re.search(r"Score:\s*([0-9.]+\s*/\s*[0-9.]+)", text)
    cells = re.findall(r"Score:\s*([0-9.]+)\s*/\s*[0-9.]+\s*\(Top\)", text)
    return (total.group(1) if total else ""), [f"{float(c):g}" for c in cells]
