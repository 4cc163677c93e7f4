"""Each exercise's requirement, stated once beside its tests (``requires``), judged from what the code does (issue 45).

The requirement lives in the test cells of ``solutions/`` and in each exercise's prose; the referee holds it and
the examinee observes what the answers do: autograd while the answer cells run (and while the Function runs in
a check), gradients that are not exact in float64, the call's values kept outside ``save_for_backward`` in any
form, a Module that does not follow its Function when that Function is replaced by another. The first tests run
the real referee and examinee in this process on answers written here (as test_examinee.py does); the last grades
a class of 01 through the real command line, sandboxed, with one student for each hole seen from outside and for
our own variants of them.
"""

from __future__ import annotations

import json
import signal

import pytest

from autograder.grading.running.judging import examinee, referee, tamper
from autograder.grading.running.judging.referee import Referee, trusted_cells
from autograder.student.checker.contracts import FLOOR, NOISE, ROUNDING
from conftest import REPO, read_notebook
from test_examinee import CUBE, HONEST
from test_robustness import (ASSIGNMENT, MAX_SCORE, POINTS, Notebooks, _course, autograded, autograder, grades_csv,
                             outputs_of, write_submissions)

DERIVING = ["01_first_function", "02_saving_for_backward", "03_non_tensor_arguments", "04_multiple_inputs_and_outputs",
            "05_deriving_backward", "06_checking_gradients", "07_gpu_timing", "08_torch_func", "09_production_pytorch"]


# ----------------------------------------------------------------------------------------
# Every graded exercise of 01-09 states its requirement before its first check, and its prose says the same


