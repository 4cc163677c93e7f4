"""Tests for what a student reads (``autograder.student.checker.messages``): for a wrong Function,
the message names the failing input and, where the pattern is recognisable, the mistake.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from autograder import check_forward, check_function
from checker_examples import (
    AddBiasUnsummed, Cube, cube, CubeBackwardNotStatic, CubeBackwardTodo, CubeFactorOff,
    CubeForgetsGradOutput, CubeForwardNotStatic, CubeIndexError, CubeSignFlipped, CubeTemplate,
    CubeWrongForward, CubeZeroGradient, failure, matmul, MatMulFloat32, MatMulSwapped, MatMulTransposed,
    polar, PolarIgnoresTheta, PolarUnmaterialized, Poly, poly, PolyOneGradient, PolySwapped,
    PolyWrongX2, randn, ReluCallsAutogradGrad, ReluCallsBackward, ReluEditsGradOutput, ReluReturnsNone,
    ReluSumsGradient, ScaleGradForC, ScaleSavesC, ScaleWithoutNone, variant,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --------------------------------------------------------------------------------------------
# Wrong Functions: what the message says


def test_names_the_failing_input_by_its_parameter_name():
    message = failure(PolyWrongX2, poly, torch.randn(5), torch.randn(5))
    assert "`x2`" in message
    assert "`x1`" not in message


def test_message_shows_torch_against_yours():
    message = failure(CubeFactorOff, cube, torch.randn(3, 4))
    assert "CubeFactorOff" in message
    for words in ("torch", "yours", "a difference of", "at index", "rtol=1e-06, atol=1e-08"):
        assert words in message
    assert "pass rtol=" not in message  # never advice to loosen the tolerance: the message may be a graded test's


@pytest.mark.parametrize(
    "grads",
    [
        pytest.param(lambda x1, x2, g: (-3 * x1 ** 2 * g, 4 * x2 * g), id="both-values-wrong"),
        pytest.param(lambda x1, x2, g: (None, -2 * x2 * g), id="none-and-value"),
        pytest.param(lambda x1, x2, g: ((3 * x1 ** 2 * g).float(), -2 * x2 * g), id="dtype-and-value"),
        pytest.param(lambda x1, x2, g: ((3 * x1 ** 2 * g).unsqueeze(0), -2 * x2 * g), id="shape-and-value"),
    ],
)
def test_reports_every_failing_input(grads):
    message = failure(variant(Poly, "PolyTwoMistakes", grads=grads), poly, torch.randn(5), torch.randn(5),
                      strict_gradients=True)
    assert "`x1`" in message and "`x2`" in message


_SQUARE = lambda: (torch.randn(3, 3), torch.randn(3, 3))  # noqa: E731
_NON_SQUARE = lambda: (torch.randn(2, 3), torch.randn(3, 4))  # noqa: E731


@pytest.mark.parametrize(
    "function, reference, make_args, words",
    [
        pytest.param(CubeForgetsGradOutput, cube, randn(5), ["`x`", "forgot", "grad_output"],
                     id="forgot-grad-output"),
        pytest.param(CubeSignFlipped, cube, randn(5), ["`x`", "sign"], id="sign-flipped"),
        pytest.param(CubeFactorOff, cube, randn(5), ["`x`", "0.3333", "constant factor"], id="constant-factor"),
        pytest.param(CubeZeroGradient, cube, randn(5), ["`x`", "zero everywhere"], id="zero-gradient"),
        pytest.param(PolySwapped, poly, lambda: (torch.randn(5), torch.randn(5)), ["`x1`", "`x2`", "wrong order"],
                     id="wrong-order"),
        pytest.param(MatMulSwapped, matmul, _NON_SQUARE, ["`a`", "`b`", "wrong order"], id="wrong-order-shapes-differ"),
        pytest.param(MatMulTransposed, matmul, _NON_SQUARE, ["`a`", "shape [3, 2]", "transpose"],
                     id="transposed-non-square"),
        pytest.param(MatMulTransposed, matmul, _SQUARE, ["`a`", "transpose"], id="transposed-square"),
        pytest.param(ReluSumsGradient, torch.relu, randn(2, 3), ["`x`", "shape [3]", "[2, 3]"], id="wrong-shape"),
        pytest.param(CubeWrongForward, cube, randn(5), ["forward", "fix forward first"], id="wrong-forward"),
        pytest.param(PolarIgnoresTheta, polar, lambda: (torch.randn(4), torch.randn(4)),
                     ["`x`", "`y`", "only output 1 used", "ignores the gradient of output 1"],
                     id="ignores-an-output-gradient"),
        pytest.param(ReluReturnsNone, torch.relu, randn(5), ["`x`", "None", "needs a gradient"],
                     id="none-for-a-tensor-input"),
    ],
)
def test_recognises_wrong_gradients(function, reference, make_args, words):
    message = failure(function, reference, *make_args())
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "function, reference, make_args, words",
    [
        pytest.param(AddBiasUnsummed, lambda x, b: x + b, lambda: (torch.randn(2, 3), torch.randn(3)),
                     ["`b`", "shape [2, 3]", "Autograd would sum it down to [3]", "asks for each gradient in its "
                      "input's shape", "sum_to_size"], id="broadcastable-shape"),
        pytest.param(MatMulFloat32, matmul, _NON_SQUARE, ["`a`", "dtype float32", "float64", "autograd would cast"],
                     id="castable-dtype"),
    ],
)
def test_what_autograd_sums_or_casts_passes_unless_the_test_asks_for_exact_gradients(function, reference,
                                                                                    make_args, words):
    """Autograd sums a broadcastable gradient to its input's shape and casts a float gradient to its input's
    dtype (autograd-function-facts.md): a Function that relies on it is right, as torch sees it; a test that
    asks for each gradient in its input's shape and dtype (strict_gradients=True, the course's) fails it."""
    assert check_function(function, reference, *make_args()) is None
    message = failure(function, reference, *make_args(), strict_gradients=True)
    for word in words:
        assert word in message
    assert "hide the bug" not in message


@pytest.mark.parametrize(
    "function, reference, make_args, words",
    [
        pytest.param(ScaleWithoutNone, lambda x, c: x * c, lambda: (torch.randn(4), 2.5),
                     ["1 gradient", "(x, c)", "None"], id="missing-none-for-non-tensor"),
        pytest.param(PolyOneGradient, poly, lambda: (torch.randn(5), torch.randn(5)),
                     ["1 gradient", "(x1, x2)"], id="too-few-gradients"),
        pytest.param(ScaleGradForC, lambda x, c: x * c, lambda: (torch.randn(4), 2.5),
                     ["`c` is a float, not a tensor", "None"], id="gradient-for-non-tensor"),
        pytest.param(ScaleGradForC, lambda x, c: x * c, lambda: (torch.randn(4), 3),
                     ["`c` is an int, not a tensor", "None"], id="gradient-for-an-int"),
        pytest.param(ReluEditsGradOutput, torch.relu, randn(5), ["grad_output", "in place"],
                     id="grad-output-modified-in-place"),
        pytest.param(ReluCallsAutogradGrad, torch.relu, randn(5), ["autograd", "torch.autograd.grad"],
                     id="backward-calls-autograd-grad"),
        pytest.param(ReluCallsBackward, torch.relu, randn(5), ["autograd", ".backward()"],
                     id="backward-calls-dot-backward"),
        pytest.param(ScaleSavesC, lambda x, c: x * c, lambda: (torch.randn(4), 2.5),
                     ["save_for_backward", "float"], id="save-for-backward-non-tensor"),
        pytest.param(CubeForwardNotStatic, cube, randn(5), ["forward", "@staticmethod"], id="forward-not-static"),
        pytest.param(CubeBackwardNotStatic, cube, randn(5), ["backward", "@staticmethod"], id="backward-not-static"),
        pytest.param(CubeIndexError, cube, randn(5), ["backward raised IndexError", "x[10]"],
                     id="exception-in-backward-shows-student-line"),
        pytest.param(PolarUnmaterialized, polar, lambda: (torch.randn(4), torch.randn(4)),
                     ["backward raised TypeError", "None"], id="unmaterialized-none-arithmetic"),
    ],
)
def test_recognises_structural_mistakes(function, reference, make_args, words):
    message = failure(function, reference, *make_args())
    for word in words:
        assert word in message


@pytest.mark.parametrize("function", [CubeTemplate, CubeBackwardTodo], ids=["template-untouched", "backward-todo"])
@pytest.mark.parametrize("check", [check_function, check_forward])
def test_an_exercise_left_as_released_is_one_message_not_a_report(function, check):
    """Its ``raise NotImplementedError()`` leaves the check as NOT_DONE, the one message the grading kernels,
    ``check`` and the feedback page show for it (a forward-only check never runs backward: it passes)."""
    from autograder.student.checker.messages import NOT_DONE

    if check is check_forward and function is CubeBackwardTodo:
        assert check(function, cube, torch.randn(5)) is None
        return
    with pytest.raises(NotImplementedError) as raised:
        check(function, cube, torch.randn(5))
    assert str(raised.value) == NOT_DONE


def _instance():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that Functions should not be instantiated
        return Cube()


@pytest.mark.parametrize(
    "make_function, words",
    [
        pytest.param(_instance, ["instance", "Cube.apply"], id="instance"),
        pytest.param(lambda: cube, ["not a subclass of torch.autograd.Function"], id="plain-function"),
        pytest.param(lambda: torch.sin, ["not a subclass of torch.autograd.Function"], id="torch-function"),
        pytest.param(lambda: torch.nn.ReLU, ["not a subclass of torch.autograd.Function"], id="module-class"),
    ],
)
@pytest.mark.parametrize("check", [check_function, check_forward])
def test_rejects_what_is_not_a_function_class(make_function, words, check):
    message = failure(make_function(), cube, torch.randn(5), check=check)
    for word in words:
        assert word in message




class ScaleSwapped(torch.autograd.Function):
    """x * w with w broadcast over x's rows; backward swaps the gradients (and w's is not reduced)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output * x, grad_output * w


def test_a_gradient_autograd_sums_is_judged_as_summed_and_a_swap_is_named():
    message = failure(ScaleSwapped, lambda x, w: x * w, torch.randn(4, 3), torch.randn(3))
    assert "the gradient for `w` is wrong (backward returned it with shape [4, 3]: it is the gradient of `x`" in message
    assert "wrong order" in message
