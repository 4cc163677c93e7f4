"""Assignment 05: typical wrong derivations fail with a message naming the input and the mistake.

Each test fills the released notebook with the instructor's answers, replaces a few of them with
a typical wrong derivation (one per exercise, so one grading run checks several), grades it with
the course's grader, hidden tests included, and checks what each failing test says.
"""

from __future__ import annotations

import json

import pytest

from autograder.course import Course
from autograder.grading.selfcheck import check_notebook
from conftest import REPO, filled_release, solution_answers

ASSIGNMENT = "05_deriving_backward"


def _grade_with_bugs(tmp_path, bugs: dict[str, list[tuple[str, str]]]) -> dict:
    """grade_id of each test -> its result, for the solution with ``bugs`` (grade_id -> [(right, wrong)])."""
    answers = solution_answers(REPO, ASSIGNMENT)
    for grade_id, changes in bugs.items():
        for right, wrong in changes:
            assert right in answers[grade_id], f"'{right}' is no longer in the solution of {grade_id}; update this test"
            answers[grade_id] = answers[grade_id].replace(right, wrong)
    notebook = tmp_path / f"{ASSIGNMENT}.ipynb"
    notebook.write_text(json.dumps(filled_release(REPO, ASSIGNMENT, answers)))
    return {r.grade_id: r for r in check_notebook(notebook, Course(REPO))}


@pytest.mark.slow
def test_wrong_derivations_are_named(tmp_path):
    results = _grade_with_bugs(tmp_path, {
        "softmax": [("return y * (grad_output - (grad_output * y).sum(dim=-1, keepdim=True))",
                     "return y * grad_output")],
        "log_softmax_nll": [("return grad_output * (torch.exp(log_softmax) - one_hot) / n, None",
                             "return grad_output * (torch.exp(log_softmax) - one_hot), None")],
        "layer_norm": [("grad_x = r * (g_xhat - g_xhat.mean(-1, keepdim=True) - xhat * (g_xhat * xhat).mean(-1, keepdim=True))",
                        "grad_x = r * (g_xhat - xhat * (g_xhat * xhat).mean(-1, keepdim=True))")],
        "attention": [("grad_v = (p.mT @ grad_output).sum_to_size(v.shape)", "grad_v = grad_output.mT @ p")],
    })
    assert [r.grade_id for r in results.values() if r.passed] == ["test_batch_norm_train"]  # the one left right
    expected = {
        "test_softmax": ("the gradient for `x` is wrong", "you forgot the sum over the softmax row"),
        "test_log_softmax_nll": ("the gradient for `logits` is wrong", "N times too large"),
        "test_layer_norm": ("the gradient for `x` is wrong", "it drops the mean's gradient"),
        "test_attention": ("the gradient for `v` is wrong", "it is transposed"),
    }
    for grade_id, phrases in expected.items():
        assert results[grade_id].score == 0
        for phrase in phrases:
            assert phrase in results[grade_id].message, f"{grade_id}: {phrase!r} not in {results[grade_id].message!r}"


@pytest.mark.slow
def test_numerically_careless_backward_passes_say_why(tmp_path):
    """A softmax backward that exponentiates the logits again, a LayerNorm backward that divides by the std alone,
    and a transposed product in Attention that makes backward raise in sum_to_size."""
    results = _grade_with_bugs(tmp_path, {
        "softmax": [("ctx.save_for_backward(y)", "ctx.save_for_backward(x)"),
                    ("(y,) = ctx.saved_tensors",
                     "(x,) = ctx.saved_tensors\n        y = torch.exp(x) / torch.exp(x).sum(dim=-1, keepdim=True)")],
        "layer_norm": [("g_xhat = grad_output * weight",
                        "r = 1 / (xhat / r).std(-1, unbiased=False, keepdim=True)  # no eps\n"
                        "        g_xhat = grad_output * weight")],
        # A transposed product that sum_to_size then cannot reduce: backward raises.
        "attention": [("grad_k = (grad_scores.mT @ q).sum_to_size(k.shape)",
                       "grad_k = (q.mT @ grad_scores).sum_to_size(k.shape)")],
    })
    softmax, layer_norm = results["test_softmax"], results["test_layer_norm"]
    assert softmax.score == 0 and layer_norm.score == 0
    assert "Softmax's backward gives inf or NaN in the gradient for `x` for logits around +1000" in softmax.message
    assert "exponentiates x again and overflows" in softmax.message
    assert "LayerNorm's backward gives inf or NaN in the gradient for `x` on rows whose values are (nearly) all equal" in layer_norm.message
    assert "variance is 0 or about 1e-12" in layer_norm.message
    attention = results["test_attention"]
    assert attention.score == 0
    assert "the gradient for `k` is wrong" in attention.message
    assert "its last two dimensions are swapped: the matrix product is transposed" in attention.message
    assert results["test_log_softmax_nll"].passed
