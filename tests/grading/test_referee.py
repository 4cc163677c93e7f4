"""The referee decides a test cell's value checks without running student code (autograder.grading.running.judging.referee).

Here the student's side is the real ``answer`` function applied to a real namespace, reached
through a JSON round trip as the pipe carries it; the notebooks' own test cells are judged.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import torch

from autograder.grading.running.judging import answer, referee
from autograder.student import seeds

from autograder.grading.running import executor
from autograder.grading.running.confinement.limits import Limits
from autograder.grading.running.executor import execute
from autograder.grading.running.preparation import cells_to_run
from autograder.grading.running.judging.referee_process import stop_referee
from conftest import sqrt_keeping

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "01_first_function" / "01_first_function.ipynb"
IMPORTS = {"kind": "given", "grade_id": None, "source": "import torch\nfrom autograder import check_function, check_saved"}
WRONG_BACKWARD = ("return grad_output * 3 * x ** 2", "return grad_output * 3 * x")


@pytest.fixture(autouse=True, scope="module")
def _no_referee_left():
    """The referee process execute() keeps for this thread ends with this module's tests."""
    yield
    stop_referee()


def _notebook() -> dict:
    return json.loads(NOTEBOOK.read_text())


def _solution_sources(replace: tuple[str, str] | None = None) -> list[str]:
    sources = ["".join(c["source"]) for c in _notebook()["cells"]
               if c["cell_type"] == "code" and c["metadata"].get("nbgrader", {}).get("solution")]
    return [s.replace(*replace) for s in sources] if replace else sources


def _student(replace=None) -> dict:
    namespace = {"torch": torch, "nn": torch.nn}
    for source in _solution_sources(replace):
        exec(source, namespace)
    return namespace


def _each(answer):
    """A referee's ``ask`` (one cell's requests at once) from a function that answers one request."""
    return lambda requests: [answer(request) for request in requests]


def _asker(namespace: dict, log: list | None = None):
    def ask(request):
        reply = json.loads(json.dumps(answer.answer(json.loads(json.dumps(request)), namespace)))
        if log is not None:
            log.append(reply)
        return reply
    return _each(ask)


def _judge(ask, test: str) -> tuple[int, str | None]:
    trusted = referee.trusted_cells(_notebook())
    return referee.Referee(trusted["cells"], trusted["student_names"], ask).judge_cell(test)


def test_the_instructors_cells_hold_no_solution_and_name_the_students_objects():
    trusted = referee.trusted_cells(_notebook())
    assert trusted["student_names"] == ["Cube", "Net", "Poly", "PolyFunction", "Sqrt"]
    shipped = "".join(c["source"] for c in trusted["cells"])
    assert all(source not in shipped for source in _solution_sources())
    assert [c["grade_id"] for c in trusted["cells"] if c["kind"] == "test"] == [
        "test_cube_forward", "test_cube_backward", "test_sqrt", "test_poly_function", "test_net"]


def test_a_right_function_passes_every_check_the_referee_decides():
    judged, failure = _judge(_asker(_student()), "test_cube_backward")
    assert (judged, failure) == (4, None)


def test_a_wrong_gradient_fails_with_a_message_that_shows_no_test_line():
    judged, failure = _judge(_asker(_student(WRONG_BACKWARD)), "test_cube_backward")
    assert judged == 4 and failure.startswith("Cube: the gradient for `x` is wrong (found by the grader's own check")
    hidden = "check_function(Cube, lambda x: x ** 3, torch.randn(4, 5))"
    assert hidden not in failure and "torch.randn" not in failure


def test_each_test_draws_the_same_inputs_on_every_run_and_its_failure_says_their_seed():
    """Each test cell starts from its own seed (autograder.student.seeds): two referees ask the same questions, a
    replay of one run's answers is the other run's answers, and a failure names the seed that draws them again."""
    trusted = referee.trusted_cells(_notebook())
    first, second = (referee.Referee(trusted["cells"], trusted["student_names"], _asker(_student())) for _ in range(2))
    torch.manual_seed(0)
    first.plan()
    torch.manual_seed(1)  # whatever came before
    second.plan()
    asked = {grade_id: [request for request, _ in plan.pending] for grade_id, plan in first.plans.items()}
    assert asked == {grade_id: [request for request, _ in plan.pending] for grade_id, plan in second.plans.items()}
    shapes = [r["args"][0]["shape"] for r in asked["test_cube_backward"]]
    assert shapes == [[3], [4, 5], [], [2, 3, 2]]
    assert asked["test_cube_backward"][1]["args"] != asked["test_cube_forward"][1]["args"]  # each test its own draws
    recorded: list = []
    assert _judge(_asker(_student(), recorded), "test_cube_backward") == (4, None)
    replay = iter(recorded)
    assert _judge(_each(lambda request: next(replay)), "test_cube_backward") == (4, None)
    seed = seeds.seed_of("test_cube_backward")
    judged, failure = _judge(_asker(_student(WRONG_BACKWARD)), "test_cube_backward")
    head = failure.splitlines()[0]
    assert head.endswith(f"[the test's inputs come from seed {seed}: torch.manual_seed({seed}) at the top of the "
                         "test cell draws them again]"), head


