"""Assignment 11's diagnoses, on the solution notebook's own kernels with one mistake typed into them each.

Each mistake is judged as grading judges it: the grader's referee runs the check on its own random inputs and asks
the student's side (the real ``answer`` function, on the mistaken solution, through a JSON round trip as the pipe
carries it) for the results or the record; its failure message is what ``check`` prints and the feedback page shows.
The kernels run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET), small: one head of 37 tokens (a
full key tile of 32 and a ragged one), 64 tokens where the causal mask must skip a tile.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("triton")

from autograder.authoring.attention_timings import CELLS, NOTEBOOK  # noqa: E402
from autograder.authoring.kernel_timings import solution_namespace  # noqa: E402
from autograder.grading.running.judging import answer, referee  # noqa: E402
from autograder.student.checker import attention  # noqa: E402
from autograder.student.kernels import interpreted  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreted(), reason="these tests run Triton's interpreter")

FORWARD = "check_attention_forward(attention_forward, randn(1, 1, 37, 16), randn(1, 1, 37, 16), randn(1, 1, 37, 16), {})"
FUNCTION = "check_attention(FlashAttention, randn(1, 1, 37, 16), randn(1, 1, 37, 16), randn(1, 1, 37, 16), {})"
SKIPS = "check_attention(FlashAttention, randn(1, 1, 64, 16), randn(1, 1, 64, 16), randn(1, 1, 64, 16), True)"
Q_KERNEL_MASK = "keep = keep & (keys[None, :] <= rows[:, None])\n            p = tl.where(keep, p, 0.0)"
KV_KERNEL_MASK = "keep = keep & (rows[None, :] >= keys[:, None])"
FORWARD_RAGGED = "            keep = keys[None, :] < seq_len\n            if CAUSAL:\n                keep = keep & (keys[None, :] <= rows[:, None])\n            s = tl.where"
# dq added into by every key/value program, a load and a store: right in the interpreter, a race on a GPU
DQ_IN_KV_KERNEL = [
    ("delta_ptr, dk_ptr, dv_ptr, seq_len,", "delta_ptr, dk_ptr, dv_ptr, dq_ptr, seq_len,"),
    ("        dk += tl.dot(dst.to(q.dtype), q)\n",
     "        dk += tl.dot(dst.to(q.dtype), q)\n"
     "        dq_rows = tl.load(dq_ptr + offsets, mask=rows[:, None] < seq_len, other=0.0)\n"
     "        tl.store(dq_ptr + offsets, dq_rows + tl.dot(tl.trans(dst).to(k.dtype), k) * scale, mask=rows[:, None] < seq_len)\n"),
    ("dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
     "dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)"),
    ("lse, delta, dk, dv, seq_len,", "lse, delta, dk, dv, dq, seq_len,"),
    ("lse, delta, dq, seq_len,", "lse, delta, torch.empty_like(dq), seq_len,"),
]

MISTAKES = [  # (what, the changes typed into the solution, the check, what its message must say)
    ("accumulator not rescaled", [("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot(")],
     FORWARD.format(False), attention.ACCUMULATOR),
    ("scale forgotten", [("s = tl.dot(q, tl.trans(k)) * scale_log2", "s = tl.dot(q, tl.trans(k)) * 1.4426950408889634")],
     FORWARD.format(False), attention.NO_SCALE),
    ("scale applied twice", [("o, lse, seq_len, head_dim ** -0.5", "o, lse, seq_len, head_dim ** -1.0")],
     FORWARD.format(False), attention.SCALE_TWICE),
    ("causal mask off by one in forward", [("keep = keep & (keys[None, :] <= rows[:, None])",
                                            "keep = keep & (keys[None, :] < rows[:, None])")],
     FORWARD.format(True), attention.CAUSAL_DIAGONAL),
    ("causal mask off by one in backward", [(Q_KERNEL_MASK, Q_KERNEL_MASK.replace("<=", "<")),
                                            (KV_KERNEL_MASK, KV_KERNEL_MASK.replace(">=", ">"))],
     FUNCTION.format(True), attention.CAUSAL_DIAGONAL),
    ("log-sum-exp without the maximum, in forward", [("(m + tl.math.log2(l)) * ln2", "tl.math.log2(l) * ln2")],
     FORWARD.format(False), attention.LSE_WITHOUT_MAX),
    ("log-sum-exp without the maximum, in backward", [("(m + tl.math.log2(l)) * ln2", "tl.math.log2(l) * ln2")],
     FUNCTION.format(False), attention.GRADIENT_LSE),
    ("dS without D", [("dst = pt * (tl.dot(v, tl.trans(do)) - delta[None, :])", "dst = pt * tl.dot(v, tl.trans(do))"),
                      ("ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])", "ds = p * tl.dot(do, tl.trans(v))")],
     FUNCTION.format(False), attention.WITHOUT_D),
    ("the gradients' scale forgotten", [("(dq * scale).to(", "dq.to("), ("(dk * scale).to(", "dk.to(")],
     FUNCTION.format(False), attention.GRADIENT_NO_SCALE),
    ("a query-gradient race", DQ_IN_KV_KERNEL, FUNCTION.format(False), "two programs of attention_backward_kv_kernel write"),
    ("ragged key tail unmasked", [(FORWARD_RAGGED, FORWARD_RAGGED.replace("keys[None, :] < seq_len", "keys[None, :] >= 0", 1))],
     FORWARD.format(False), attention.RAGGED_KEYS),
    ("ragged tail loaded without other=", [("v = tl.load(v_ptr + key_offsets, mask=keys[:, None] < seq_len, other=0.0)\n        p =",
                                            "v = tl.load(v_ptr + key_offsets, mask=keys[:, None] < seq_len)\n        p =")],
     FUNCTION.format(False), attention.RAGGED_NAN),
    ("the whole probability matrix stored", [("    o = torch.empty_like(q)\n", "    o = torch.empty_like(q)\n"
                                              "    probabilities = q.new_empty(batch, heads, seq_len, seq_len)\n")],
     FUNCTION.format(False), "creates a tensor of 1,369 elements, as many as the 37 x 37 attention matrix"),
    ("causal tiles not skipped", [("tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else seq_len", "seq_len"),
                                  ("(start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0", "0")],
     SKIPS, "FlashAttention runs 36 tl.dot causal against 36 without the mask"),
]


def _judged(namespace: dict, source: str) -> tuple[int, str | None]:
    """The referee's verdict on a test cell of ``source`` after the notebook's given cells, the student's side being
    ``namespace``."""
    notebook = json.loads(NOTEBOOK.read_text())
    trusted = referee.trusted_cells(notebook)
    cells = [c for c in trusted["cells"] if c["kind"] == "given"] + [{"kind": "test", "grade_id": "t", "source": source}]

    def ask(requests):
        return [json.loads(json.dumps(answer.answer(json.loads(json.dumps(r)), namespace))) for r in requests]

    return referee.Referee(cells, trusted["student_names"], ask).judge_cell("t")


@pytest.fixture(scope="module")
def right():
    namespace = solution_namespace(NOTEBOOK, CELLS)
    yield namespace
    torch.use_deterministic_algorithms(False)  # the solution's setup cell turns it on


@pytest.mark.parametrize("source", [FORWARD.format(False), FORWARD.format(True), FUNCTION.format(False),
                                    FUNCTION.format(True), SKIPS])
def test_the_solution_passes_every_check(right, source):
    assert _judged(right, source) == (1, None)


@pytest.mark.parametrize("what, changes, source, says", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_named_by_the_grader(right, what, changes, source, says):
    judged, failure = _judged(solution_namespace(NOTEBOOK, CELLS, changes), source)
    assert judged == 1 and failure and says in failure and "found by the grader's own check" in failure, failure


def test_the_students_own_check_names_a_mistake_as_the_grader_does(right):
    namespace = solution_namespace(NOTEBOOK, CELLS, [("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot(")])
    q, k, v = (torch.randn(1, 1, 37, 16) for _ in range(3))
    with pytest.raises(AssertionError, match="attention_forward's o is wrong: the online softmax's accumulator"):
        attention.check_attention_forward(namespace["attention_forward"], q, k, v)
    with pytest.raises(AssertionError, match="FlashAttention's forward output is wrong: the online softmax's accumulator"):
        attention.check_attention(namespace["FlashAttention"], q, k, v)
    attention.check_attention(right["FlashAttention"], q, k, v)


def test_a_record_that_does_not_hold_together_fails_as_malformed(right):
    q, k, v = (torch.randn(1, 1, 8, 16) for _ in range(3))
    record = attention.attention_record(right["FlashAttention"], (q, k, v, False))
    assert attention.attention_problem("F", record, (q, k, v, False)) is None
    assert "differs from attention's" in attention.attention_problem("F", dict(record, output=record["output"] * 2),
                                                                     (q, k, v, False))
    with pytest.raises(KeyError):  # the referee turns this into "could not be checked: a malformed answer"
        attention.attention_problem("F", {k: v for k, v in record.items() if k != "largest"}, (q, k, v, False))
