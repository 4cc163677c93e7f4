"""The examinee answers the referee (autograder.grading.running.judging.examinee, answer, autograd_use), issue 32.

The referee checks, it does not ask: every fact it judges is measured in the examinee by the grader's
own functions, and where an exercise forbids it, any way of getting the gradient from autograd fails.
These run the real answering code in this process (``Answers``, ``answer.answer``) on answers written
here, the referee's real judges on the replies; test_referee.py and test_hostile.py run them sandboxed.
"""

from __future__ import annotations

import json
import signal

import pytest
import torch

from autograder.grading.running.judging import answer, examinee, referee, scan, tamper
from autograder.grading.running.judging.autograd_use import BACKWARD_SCOPE, graph_nodes

IMPORTS = {"kind": "given", "grade_id": None, "source": "import torch\nfrom autograder import check_function"}

CUBE = '''
import torch

class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        BODY
'''
HONEST = "return grad_output * 3 * x ** 2"
# Every way a backward can hand the work back to autograd, and what the examinee sees of it.
PATHS = {
    "torch.autograd.grad": ("with torch.enable_grad():\n            y = x.detach().requires_grad_()\n"
                            "            return torch.autograd.grad(y ** 3, y, grad_output)[0]", "autograd ran PowBackward0"),
    ".backward()": ("with torch.enable_grad():\n            y = x.detach().requires_grad_()\n"
                    "            (y ** 3).backward(grad_output)\n        return y.grad", "autograd ran PowBackward0"),
    "Variable._execution_engine": (
        "with torch.enable_grad():\n            y = x.detach().requires_grad_()\n"
        "            return torch.autograd.Variable._execution_engine.run_backward(\n"
        "                (y ** 3,), (grad_output,), False, False, (y,), False)[0]", "autograd ran PowBackward0"),
    "torch._C._ImperativeEngine": (
        "with torch.enable_grad():\n            y = x.detach().requires_grad_()\n"
        "            return torch._C._ImperativeEngine().run_backward(\n"
        "                (y ** 3,), (grad_output,), False, False, (y,), False)[0]", "autograd ran PowBackward0"),
    "torch.func.vjp": ("return torch.func.vjp(lambda t: t ** 3, x)[1](grad_output)[0]", "autograd ran PowBackward0"),
    "torch.func.grad": ("return grad_output * torch.func.vmap(torch.func.grad(lambda t: t ** 3))(x.reshape(-1))"
                        ".reshape(x.shape)",
                        "autograd ran PowBackward0"),
    "torch.autograd.functional.vjp": ("return torch.autograd.functional.vjp(lambda t: t ** 3, x, grad_output)[1]",
                                      "autograd ran PowBackward0"),
    "torch.func.jvp": ("return grad_output * torch.func.jvp(lambda t: t ** 3, (x,), (torch.ones_like(x),))[1]",
                       "forward-mode AD ran (aten::_make_dual)"),
    "forward_ad.make_dual": (
        "import torch.autograd.forward_ad as fwAD\n        with fwAD.dual_level():\n"
        "            dual = fwAD.make_dual(x, torch.ones_like(x))\n"
        "            return grad_output * fwAD.unpack_dual(dual ** 3).tangent", "forward-mode AD ran (aten::_make_dual)"),
}
IN_FORWARD = '''
import torch

class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        with torch.enable_grad():
            y = x.detach().requires_grad_()
            (slope,) = torch.autograd.grad((y ** 3).sum(), y)
        ctx.save_for_backward(slope)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (slope,) = ctx.saved_tensors
        return grad_output * slope
'''
KERNEL = '''
import torch

class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return torch.ops.aten.sigmoid_backward(grad_output, y)
'''


def _namespace(source: str) -> dict:
    namespace: dict = {}
    exec(source, namespace)
    return namespace


def _judge(namespace: dict, check: str) -> tuple[int, str | None, list]:
    """The referee's verdict on ``check`` (a test cell's line), answered by ``answer.answer`` through JSON."""
    replies = []

    def ask(requests):
        found = [json.loads(json.dumps(answer.answer(json.loads(json.dumps(r)), namespace))) for r in requests]
        replies.extend(found)
        return found

    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": check}]
    judged, failure = referee.Referee(cells, ["Cube"], ask).judge_cell("t")
    return judged, failure, replies


CHECK = "check_function(Cube, lambda x: x ** 3, torch.randn(4, 3))"


def test_the_profiler_records_each_graph_node_it_runs_in_the_backward_scope():
    """What the examinee relies on, on the installed torch: a node that runs records an event of the
    BACKWARD_FUNCTION scope under its own name, however it was reached."""
    x = torch.randn(3, requires_grad=True)
    y = (x.exp() * 2).sum()
    with torch.autograd.profiler.profile() as profile:
        torch.autograd.grad(y, x)
    ran = sorted(e.name for e in profile.function_events if e.scope == BACKWARD_SCOPE)
    assert ran == ["ExpBackward0", "MulBackward0", "SumBackward0"]
    assert +graph_nodes([y]) == {"SumBackward0": 1, "MulBackward0": 1, "ExpBackward0": 1,
                                 "torch::autograd::AccumulateGrad": 1, "torch::autograd::GraphRoot": 1}