def test_a_judges_own_draws_leave_the_cells_draws_as_they_are_where_no_judge_draws():
    """The visible part draws the same tensors in the referee as in the student's process, where check_function
    draws nothing from torch's generator: the judges' upstream gradients come from seeds of their own."""
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": (
        "a = torch.randn(3)\ncheck_function(Cube, lambda x: x ** 3, a)\nb = torch.randn(4)\n"
        "check_function(Cube, lambda x: x ** 3, b)\n")}]
    judge = referee.Referee(cells, ["Cube"], _asker(_student()))
    judge.plan()
    seeds.seed_test("t")
    a, b = torch.randn(3), torch.randn(4)
    args = [answer.decode(request["args"][0]) for request, _ in judge.plans["t"].pending]
    assert torch.equal(args[0], a.double()) and torch.equal(args[1], b.double())
    upstream = [answer.decode(request["upstream"][0]) for request, _ in judge.plans["t"].pending]
    assert not torch.equal(upstream[0][:3], upstream[1][:3])  # each judge its own seed


def test_checks_on_values_the_referee_cannot_compute_are_left_to_the_students_process():
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": (
        "y = Cube.apply(torch.randn(3))\n"          # needs the student's object: skipped, y unavailable
        "check_function(Cube, lambda x: x ** 3, y)\n"  # so this cannot be decided here
        "assert False, 'asserts are decided by the student process'\n"
        "check_function(Cube, lambda x: x ** 3, torch.randn(2))\n")}]
    asked = []
    judge = referee.Referee(cells, ["Cube"], _each(lambda request: asked.append(request) or
                                                   answer.answer(request, _student())))
    assert judge.judge_cell("t") == (1, None)
    assert len(asked) == 1 and asked[0]["args"][0]["shape"] == [2]


@pytest.mark.parametrize("reply, says", [
    (None, "sent no answer"),
    ("not a dict", "sent no answer"),
    ({"gone": "it failed (a bug in the grader): ModuleNotFoundError: No module named 'tqdm'"},
     "could not be checked: the grader's run of your answers stopped (it failed (a bug in the grader): "
     "ModuleNotFoundError: No module named 'tqdm')"),
    ({"error": None, "outputs": [{"tensor": "float64", "shape": [5], "data": "!!"}], "grads": []}, "malformed"),
    ({"error": None, "outputs": [{"tensor": "float64", "shape": [10**9], "data": ""}], "grads": []}, "malformed"),
    ({"error": None, "outputs": [{"tensor": "complex128", "shape": [1], "data": ""}], "grads": []}, "malformed"),
    ({"error": None, "outputs": [{"tensor": "float64", "shape": [2],
                                  "data": base64.b64encode(b"\0" * 8).decode()}], "grads": []}, "malformed"),
    ({"error": None, "outputs": [{"other": "str"}], "grads": []}, "is not a tensor"),
    ({"error": None, "outputs": [], "grads": []}, "returned 0 outputs"),
    ({"error": "RuntimeError: no"}, "Cube: raised RuntimeError: no (found by"),
    ({"error": "NotImplementedError: "}, "Cube: not done yet (replace `raise NotImplementedError()` with your code)"),
    ({"error": "TimeoutError: timed out after 2 s"}, "Cube: timed out after 2 s (found by"),
])
def test_whatever_the_students_process_sends_back_is_checked_and_fails_the_check(reply, says):
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": "check_function(Cube, lambda x: x ** 3, torch.randn(3))"}]
    judged, failure = referee.Referee(cells, ["Cube"], _each(lambda request: reply)).judge_cell("t")
    assert judged == 1 and says in failure


def test_a_forward_only_check_asks_for_no_gradient():
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": "check_forward(Cube, lambda x: x ** 3, torch.randn(3))"}]
    asked = []
    namespace = _student(WRONG_BACKWARD)
    judge = referee.Referee(cells, ["Cube"], _each(lambda r: asked.append(r) or answer.answer(r, namespace)))
    assert judge.judge_cell("t") == (1, None) and asked[0]["upstream"] is None


PLAIN = """
import torch

def norm_squared(x, y):
    return (x * x).sum() + y

class Doubler(torch.nn.Module):
    def forward(self, x):
        return 2 * x

def wrong_norm_squared(x, y):
    return (x * x).sum() - y
"""


