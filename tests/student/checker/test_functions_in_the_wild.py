"""Tests for Functions written the way published code writes them (issue 19).

classmethods instead of staticmethods, ``ctx.needs_input_grad`` branches, constant tensor
arguments, a backward without ``return``, and a backward that calls autograd on purpose
(gradient checkpointing). All Functions here are written for these tests.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Function

from autograder import check_function
from checker_examples import Cube, cube, failure, MatMul, matmul, variant


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def linear(x, weight, bias=None):
    return x @ weight + (bias if bias is not None else 0)


def _linear_args(bias=True):
    args = (torch.randn(3, 4), torch.randn(4, 2))
    return args + (torch.randn(2),) if bias else args


def assert_words(message: str, words) -> None:
    for word in words:
        assert word in message, f"{word!r} not in:\n{message}"


# --------------------------------------------------------------------------------------------
# @classmethod and methods without a decorator: accepted wherever torch runs them


class SoftsignClassmethods(Function):
    @classmethod
    def forward(cls, ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return scale * x / (1 + x.abs())

    @classmethod
    def backward(cls, ctx, grad_output):
        (x,) = ctx.saved_tensors
        return ctx.scale * grad_output / (1 + x.abs()) ** 2, None


class SoftsignClassmethodsWrongShape(SoftsignClassmethods):
    @classmethod
    def backward(cls, ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (ctx.scale * grad_output / (1 + x.abs()) ** 2).sum(0), None


class CubeClassmethodSetupContext(Function):
    generate_vmap_rule = True

    @classmethod
    def forward(cls, x):
        return x ** 3

    @classmethod
    def setup_context(cls, ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @classmethod
    def backward(cls, ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output


class CubeWithoutDecorators(Function):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output


class ScaleLegacy(Function):
    """The legacy style: settings given to __init__, methods of the instance."""

    def __init__(self, alpha=2.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return self.alpha * x

    def backward(self, grad_output):
        return self.alpha * grad_output


def softsign(x, scale):
    return scale * x / (1 + x.abs())


@pytest.mark.parametrize(
    "function, reference, args, options",
    [
        pytest.param(SoftsignClassmethods, softsign, (torch.randn(3, 4), 1.5), {}, id="classmethods"),
        pytest.param(CubeClassmethodSetupContext, cube, (torch.randn(3, 4),),
                     {"vmap": True, "double_backward": True}, id="classmethod-setup-context"),
        pytest.param(CubeWithoutDecorators, cube, (torch.randn(5),), {}, id="no-decorators-ctx-first"),
    ],
)
def test_functions_torch_runs_pass(function, reference, args, options):
    assert check_function(function, reference, *args, **options) is None


def test_a_classmethod_function_gets_its_real_mistake_reported():
    message = failure(SoftsignClassmethodsWrongShape, softsign, torch.randn(3, 4), 1.5)
    assert_words(message, ["`x`", "shape [4]", "[3, 4]"])
    assert "@staticmethod" not in message


def test_torch_compile_refuses_classmethods_and_the_message_says_so():
    """torch 2.13's dynamo cannot bind a classmethod forward's arguments; eager mode runs it."""
    message = failure(SoftsignClassmethods, softsign, torch.randn(4), 1.5, compile=True)
    assert_words(message, ["under torch.compile", "failed to bind arguments", "classmethod", "staticmethods"])


def test_the_legacy_style_is_reported_when_torch_refuses_it():
    message = failure(ScaleLegacy, lambda x: 2.0 * x, torch.randn(4))
    assert_words(message, ["legacy style", "no @staticmethod", "`self`", "ScaleLegacy()(x)", "ctx first"])


# --------------------------------------------------------------------------------------------
# ctx.needs_input_grad: backward runs with each input alone requiring grad, and without the optional ones


class LinearFunction(Function):
    """Computes each gradient only when its input needs it, as published Functions do."""

    @staticmethod
    def forward(ctx, x, weight, bias=None):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_output @ weight.mT
        if ctx.needs_input_grad[1]:
            grad_weight = x.mT @ grad_output
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_x, grad_weight, grad_bias


class LinearUsesUnboundGradient(LinearFunction):
    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            grad_x = grad_output @ weight.mT
        if ctx.needs_input_grad[1]:
            grad_weight = x.mT @ grad_output
        return grad_x, grad_weight, grad_output.sum(0)


class LinearWrongFlag(LinearFunction):
    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        grad_x = grad_output @ weight.mT if ctx.needs_input_grad[0] else None
        grad_weight = x.mT @ grad_output if ctx.needs_input_grad[0] else None
        return grad_x, grad_weight, grad_output.sum(0)


class LinearFastPathAssumesBias(LinearFunction):
    """Right whenever bias requires grad; breaks when only bias is frozen (x and weight train)."""

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        if ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        if ctx.needs_input_grad[0] and ctx.needs_input_grad[1]:
            return grad_output @ weight.mT, x.mT @ grad_output, grad_bias
        grad_x = grad_output @ weight.mT if ctx.needs_input_grad[0] else None
        grad_weight = x.mT @ grad_output if ctx.needs_input_grad[1] else None
        return grad_x, grad_weight, grad_output.sum(0) if ctx.needs_input_grad[2] else None


def test_needs_input_grad_branches_done_right_pass():
    assert check_function(LinearFunction, linear, *_linear_args()) is None
    assert check_function(LinearFunction, linear, *_linear_args(bias=False)) is None


def test_a_gradient_used_when_it_was_never_computed_is_explained():
    message = failure(LinearUsesUnboundGradient, linear, *_linear_args())
    assert_words(message, ["with only `x` requiring grad", "UnboundLocalError", "line",
                           "`grad_weight` is computed only under `if ctx.needs_input_grad[1]:`",
                           "used when `weight` needs no gradient"])


def test_a_branch_testing_another_inputs_flag_is_explained():
    message = failure(LinearWrongFlag, linear, *_linear_args())
    assert_words(message, ["with only `x` requiring grad", "computed a gradient for `weight`, which needs none",
                           "under `grad_weight = x.mT @ grad_output if ctx.needs_input_grad[0] else None`",
                           "`x`'s flag", "needs_input_grad[1]"])
    message = failure(LinearWrongFlag, linear, torch.randn(3, 4), torch.randn(4, 2).requires_grad_(), torch.randn(2))
    assert "computed a gradient for `weight`" in message, "which inputs the caller's tensors require is ignored"


def test_backward_also_runs_with_the_optional_inputs_not_requiring_grad():
    """forward's parameters with a default (bias=None) are optional: often frozen, or left out."""
    message = failure(LinearFastPathAssumesBias, linear, *_linear_args())
    assert_words(message, ["with `bias` not requiring grad", "UnboundLocalError", "`grad_bias`",
                           "if ctx.needs_input_grad[2]:"])


