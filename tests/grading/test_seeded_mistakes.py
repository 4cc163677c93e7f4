"""Seeded mistakes in 10 and 11, graded by the real grader: each is named in the test of the exercise where it is made,
and costs that exercise only; and the honest corpus's answers to 10 and 11 keep every point.

``MISTAKES`` is the table: a mistake is a small edit of the solution's answer cells (what a student would type), the
test cell that must fail, and what its message must say. A notebook holds several mistakes, each in another exercise
(``NOTEBOOKS``): since each test judges its own exercise (later ones run on the course's own pieces, ``on_pieces``;
the causal checks judge the mask against the kernel's own unmasked run), the cells the mistakes are in fail, each
with its own message, and every other cell passes. Graded as ``grade`` grades (``executor.execute`` with the referee:
the notebook's process, the examinee, the hidden tests), so the scores are the grader's. The kernels run in Triton's
interpreter; each notebook takes half a minute or so.
"""

from __future__ import annotations

import json
import re

import pytest

from autograder.grading.running.confinement.limits import Limits
from autograder.grading.running.executor import execute
from autograder.grading.running.judging import referee
from autograder.grading.running.judging.referee_process import stop_referee
from autograder.grading.running.preparation import cells_to_run
from conftest import DQ_RACE, REPO

pytest.importorskip("triton")
pytestmark = pytest.mark.slow

TEN = REPO / "solutions" / "10_triton_kernels" / "10_triton_kernels.ipynb"
ELEVEN = REPO / "solutions" / "11_flash_attention" / "11_flash_attention.ipynb"
REQUIRES = "This exercise requires that a Triton kernel of your answer compute "
Q_LOOP = ("    end = tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else seq_len\n    for start_n in range(0, end, BLOCK_N):\n"
          "        keys = start_n + tl.arange(0, BLOCK_N)\n        key_offsets")