def test_an_honest_backward_is_not_mistaken_for_autograd():
    judged, failure, replies = _judge(_namespace(CUBE.replace("BODY", HONEST)), CHECK)
    assert (judged, failure) == (1, None) and replies[0]["autograd_in_backward"] is None


@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_way_to_reach_autograd_in_backward_fails_the_check(path):
    body, seen = PATHS[path]
    namespace = _namespace(CUBE.replace("BODY", body))
    judged, failure, replies = _judge(namespace, CHECK)
    assert replies[0]["error"] is None  # its values are right: only how it got them is wrong
    assert seen in replies[0]["autograd_in_backward"]
    assert failure.startswith(f"Cube: backward calls autograd ({seen}") and "derive the gradient instead" in failure
    # A test that allows it (gradient checkpointing) passes the same backward.
    assert _judge(namespace, CHECK[:-1] + ", autograd_in_backward=True)")[:2] == (1, None)


def test_a_gradient_computed_by_autograd_in_forward_fails_too():
    _, failure, replies = _judge(_namespace(IN_FORWARD), CHECK)
    assert "autograd ran PowBackward0" in replies[0]["autograd_in_backward"] and "backward calls autograd" in failure


def test_torchs_own_derivative_kernel_fails_too():
    _, failure, _ = _judge(_namespace(KERNEL), "check_function(Cube, torch.sigmoid, torch.randn(5))")
    assert "torch's own derivative aten::sigmoid_backward ran" in failure


@pytest.mark.parametrize("source, check", [
    # two outputs: the engine starts the pass from a root node of its own
    ("class Cube(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
     "        ctx.save_for_backward(x)\n        return x.sin(), x.cos()\n    @staticmethod\n"
     "    def backward(ctx, ds, dc):\n        (x,) = ctx.saved_tensors\n        return ds * x.cos() - dc * x.sin()\n",
     "check_function(Cube, lambda x: (x.sin(), x.cos()), torch.randn(4))"),
    # in place: the check's copy of the input is a node of the graph
    ("class Cube(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n        ctx.mark_dirty(x)\n"
     "        ctx.save_for_backward(x > 0)\n        return x.clamp_(min=0)\n    @staticmethod\n"
     "    def backward(ctx, g):\n        (mask,) = ctx.saved_tensors\n        return g * mask\n",
     "check_function(Cube, torch.relu, torch.randn(6), inplace=True)"),
])
def test_honest_functions_with_several_outputs_or_in_place_pass(source, check):
    judged, failure, replies = _judge(_namespace("import torch\n" + source), check)
    assert (judged, failure) == (1, None), failure
    assert replies[0]["autograd_in_backward"] is None


def test_a_reply_without_the_record_fails_the_check():
    namespace = _namespace(CUBE.replace("BODY", HONEST))
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": CHECK}]

    def forged(requests):
        replies = [answer.answer(r, namespace) for r in requests]
        for reply in replies:
            del reply["autograd_in_backward"]
        return json.loads(json.dumps(replies))

    _, failure = referee.Referee(cells, ["Cube"], forged).judge_cell("t")
    assert "backward calls autograd (no record of it came back" in failure


@pytest.mark.parametrize("own_apply, says", [(True, "Cube defines its own apply"),
                                              (False, "Cube's graph node is not the one torch made for it")])
def test_a_function_that_is_not_applied_by_torch_itself_is_refused(own_apply, says):
    source = CUBE.replace("BODY", HONEST)
    if own_apply:  # an apply that computes the right values with plain torch, so autograd derives the gradient
        source = source.replace("    @staticmethod\n    def backward", "    @classmethod\n    def apply(cls, x):\n"
                                "        return x ** 3\n\n    @staticmethod\n    def backward")
    else:
        source += "\nclass Other(torch.autograd.Function):\n    pass\n\nCube._backward_cls = Other._backward_cls\n"
    _, failure, _ = _judge(_namespace(source), CHECK)
    assert says in failure


def test_a_tensor_subclass_never_reaches_the_referee():
    source = CUBE.replace("BODY", HONEST).replace("return x ** 3", "return (x ** 3).as_subclass(Sneaky)")
    namespace = _namespace("import torch\nclass Sneaky(torch.Tensor):\n    pass\n" + source)
    _, failure, replies = _judge(namespace, CHECK)
    assert replies[0]["outputs"] == [{"other": "a Sneaky (a tensor subclass)"}]
    assert "forward's output is not a tensor" in failure


# ----------------------------------------------------------------------------------------
# What the examinee runs


