"""The grader fails a backward that writes over what it was given, or that cannot run twice on one graph, by name;
refuses a gradient for an integer input; and says a wrong gradient's other dtype (issue 45, item 8).

One batch of 01 and one notebook of 05 go through the real command line (``grade``, then ``check`` on two of them):
each wrong answer gives the right values, and only what its backward does to the tensors it was handed (in place,
or through a Triton kernel's pointers), what a second backward on the same graph finds, or the dtype of what it
returns is wrong. Each fails its test, and only its test, with the words ``check_function`` says in the student's
own process (tests/student/checker/test_overwrites.py), from the referee (the grader's own check, on what the
examinee measured), and ``check`` says the same as ``grade``; the right notebook graded beside them scores full marks.
And ``check_kernel`` in grading: a launcher that writes over its argument is named by the referee, from the runs the
examinee made.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from autograder.grading.running.judging import answer, referee
from autograder.grading.selfcheck import failure_message
from conftest import REPO, filled_release, nbgrader_meta, solution_answers
from test_robustness import _course

pytest.importorskip("triton")

FIRST, FIFTH = "01_first_function", "05_deriving_backward"
FROM_THE_GRADER = "(found by the grader's own check"

CUBE_OVER_SAVED_INPUT = '''
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x.square_()
'''
SQRT_OVER_SAVED_OUTPUT = '''
class Sqrt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.sqrt()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        return grad_output / (2 * result.sqrt_() ** 2)
'''
POLY_KERNEL_OVER_INPUTS = '''
import triton
import triton.language as tl


@triton.jit
def poly_backward_kernel(g_ptr, x1_ptr, x2_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    g = tl.load(g_ptr + offsets, mask=mask)
    x1 = tl.load(x1_ptr + offsets, mask=mask)
    x2 = tl.load(x2_ptr + offsets, mask=mask)
    tl.store(x1_ptr + offsets, g * 3 * x1 * x1, mask=mask)  # the gradients, over the inputs
    tl.store(x2_ptr + offsets, g * 2 * x2, mask=mask)


class PolyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2):
        ctx.save_for_backward(x1, x2)
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        n = x1.numel()
        poly_backward_kernel[(triton.cdiv(n, 64),)](grad_output.contiguous(), x1, x2, n, BLOCK=64)
        return x1, x2
'''
POLY_OVER_GRAD_OUTPUT = '''
class PolyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2):
        ctx.save_for_backward(x1, x2)
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        grad_x2 = grad_output * 2 * x2
        return grad_output.mul_(3 * x1 ** 2), grad_x2
'''
SQRT_NOT_REENTRANT = '''
class Sqrt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.sqrt()
        ctx.save_for_backward(result)
        ctx.scale = 0.5
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        gradient = ctx.scale * grad_output / result
        ctx.scale = ctx.scale * 2
        return gradient
'''
CUBE_OVER_CALLERS_INPUT = '''
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.input = x
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        return ctx.input.pow_(2).mul_(3 * grad_output)
'''
CUBE_IN_HALF = '''
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output * 3 * x ** 2).half()
'''
NLL_RIGHT_RETURN = "return grad_output * (torch.exp(log_softmax) - one_hot) / n, None"

# student -> (assignment, answers changed) -> test -> the words its failure must hold (every other test: full marks)
NOTEBOOKS = {
    "right": (FIRST, {}, {}),
    "in_place": (FIRST, {"cube": CUBE_OVER_SAVED_INPUT, "sqrt": SQRT_OVER_SAVED_OUTPUT,
                         "poly_function": POLY_KERNEL_OVER_INPUTS}, {
        "test_cube_backward": "backward wrote over `x` (the caller's input, which forward saved for backward), in place",
        "test_sqrt": "backward wrote over forward's output (saved for backward), in place",
        "test_poly_function": "backward wrote over `x1` (the caller's input, which forward saved for backward) and "
                              "`x2` (the caller's input, which forward saved for backward), through memory"}),
    "twice": (FIRST, {"cube": CUBE_OVER_CALLERS_INPUT, "sqrt": SQRT_NOT_REENTRANT,
                      "poly_function": POLY_OVER_GRAD_OUTPUT}, {
        "test_cube_backward": "backward wrote over `x` (the caller's input), in place",
        "test_sqrt": "backward gives the right gradient for `x` the first time, and a wrong one when it runs again "
                     "on the same graph",
        "test_poly_function": "backward modified grad_output in place"}),  # (and test_net: OWN_FAILURES)
    "half": (FIRST, {"cube": CUBE_IN_HALF}, {
        "test_cube_backward": "the gradient for `x` is wrong (backward returned it in float16, which autograd casts "
                              "to `x`'s float64, but only after backward rounded it to float16"}),
    "integer": (FIFTH, {"log_softmax_nll": NLL_RIGHT_RETURN.replace("None", "torch.zeros(target.shape)")}, {
        "test_log_softmax_nll": "backward returned a gradient for `target`, which is an integer tensor (int64)"}),
}
# Failures in the student's own process, a consequence of the one above: Net's visible backward (from .sum(), whose
# grad_output is one number expanded) reaches PolyFunction's grad_output.mul_, which torch refuses on it.
OWN_FAILURES = {("twice", "test_net"): "more than one element of the written-to tensor refers to a single memory"}
CHECKED = ("in_place", "integer")  # check's verdicts and messages must be grade's
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"


def _checks_hidden(course, assignment: str, tests) -> None:
    """In the course copy's source of ``assignment``, the visible ``check_function`` lines of ``tests`` made hidden:
    the student's process then runs their visible asserts only (which these answers pass), and the referee alone
    decides every check_function, from what the examinee measured."""
    path = course.solutions / assignment / f"{assignment}.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if nbgrader_meta(cell).get("grade_id") not in tests:
            continue
        lines, hidden, moved = [], False, 0
        for line in "".join(cell["source"]).splitlines():
            hidden = (hidden or HIDDEN_BEGIN in line) and HIDDEN_END not in line
            if not hidden and line.startswith("check_function("):
                lines += [HIDDEN_BEGIN, line, HIDDEN_END]
                moved += 1
            else:
                lines.append(line)
        assert moved == 1, (assignment, cell["source"])  # each of these tests has one visible check_function
        cell["source"] = "\n".join(lines)
    path.write_text(json.dumps(notebook), encoding="utf-8")


def _answers(assignment: str, changes: dict) -> dict:
    answers = solution_answers(REPO, assignment)
    if assignment == FIFTH:
        assert NLL_RIGHT_RETURN in answers["log_softmax_nll"], "05's answer changed: update the test"
        return {**answers, "log_softmax_nll": answers["log_softmax_nll"].replace(
            NLL_RIGHT_RETURN, changes["log_softmax_nll"])}
    return {**answers, **changes}


def _autograder(course, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root, env=course.environment(),
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(each student's graded tests: grade id -> (score, message as the feedback page shows it), check's reports of
    the CHECKED ones, each test's points)."""
    root = tmp_path_factory.mktemp("overwrites")
    course = _course(root / "course")
    _checks_hidden(course, FIRST, ("test_cube_backward", "test_sqrt", "test_poly_function"))
    _checks_hidden(course, FIFTH, ("test_log_softmax_nll",))
    notebooks = {}
    for student, (assignment, changes, _) in NOTEBOOKS.items():
        notebooks[student] = json.dumps(filled_release(REPO, assignment, _answers(assignment, changes)))
        folder = course.grading / "submitted" / student / assignment
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_text(notebooks[student], encoding="utf-8")
    for assignment in (FIRST, FIFTH):
        run = _autograder(course, "grade", assignment)
        assert run.returncode == 0, run.stdout + run.stderr
    results, points = {}, {}
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}", "custom-autograd-functions") as gb:
        for student, (assignment, _, _) in NOTEBOOKS.items():
            submission = gb.find_submission(assignment, student)
            scores = {g.name: g.auto_score for nb in submission.notebooks for g in nb.grades}
            points.update({(assignment, g.name): g.max_score for nb in submission.notebooks for g in nb.grades})
            cells = json.loads((course.grading / "autograded" / student / assignment / f"{assignment}.ipynb")
                               .read_text(encoding="utf-8"))["cells"]
            messages = {nbgrader_meta(c)["grade_id"]: failure_message(c.get("outputs", [])) for c in cells
                        if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")}
            results[student] = {name: (scores[name], messages[name]) for name in messages}
    checked = {}
    for student in CHECKED:
        mine = root / "mine" / student / f"{NOTEBOOKS[student][0]}.ipynb"
        mine.parent.mkdir(parents=True)
        mine.write_text(notebooks[student], encoding="utf-8")
        run = _autograder(course, "check", str(mine), "--json")
        assert run.returncode == 1 and run.stderr == "", run.stderr
        checked[student] = {t["grade_id"]: (t["score"], t["message"]) for t in json.loads(run.stdout)["tests"]}
    return results, checked, points


@pytest.mark.slow
@pytest.mark.parametrize("student", list(NOTEBOOKS))
def test_each_wrong_backward_fails_its_test_only_by_name_from_the_grader(graded, student):
    results, _, points = graded
    assignment, _, failing = NOTEBOOKS[student]
    for test, (score, message) in results[student].items():
        if test in failing:
            assert score == 0, (student, test, score)
            assert failing[test] in message and FROM_THE_GRADER in message, (student, test, message)
        elif (student, test) in OWN_FAILURES:
            assert score == 0 and OWN_FAILURES[student, test] in message, (student, test, message)
        else:
            assert score == points[assignment, test], (student, test, message)


@pytest.mark.slow
@pytest.mark.parametrize("student", CHECKED)
def test_check_says_what_grade_says(graded, student):
    results, checked, _ = graded
    assert checked[student] == results[student]


def test_a_launcher_that_writes_over_its_argument_is_named_by_the_referee():
    """check_kernel in grading: the examinee's runs say which arguments the launcher wrote over, the referee words it."""
    namespace: dict = {}
    exec("import torch\n\ndef doubled(values):\n    return values.mul_(2)\n", namespace)

    def ask(requests):
        return [json.loads(json.dumps(answer.answer(json.loads(json.dumps(r)), namespace))) for r in requests]

    cells = [{"kind": "given", "grade_id": None, "source": "import torch\nfrom autograder import check_kernel"},
             {"kind": "test", "grade_id": "t", "source": "check_kernel(doubled, lambda x: 2 * x, torch.randn(4, 5))"}]
    judged, failure = referee.Referee(cells, ["doubled"], ask).judge_cell("t")
    assert judged == 1 and failure.startswith("doubled wrote over `values`, which it was given") and \
        FROM_THE_GRADER in failure, failure


@pytest.mark.parametrize("forge, says", [
    (lambda reply: reply.pop("overwritten"), "sent no record of what backward changed"),
    (lambda reply: reply.update(overwritten=[{"roles": [["input", 7]], "in_place": True}]),
     "sent no record of what backward changed"),  # an input the Function does not have
    (lambda reply: reply.pop("second"), "sent malformed gradients"),
    (lambda reply: reply.update(raw="no"), "sent malformed gradients"),
])
def test_a_reply_without_the_examinees_records_fails_the_check(forge, says):
    namespace: dict = {}
    exec(CUBE_OVER_SAVED_INPUT.replace("x.square_()", "x ** 2"), {"torch": __import__("torch")}, namespace)

    def ask(requests):
        replies = [json.loads(json.dumps(answer.answer(json.loads(json.dumps(r)), namespace))) for r in requests]
        for reply in replies:
            forge(reply)
        return replies

    cells = [{"kind": "given", "grade_id": None, "source": "import torch\nfrom autograder import check_function"},
             {"kind": "test", "grade_id": "t", "source": "check_function(Cube, lambda x: x ** 3, torch.randn(4))"}]
    judged, failure = referee.Referee(cells, ["Cube"], ask).judge_cell("t")
    assert judged == 1 and failure is not None and says in failure, failure
    honest = referee.Referee(cells, ["Cube"], lambda requests: [answer.answer(r, namespace) for r in requests])
    assert honest.judge_cell("t") == (1, None)  # the same Cube, its records as the examinee sent them