MISTAKES = {  # name: (edits of the solution's answer cells, the test cell that must fail, what its message must say)
    # 11
    "variance over the masked lanes": ([("centred = tl.where(inside, x - mean, 0.0)", "centred = x - mean")],
                                       "test_layer_norm_forward", "layer_norm_forward's y and rstd are wrong: the "
                                                                  "variance counts the masked lanes"),
    "layer_norm_forward returns the reference": (
        [("    x = x.contiguous()\n    n_columns = x.shape[-1]\n    n_rows = x.numel() // n_columns\n",
          "    return layer_norm_forward_reference(x, weight, bias)\n")],
        "test_layer_norm_forward", REQUIRES + "y, mean and rstd"),
    "weight gradient not summed across rows": ([("grad_weight += grad_output * xhat", "grad_weight = grad_output * xhat")],
                                               "test_layer_norm_backward", "layer_norm_backward's grad_weight holds one "
                                                                           "row's term per program"),
    "grad_x without the mean's term": (
        [("grad_x = rstd * (grad_xhat - tl.sum(grad_xhat, axis=0) / n_columns\n", "grad_x = rstd * (grad_xhat\n")],
        "test_layer_norm_backward", "layer_norm_backward's grad_x is wrong: it drops the mean's term"),
    "no 1/sqrt(d) scale": ([("s = tl.dot(q, tl.trans(k)) * scale_log2", "s = tl.dot(q, tl.trans(k)) * log2e")],
                           "test_attention_forward", "attention_forward's o is wrong: the scores are not scaled"),
    "accumulator not rescaled": ([("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot(")],
                                 "test_attention_forward", "attention_forward's o is wrong: the online softmax's "
                                                           "accumulator is not rescaled"),
    "log-sum-exp saved without log l": ([("(m + tl.math.log2(l)) * ln2", "m * ln2")], "test_attention_forward",
                                        "attention_forward's lse is wrong (o is right): the log-sum-exp is saved "
                                        "without log(l)"),
    "attention_forward in torch": ([("    o = torch.empty_like(q)\n", "    return attention_reference(q, k, v, causal)\n")],
                                   "test_attention_forward", REQUIRES + "o and lse"),
    "backward without D": ([("dst = pt * (tl.dot(v, tl.trans(do)) - delta[None, :])", "dst = pt * tl.dot(v, tl.trans(do))"),
                            ("ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])", "ds = p * tl.dot(do, tl.trans(v))")],
                           "test_attention_backward", "attention_backward's dq and dk are wrong: dS is computed without "
                                                      "subtracting D"),
    "a wrong D": ([("tl.sum(o * do, 1)", "tl.sum(do, 1)")], "test_attention_backward",
                  "attention_backward's dq and dk are wrong: D is wrong."),
    "dV assigned, not accumulated": ([("dv += tl.dot(pt.to(do.dtype), do)", "dv = tl.dot(pt.to(do.dtype), do)")],
                                     "test_attention_backward", "attention_backward's dv is wrong: dv holds the last "
                                                                "query tile's term only"),
    "a query-gradient race": (DQ_RACE, "test_attention_backward", "two programs of attention_backward_kv_kernel write"),
    "FlashAttention computes with torch": ([("        o, lse = attention_forward(q, k, v, causal)\n",
                                             "        o, lse = attention_reference(q, k, v, causal)\n")],
                                           "test_flash_attention", "but FlashAttention never calls attention_forward"),
    "key/value loop one tile late": ([("(start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0",
                                       "(start_n // BLOCK_M + 1) * BLOCK_M if CAUSAL else 0")],
                                     "test_causal", "attention_backward's dk and dv are wrong with causal=True: the "
                                                    "key/value kernel's causal loop starts one query tile late"),
    "query kernel skips no causal tile": ([(Q_LOOP, Q_LOOP.replace("tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else "
                                                                   "seq_len", "seq_len"))],
                                          "test_causal", "but attention_backward_q_kernel runs 27 tl.dot with causal=True "
                                                         "against 27 without the mask"),
    # 10
    "bias_gelu_forward in torch": ([("    x = x.contiguous()\n    y = torch.empty_like(x)\n    n_columns = bias.numel()\n",
                                     "    return F.gelu(x + bias)\n")],
                                   "test_bias_gelu_forward", REQUIRES + "y"),
    "bias_gelu_backward returns the given reference": (
        [("    return _bias_gelu_backward(x, bias, grad_output, atomic=False)\n",
          "    return bias_gelu_backward_reference(x, bias, grad_output)\n")],
        "test_bias_gelu_backward", REQUIRES + "grad_x and the bias gradient's sums, the launchers themselves only "
                                              "allocating, making x and grad_output contiguous, launching the kernel and "
                                              "adding up the partial sums (.sum(0)) in the bias's dtype, but "
                                              "bias_gelu_backward computes grad_x, or what its kernels read, with torch"),
    "bias_gelu_backward_atomic returns the given reference": (
        [("    return _bias_gelu_backward(x, bias, grad_output, atomic=True)\n",
          "    return bias_gelu_backward_reference(x, bias, grad_output)\n")],
        "test_bias_gelu_backward_atomic", REQUIRES + "grad_x and the bias gradient's sums"),
    "TritonSoftmax's backward in torch": ([("        grad_output = grad_output.contiguous()\n        grad_x = torch.empty_like(y)\n",
                                            "        return y * (grad_output - (grad_output * y).sum(-1, keepdim=True))\n")],
                                          "test_triton_softmax", "This exercise requires that a Triton kernel of your "
                                                                 "answer, launched by TritonSoftmax's backward, compute "
                                                                 "grad_x"),
    "grid rounded down": ([('triton.cdiv(n_columns, meta["BLOCK_COLUMNS"])', 'n_columns // meta["BLOCK_COLUMNS"]')],
                          "test_bias_gelu_forward", "the grid stops short of the end"),
    "atomics stored": ([("tl.atomic_add(grad_bias_ptr + columns, column_sums, mask=in_columns)",
                         "tl.store(grad_bias_ptr + columns, column_sums, mask=in_columns)")],
                       "test_bias_gelu_backward_atomic", "bias_gelu_backward_atomic's grad_bias holds only the last"),
    "BiasGELU computes with torch": ([("        return bias_gelu_forward(x, bias)\n", "        return F.gelu(x + bias)\n")],
                                     "test_bias_gelu_function", "but BiasGELU never calls bias_gelu_forward"),
}
# Each notebook: its mistakes (each in another exercise, and in another kernel: two mistakes in one kernel can make a
# third) and the score it must get (of 27 for 11, of 18 for 10).
NOTEBOOKS = [
    (ELEVEN, ("no 1/sqrt(d) scale",), 22),  # a forward mistake costs the forward's 5 points, nothing else
    (ELEVEN, ("variance over the masked lanes", "weight gradient not summed across rows", "accumulator not rescaled",
              "backward without D", "FlashAttention computes with torch"), 27 - 3 - 3 - 5 - 4 - 3),
    (ELEVEN, ("layer_norm_forward returns the reference", "grad_x without the mean's term", "log-sum-exp saved without log l",
              "a wrong D", "query kernel skips no causal tile"), 27 - 3 - 3 - 5 - 4 - 4),
    (ELEVEN, ("a query-gradient race", "grad_x without the mean's term"), 27 - 4 - 3),
    (ELEVEN, ("variance over the masked lanes", "key/value loop one tile late"), 27 - 3 - 4),
    (ELEVEN, ("dV assigned, not accumulated", "weight gradient not summed across rows"), 27 - 4 - 3),
    (TEN, ("bias_gelu_forward in torch", "bias_gelu_backward returns the given reference",
           "bias_gelu_backward_atomic returns the given reference", "TritonSoftmax's backward in torch"), 18 - 3 - 3 - 2 - 3),
    (TEN, ("grid rounded down", "atomics stored", "BiasGELU computes with torch"), 18 - 3 - 2 - 3),
]
ALONE = {"attention_forward in torch": (ELEVEN, ("test_attention_forward", "test_causal"))}  # no kernel, no causal one