@pytest.mark.parametrize("call, says", [
    ("check_callable(norm_squared, lambda x, y: (x * x).sum() + y, torch.randn(4), torch.randn(()))", None),
    ("check_callable(Doubler, lambda x: 2 * x, torch.randn(2, 3))", None),
    ("check_callable(wrong_norm_squared, lambda x, y: (x * x).sum() + y, torch.randn(4), torch.randn(()))",
     "wrong_norm_squared: its output is wrong"),
    ("check_callable(Cube, lambda x: x ** 3, torch.randn(3))", "no function or nn.Module class named Cube"),
    ("check_function(norm_squared, lambda x, y: (x * x).sum() + y, torch.randn(4), torch.randn(()))",
     "no torch.autograd.Function named norm_squared"),
])
def test_functions_and_module_classes_are_called_and_functions_applied(call, says):
    namespace = _student()
    exec(PLAIN, namespace)
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": call}]
    names = ["Cube", "Doubler", "norm_squared", "wrong_norm_squared"]
    judged, failure = referee.Referee(cells, names, _asker(namespace)).judge_cell("t")
    assert judged == 1 and (failure is None if says is None else says in failure)


def test_the_referee_names_each_input_as_forward_names_it():
    """The student's process reports forward's parameter names with its answer, as the in-process checker names
    them; a reply whose names are not plain names gets positions instead."""
    namespace = _student(("grad_output * 2 * x2", "2 * x2"))  # PolyFunction forgets grad_output for x2 only
    judged, failure = _judge(_asker(namespace), "test_poly_function")
    assert failure.startswith("PolyFunction: the gradient for `x2` is wrong (found by the grader's own check")
    assert "For a random grad_output, compared with torch autograd on the reference:" in failure

    def odd_names(request):
        reply = answer.answer(json.loads(json.dumps(request)), namespace)
        return dict(reply, names=["x1", "<b>x2</b>"]) if "names" in reply else reply

    judged, failure = _judge(_each(odd_names), "test_poly_function")
    assert failure.startswith("PolyFunction: the gradient for `input 2` is wrong")


CUBE_BACKWARD = "        (x,) = ctx.saved_tensors\n        return grad_output * 3 * x ** 2"


@pytest.mark.slow
@pytest.mark.parametrize("cause, body, says", [
    ("not done", "        raise NotImplementedError()",
     "NotImplementedError: not done yet (replace `raise NotImplementedError()` with your code)"),
    ("crashed", "        raise RuntimeError('oops')", "RuntimeError: oops"),
    ("timed out", "        while True:\n            pass", "TimeoutError: timed out after 2 s (an infinite loop?)"),
])
def test_each_way_a_cell_fails_is_said_once(cause, body, says, tmp_path):
    """A backward left as released, one that raises and one that never returns: test_cube_backward shows its own
    error, as its value (what `check` and the feedback page read), once; the referee, which meets the same error
    when it asks, adds nothing."""
    cells = _cells((CUBE_BACKWARD, body))
    result = execute(cells, str(tmp_path), Limits(cell_timeout=2, after_timeout=2), {},
                     referee.trusted_cells(_notebook()))
    index = next(i for i, c in enumerate(cells) if c.get("grade_id") == "test_cube_backward")
    errors = [f"{o['ename']}: {o['evalue']}" for o in result.outputs[index] if o["output_type"] == "error"]
    assert errors == [says], cause


def _cells(replace=None, extra: str = "", answer_extra: str = "") -> list[dict]:
    """01's cells as grading passes them, the answers changed by ``replace``; ``extra``: a cell of the
    student's own after Cube's answer cell; ``answer_extra``: code added to Cube's answer cell."""
    notebook = _notebook()
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code" and cell["metadata"].get("nbgrader", {}).get("solution"):
            source = "".join(cell["source"])
            cell["source"] = (source.replace(*replace) if replace else source) + (
                answer_extra if "class Cube" in source else "")
    cells = cells_to_run(notebook)
    if extra:
        after = next(i for i, c in enumerate(cells) if c.get("answer_id") == "cube") + 1
        cells.insert(after, {"cell_type": "code", "source": extra})
    return cells


def _errors(result, cells, test: str) -> list[str]:
    index = next(i for i, c in enumerate(cells) if c.get("grade_id") == test)
    return [o["evalue"] for o in result.outputs[index] if o["output_type"] == "error"]


