"""Tests for the checker's core checks (``autograder.student.checker.core``): right Functions pass
quietly; the test's own mistakes, side effects, cost, tampering, integer outputs, in-place Functions.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Function

from autograder import check_function
from checker_examples import (
    AddBias, Cube, cube, CubeSignFlipped, Double_, failure, MatMul, matmul, Polar, polar,
    PolarCopesWithNone, Poly, poly, PolySetupContext, PolySwapped, Scale, Sort, variant,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --------------------------------------------------------------------------------------------
# Right Functions pass quietly


@pytest.mark.parametrize(
    "function, reference, make_args",
    [
        pytest.param(Cube, cube, lambda: (torch.randn(3, 4),), id="one-input"),
        pytest.param(Poly, poly, lambda: (torch.randn(5), torch.randn(5)), id="two-inputs"),
        pytest.param(PolySetupContext, poly, lambda: (torch.randn(5), torch.randn(5)), id="setup-context"),
        pytest.param(Scale, lambda x, c: x * c, lambda: (torch.randn(4), 2.5), id="non-tensor-argument"),
        pytest.param(AddBias, lambda x, b: x + b, lambda: (torch.randn(2, 3), torch.randn(3)), id="broadcast-summed"),
        pytest.param(Polar, polar, lambda: (torch.randn(4), torch.randn(4)), id="two-outputs"),
        pytest.param(PolarCopesWithNone, polar, lambda: (torch.randn(4), torch.randn(4)),
                     id="two-outputs-unmaterialized"),
        pytest.param(Sort, torch.sort, lambda: (torch.randn(6),), id="non-differentiable-integer-output"),
        pytest.param(MatMul, matmul, lambda: (torch.randn(2, 3), torch.randn(3, 4)), id="matrix-product"),
        pytest.param(MatMul, matmul, lambda: (torch.randn(16, 16) * 100, torch.randn(16, 16) * 100),
                     id="float32-args"),
        pytest.param(Poly, poly, lambda: (torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True) * 2),
                     id="args-require-grad-and-non-leaf"),
    ],
)
def test_right_function_returns_none(function, reference, make_args):
    assert check_function(function, reference, *make_args()) is None


def test_float32_args_reach_the_function_as_float64():
    seen = []

    def forward(ctx, x):
        seen.append(x.dtype)
        return Cube.forward(ctx, x)

    check_function(variant(Cube, "CubeRecordsDtype", forward=forward), cube, torch.randn(5, dtype=torch.float32))
    assert seen and set(seen) == {torch.float64}


def test_inplace_function_with_mark_dirty_passes_with_inplace_true():
    assert check_function(Double_, lambda x: x * 2, torch.randn(4), inplace=True) is None


# --------------------------------------------------------------------------------------------
# A broken reference is the test's fault, not the student's


def _reference_raises(x):
    raise ValueError("reference bug")


def _reference_asserts(x):
    assert False, "reference bug"


@pytest.mark.parametrize(
    "reference",
    [
        pytest.param(_reference_raises, id="raises"),
        pytest.param(_reference_asserts, id="raises-assertion-error"),
        pytest.param(lambda x: x @ torch.ones(5, 5, dtype=torch.float32), id="float32-constant"),
        pytest.param(lambda x: (x ** 3).detach(), id="not-differentiable"),
    ],
)
def test_reference_error_is_runtime_error_blaming_the_test(reference):
    with pytest.raises(RuntimeError, match="problem with the test"):
        check_function(Cube, reference, torch.randn(5))


# --------------------------------------------------------------------------------------------
# Side effects, speed, tampering


_ANY_FUNCTION = [
    pytest.param(Poly, id="right"),
    pytest.param(variant(Poly, "PolyWrong", grads=lambda x1, x2, g: (-3 * x1 ** 2 * g, 4 * x2 * g)), id="wrong"),
    pytest.param(variant(Poly, "PolyForgets", grads=lambda x1, x2, g: (3 * x1 ** 2, 2 * x2)), id="forgets-grad-output"),
]


def _check_ignoring_failure(function, reference, *args, **kwargs):
    try:
        check_function(function, reference, *args, **kwargs)
    except AssertionError:
        pass


@pytest.mark.parametrize("function", _ANY_FUNCTION)
def test_does_not_disturb_the_global_rng(function):
    args = torch.randn(4, 4), torch.randn(4, 4)
    before = torch.random.get_rng_state()
    _check_ignoring_failure(function, poly, *args)
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize(
    "function, reference, make_args, kwargs",
    [
        pytest.param(Poly, poly, lambda: (torch.randn(5, requires_grad=True), torch.randn(5).double()), {},
                     id="leaf-requiring-grad-and-float64"),
        pytest.param(Poly, poly, lambda: (torch.randn(5, requires_grad=True) * 2, torch.randn(5)), {},
                     id="non-leaf"),
        pytest.param(PolySwapped, poly, lambda: (torch.randn(5, requires_grad=True), torch.randn(5)), {},
                     id="wrong-function"),
        pytest.param(Double_, lambda x: x * 2, lambda: (torch.randn(5),), {"inplace": True}, id="inplace"),
        pytest.param(Scale, lambda x, c: x * c, lambda: (torch.randn(5), 2.5), {}, id="non-tensor-argument"),
    ],
)
def test_does_not_modify_the_callers_tensors(function, reference, make_args, kwargs):
    args = make_args()
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    before = [(t.detach().clone(), t.requires_grad, t.dtype, t._version) for t in tensors]
    _check_ignoring_failure(function, reference, *args, **kwargs)
    for t, (value, requires_grad, dtype, version) in zip(tensors, before):
        assert torch.equal(t.detach(), value)
        assert (t.requires_grad, t.dtype, t._version) == (requires_grad, dtype, version)
        if t.is_leaf:
            assert t.grad is None


def _counting(function, calls: dict[str, int]):
    """``function`` with its forward and backward calls counted in ``calls``."""
    def forward(ctx, *args):
        calls["forward"] += 1
        return function.forward(ctx, *args)

    def backward(ctx, *grads):
        calls["backward"] += 1
        return function.backward(ctx, *grads)

    return type(f"{function.__name__}Counted", (function,),
                {"forward": staticmethod(forward), "backward": staticmethod(backward)})


@pytest.mark.parametrize("function", _ANY_FUNCTION)
def test_a_check_runs_the_function_as_often_whatever_the_inputs_size(function):
    # What keeps a check fast: it never differentiates element by element (finite differences, a Jacobian), so
    # 32x32 inputs cost as many calls of forward and backward as 2x2 ones. (Its time is a figure of
    # `make bench-check`, not a test's bound: wall-clock time depends on the machine's load.)
    counts = []
    for size in (2, 32):
        calls = {"forward": 0, "backward": 0}
        _check_ignoring_failure(_counting(function, calls), poly, torch.randn(size, size), torch.randn(size, size))
        counts.append(calls)
    assert counts[0] == counts[1] and counts[0]["forward"] > 0 and counts[0]["backward"] > 0, counts


def _forward_that_tampers(ctx, x):
    torch.allclose = lambda *a, **k: True
    ctx.save_for_backward(x)
    return x ** 3


@pytest.mark.parametrize(
    "function, tamper_first",
    [
        pytest.param(CubeSignFlipped, True, id="patched-before-the-check"),
        pytest.param(variant(CubeSignFlipped, "CubeTampers", forward=_forward_that_tampers), False,
                     id="patched-by-forward"),
    ],
)
def test_patched_allclose_does_not_make_a_wrong_function_pass(function, tamper_first):
    real_allclose = torch.allclose
    try:
        if tamper_first:
            torch.allclose = lambda *a, **k: True
        message = failure(function, cube, torch.randn(5))
    finally:
        torch.allclose = real_allclose
    assert "sign" in message


# --------------------------------------------------------------------------------------------
# Integer outputs (indices) are compared exactly, dtype included.


class SortFloatIndices(Sort):
    @staticmethod
    def forward(ctx, x):
        values, indices = Sort.forward(ctx, x)
        return values, indices.to(values.dtype)


class IndexOffByOne(Function):
    @staticmethod
    def forward(ctx, x):
        index = torch.tensor([2_000_001])
        ctx.mark_non_differentiable(index)
        return x * 2, index

    @staticmethod
    def backward(ctx, grad_output, grad_index):
        return 2 * grad_output


def test_integer_output_of_the_wrong_dtype_is_reported():
    message = failure(SortFloatIndices, torch.sort, torch.randn(6))
    assert "output 1" in message and "dtype float64, expected int64" in message


def test_integer_output_is_compared_exactly():
    message = failure(IndexOffByOne, lambda x: (x * 2, torch.tensor([2_000_000])), torch.randn(3))
    assert "output 1 is wrong" in message and "exactly" in message


# --------------------------------------------------------------------------------------------
# In-place Functions must declare the modified input with ctx.mark_dirty.


class Double_NoMarkDirty(Function):
    @staticmethod
    def forward(ctx, x):
        return x.mul_(2)

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


def test_in_place_without_mark_dirty_is_reported():
    message = failure(Double_NoMarkDirty, lambda x: 2 * x, torch.randn(4), inplace=True)
    assert "`x`" in message and "mark_dirty" in message


def test_in_place_change_in_an_out_of_place_check_is_reported():
    message = failure(Double_NoMarkDirty, lambda x: 2 * x, torch.randn(4))
    assert "modified its input `x` in place" in message