@pytest.fixture(autouse=True, scope="module")
def _no_referee_left():
    yield
    stop_referee()


def graded(path, mistakes=(), answers=None) -> tuple[dict, dict]:
    """({test cell: its error or None}, {test cell: its points}) of the solution at ``path`` with ``mistakes`` typed in,
    or its answer cells replaced by ``answers`` (grade id -> source)."""
    source = json.loads(path.read_text())
    notebook = json.loads(path.read_text())
    for cell in notebook["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if answers and cell["metadata"].get("nbgrader", {}).get("solution") and grade_id in answers:
            cell["source"] = answers[grade_id]
    for name in mistakes:
        for old, new in MISTAKES[name][0]:
            cells = [c for c in notebook["cells"] if c["metadata"].get("nbgrader", {}).get("solution")
                     and old in "".join(c["source"])]
            assert cells, f"{name}: {old!r} is not in the solution"
            for cell in cells:
                cell["source"] = "".join(cell["source"]).replace(old, new)
    cells = cells_to_run(notebook)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        result = execute(cells, folder, Limits(cell_timeout=120), {}, referee.trusted_cells(source))
    assert result.status == "graded"
    errors = {c["grade_id"]: next((o["evalue"] for o in result.outputs[i] if o["output_type"] == "error"), None)
              for i, c in enumerate(cells) if c.get("grade_id", "").startswith("test")}
    points = {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"] for c in source["cells"]
              if c["metadata"].get("nbgrader", {}).get("grade")}
    return errors, points


@pytest.mark.parametrize("path, mistakes, score", NOTEBOOKS, ids=[" + ".join(m) for _, m, _ in NOTEBOOKS])
def test_each_mistake_is_named_where_it_is_made_and_costs_that_exercise_only(path, mistakes, score):
    errors, points = graded(path, mistakes)
    expected = {MISTAKES[name][1]: MISTAKES[name][2] for name in mistakes}
    for cell, says in expected.items():
        assert errors[cell] and says in errors[cell], (cell, errors[cell])
        assert not re.search(r"result \d|rtol= and atol=", errors[cell]), errors[cell]  # outputs named, no advice
        assert path == TEN or not re.search(r"BLOCK_ROWS|BLOCK_COLUMNS", errors[cell]), errors[cell]  # 10's blocks
    assert {cell for cell, error in errors.items() if error} == set(expected), errors
    assert sum(points[cell] for cell, error in errors.items() if error is None) == score


def test_a_forward_in_torch_does_neither_exercise_that_asks_for_its_kernel():
    path, cells = ALONE["attention_forward in torch"]
    errors, _ = graded(path, ["attention_forward in torch"])
    assert {cell for cell, error in errors.items() if error} == set(cells), errors
    assert all(errors[cell].startswith("This exercise requires ") for cell in cells), errors


def _honest(assignment: str) -> list[dict]:
    """The honest corpus's answers to ``assignment`` as notebooks' answer cells: the k-th answer to each exercise in the
    k-th (the last where an exercise has fewer)."""
    text = (REPO / "tests" / "grading" / "honest_answers" / f"{assignment}.py").read_text()
    chunks = re.split(r"^# %% (\S+)\n", text, flags=re.M)
    found: dict[str, list[str]] = {}
    for grade_id, answer in zip(chunks[1::2], chunks[2::2]):
        found.setdefault(grade_id, []).append(answer)
    return [{g: a[min(k, len(a) - 1)] for g, a in found.items()} for k in range(max(map(len, found.values())))]


@pytest.mark.parametrize("path, k", [(p, k) for p in (TEN, ELEVEN) for k in range(2)], ids=lambda v: str(getattr(v, "stem", v)))
def test_the_honest_corpus_keeps_every_point(path, k):
    errors, _ = graded(path, answers=_honest(path.stem)[k])
    assert {cell: error for cell, error in errors.items() if error} == {}
