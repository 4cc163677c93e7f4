"""Assignment 11's diagnoses, on the solution notebook's own kernels with one mistake typed into them each.

Each mistake is judged as grading judges it: the grader's referee runs the check on its own random inputs and asks
the student's side (the real ``answer`` function, on the mistaken solution, through a JSON round trip as the pipe
carries it) for the results or the record; its failure message is what ``check`` prints and the feedback page shows.
The kernels run in Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET), small: one head of 37 tokens (a
full key tile of 32 and a ragged one), 100 tokens (four tiles) where each causal kernel must skip the tiles above the
diagonal. Each mistake is named by the check of the exercise where it is made, whatever the others get wrong.
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
from conftest import DQ_RACE  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreted(), reason="these tests run Triton's interpreter")

FORWARD = ("check_attention_forward(attention_forward, randn(1, 1, {1}, 16), randn(1, 1, {1}, 16), randn(1, 1, {1}, 16), "
           "{0}, requires='that a Triton kernel of your answer compute o and lse')")
BACKWARD = ("q, k, v, g = randn(1, 1, {1}, 16), randn(1, 1, {1}, 16), randn(1, 1, {1}, 16), randn(1, 1, {1}, 16)\n"
            "o, lse = attention_reference(q, k, v, {0})\n"
            "check_attention_backward(attention_backward, q, k, v, o, lse, g, {0}, "
            "requires='that Triton kernels of your answer compute D, dq, dk and dv')")
Q_KERNEL_MASK = "keep = keep & (keys[None, :] <= rows[:, None])\n            p = tl.where(keep, p, 0.0)"
KV_KERNEL_MASK = "keep = keep & (rows[None, :] >= keys[:, None])"
FORWARD_RAGGED = "            keep = keys[None, :] < seq_len\n            if CAUSAL:\n                keep = keep & (keys[None, :] <= rows[:, None])\n            s = tl.where"
Q_LOOP = ("    end = tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else seq_len\n    for start_n in range(0, end, BLOCK_N):\n"
          "        keys = start_n + tl.arange(0, BLOCK_N)\n        key_offsets")
NO_SCALE = ("s = tl.dot(q, tl.trans(k)) * scale_log2", "s = tl.dot(q, tl.trans(k)) * log2e")

MISTAKES = [  # (what, the changes typed into the solution, the check, what its message must say)
    ("accumulator not rescaled", [("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot(")],
     FORWARD.format(False, 37), "attention_forward's o is wrong: " + attention.ACCUMULATOR),
    ("scale forgotten", [NO_SCALE], FORWARD.format(False, 37), "attention_forward's o is wrong: " + attention.NO_SCALE),
    ("scale applied twice", [("o, lse, seq_len, head_dim ** -0.5", "o, lse, seq_len, head_dim ** -1.0")],
     FORWARD.format(False, 37), attention.SCALE_TWICE),
    ("log-sum-exp without the maximum", [("(m + tl.math.log2(l)) * ln2", "tl.math.log2(l) * ln2")],
     FORWARD.format(False, 37), "attention_forward's lse is wrong (o is right): " + attention.LSE_WITHOUT_MAX),
    ("log-sum-exp without log l", [("(m + tl.math.log2(l)) * ln2", "m * ln2")],
     FORWARD.format(False, 37), "attention_forward's lse is wrong (o is right): " + attention.LSE_WITHOUT_SUM),
    ("ragged key tail unmasked", [(FORWARD_RAGGED, FORWARD_RAGGED.replace("keys[None, :] < seq_len", "keys[None, :] >= 0", 1))],
     FORWARD.format(False, 37), attention.RAGGED_KEYS),
    ("the whole probability matrix stored", [("    o = torch.empty_like(q)\n", "    o = torch.empty_like(q)\n"
                                              "    probabilities = q.new_empty(batch, heads, seq_len, seq_len)\n")],
     FORWARD.format(False, 37), "creates a tensor of 1,369 elements, as many as the 37 x 37 attention matrix"),
    ("forward in torch", [("    o = torch.empty_like(q)\n", "    return attention_reference(q, k, v, causal)\n")],
     FORWARD.format(False, 37), "This exercise requires that a Triton kernel of your answer compute o and lse, but "
                                "attention_forward computes o, or what its kernels read, with torch"),
    ("causal mask off by one in forward", [("keep = keep & (keys[None, :] <= rows[:, None])\n            s = tl.where",
                                            "keep = keep & (keys[None, :] < rows[:, None])\n            s = tl.where")],
     FORWARD.format(True, 37), "attention_forward's o is wrong with causal=True: " + attention.CAUSAL_DIAGONAL),
    ("causal mask off by one, and no scale", [("keep = keep & (keys[None, :] <= rows[:, None])\n            s = tl.where",
                                               "keep = keep & (keys[None, :] < rows[:, None])\n            s = tl.where"),
                                              NO_SCALE],
     FORWARD.format(True, 37), attention.CAUSAL_DIAGONAL + " (and, as without the mask, " + attention.NO_SCALE),
    ("forward's causal tiles not skipped", [("end = tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else seq_len  # causal",
                                             "end = seq_len  # causal")],
     FORWARD.format(True, 100), "but attention_forward_kernel runs 32 tl.dot with causal=True against 32 without the mask"),
    ("causal mask off by one in backward", [(Q_KERNEL_MASK, Q_KERNEL_MASK.replace("<=", "<")),
                                            (KV_KERNEL_MASK, KV_KERNEL_MASK.replace(">=", ">"))],
     BACKWARD.format(True, 37), "wrong with causal=True: " + attention.CAUSAL_DIAGONAL),
    ("key/value loop one tile late", [("(start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0", "(start_n // BLOCK_M + 1) * BLOCK_M if CAUSAL else 0")],
     BACKWARD.format(True, 37), "attention_backward's dk and dv are wrong with causal=True: " + attention.KV_LOOP_LATE),
    ("query loop one tile early", [(Q_LOOP, Q_LOOP.replace("start_m + BLOCK_M) if CAUSAL", "start_m) if CAUSAL"))],
     BACKWARD.format(True, 37), "attention_backward's dq is wrong with causal=True: " + attention.LOOP_ENDS_EARLY),
    ("query kernel's causal tiles not skipped", [(Q_LOOP, Q_LOOP.replace("tl.minimum(seq_len, start_m + BLOCK_M) if CAUSAL else seq_len", "seq_len"))],
     BACKWARD.format(True, 100), "but attention_backward_q_kernel runs 48 tl.dot with causal=True against 48 without"),
    ("key/value kernel's causal tiles not skipped", [("(start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0", "0")],
     BACKWARD.format(True, 100), "but attention_backward_kv_kernel runs 64 tl.dot with causal=True against 64 without"),
    ("dS without D", [("dst = pt * (tl.dot(v, tl.trans(do)) - delta[None, :])", "dst = pt * tl.dot(v, tl.trans(do))"),
                      ("ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])", "ds = p * tl.dot(do, tl.trans(v))")],
     BACKWARD.format(False, 37), "attention_backward's dq and dk are wrong: " + attention.WITHOUT_D),
    ("dS without D, causal", [("dst = pt * (tl.dot(v, tl.trans(do)) - delta[None, :])", "dst = pt * tl.dot(v, tl.trans(do))"),
                              ("ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])", "ds = p * tl.dot(do, tl.trans(v))")],
     BACKWARD.format(True, 37), None),  # Exercise 5's mistake: the causal mask is right, and judged so
    ("a wrong D", [("tl.sum(o * do, 1)", "tl.sum(do, 1)")], BACKWARD.format(False, 37),
     "attention_backward's dq and dk are wrong: D is wrong. The gradients are those of dS = P * (dP - D) with a D of"),
    ("dv assigned in the loop", [("dv += tl.dot(pt.to(do.dtype), do)", "dv = tl.dot(pt.to(do.dtype), do)")],
     BACKWARD.format(False, 37), "attention_backward's dv is wrong: " + attention.DV_ASSIGNED),
    ("the gradients' scale forgotten", [("(dq * scale).to(", "dq.to("), ("(dk * scale).to(", "dk.to(")],
     BACKWARD.format(False, 37), attention.GRADIENT_NO_SCALE),
    ("a query-gradient race", DQ_RACE, BACKWARD.format(False, 37), "two programs of attention_backward_kv_kernel write"),
    ("a query-gradient race, causal", DQ_RACE, BACKWARD.format(True, 37), None),  # Exercise 5's, named there
    ("ragged tail loaded without other=", [("v = tl.load(v_ptr + key_offsets, mask=keys[:, None] < seq_len, other=0.0)\n        p =",
                                            "v = tl.load(v_ptr + key_offsets, mask=keys[:, None] < seq_len)\n        p =")],
     BACKWARD.format(False, 37), attention.RAGGED_NAN),
    ("forward's mistake costs the backward check nothing", [NO_SCALE], BACKWARD.format(True, 37), None),
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


@pytest.mark.parametrize("source", [FORWARD.format(False, 37), FORWARD.format(True, 37), FORWARD.format(True, 100),
                                    BACKWARD.format(False, 37), BACKWARD.format(True, 37), BACKWARD.format(True, 100)])
def test_the_solution_passes_every_check(right, source):
    assert _judged(right, source) == (1, None)


@pytest.mark.parametrize("what, changes, source, says", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_named_by_the_grader(right, what, changes, source, says):
    judged, failure = _judged(solution_namespace(NOTEBOOK, CELLS, changes), source)
    if says is None:
        assert (judged, failure) == (1, None)
    else:
        assert judged == 1 and failure and says in failure and "found by the grader's own check" in failure, failure


def test_the_students_own_check_names_a_mistake_as_the_grader_does(right):
    namespace = solution_namespace(NOTEBOOK, CELLS, [("acc = acc * alpha[:, None] + tl.dot(", "acc = acc + tl.dot(")])
    q, k, v = (torch.randn(1, 1, 37, 16) for _ in range(3))
    with pytest.raises(AssertionError, match="attention_forward's o is wrong: the online softmax's accumulator"):
        attention.check_attention_forward(namespace["attention_forward"], q, k, v)
    attention.check_attention_forward(right["attention_forward"], q, k, v, True)
    o, lse = attention.forward_reference(q, k, v, True)
    attention.check_attention_backward(right["attention_backward"], q, k, v, o, lse, torch.randn(1, 1, 37, 16), True)


def test_the_pieces_are_attention_and_its_flash_backward_from_what_forward_saved():
    from autograder.student.checker.pieces import REFERENCES

    q, k, v, g = (torch.randn(1, 2, 9, 16, dtype=torch.float64, requires_grad=True) for _ in range(4))
    for causal in (False, True):
        o, lse = REFERENCES["attention_forward"](q, k, v, causal)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        assert torch.allclose(o, expected) and lse.dtype == torch.float64
        grads = torch.autograd.grad(expected, (q, k, v), g)
        assert all(torch.allclose(a, b) for a, b in zip(REFERENCES["attention_backward"](q, k, v, o, lse, g, causal),
                                                        grads))
