"""Assignment 05: typical wrong derivations fail with a message naming the input and the mistake.

Each test fills the released notebook with the instructor's answers, replaces a few of them with
a typical wrong derivation (one per exercise, so one grading run checks several), grades it with
the course's grader, hidden tests included, and checks what each failing test says.
"""

from __future__ import annotations

import json

import matplotlib
import pytest
import torch

from autograder.course import Course
from autograder.grading.selfcheck import check_notebook
from conftest import REPO, filled_release, read_notebook, solution_answers, source

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
        # LayerNorm's backward, copied: its means over each row, where batch norm's run over the batch.
        "batch_norm_train": [("grad_x = weight * r * (grad_output - (grad_bias + xhat * grad_weight) / n)",
                              "g = grad_output * weight\n        grad_x = r * (g - g.mean(-1, keepdim=True) - "
                              "xhat * (g * xhat).mean(-1, keepdim=True))")],
    })
    assert [r.grade_id for r in results.values() if r.passed] == []  # (BatchNormLayer runs the wrong BatchNormTrain)
    expected = {
        "test_softmax": ("the gradient for `x` is wrong", "you forgot the sum over the softmax row"),
        "test_log_softmax_nll": ("the gradient for `logits` is wrong", "N times too large"),
        "test_layer_norm": ("the gradient for `x` is wrong", "it drops the mean's gradient"),
        "test_attention": ("the gradient for `v` is wrong", "it is transposed"),
        "test_batch_norm_train": ("the gradient for `x` is wrong", "as LayerNorm does"),
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


# The worked examples teach the method on functions that are not the exercises: their cells, in order.
WORKED_CELLS = ["cell-e02dc262", "cell-2a33016d", "cell-66c60f20", "cell-59bd4024", "cell-3f9a2d71", "cell-1c77d056"]


def _worked_examples() -> dict:
    """The namespace after running the notebook's imports, helpers and worked-example Functions (plots off)."""
    matplotlib.use("Agg")
    cells = {c.get("id"): source(c) for c in read_notebook(REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")["cells"]}
    namespace: dict = {}
    for cell_id in WORKED_CELLS:
        exec(compile(cells[cell_id], cell_id, "exec"), namespace)  # noqa: S102  (our own notebook)
    return namespace


def _leaves(*tensors):
    return tuple(t.to(torch.float64).requires_grad_() for t in tensors)


def test_worked_examples_pass_gradcheck_in_float64():
    ns = _worked_examples()
    gradcheck = torch.autograd.gradcheck
    weighted_mean, cosine = ns["WeightedMean"].apply, ns["CosineSimilarity"].apply
    for x, w in [(torch.randn(4, 6), torch.rand(4, 6) + 0.5), (torch.randn(2, 3, 5), torch.rand(5) + 0.5),
                 (torch.randn(7), torch.rand(7) + 0.5)]:
        assert gradcheck(weighted_mean, _leaves(x, w))
    for a, b in [(torch.randn(4, 6), torch.randn(4, 6)), (torch.randn(2, 3, 5), torch.randn(5)), (torch.randn(3), torch.randn(3))]:
        assert gradcheck(cosine, _leaves(a, b))
    assert gradcheck(ns["Sigmoid"].apply, _leaves(3 * torch.randn(3, 4)))
    x, w = torch.randn(2, 3, 5, dtype=torch.float64), torch.rand(5, dtype=torch.float64) + 0.5
    assert torch.allclose(ns["WeightedMean"].apply(x, w), (x * w).sum(-1) / w.sum())
    a, b = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    assert torch.allclose(ns["CosineSimilarity"].apply(a, b), torch.nn.functional.cosine_similarity(a, b, dim=-1))


def test_gradcheck_of_the_worked_examples_sees_a_forgotten_fan_out_path():
    """The check above can fail: w is used twice in the weighted mean and a and b twice in the cosine similarity;
    a backward that keeps only the numerator's path (or only the dot product's) fails gradcheck."""
    ns = _worked_examples()

    class WeightedMeanNumeratorOnly(ns["WeightedMean"]):
        @staticmethod
        def backward(ctx, grad_output):
            x, w, y, total = ctx.saved_tensors
            g = grad_output[..., None] / total
            return (g * w).sum_to_size(x.shape), (g * x).sum_to_size(w.shape)  # W's path missing

    class CosineDotOnly(ns["CosineSimilarity"]):
        @staticmethod
        def backward(ctx, grad_output):
            a_hat, b_hat, norm_a, norm_b, c = ctx.saved_tensors
            g = grad_output[..., None]
            return g / norm_a * b_hat, g / norm_b * a_hat  # the norms' paths missing

    leaves = _leaves(torch.randn(3, 5), torch.rand(3, 5) + 0.5)
    assert not torch.autograd.gradcheck(WeightedMeanNumeratorOnly.apply, leaves, raise_exception=False)
    leaves = _leaves(torch.randn(3, 5), torch.randn(3, 5))
    assert not torch.autograd.gradcheck(CosineDotOnly.apply, leaves, raise_exception=False)


def test_sigmoid_backward_from_the_input_overflows_and_from_the_output_does_not():
    """Section 5: in float32 exp(100) is inf, so e^-x / (1 + e^-x)^2 is NaN at x = -100; y (1 - y) is finite;
    the worked Sigmoid gives finite gradients at +-1000 in float64, where exp overflows too."""
    x = torch.tensor([-100.0, 0.0, 100.0])
    assert torch.isinf(torch.exp(torch.tensor(100.0)))
    e = torch.exp(-x)
    from_input = e / (1 + e) ** 2
    assert torch.isnan(from_input[0]) and torch.isfinite(from_input[1:]).all()
    y = torch.sigmoid(x)
    assert torch.isfinite(y).all() and torch.isfinite(y * (1 - y)).all()
    wide = torch.tensor([-1000.0, -100.0, 0.0, 3.0, 1000.0], dtype=torch.float64, requires_grad=True)
    assert torch.isinf(torch.exp(-wide.detach()[0]))
    _worked_examples()["Sigmoid"].apply(wide).backward(torch.ones(5, dtype=torch.float64))
    expected = torch.sigmoid(wide.detach()) * (1 - torch.sigmoid(wide.detach()))
    assert torch.isfinite(wide.grad).all() and torch.allclose(wide.grad, expected)


def test_worked_examples_are_not_the_exercises():
    """No worked Normalize, LogSumExp or RMSNorm (they gave away Softmax, cross-entropy and LayerNorm), and no
    sentence relating LayerNorm to a worked example."""
    for folder in ("solutions", "course"):
        cells = read_notebook(REPO / folder / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")["cells"]
        text = "\n".join(source(c) for c in cells)
        for given in ("class Normalize", "class LogSumExp", "class RMSNorm", "RMSNorm", "LayerNorm is",
                      r"e^{x_j - \ell}", "the worked example above"):
            assert given not in text, f"{folder}: {given!r}"