@pytest.mark.slow
def test_in_grading_a_forged_pass_is_overruled_and_an_honest_notebook_keeps_every_point(tmp_path):
    trusted = referee.trusted_cells(_notebook())
    honest = execute(_cells(), str(tmp_path), Limits(cell_timeout=30), {}, trusted)
    assert honest.status == "graded" and all(not _errors(honest, _cells(), t) for t in
                                               ("test_cube_backward", "test_sqrt", "test_poly_function"))
    assert sum(honest.judged.values()) >= 11
    # Wrong backward, and every later cell "passes" because run_cell no longer runs anything.
    forged = _cells(WRONG_BACKWARD, "get_ipython().run_cell = lambda *args, **kwargs: None\n")
    result = execute(forged, str(tmp_path), Limits(cell_timeout=30), {}, trusted)
    assert any("the gradient for `x` is wrong" in e for e in _errors(result, forged, "test_cube_backward"))
    # Sqrt is right: judged on the answers alone, it keeps its points whatever the notebook's own process did.
    assert _errors(result, forged, "test_sqrt") == []
    # An answer that stops answering in the examinee (it can tell the two processes apart) and ignores its
    # time limit: the examinee is ended, every later check fails; the same referee process then judges the
    # next notebook as if nothing had happened.
    stuck = _cells(answer_extra="\nimport time\n_forward = Cube.forward\n"
                                "def _stuck_for_the_grader(ctx, x):\n"
                                "    while __name__ != '__main__':\n"
                                "        try:\n"
                                "            time.sleep(60)\n"
                                "        except BaseException:\n"
                                "            pass\n"
                                "    return _forward(ctx, x)\n"
                                "Cube.forward = staticmethod(_stuck_for_the_grader)\n")
    result = execute(stuck, str(tmp_path), Limits(cell_timeout=2), {}, trusted)
    assert result.status == "kernel died" and "the process that runs your answers" in result.detail, result.detail
    [said] = _errors(result, stuck, "test_cube_forward")
    assert said.startswith("Cube: could not be checked: the grader's run of your answers stopped (it did not answer") \
        and "(found by the grader's own check, which runs this cell's checks outside your notebook's process) " \
        "[the test's inputs come from seed" in said, said
    again = execute(_cells(), str(tmp_path), Limits(cell_timeout=30), {}, trusted)
    assert again.status == "graded" and again.judged == honest.judged


@pytest.mark.slow
def test_replacing_the_answering_code_gains_nothing_wherever_the_notebook_does_it(tmp_path):
    # Issue 32: the student's process replaced the answering function with one that computes torch's own
    # answer (8/11 with every answer wrong). Now the notebook's process answers nothing: in a cell of its
    # own the forgery changes nothing; in the answer cell, the grader refuses to run that cell.
    forge = ("import autograder.grading.running.judging.answer as _r, torch as _t\n"
             "def _forged(request, namespace, harnesses=None):\n"
             "    x = _r.decode(request['args'][0]).requires_grad_()\n"
             "    y = x ** 3\n"
             "    reply = {'error': None, 'outputs': [_r.encode(y.detach())], 'grads': None, 'autograd_in_backward': None}\n"
             "    if request['upstream'] is not None:\n"
             "        (g,) = _t.autograd.grad(y, x, _r.decode(request['upstream'][0]))\n"
             "        reply['grads'] = [_r.encode(g)]\n"
             "    return reply\n"
             "_r.answer = _forged\n")
    trusted = referee.trusted_cells(_notebook())
    for cells in (_cells(WRONG_BACKWARD, forge), _cells(WRONG_BACKWARD, answer_extra="\n" + forge)):
        result = execute(cells, str(tmp_path), Limits(cell_timeout=30), {}, trusted)
        errors = _errors(result, cells, "test_cube_backward")
        assert errors and not result.verdicts[cells.index(next(c for c in cells if c.get("grade_id") ==
                                                                 "test_cube_backward"))].passed, errors
    # In the answer cell it is refused, and said even though the cell's visible part already failed: fixing the
    # gradient alone would not be enough.
    assert any("the grader did not run your answer cell 'cube': it uses line" in e and "importing `autograder" in e
               for e in errors), errors


ASSIGNMENTS = sorted(path.name for path in (ROOT / "solutions").iterdir() if path.is_dir())


# Here, for the first assignment, the executor run directly; every assignment's solution gets full marks with every
# test cell decided by the referee under `grade` (test_check_agrees.py), each test cell's plan decidable (below).
@pytest.mark.slow
@pytest.mark.parametrize("assignment", ["01_first_function"])
def test_the_referee_decides_every_test_cell_and_never_fails_a_right_answer(assignment, tmp_path):
    # Every test cell's hidden tests run in the referee alone (the student's process never sees them),
    # with at least one check the referee decides, and the solutions pass every one.
    folder = ROOT / "solutions" / assignment
    notebook = json.loads((folder / f"{assignment}.ipynb").read_text())
    for path in folder.iterdir():  # data files beside the notebook, as grading copies them
        if path.suffix != ".ipynb" and path.is_file():
            (tmp_path / path.name).write_bytes(path.read_bytes())
    cells = cells_to_run(notebook)
    result = execute(cells, str(tmp_path), Limits(cell_timeout=60), {}, referee.trusted_cells(notebook))
    assert result.status == "graded", result.detail
    tests = {i: c["grade_id"] for i, c in enumerate(cells) if c.get("grade_id")}
    assert {tests[i]: _errors(result, cells, tests[i]) for i in tests} == {t: [] for t in tests.values()}
    assert {tests[i] for i in tests if i not in result.decided} == set()
    assert all(result.judged[i] > 0 for i in tests)