def test_a_single_input_function_is_not_run_again():
    calls = []

    class CubeCounted(Cube):
        @staticmethod
        def backward(ctx, grad_output):
            calls.append(ctx.needs_input_grad)
            return Cube.backward(ctx, grad_output)

    check_function(CubeCounted, cube, torch.randn(4))
    assert calls and set(calls) == {(True,)}


# --------------------------------------------------------------------------------------------
# Constant tensor arguments: no gradient demanded, None accepted, a gradient returned still checked


class FilterBank(Function):
    """x @ filters, with filters a constant: backward returns None for it."""

    @staticmethod
    def forward(ctx, x, filters):
        ctx.save_for_backward(filters)
        return x @ filters

    @staticmethod
    def backward(ctx, grad_output):
        (filters,) = ctx.saved_tensors
        return grad_output @ filters.mT, None


FilterBankWrongConstantGradient = variant(MatMul, "FilterBankWrongConstantGradient",
                                          grads=lambda x, filters, g: (g @ filters.mT, -(x.mT @ g)))


class MaskedScale(Function):
    """x * mask * 3 with a boolean mask: a non-float constant."""

    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x * mask * 3

    @staticmethod
    def backward(ctx, grad_output):
        (mask,) = ctx.saved_tensors
        return grad_output * mask * 3, None


