"""The checker in the caller's dtype, on non-contiguous inputs, and the misses of issue 40's item 5.

- ``dtype="keep"`` (or a dtype): the Function and the reference get the caller's dtype, the tolerances
  are torch.testing.assert_close's for it, and every wrong value says the difference, the tolerance used
  and how to change it; the sign and constant-factor diagnoses scale with the dtype and need evidence.
- Non-contiguous inputs: a stride mistake passes on contiguous copies; the checks run again on a slice and
  a transposed view (and with such upstream gradients) and name it.
- check_callable names mistake patterns; NumPy arrays, in-place Functions and legacy Functions get the
  checker's words.
"""

from __future__ import annotations

import os

import pytest
import torch

from autograder import check_callable, check_forward, check_function, check_kernel
from checker_examples import Cube, cube, failure, variant


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def assert_words(message: str, words) -> None:
    for word in words:
        assert word in message, f"{word!r} not in:\n{message}"


# --------------------------------------------------------------------------------------------
# dtypes and tolerances


class CubeInFloat32(Cube):
    """Right, computed in float32 whatever it is given (a kernel's way): off by float32's rounding."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x.float() ** 3).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (3 * x.float() ** 2 * grad_output.float()).to(x.dtype)


class CubeInFloat16(Cube):
    """Right, computed in float16 whatever it is given: off by float16's rounding."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x.half() ** 3).to(x.dtype)


def test_low_precision_code_fails_in_float64_saying_the_difference_and_the_tolerance():
    message = failure(CubeInFloat16, cube, torch.randn(4, 5))
    assert_words(message, ["a difference of", "is allowed", "rtol=1e-06, atol=1e-08",
                           "the checker's defaults in float64"])
    assert "rtol=" not in message.split("the checker's defaults in float64")[1]  # no advice to loosen them: tests say it
    torch_value = message.split("torch ")[1].split(",")[0]
    yours = message.split("yours ")[1].split(",")[0]
    assert torch_value != yours, "the two values are shown with the digits that tell them apart"


@pytest.mark.parametrize("dtype, words", [
    ("keep", ["float32's defaults"]), (torch.float32, ["float32's defaults"]), (torch.float16, ["float16's defaults"]),
    (torch.bfloat16, ["bfloat16's defaults"]),
])
def test_the_callers_dtype_is_kept_with_its_tolerances(dtype, words):
    assert check_function(CubeInFloat32, cube, torch.randn(4, 5), dtype=dtype) is None
    wrong = variant(Cube, "CubeOff", grads=lambda x, g: 3.3 * x ** 2 * g)
    message = failure(wrong, cube, torch.randn(4, 5), dtype=dtype)
    assert_words(message, words + ["It is 1.1", "times the right gradient"])


def test_a_sign_flip_in_float32_is_named_and_the_given_tolerances_are_said():
    flipped = variant(Cube, "CubeFlipped", grads=lambda x, g: -3 * x ** 2 * g)
    assert "sign is flipped" in failure(flipped, cube, torch.randn(4, 5), dtype=torch.float32)
    message = failure(flipped, cube, torch.randn(4, 5), rtol=1e-3, atol=1e-4)
    assert_words(message, ["rtol=0.001, atol=0.0001", "the check's own or the test's"])


def test_a_wrong_dtype_is_refused_as_the_tests_problem():
    with pytest.raises(RuntimeError, match="problem with the test"):
        check_function(Cube, cube, torch.randn(3), dtype=torch.int64)


def test_no_constant_factor_is_named_on_evidence_that_cannot_show_one():
    """One element, or all of them equal: any wrong value is 'c times' the right one."""
    off = variant(Cube, "CubeOff", grads=lambda x, g: 7 * x ** 2 * g)
    assert "constant factor" not in failure(off, cube, torch.randn(1))
    assert "constant factor" not in failure(off, cube, torch.full((4,), 0.5))
    assert "2.333 times the right gradient" in failure(off, cube, torch.randn(4))


# --------------------------------------------------------------------------------------------
# Non-contiguous inputs


def packed(x):
    """``x``'s memory read as if it were contiguous: row r starts at r * n_columns, as in a kernel that ignores
    x.stride(0)."""
    return torch.as_strided(x, x.shape, torch.empty(x.shape).stride())


class ExpPackedRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = packed(x).exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * y


class ExpPackedGradOutput(ExpPackedRows):
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return packed(grad_output) * y


class ExpFlatView(ExpPackedGradOutput):
    """x.view(-1) needs rows packed one after the other: it raises on a slice."""

    @staticmethod
    def forward(ctx, x):
        y = x.view(-1).exp().view(x.shape)
        ctx.save_for_backward(y)
        return y


def test_a_stride_mistake_passes_on_contiguous_copies_and_is_named():
    message = failure(ExpPackedRows, torch.exp, torch.randn(4, 5))
    assert_words(message, ["right answer on contiguous inputs and a wrong one on a slice of `x`", "row stride",
                           "x.contiguous()", "On a slice, forward's output is wrong"])
    assert check_function(ExpPackedRows, torch.exp, torch.randn(4, 5), noncontiguous=False) is None
    assert check_function(ExpPackedRows, torch.exp, torch.randn(5)) is None, "a vector has no other layout here"
    assert_words(failure(ExpPackedRows, torch.exp, torch.randn(4, 5), check=check_forward), ["a slice of `x`"])