def test_every_test_cell_of_the_course_is_decided_by_the_referee():
    # The count the issue asks for, read from the notebooks (test_check_agrees.py grades them all).
    counted = 0
    for assignment in ASSIGNMENTS:
        notebook = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
        trusted = referee.trusted_cells(notebook)
        judge = referee.Referee(trusted["cells"], trusted["student_names"], None)
        tests = [c["grade_id"] for c in trusted["cells"] if c["kind"] == "test"]
        assert sorted(judge.plan()) == sorted(tests), {g: p.undecidable for g, p in judge.plans.items() if not p.decided}
        counted += len(tests)
    points = sum(referee_points(assignment) for assignment in ASSIGNMENTS)
    guarantees = (ROOT / "autograder" / "authoring" / "book" / "instructors" / "guarantees.md").read_text()
    stated = " ".join(guarantees.split())
    assert f"the referee decides all {counted} test cells ({points:g} points)" in stated  # what the book says holds


def referee_points(assignment: str) -> float:
    notebook = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    return sum(c["metadata"]["nbgrader"].get("points", 0) for c in notebook["cells"] if referee.test_cell_id(c))


def test_the_student_process_gets_a_decided_cell_without_its_hidden_tests():
    cells = [{"cell_type": "code", "source": "x = 1"},
             {"cell_type": "code", "grade_id": "t", "source": "visible = 1\n### BEGIN " "HIDDEN TESTS\nsecret = 2\n"
                                                              "### END HIDDEN TESTS\nprint('done')\n"},
             {"cell_type": "code", "grade_id": "u", "source": "### BEGIN " "HIDDEN TESTS\nkept = 3\n### END HIDDEN TESTS"}]
    sent = executor._for_the_student(cells, {"t"})
    assert sent[1]["source"] == "visible = 1\nprint('done')\n" and sent[1]["hidden"] is True
    assert sent[0] is cells[0] and sent[2] is cells[2]  # not decided by the referee: run whole, as before
    assert referee.hidden_chunks(cells[1]["source"]) == [(False, "visible = 1\n"), (True, "secret = 2\n"),
                                                         (False, "print('done')\n")]


def test_a_hidden_statement_that_needs_the_students_objects_leaves_the_cell_to_the_students_process():
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": (
        "### BEGIN " "HIDDEN TESTS\ncheck_function(Cube, lambda x: x ** 3, torch.randn(3))\n"
        "assert Cube.apply(torch.ones(1)) == 1\n### END HIDDEN TESTS")}]
    judge = referee.Referee(cells, ["Cube"], _asker(_student()))
    assert judge.plan() == []
    assert "Cube.apply lives in the student's process" in judge.plans["t"].undecidable[0]
    assert judge.judge_cell("t") == (1, None)  # its judge calls are still decided by the referee


def test_a_failing_hidden_assert_on_the_referees_own_values_fails_the_cell():
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": (
        "### BEGIN " "HIDDEN TESTS\ncheck_function(Cube, lambda x: x ** 3, torch.randn(3))\n"
        "assert torch.ones(1).sum() == 2, 'the instructor made a mistake'\n### END HIDDEN TESTS")}]
    judge = referee.Referee(cells, ["Cube"], _asker(_student()))
    judged, failure = judge.judge_cell("t")
    assert judge.plan() == ["t"] and judged == 1 and failure.startswith("the instructor made a mistake [the test's inputs")


@pytest.mark.parametrize("replies", [[], "no", None, [{"error": None}] * 5])
def test_a_batch_of_answers_of_the_wrong_length_or_kind_fails_every_check(replies):
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": (
        "check_function(Cube, lambda x: x ** 3, torch.randn(3))\ncheck_forward(Cube, lambda x: x ** 3, torch.randn(2))")}]
    judged, failure = referee.Referee(cells, ["Cube"], lambda requests: replies).judge_cell("t")
    assert judged == 2 and "sent no answer" in failure


SOFTPLUS = '''
class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.nn.functional.softplus(x)
        ctx.save_for_backward(KEPT)
        return y

    @staticmethod
    def backward(ctx, g):
        (kept,) = ctx.saved_tensors
        return g * torch.sigmoid(x_of(kept))
'''


@pytest.mark.parametrize("kept, x_of, failure", [
    ("y", "lambda y: torch.log(torch.expm1(y))", None),
    ("x", "lambda x: x", "Softplus's saved tensor 1 should be the output (a float64 tensor of shape [5, 3]); "
                        "it is a float64 tensor of shape [5, 3] with other values"),
    ("x * 1", "lambda x: x", "Softplus's saved tensor 1 should be the output"),
])
def test_the_referee_judges_what_a_function_saves_from_its_record(kept, x_of, failure):
    namespace = {"torch": torch}
    exec(SOFTPLUS.replace("KEPT", kept if kept != "y" else "y").replace("x_of(kept)", f"({x_of})(kept)"), namespace)
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": (
        "### BEGIN " "HIDDEN TESTS\ncheck_saved(Softplus, torch.nn.functional.softplus, torch.randn(5, 3), "
        "saves=['output'])\n### END HIDDEN TESTS")}]
    judge = referee.Referee(cells, ["Softplus"], _asker(namespace))
    assert judge.plan() == ["t"]
    judged, found = judge.judge_cell("t")
    assert judged == 1 and (found is None if failure is None else failure in found), found