def _filter_args():
    return torch.randn(3, 4), torch.randn(4, 5)


@pytest.mark.parametrize("constants", [("filters",), (1,)], ids=["by-name", "by-position"])
def test_a_constant_may_get_none(constants):
    assert check_function(FilterBank, lambda x, f: x @ f, *_filter_args(), constants=constants) is None


def test_without_constants_a_tensor_argument_needs_its_gradient():
    message = failure(FilterBank, lambda x, f: x @ f, *_filter_args())
    assert_words(message, ["None for `filters`", "needs a gradient"])


def test_a_gradient_returned_for_a_constant_is_checked():
    assert check_function(MatMul, matmul, *_filter_args(), constants=("b",)) is None
    message = failure(FilterBankWrongConstantGradient, matmul, *_filter_args(), constants=("b",))
    assert_words(message, ["the constant `b`", "wrong", "return None"])
    assert "`a`" not in message


def test_a_non_float_constant_and_the_optional_checks():
    args = torch.randn(3, 4), torch.rand(3, 4) > 0.5
    assert check_function(MaskedScale, lambda x, m: x * m * 3, *args, constants=("mask",)) is None
    assert check_function(FilterBank, lambda x, f: x @ f, *_filter_args(), constants=("filters",),
                          double_backward=True, compile=True) is None


@pytest.mark.parametrize("constants", [("weights",), (5,), ("scale",)], ids=["unknown-name", "out-of-range",
                                                                            "not-a-tensor"])
def test_a_wrong_constant_is_the_tests_problem(constants):
    with pytest.raises(RuntimeError, match="problem with the test"):
        check_function(SoftsignClassmethods, softsign, torch.randn(4), 1.5, constants=constants)


# --------------------------------------------------------------------------------------------
# backward without return


class LinearNoReturn(LinearFunction):
    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        grad_x = grad_output @ weight.mT  # noqa: F841 - the missing return is the mistake
        grad_weight = x.mT @ grad_output  # noqa: F841


class CubeNoReturn(Cube):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_x = 3 * x ** 2 * grad_output  # noqa: F841 - the missing return is the mistake


@pytest.mark.parametrize(
    "function, reference, args, words",
    [
        pytest.param(LinearNoReturn, linear, _linear_args(bias=False),
                     ["backward returned None", "`x` and `weight` need gradients", "is a `return` missing?"],
                     id="two-inputs"),
        pytest.param(CubeNoReturn, cube, (torch.randn(4),),
                     ["backward returned None", "`x` needs a gradient", "is a `return` missing?"], id="one-input"),
    ],
)
def test_backward_without_return(function, reference, args, words):
    message = failure(function, reference, *args)
    assert_words(message, words)
    assert "1 gradient" not in message


# --------------------------------------------------------------------------------------------
# A backward that calls autograd on purpose: gradient checkpointing


class CheckpointedTanhLayer(Function):
    """Keeps only the inputs; backward recomputes tanh(x @ w) with autograd and backpropagates through it."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.tanh(x @ w)

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_(ctx.needs_input_grad[0])
            w = w.detach().requires_grad_(ctx.needs_input_grad[1])
            y = torch.tanh(x @ w)
        torch.autograd.backward(y, grad_output)
        return x.grad, w.grad


def test_autograd_in_backward_is_refused_by_default_and_the_message_names_the_option():
    message = failure(CheckpointedTanhLayer, lambda x, w: torch.tanh(x @ w), torch.randn(3, 4), torch.randn(4, 2))
    assert_words(message, ["calls autograd itself", "autograd_in_backward=True"])


def test_autograd_in_backward_is_allowed_when_asked_for():
    args = torch.randn(3, 4), torch.randn(4, 2)
    assert check_function(CheckpointedTanhLayer, lambda x, w: torch.tanh(x @ w), *args,
                          autograd_in_backward=True) is None
