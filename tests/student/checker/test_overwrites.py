"""A backward that writes over what it was given, or that cannot run twice on one graph, fails by name; a gradient
for an integer input is refused; a wrong gradient of another float dtype says so (issue 45, item 8).

Each wrong Function here gives the right values: only what it does to the tensors it was handed, or what a second
call finds, is wrong. ``torch.autograd.gradcheck`` knows nothing of the checker, and where it sees the mistake too
(its version-counter error, "Backward is not reentrant"), that is asserted beside the checker's message. Honest
Functions that free what they kept, or are ``@once_differentiable``, still pass. The grader's side of the same
Functions, on a notebook: ``tests/grading/test_overwrites_graded.py``.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from autograder import check_function, check_kernel
from checker_examples import Cube, cube, failure


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def assert_words(message: str, words) -> None:
    for word in words:
        assert word in message, f"{word!r} not in:\n{message}"


def gradcheck_says(function, *args) -> str:
    """What torch.autograd.gradcheck raises on ``function.apply`` at float64 copies of ``args`` ("" if it passes)."""
    leaves = [a.detach().double().requires_grad_() if a.is_floating_point() else a for a in args]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.autograd.gradcheck(function.apply, leaves)
    except RuntimeError as error:  # (GradcheckError is a RuntimeError)
        return str(error)
    return ""


# --------------------------------------------------------------------------------------------
# Written over: each Function's gradient values are right


class CubeSquaresSavedInput(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x.square_()


class SqrtRootsSavedOutput(Function):
    @staticmethod
    def forward(ctx, x):
        result = x.sqrt()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        return grad_output / (2 * result.sqrt_() ** 2)


class CubeScalesGradOutput(Cube):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output.mul_(3 * x ** 2)


class PolyOverCallersInputs(Function):
    """Keeps its inputs on ctx (not saved) and turns them into their gradients in place."""

    @staticmethod
    def forward(ctx, x1, x2):
        ctx.inputs = (x1, x2)
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.inputs
        return x1.pow_(2).mul_(3 * grad_output), x2.mul_(2 * grad_output)


class TanhOverSavedIntermediate(Function):
    """Saves 1 - tanh(x)^2, an intermediate, and scales it by grad_output in place."""

    @staticmethod
    def forward(ctx, x):
        result = x.tanh()
        ctx.save_for_backward(result, 1 - result ** 2)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        _, slope = ctx.saved_tensors
        return slope.mul_(grad_output)


def poly(x1, x2):
    return x1 ** 3 + x2 ** 2


def test_a_saved_input_changed_in_place_is_named_and_gradcheck_sees_it_too():
    message = failure(CubeSquaresSavedInput, cube, torch.randn(5))
    assert_words(message, ["backward wrote over `x` (the caller's input, which forward saved for backward), in place",
                           "compute new tensors"])
    assert "modified by an inplace operation" in gradcheck_says(CubeSquaresSavedInput, torch.randn(5))


def test_a_saved_output_changed_in_place_is_named_and_gradcheck_sees_it_too():
    x = torch.rand(5) + 0.5
    message = failure(SqrtRootsSavedOutput, torch.sqrt, x)
    assert_words(message, ["backward wrote over forward's output (saved for backward), in place"])
    assert "modified by an inplace operation" in gradcheck_says(SqrtRootsSavedOutput, x)


def test_grad_output_changed_in_place_is_named():
    assert_words(failure(CubeScalesGradOutput, cube, torch.randn(5)),
                 ["backward modified grad_output in place", "grad_output.clone()"])


def test_the_callers_inputs_changed_from_backward_are_named_by_their_parameter_names():
    message = failure(PolyOverCallersInputs, poly, torch.randn(4), torch.randn(4))
    assert_words(message, ["backward wrote over `x1` (the caller's input) and `x2` (the caller's input), in place"])


def test_a_saved_intermediate_changed_in_place_is_named_by_its_place_in_saved_tensors():
    message = failure(TanhOverSavedIntermediate, torch.tanh, torch.randn(5))
    assert_words(message, ["backward wrote over ctx.saved_tensors[1] (a tensor forward saved for backward), in place"])
    assert "modified by an inplace operation" in gradcheck_says(TanhOverSavedIntermediate, torch.randn(5))


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="Triton's interpreter runs these kernels")
def test_a_triton_backward_that_stores_its_gradients_over_its_inputs_is_named():
    """SwiGLU as Liger-Kernel's swiglu computes it: backward's kernel stores da and db over a and b, and returns
    them. No version counter moves (a kernel writes through a pointer); the values do."""
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.jit
    def swiglu_forward_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        a = tl.load(a_ptr + offsets, mask=mask, other=0.0)
        b = tl.load(b_ptr + offsets, mask=mask, other=0.0)
        tl.store(c_ptr + offsets, a * tl.sigmoid(a) * b, mask=mask)

    @triton.jit
    def swiglu_backward_kernel(dc_ptr, a_ptr, b_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        dc = tl.load(dc_ptr + offsets, mask=mask, other=0.0)
        a = tl.load(a_ptr + offsets, mask=mask, other=0.0)
        b = tl.load(b_ptr + offsets, mask=mask, other=0.0)
        sigmoid = tl.sigmoid(a)
        silu = a * sigmoid
        tl.store(a_ptr + offsets, dc * (silu * (1 - sigmoid) + sigmoid) * b, mask=mask)
        tl.store(b_ptr + offsets, dc * silu, mask=mask)

    class SwiGLU(Function):
        @staticmethod
        def forward(ctx, a, b):
            a, b = a.contiguous(), b.contiguous()
            c = torch.empty_like(a)
            swiglu_forward_kernel[(triton.cdiv(a.numel(), 64),)](a, b, c, a.numel(), BLOCK=64)
            ctx.save_for_backward(a, b)
            return c

        @staticmethod
        def backward(ctx, dc):
            a, b = ctx.saved_tensors
            swiglu_backward_kernel[(triton.cdiv(a.numel(), 64),)](dc.contiguous(), a, b, a.numel(), BLOCK=64)
            return a, b

    def swiglu(a, b):
        return torch.nn.functional.silu(a) * b

    args = torch.randn(4, 30), torch.randn(4, 30)
    message = failure(SwiGLU, swiglu, *args, dtype=torch.float32)
    assert_words(message, ["backward wrote over `a` (the caller's input, which forward saved for backward) and `b` "
                           "(the caller's input, which forward saved for backward), through memory",
                           "tl.store", "torch.empty_like(x)"])
    assert "in place" not in message
    assert "Backward is not reentrant" in gradcheck_says(SwiGLU, *args)

    @triton.jit
    def relu_kernel(x_ptr, n, BLOCK: tl.constexpr):  # stores the result over its input
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)

    def relu(x):
        relu_kernel[(triton.cdiv(x.numel(), 64),)](x, x.numel(), BLOCK=64)
        return x

    message = failure(relu, torch.relu, torch.randn(100), check=check_kernel)
    assert_words(message, ["relu wrote over `x`, which it was given", "torch.empty_like(x)"])


# --------------------------------------------------------------------------------------------
# Backward twice on one graph


class CubeDoublesItsScale(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.scale = 3.0
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad = ctx.scale * x ** 2 * grad_output
        ctx.scale *= 2
        return grad


class CubeFreesWhatItKept(Function):
    """Keeps x on ctx and frees it in backward, as memory-minded published code does: a second backward raises."""

    @staticmethod
    def forward(ctx, x):
        ctx.x = x.detach()
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.x
        del ctx.x
        return 3 * x ** 2 * grad_output


class CubeOnceDifferentiable(Cube):
    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output


def test_a_backward_that_changes_what_it_reads_fails_on_the_second_call_as_gradcheck_says():
    message = failure(CubeDoublesItsScale, cube, torch.randn(5))
    assert_words(message, ["backward gives the right gradient for `x` the first time, and a wrong one when it runs "
                           "again on the same graph", "ctx.scale *= 2", "5 of 5 elements differ"])
    assert "Backward is not reentrant" in gradcheck_says(CubeDoublesItsScale, torch.randn(5))


def test_a_function_that_frees_what_it_kept_or_is_once_differentiable_is_not_wrong_for_it():
    x = torch.randn(5, requires_grad=True)
    y = CubeFreesWhatItKept.apply(x)
    torch.autograd.grad(y, x, torch.ones(5), retain_graph=True)
    with pytest.raises(AttributeError):  # its second backward raises: what the checker must not call wrong
        torch.autograd.grad(y, x, torch.ones(5))
    assert check_function(CubeFreesWhatItKept, cube, torch.randn(5)) is None
    assert check_function(CubeOnceDifferentiable, cube, torch.randn(4, 3)) is None


# --------------------------------------------------------------------------------------------
# Integer inputs; gradients of another dtype


class GatherRows(Function):
    """x[index] (index: an integer tensor), whose backward returns a gradient for the index too."""

    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.rows = x.shape[0]
        return x[index]

    @staticmethod
    def backward(ctx, grad_output):
        (index,) = ctx.saved_tensors
        grad = grad_output.new_zeros((ctx.rows, *grad_output.shape[1:])).index_add_(0, index, grad_output)
        return grad, torch.zeros(index.shape)


class MaskedFill(Function):
    """x where mask is False, 0 where it is True; its backward gives the mask a gradient too."""

    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x.masked_fill(mask, 0.0)

    @staticmethod
    def backward(ctx, grad_output):
        (mask,) = ctx.saved_tensors
        return grad_output.masked_fill(mask, 0.0), grad_output.sum() * torch.ones(mask.shape)


def test_a_gradient_for_an_integer_or_bool_input_is_refused_by_name_though_autograd_drops_it_silently():
    x, index = torch.randn(6, 3), torch.tensor([0, 2, 2, 5])
    leaf = x.clone().requires_grad_()
    GatherRows.apply(leaf, index).sum().backward()  # autograd takes it without a word
    assert torch.equal(leaf.grad, torch.zeros(6, 3).index_add_(0, index, torch.ones(4, 3)))
    assert_words(failure(GatherRows, lambda x, index: x[index], x, index),
                 ["backward returned a gradient for `index`, which is an integer tensor (int64)", "Return None"])
    assert_words(failure(MaskedFill, lambda x, mask: x.masked_fill(mask, 0.0), torch.randn(5), torch.randn(5) > 0),
                 ["backward returned a gradient for `mask`, which is a bool tensor (bool)"])


class CubeInHalf(Cube):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (3 * x ** 2 * grad_output).half()


class CubeInDoubleForgetsGradOutput(Cube):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (3 * x ** 2).double()


class CubeInFloat32(Cube):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (3 * x ** 2 * grad_output).float()


def test_a_wrong_gradient_of_another_float_dtype_says_which_and_what_autograd_made_of_it():
    x = torch.randn(6)
    leaf = x.clone().requires_grad_()
    CubeInHalf.apply(leaf).sum().backward()
    assert leaf.grad.dtype == torch.float32  # autograd casts it, without a word
    message = failure(CubeInHalf, cube, x, dtype=torch.float32)
    assert_words(message, ["the gradient for `x` is wrong (backward returned it in float16, which autograd casts to "
                           "`x`'s float32, but only after backward rounded it to float16, which keeps about 3 "
                           "significant digits where float32 keeps 6"])
    # More precise than its input: the cast is not why it is wrong, and the message says so.
    assert_words(failure(CubeInDoubleForgetsGradOutput, cube, x, dtype=torch.float32),
                 ["backward returned it in float64, which autograd casts to `x`'s float32, which keeps all float32 can "
                  "hold: the dtype is not what makes it wrong", "forgot to multiply by grad_output"])
    # A gradient of another dtype that is right after autograd's cast passes, as autograd takes it.
    assert check_function(CubeInFloat32, cube, torch.randn(6)) is None