TOPK = '''
class TopK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        values, indices = torch.topk(x, k)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.x_shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        return torch.zeros(ctx.x_shape, dtype=grad_values.dtype DEVICE).scatter(-1, indices, grad_values), None
'''


@pytest.mark.parametrize("device, failure", [
    (", device=grad_values.device", None),
    ("", "TopK: your backward returned a CPU tensor; the input is on meta"),
])
def test_the_referee_judges_where_a_function_makes_its_tensors_from_its_record_on_meta_tensors(device, failure):
    namespace = {"torch": torch}
    exec(TOPK.replace(" DEVICE", device), namespace)
    cells = [{**IMPORTS, "source": IMPORTS["source"] + ", check_device"}, {"kind": "test", "grade_id": "t", "source": (
        "### BEGIN " "HIDDEN TESTS\ncheck_device(TopK, torch.randn(3, 4, 6), 3)\n### END HIDDEN TESTS")}]
    judge = referee.Referee(cells, ["TopK"], _asker(namespace))
    assert judge.plan() == ["t"]
    judged, found = judge.judge_cell("t")
    assert judged == 1 and (found is None if failure is None else failure in found), found


def test_the_referee_fails_a_module_that_does_not_use_the_students_function():
    namespace = _student()
    exec("class Net(nn.Module):\n    def forward(self, a, b):\n        return (a ** 3 + b ** 2).sum()\n", namespace)
    cells = [IMPORTS, {"kind": "test", "grade_id": "t", "source": (
        "check_callable(Net, lambda a, b: (a ** 3 + b ** 2).sum(), torch.randn(4), torch.randn(4), "
        "uses=('PolyFunction',))")}]
    judged, failure = referee.Referee(cells, ["Net", "PolyFunction"], _asker(namespace)).judge_cell("t")
    assert judged == 1 and "Net's output should come from PolyFunction.apply" in failure


FORGE_EVERY_VERDICT = ("get_ipython().run_cell = lambda *args, **kwargs: None  "
                       "# every later cell 'passes' in this process, running nothing")


@pytest.mark.slow
@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_a_notebook_that_forges_every_verdict_in_its_own_process_passes_no_test_cell(assignment, tmp_path):
    # The blank release, with a first cell that makes every later cell pass in the student's process (no
    # error, no output): the referee decides each test cell itself, so each fails, as the blank one does.
    folder = ROOT / "course" / assignment
    notebook = json.loads((folder / f"{assignment}.ipynb").read_text())
    trusted = referee.trusted_cells(json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text()))
    cells = [{"cell_type": "code", "source": FORGE_EVERY_VERDICT}] + cells_to_run(notebook)
    result = execute(cells, str(tmp_path), Limits(cell_timeout=60), {}, trusted)
    tests = {i: c["grade_id"] for i, c in enumerate(cells) if c.get("grade_id")}
    passed = [tests[i] for i in tests if not _errors(result, cells, tests[i])]
    assert passed == [] and len(tests) == len([c for c in trusted["cells"] if c["kind"] == "test"])
    assert all(any("grader's own check" in e for e in _errors(result, cells, tests[i])) for i in tests)


def test_grade_counts_the_points_decided_in_the_students_process():
    import nbformat

    from autograder.commands.grade import decided_by_whom
    from autograder.grading.grader.scoring import points_in_process
    from autograder.grading.records.grades import Row

    nb = nbformat.read(NOTEBOOK, as_version=4)
    tests = [i for i, c in enumerate(nb.cells) if referee.test_cell_id(c)]
    total = sum(nb.cells[i].metadata["nbgrader"]["points"] for i in tests)
    assert points_in_process(nb, set(tests)) == 0 and points_in_process(nb, set()) == total
    left = nb.cells[tests[0]].metadata["nbgrader"]["points"]
    assert points_in_process(nb, set(tests[1:])) == left
    rows = [Row("a", "01", 5, total, points_in_process=left), Row("b", "01", 0, total, "missing")]
    assert decided_by_whom(rows).startswith(f"{left:g} of {total:g} points decided in the student's process")
    assert decided_by_whom([Row("a", "01", 5, total)]).startswith("every test cell's points")


KERNELS = NOTEBOOK.parents[2] / "solutions" / "10_triton_kernels" / "10_triton_kernels.ipynb"


GRID_ROUNDED_DOWN = ("bias_gelu_forward", "test_bias_gelu_forward", 'triton.cdiv(n_columns, meta["BLOCK_COLUMNS"])',
                     'n_columns // meta["BLOCK_COLUMNS"]', "never written in the last 76 columns (of 1,100), and right "
                                                           "everywhere else: the grid stops short of the end")
NOT_CONTIGUOUS = ("bias_gelu_backward", "test_bias_gelu_backward", "x, grad_output = x.contiguous(), grad_output.contiguous()",
                  "x = x.contiguous()", "when `grad_output` is not contiguous")