class _Recording(Referee):
    """The referee, recording which of the student's names each test cell checks and which requirements were stated
    by then."""

    def __init__(self, cells, names):
        super().__init__(cells, names, lambda requests: [None] * len(requests))
        self.seen: list[tuple[str, set, set]] = []  # (grade id, names checked, names with a requirement by then)

    def _plan_test(self, grade_id, source):
        plan = super()._plan_test(grade_id, source)
        self.seen.append(("", {r["target"] for r, _ in plan.pending}, set(self.contracts)))
        return plan


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("assignment", DERIVING)
def test_every_graded_exercise_states_its_requirement_before_its_checks_and_in_its_prose(assignment):
    solution = read_notebook(REPO / "solutions" / assignment / f"{assignment}.ipynb")
    trusted = trusted_cells(solution)
    judged = _Recording(trusted["cells"], trusted["student_names"])
    judged.plan()
    checked = set()
    for _, names, stated in judged.seen:
        assert names <= stated, f"{assignment}: {sorted(names - stated)} checked before its requirement is stated"
        checked |= names
    assert checked and checked <= set(judged.contracts)
    released = read_notebook(REPO / "course" / assignment / f"{assignment}.ipynb")
    for notebook in (solution, released):  # what students read says what the referee holds
        prose = _words(" ".join("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "markdown"))
        for name, contract in judged.contracts.items():
            assert f"**It requires** {contract.requirement}." in prose, (assignment, name)
    # Where an exercise derives its backward, the requirement says so and the grader checks it.
    derived = {n for n, c in judged.contracts.items() if not c.autograd}
    assert all(judged.contracts[n].exact for n in derived if n != "numerical_jacobian")


# ----------------------------------------------------------------------------------------
# The referee and the examinee, in this process


TRUSTED = {"cells": [
    {"kind": "given", "grade_id": None, "source": "import torch\nfrom autograder import check_function, check_forward, "
                                                  "check_saved, requires\nfrom torch.autograd import gradcheck\n"},
    {"kind": "answer", "grade_id": "cube", "cell_id": "cube", "source": "", "names": ["Cube"]},
    {"kind": "test", "grade_id": "test_cube", "source":
        'requires(Cube, "a backward you derive, exact", autograd=False, exact=True)\n'
        "check_forward(Cube, lambda x: x ** 3, torch.randn(3))\n"
        "check_function(Cube, lambda x: x ** 3, torch.randn(4, 3))\n"},
    {"kind": "answer", "grade_id": "sqrt", "cell_id": "sqrt", "source": "", "names": ["Sqrt"]},
    {"kind": "test", "grade_id": "test_sqrt", "source":
        'requires(Sqrt, "a backward you derive from the output alone", autograd=False, exact=True)\n'
        "check_function(Sqrt, torch.sqrt, torch.rand(5) + 0.5)\n"
        'check_saved(Sqrt, torch.sqrt, torch.rand(5) + 0.5, saves=["output"])\n'},
    {"kind": "answer", "grade_id": "other", "cell_id": "other", "source": "", "names": ["train"]},
], "student_names": ["Cube", "Sqrt", "train"]}
SQRT = '''
class Sqrt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.sqrt()
        ctx.save_for_backward(result)
        KEEP
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        return grad_output / (2 * result)
'''
# The derivative of x ** 3 fitted, as a quadratic, to values that autograd gives at sample points while a cell runs.
FIT = ("_points = torch.linspace(-3, 3, 7, dtype=torch.float64)\n_slopes = {how}\n"
       "_table = torch.linalg.lstsq(torch.stack([_points ** k for k in range(3)], 1), _slopes.unsqueeze(1)).solution\n"
       "_TABLE.update(c0=_table[0, 0], c1=_table[1, 0], c2=_table[2, 0])\n")
SLOPES = {
    "torch.autograd.grad": "torch.autograd.grad((_points.requires_grad_() ** 3).sum(), _points)[0].detach()",
    "torch.func.jacrev": "torch.func.jacrev(lambda t: t ** 3)(_points).diagonal()",
    "torch.func.vjp": "torch.func.vjp(lambda t: t ** 3, _points)[1](torch.ones_like(_points))[0]",
    "torch.func.jvp": "torch.func.jvp(lambda t: t ** 3, (_points,), (torch.ones_like(_points),))[1]",
    "torch.autograd.functional.jacobian": "torch.autograd.functional.jacobian(lambda t: (t ** 3).sum(), _points)",
}
FITTED = "return grad_output * (_TABLE['c0'] + _TABLE['c1'] * x + _TABLE['c2'] * x ** 2)"
REQUIRES = "This exercise requires a backward you derive, exact, but "


def _verdicts(cube: str, sqrt: str = SQRT.replace("KEEP", "pass"), other: str = "def train():\n    pass\n") -> dict:
    """Each test cell's verdict on these answer cells: the real examinee's answers (in this process), the real referee."""
    cells = [{"cell_type": "code", "answer_id": g, "source": s} for g, s in (("cube", cube), ("sqrt", sqrt),
                                                                            ("other", other))]
    steps = examinee.program(TRUSTED, cells)
    previous = signal.signal(signal.SIGALRM, examinee._on_alarm)
    try:
        answers = examinee.Answers(steps, 30.0, tamper.Guard())
        ask = lambda requests: json.loads(json.dumps(answers.reply(json.loads(json.dumps(requests)), 30.0)))  # noqa: E731
        judged = referee.Referee(TRUSTED["cells"], TRUSTED["student_names"], ask)
        return {grade_id: judged.judge_cell(grade_id)[1] for grade_id in ("test_cube", "test_sqrt")}
    finally:
        signal.signal(signal.SIGALRM, previous)


def _cube(body: str = HONEST, before: str = "") -> str:
    return "import torch\n" + before + "\n" + CUBE.replace("BODY", body)


def test_honest_answers_with_their_own_checks_in_the_answer_cell_pass():
    # The course's self-checks called in an answer cell do nothing in the examinee: what they would run is not the answer's.
    checks = "\ncheck_function(Cube, lambda t: t ** 3, torch.randn(4, dtype=torch.float64))\n" \
             "assert gradcheck(Cube.apply, (torch.randn(3, dtype=torch.float64, requires_grad=True),))\n"
    assert _verdicts(_cube() + checks) == {"test_cube": None, "test_sqrt": None}


@pytest.mark.parametrize("how", sorted(SLOPES))
def test_a_derivative_fitted_with_autograd_while_the_answer_cell_runs_fails_saying_so(how):
    found = _verdicts(_cube(FITTED, "_TABLE = {}\n" + FIT.format(how=SLOPES[how])))
    assert found["test_cube"].startswith(REQUIRES + "when the grader ran your answer cell 'cube', "), found
    assert ("autograd ran" in found["test_cube"] or "forward-mode AD ran" in found["test_cube"]), found
    assert found["test_sqrt"] is None  # Sqrt's cell shares nothing with the cell that ran autograd


def test_a_lookup_table_fitted_in_another_cell_that_shares_it_fails_and_an_unrelated_cell_does_not():
    fitting = FIT.format(how=SLOPES["torch.autograd.grad"])
    found = _verdicts(_cube(FITTED, "_TABLE = {}"), other="def train():\n    pass\n\n" + fitting)
    assert found["test_cube"].startswith(REQUIRES + "when the grader ran your answer cell 'other', autograd ran"), found
    # A cell that runs autograd on state of its own (a training demo) is no one else's business.
    demo = "def train():\n    pass\n\n_w = torch.ones(3, requires_grad=True)\n(_w ** 2).sum().backward()\n"
    assert _verdicts(_cube(), other=demo) == {"test_cube": None, "test_sqrt": None}


@pytest.mark.parametrize("body, says", [
    ("h = 1e-5\n        return grad_output * ((x + h) ** 3 - (x - h) ** 3) / (2 * h)", "its gradients differ from torch's"),
    ("return grad_output * (3 * x ** 2).float().double()", "its gradients differ from torch's"),
    ("with torch.enable_grad():\n            y = x.detach().requires_grad_()\n"
     "            return torch.autograd.grad(y ** 3, y, grad_output)[0]", "when the grader's check ran Cube, autograd ran"),
])
def test_an_approximated_or_autograd_computed_backward_fails_saying_so(body, says):
    found = _verdicts(_cube(body))
    assert found["test_cube"].startswith(REQUIRES + says), found


def test_the_input_kept_as_python_numbers_and_used_where_they_agree_fails_saying_where():
    # The hole seen from outside: Sqrt saves its output, keeps its input as floats on ctx, and uses them only where
    # they agree with the saved output (so backward given other tensors computes from those).
    keep = ("ctx.values = x.tolist()\n        ctx.shape = x.shape")
    sqrt = SQRT.replace("KEEP", keep).replace(
        "return grad_output / (2 * result)",
        "x = torch.tensor(ctx.values, dtype=result.dtype).reshape(ctx.shape)\n"
        "        return grad_output / (2 * (x.sqrt() if torch.allclose(x.sqrt(), result) else result))")
    found = _verdicts(_cube(), sqrt=sqrt)
    assert found["test_sqrt"].startswith("This exercise requires a backward you derive from the output alone, but Sqrt "
                                         "keeps the values of the input `x` (as Python floats) in `ctx.values`"), found


def test_torchs_softplus_is_its_input_above_20_so_its_gradient_there_is_1():
    # Why 02's hidden tests compare Softplus with the exact softplus (threshold=100): a derived backward gives
    # sigmoid(x) = 1 - exp(-x), which is not 1 at 30 in float64.
    import torch

    x = torch.tensor([20.5, 30.0], dtype=torch.float64, requires_grad=True)
    (torchs,) = torch.autograd.grad(torch.nn.functional.softplus(x).sum(), x)
    (exact,) = torch.autograd.grad(torch.nn.functional.softplus(x, threshold=100).sum(), x)
    assert torch.equal(torchs, torch.ones(2, dtype=torch.float64))
    assert torch.allclose(exact, torch.sigmoid(x.detach()), rtol=1e-15, atol=0) and bool((exact < 1).all())


def test_the_bound_is_what_guarantees_md_states():
    stated = _words((REPO / "autograder" / "authoring" / "book" / "instructors" / "guarantees.md").read_text())
    assert f"within {FLOOR} roundings" in stated and f"{NOISE} times" in stated and f"{ROUNDING:.1e}" in stated


# ----------------------------------------------------------------------------------------
# A class of 01 through the real command line


BROKEN_X2 = ("return grad_output * 3 * x1 ** 2, grad_output * 2 * x2", "return grad_output * 3 * x1 ** 2, grad_output * x2")
MENDS = "p = PolyFunction.apply(x1, x2)\n        q = PolyFunction.apply(x1.detach(), x2)\n        return (p + (q - q.detach())).sum()"
MENDS_WHERE_UNCHANGED = ("p = PolyFunction.apply(x1, x2)\n        if not torch.equal(p.detach(), (x1 ** 3 + x2 ** 2).detach()):\n"
                         "            return p.sum()\n        q = PolyFunction.apply(x1.detach(), x2)\n"
                         "        return (p + (q - q.detach())).sum()")
SQRT_KEEPS = {  # how Sqrt keeps its input besides saving its output, and where the message must say it is
    "floats_on_ctx": ("ctx.values = x.tolist()", "", "in `ctx.values`"),
    "bytes_in_a_closure": ("_put(x.detach().numpy().tobytes())",
                           "def _box():\n    kept = []\n    return kept.append\n\n\n_put = _box()\n",
                           "in the module-level name `_put`"),
    "str_in_a_module_dict": ("_kept[id(ctx)] = str(x.tolist())", "_kept = {}\n", "in the module-level dict `_kept`"),
    "numpy_scalars_in_a_module_dict": ("_kept[0] = [np.float64(v) for v in x.reshape(-1).tolist()]", "import numpy as np\n_kept = {}\n",
                                       "in the module-level dict `_kept`"),
}
def class_of_01(notebooks: Notebooks) -> dict[str, tuple[dict, set, dict[str, str]]]:
    """student -> (their notebook, the test cells they lose, test cell -> what its output must say after "This
    exercise requires ..., but")."""
    right = notebooks.right
    cube_with = lambda body, before="": right["cube"].replace(  # noqa: E731
        "return grad_output * 3 * x ** 2", body).replace("class Cube", before + "\n\nclass Cube", 1)
    in_cell = "when the grader ran your answer cell '{}', autograd ran"
    cube = {"test_cube_forward", "test_cube_backward"}
    students = {
        "right": ({}, set(), {}),
        # The hole seen from outside: float64 central differences of forward (right to 1e-10: float32 checks pass).
        "central_differences": ({"cube": cube_with("d, h = x.double(), 1e-5\n        return grad_output * (((d + h) ** 3 - "
                                                   "(d - h) ** 3) / (2 * h)).to(x.dtype)")},
                                {"test_cube_backward"}, {"test_cube_backward": "its gradients differ from torch's"}),
        "fits_with_autograd_in_its_cell": ({"cube": cube_with(FITTED, "_TABLE = {}\n" + FIT.format(
            how=SLOPES["torch.autograd.grad"]))}, cube, {c: in_cell.format("cube") for c in cube}),
        "fits_with_jacrev_in_its_cell": ({"cube": cube_with(FITTED, "_TABLE = {}\n" + FIT.format(
            how=SLOPES["torch.func.jacrev"]))}, cube, {"test_cube_backward": in_cell.format("cube")}),
        "fits_with_jvp_in_its_cell": ({"cube": cube_with(FITTED, "_TABLE = {}\n" + FIT.format(
            how=SLOPES["torch.func.jvp"]))}, cube, {"test_cube_backward": "when the grader ran your answer cell 'cube', "
                                                                       "forward-mode AD ran"}),
        # The hole seen from outside: a wrong PolyFunction, and a Net that calls it twice on half-detached inputs to
        # mend its gradient; and the same Net mending only where PolyFunction's values are the polynomial's.
        "net_mends_a_wrong_poly_function": ({"poly_function": notebooks.edit("poly_function", *BROKEN_X2),
                                             "net": notebooks.edit("net", "return self.poly(x1, x2).sum()", MENDS)},
                                            {"test_poly_function", "test_net"}, {"test_net": "Net does not follow PolyFunction"}),
        "net_mends_where_poly_function_is_unchanged": (
            {"poly_function": notebooks.edit("poly_function", *BROKEN_X2),
             "net": notebooks.edit("net", "return self.poly(x1, x2).sum()", MENDS_WHERE_UNCHANGED)},
            {"test_poly_function", "test_net"},
            {"test_net": "Net does not follow PolyFunction: with PolyFunction keeping its forward but given the backward "
                         "of another function"}),
    }
    for how, (keep, before, where) in SQRT_KEEPS.items():
        sqrt = right["sqrt"].replace("ctx.save_for_backward(result)", f"ctx.save_for_backward(result)\n        {keep}")
        students[f"sqrt_keeps_{how}"] = ({"sqrt": before + sqrt}, {"test_sqrt"},
                                         {"test_sqrt": "Sqrt keeps the values of the input `x` ("})
        students[f"sqrt_keeps_{how}"][2]["where"] = where
    return {student: (notebooks.answers(**answers), lost, says) for student, (answers, lost, says) in students.items()}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = _course(tmp_path_factory.mktemp("contracts"))
    students = class_of_01(Notebooks(course.root))
    write_submissions(course, {student: notebook for student, (notebook, _, _) in students.items()})
    ran = autograder(course, "grade", ASSIGNMENT, "--timeout", "20", "--memory", "2")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return course, students, grades_csv(course)


@pytest.mark.slow
@pytest.mark.parametrize("student", sorted([
    "right", "central_differences", "fits_with_autograd_in_its_cell", "fits_with_jacrev_in_its_cell",
    "fits_with_jvp_in_its_cell", "net_mends_a_wrong_poly_function", "net_mends_where_poly_function_is_unchanged",
    *(f"sqrt_keeps_{how}" for how in SQRT_KEEPS)]))
def test_each_hole_loses_its_exercise_with_a_message_stating_the_requirement(graded, student):
    course, students, rows = graded
    _, lost, says = students[student]
    assert (float(rows[student]["score"]), rows[student]["status"]) == (MAX_SCORE - sum(POINTS[c] for c in lost),
                                                                        "graded"), rows[student]
    notebook = autograded(course, student)
    for cell, text in says.items():
        if cell == "where":
            assert text in outputs_of(notebook, "test_sqrt"), outputs_of(notebook, "test_sqrt")
            continue
        shown = outputs_of(notebook, cell)
        assert "This exercise requires " in shown and f", but {text}" in shown.replace("\\n", " "), shown