def test_a_backward_that_assumes_a_contiguous_grad_output_is_named():
    message = failure(ExpPackedGradOutput, torch.exp, torch.randn(4, 5))
    assert_words(message, ["right gradients for a contiguous grad_output", "grad_output.contiguous()"])


def test_an_error_on_a_non_contiguous_input_is_named_with_its_layout():
    message = failure(ExpFlatView, torch.exp, torch.randn(4, 5))
    assert_words(message, ["a wrong one on a slice of `x`", "On a slice, forward raised RuntimeError", "view"])


def test_check_callable_runs_on_non_contiguous_inputs_too():
    def double(x):
        return packed(x) * 2

    message = failure(double, lambda x: x * 2, torch.randn(3, 4), check=check_callable)
    assert_words(message, ["a slice of `x`", "row stride"])


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="Triton's interpreter runs these kernels")
def test_check_kernel_names_a_row_stride_mistake():
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.jit
    def softmax_kernel(y_ptr, x_ptr, x_row_stride, n_columns, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        columns = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_row_stride + columns, mask=columns < n_columns, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * n_columns + columns, e / tl.sum(e, axis=0), mask=columns < n_columns)

    def launch(x, row_stride):
        y = torch.empty(x.shape, dtype=x.dtype)
        softmax_kernel[(x.shape[0],)](y, x, row_stride(x), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y

    def softmax(x):
        return launch(x.contiguous(), lambda t: t.stride(0))

    def softmax_packed_rows(x):
        return launch(x, lambda t: t.shape[1])

    reference = lambda x: torch.softmax(x, -1)  # noqa: E731
    assert check_kernel(softmax, reference, torch.randn(6, 10)) is None
    message = failure(softmax_packed_rows, reference, torch.randn(6, 10), check=check_kernel)
    assert_words(message, ["softmax_packed_rows is right on contiguous tensors, but gives wrong values when `x` is "
                           "not contiguous", "its rows lie 13 elements apart in memory, not 10",
                           "make it contiguous in the launcher (x = x.contiguous())"])


# --------------------------------------------------------------------------------------------
# Item 5's misses


def test_check_callable_names_mistake_patterns():
    assert "sign is flipped" in failure(lambda x: -(x ** 3) + 2 * x.detach() ** 3, cube, torch.randn(5),
                                        check=check_callable)


class CubeNumpyGradient(Cube):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (3 * x ** 2 * grad_output).numpy()


def test_numpy_arrays_get_the_checkers_words():
    assert_words(failure(CubeNumpyGradient, cube, torch.randn(4)), ["NumPy array", "return a tensor"])

    class CubeAndArray(Cube):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3, (x ** 2).detach().numpy()

        @staticmethod
        def backward(ctx, grad_output, _):
            return Cube.backward(ctx, grad_output)

    assert_words(failure(CubeAndArray, lambda x: (x ** 3, x ** 2), torch.randn(4)),
                 ["output 1 is a NumPy array", "return a tensor"])
    assert check_function(CubeAndArray, lambda x: (x ** 3, (x ** 2).detach().numpy()), torch.randn(4)) is None


class ExpInPlaceNotMarked(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.exp_()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * y


class ExpInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.exp_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    backward = ExpInPlaceNotMarked.backward




def test_in_place_functions_get_the_checkers_hints():
    assert_words(failure(ExpInPlaceNotMarked, torch.exp, torch.randn(3, 4), inplace=True),
                 ["returned one of its inputs as it is", "ctx.mark_dirty(input)"])
    assert_words(failure(ExpInPlace, torch.exp, torch.randn(3, 4)),
                 ["forward modified its input in place", "check_function(..., inplace=True)"])
    assert check_function(ExpInPlace, torch.exp, torch.randn(3, 4), inplace=True) is None


class BinActive(torch.autograd.Function):
    """The legacy style of published binarised networks: methods of an instance, called as BinActive()(x)."""

    def forward(self, x):
        self.save_for_backward(x)
        return x.sign()

    def backward(self, grad_output):
        (x,) = self.saved_tensors
        return grad_output * (x.abs() <= 1)


def test_a_legacy_function_is_named_even_though_apply_runs_it():
    with pytest.raises(RuntimeError, match="Legacy autograd function"):
        BinActive()(torch.randn(3))  # what its model does, refused by torch
    BinActive.apply(torch.randn(3))  # what the check calls: it runs
    message = failure(BinActive, lambda x: x.sign().detach() + x.clamp(-1, 1) - x.clamp(-1, 1).detach(),
                      torch.randn(3, 4))
    assert_words(message, ["legacy style", "no @staticmethod", "BinActive()(x)", "@staticmethod", "ctx first"])


class CubeSplit(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * tangent


@pytest.mark.parametrize("dtype", ["keep", torch.float16])
def test_the_optional_checks_work_in_the_callers_dtype(dtype):
    assert check_function(CubeSplit, cube, torch.randn(3, 4), dtype=dtype, vmap=True, forward_ad=True,
                          double_backward=True) is None