OFF_BY_ONE = ("bias_gelu_forward", "test_bias_gelu_forward", "inside = (rows[:, None] < n_rows)",
              "inside = (rows[:, None] <= n_rows)", "out of bounds")


@pytest.mark.slow
@pytest.mark.parametrize("mistakes", [(GRID_ROUNDED_DOWN, NOT_CONTIGUOUS), (OFF_BY_ONE,)], ids=["grid+layout", "mask"])
def test_a_wrong_kernel_is_named_by_the_examinee_which_runs_10s_setup_cells(mistakes, tmp_path):
    """10's answers need its given cells tagged `setup` run whole (triton imported inside `try`, the memory guard,
    deterministic mode): the examinee does, so a wrong kernel that only the hidden tests meet (the notebook's own
    process runs no visible check here) is named by the checks the examinee answers: check_kernel's runs on the
    arguments, on non-contiguous copies and on one row (``checker.kernels.kernel_runs``) travel as data."""
    notebook = json.loads(KERNELS.read_text())
    for answer_id, test_id, right, wrong, _ in mistakes:
        for cell in notebook["cells"]:
            meta = cell["metadata"].get("nbgrader", {})
            if meta.get("grade_id") == answer_id:
                assert right in "".join(cell["source"])
                cell["source"] = "".join(cell["source"]).replace(right, wrong)
            elif meta.get("grade_id") == test_id:  # its visible part left out of the student's run
                cell["source"] = "".join("".join(cell["source"]).partition(referee.HIDDEN_BEGIN)[1:])
    cells = cells_to_run(notebook)
    result = execute(cells, str(tmp_path), Limits(cell_timeout=60), {}, referee.trusted_cells(json.loads(KERNELS.read_text())))
    for _, test_id, _, _, says in mistakes:
        errors = _errors(result, cells, test_id)
        assert len(errors) == 1 and says in errors[0] and "found by the grader's own check" in errors[0], errors
    assert _errors(result, cells, "test_triton_softmax") == []  # the kernels that are right still pass


READS_AS_IF_CONTIGUOUS = """
import torch

def doubled(x):  # reads memory as if x were contiguous, as a kernel without x.contiguous() does
    return 2 * torch.as_strided(x, x.shape, (x.shape[-1], 1))
"""


@pytest.mark.parametrize("strided, says", [
    (True, "doubled is right on contiguous tensors, but gives wrong values when `x` is not contiguous"),
    (False, None),
])
def test_check_kernel_in_grading_asks_the_students_process_for_its_runs_and_names_a_layout_mistake(strided, says):
    cells = [{"kind": "given", "grade_id": None, "source": "import torch\nfrom autograder import check_kernel"},
             {"kind": "test", "grade_id": "t", "source": "check_kernel(doubled, lambda x: 2 * x, torch.randn(4, 5), "
                                                          f"strided={strided})"}]
    namespace, log = {}, []
    exec(READS_AS_IF_CONTIGUOUS, namespace)
    judged, failure = referee.Referee(cells, ["doubled"], _asker(namespace, log)).judge_cell("t")
    assert judged == 1 and (failure is None if says is None else failure.startswith(says)), failure
    assert sorted(log[0]["runs"]) == (["given", "one row", "strided"] if strided else ["given", "one row"])


HARNESS = """
import torch
from autograder import check_with

def gradients_report(F, needs):  # as 03's backward_report: a dict of what F's backward returns
    output = F.apply(torch.ones(2, 3, requires_grad=needs))
    return {"gradients": [output.grad_fn.apply(torch.ones(2, 3))]}

class Right(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g
"""
ALWAYS_THREE = """
import torch

class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 3 * g
"""


def test_the_referee_names_the_entry_of_a_harness_report_that_differs():
    cells = [{"kind": "given", "grade_id": None, "source": HARNESS},
             {"kind": "test", "grade_id": "t", "source": "check_with(gradients_report, Twice, Right, True)"}]
    namespace = {}
    exec(HARNESS + ALWAYS_THREE, namespace)
    judged, failure = referee.Referee(cells, ["Twice"], _each(lambda r: answer.answer(r, namespace))).judge_cell("t")
    assert judged == 1
    assert failure.startswith("gradients_report(...)['gradients'][0] with your Twice is tensor([[3., 3., 3.], "
                              "[3., 3., 3.]]); with a right Twice it is tensor([[2., 2., 2.], [2., 2., 2.]]) "
                              "(found by the grader's own check"), failure



TOP_K = NOTEBOOK.parents[2] / "solutions" / "04_multiple_inputs_and_outputs" / "04_multiple_inputs_and_outputs.ipynb"