TRUSTED = {"cells": [
    {"kind": "given", "grade_id": None, "source": "import torch\nSCALE = 3\ndef train(model, x):\n"
                                                    "    return [float(v) for v in model.apply(x) * SCALE]\nprint('demo')\n"},
    {"kind": "answer", "grade_id": "cube", "cell_id": "cube", "source": "", "names": ["Cube"]},
    {"kind": "test", "grade_id": "test_cube", "source": "def harness(f, x):\n    return train(f, x)\n"
                                                        "### BEGIN " "HIDDEN TESTS\nsecret = 1\n### END HIDDEN TESTS\n"},
    {"kind": "answer", "grade_id": "poly", "cell_id": "poly", "source": "", "names": ["Poly"]},
], "student_names": ["Cube", "Poly"]}


def _steps(cube: str, poly: str | None = None, by: str = "answer_id") -> list[dict]:
    cells = [{"cell_type": "code", "source": "helper = lambda x: 3 * x ** 2"},
             {"cell_type": "code", by: "cube", "source": cube}]
    if poly is not None:
        cells.append({"cell_type": "code", "answer_id": "poly", "source": poly})
    cells.append({"cell_type": "code", "grade_id": "test_cube", "source": "assert False"})
    return scan.screen(examinee.program(TRUSTED, cells))


def _answers(steps: list[dict]) -> examinee.Answers:
    previous = signal.signal(signal.SIGALRM, examinee._on_alarm)
    try:
        return examinee.Answers(steps, 10.0, tamper.Guard())
    finally:
        signal.signal(signal.SIGALRM, previous)


def _apply(answers: examinee.Answers, target: str = "Cube", harness: str | None = None) -> dict:
    request = {"target": target, "kind": "with" if harness else "apply", "harness": harness,
               "args": [answer.encode(torch.ones(2, dtype=torch.float64))], "grad": [False], "inplace": False,
               "upstream": None}
    previous = signal.signal(signal.SIGALRM, examinee._on_alarm)
    try:
        return answers.reply([request], 10.0)[0]
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_the_program_holds_the_given_cells_the_answers_and_the_visible_definitions_only():
    steps = _steps(CUBE.replace("BODY", HONEST))
    assert [s["kind"] for s in steps] == ["given", "answer", "test", "answer"]
    assert "secret" not in json.dumps(steps) and "helper" not in json.dumps(steps) and "assert False" not in json.dumps(steps)
    assert steps[1]["source"].startswith("\nimport torch") and steps[1]["why"] is None
    assert steps[3]["why"] == "your notebook has no answer cell 'poly' (the grader finds it by its nbgrader id)"
    # A cell whose nbgrader metadata is gone is still found by its cell id.
    assert _steps(CUBE.replace("BODY", HONEST), by="cell_id")[1]["source"] == steps[1]["source"]


def test_an_answer_the_scan_refuses_is_never_run_and_every_check_of_it_says_why():
    steps = _steps(CUBE.replace("BODY", HONEST) + "\nimport os\nos.system('true')\n")
    assert steps[1]["source"] is None and steps[1]["why"].startswith("the grader did not run your answer cell 'cube'")
    assert _apply(_answers(steps))["error"] == steps[1]["why"]


def test_a_helper_outside_the_answer_cells_is_missing_and_the_message_says_why():
    reply = _apply(_answers(_steps(CUBE.replace("BODY", "return grad_output * helper(x)")
                                   .replace("return x ** 3", "return x * helper(x) / 3"))))
    assert reply["error"].startswith("NameError: name 'helper' is not defined")
    assert examinee.ONLY_ANSWER_CELLS in reply["error"]


def test_a_failing_answer_cell_is_said_in_each_check_of_what_it_should_define():
    reply = _apply(_answers(_steps("raise ValueError('not yet')\n" + CUBE.replace("BODY", HONEST))))
    assert reply["error"] == "your answer cell 'cube' failed when the grader ran it: ValueError: not yet"


def test_a_harness_runs_with_the_instructors_helpers_whatever_the_answers_redefine():
    cube = CUBE.replace("BODY", HONEST) + "\nSCALE = 0\ndef train(model, x):\n    return 'forged'\n"
    answers = _answers(_steps(cube))
    assert _apply(answers, harness="harness")["result"] == answer.encode([3.0, 3.0])
    assert answers.answers["SCALE"] == 0 and answers.given["SCALE"] == 3  # each namespace its own


def test_replacing_the_answering_code_or_the_checker_in_an_answer_is_found_and_fails_every_check():
    """The scan refuses these; were one to get past it, the tamper guard finds it (steps made by hand here)."""
    for tampering in ("import autograder.grading.running.judging.answer as a\na._answer_saved = lambda *args: {}\n",
                      "import autograder.student.checker.saved as s\ns.saved_record.__code__ = (lambda f, c: 0).__code__\n"):
        assert scan.problems(tampering)
        steps = _steps(CUBE.replace("BODY", HONEST))
        steps[1]["source"] += "\n" + tampering
        reply = _apply(_answers(steps))
        assert reply["error"].startswith("tampering found: ") and "(restored)" in reply["error"], reply
    assert answer._answer_saved.__module__ == "autograder.grading.running.judging.answer"  # put back