def test_an_error_only_a_hidden_test_meets_says_which_method_raised_and_on_which_line(tmp_path):
    """04's TopK scattering into dim 0 passes the visible test (one row) and raises in the hidden ones (3-D
    inputs), which the referee runs with the examinee: its message says `backward raised` and the student's
    line, as the notebook's own check_function does for the same mistake."""
    notebook = json.loads(TOP_K.read_text())
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "top_k":
            source = "".join(cell["source"])
            assert "grad_x.scatter(-1, indices, grad_values)" in source
            cell["source"] = source.replace("grad_x.scatter(-1, indices, grad_values)", "grad_x.scatter(0, indices, grad_values)")
    cells = cells_to_run(notebook)
    result = execute(cells, str(tmp_path), Limits(cell_timeout=60), {}, referee.trusted_cells(json.loads(TOP_K.read_text())))
    [error] = _errors(result, cells, "test_top_k_backward")
    assert "TopK: backward raised RuntimeError: index" in error, error
    assert "(in backward, line 17: return grad_x.scatter(0, indices, grad_values), None)" in error, error
    assert "found by the grader's own check" in error, error


# Issue 39: what is saved, and what a Module is built on, judged by behaviour. The examinee's side is the real
# ``answer`` on a module's namespace, as the examinee's answers are.
def _module(name: str, source: str) -> dict:
    import sys
    import types

    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(source, module.__dict__)
    return module.__dict__


@pytest.mark.parametrize("keep, get, says", [
    ("_cache[id(ctx)] = x", "_cache.pop(id(ctx))", "Sqrt keeps a tensor (the input `x`) in the module-level dict `_cache`"),
    ("ctx.inputs = (x,)", "ctx.inputs[0]", "Sqrt keeps a tensor (the input `x`) in `ctx.inputs[0]`"),
    ("_cache[0] = x.clone()", "_cache[0]", "Sqrt keeps a tensor (a copy of the input `x`) in the module-level dict `_cache`"),
    ("_cache[0] = x.tolist()", "torch.tensor(_cache[0], dtype=result.dtype)",
     "Sqrt keeps the values of the input `x` (as Python floats) in the module-level dict `_cache`"),
    ("_cache[0] = [3 * v for v in x.reshape(-1).tolist()]", "torch.tensor(_cache[0], dtype=result.dtype).reshape(result.shape) / 3",
     "Sqrt's backward does not compute from what forward saved"),  # an encoding of its own: what backward computes shows it
    ("pass", "result ** 2", None),
])
def test_the_referee_fails_a_function_that_keeps_a_tensor_outside_save_for_backward_saying_where(keep, get, says):
    namespace = _module(f"keeps_{abs(hash(keep))}", sqrt_keeping(keep, get, before="_cache = {}"))
    judged, failure = _judge(_asker(namespace), "test_sqrt")
    assert judged == 4, judged
    if says is None:
        assert failure is None, failure
    else:
        # (in the words of 01's requirement for Sqrt, which its first test cell states)
        assert failure.startswith("This exercise requires a backward you derive from the output alone") \
            and f", but {says}" in failure and "found by the grader's own check" in failure, failure


NETS = {
    "honest": "return self.poly(x1, x2).sum()",
    "adds 0 * PolyFunction": "return (x1 ** 3 + x2 ** 2).sum() + 0 * PolyFunction.apply(x1, x2).sum()",
    "its value from a detached copy": ("p = PolyFunction.apply(x1.detach(), x2.detach())\n"
                                       "        r = x1 ** 3 + x2 ** 2\n"
                                       "        return (r + (p - r).detach()).sum() + 0 * PolyFunction.apply(x1, x2).sum()"),
}


@pytest.mark.parametrize("net", sorted(NETS))
def test_the_referee_fails_a_net_that_does_not_follow_poly_function(net):
    """01's test_net as the notebook has it: Net is run again in the examinee with the student's PolyFunction replaced
    by another function (values and gradients, then gradients alone), and its output and gradients must be that
    function's, as the referee's stand-in says."""
    namespace = _student(("return self.poly(x1, x2).sum()", NETS[net]))
    poly = namespace["PolyFunction"]
    methods = dict(vars(poly))
    judged, failure = _judge(_asker(namespace), "test_net")
    assert judged == 9 and dict(vars(poly)) == methods  # three shapes, each as it is and replaced twice; put back after
    if net == "honest":
        assert failure is None, failure
    else:
        assert failure.startswith("This exercise requires Net's value and gradients to come from PolyFunction, through "
                                  "Poly: with PolyFunction replaced by another function of the same inputs, Net follows it, "
                                  "but Net does not follow PolyFunction: with PolyFunction replaced by another function"), failure
        assert "found by the grader's own check" in failure


def test_a_built_on_request_for_a_function_the_answers_do_not_have_is_an_error():
    namespace = _student()
    request = {"target": "Net", "kind": "call", "args": [answer.encode(torch.randn(3, dtype=torch.float64))] * 2,
               "grad": [True, True], "inplace": False, "upstream": None,
               "built_on": {"pieces": ["Missing"], "seed": 3}}
    assert answer.answer(request, namespace) == {
        "error": "NameError: no torch.autograd.Function named Missing in your notebook"}
    request["built_on"] = {"pieces": ["PolyFunction"], "seed": "x"}
    assert "malformed request" in answer.answer(request, namespace)["error"]
