"""Tests for ``check_forward``: forward's outputs are checked as ``check_function`` checks them,
and backward is never called, so a test of forward alone passes before backward is written.
"""

from __future__ import annotations

import pytest
import torch

from autograder import check_forward, check_function
from checker_examples import (
    Cube, cube, CubeBackwardTodo, CubeTemplate, CubeWrongForward, Double_, failure, Polar, polar, Scale, Sort,
    variant,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _polar_forward_swapped(ctx, x, y):
    r, theta = Polar.forward(ctx, x, y)
    return theta, r


def _sort_forward_descending(ctx, x):
    values, indices = torch.sort(x, descending=True)
    ctx.mark_non_differentiable(indices)
    return values, indices


@pytest.mark.parametrize(
    "function, reference, make_args, kwargs",
    [
        pytest.param(Cube, cube, lambda: (torch.randn(3, 4),), {}, id="one-input"),
        pytest.param(Scale, lambda x, c: x * c, lambda: (torch.randn(4), 2.5), {}, id="non-tensor-argument"),
        pytest.param(Polar, polar, lambda: (torch.randn(4), torch.randn(4)), {}, id="two-outputs"),
        pytest.param(Sort, torch.sort, lambda: (torch.randn(6),), {}, id="integer-output-torch-return-type"),
        pytest.param(Double_, lambda x: x * 2, lambda: (torch.randn(4),), {"inplace": True}, id="inplace"),
    ],
)
def test_right_forward_returns_none(function, reference, make_args, kwargs):
    assert check_forward(function, reference, *make_args(), **kwargs) is None


def test_backward_not_written_yet_passes_and_backward_is_never_called():
    calls = []

    def backward_records(x, grad_output):
        calls.append(x)
        return 3 * x ** 2 * grad_output

    assert check_forward(CubeBackwardTodo, cube, torch.randn(5)) is None
    assert check_forward(variant(Cube, "CubeRecordsBackward", grads=backward_records), cube, torch.randn(5)) is None
    assert calls == []
    with pytest.raises(NotImplementedError, match="not done yet"):  # check_function runs backward
        check_function(CubeBackwardTodo, cube, torch.randn(5))


@pytest.mark.parametrize(
    "function, reference, make_args, expected",
    [
        pytest.param(CubeWrongForward, cube, lambda: (torch.randn(5),), ["forward's output is wrong", "a difference of"],
                     id="wrong-values"),
        pytest.param(variant(Polar, "PolarSwapped", forward=_polar_forward_swapped), polar,
                     lambda: (torch.randn(4), torch.randn(4)), ["output 0 is wrong", "output 1 is wrong"],
                     id="two-outputs-swapped"),
        pytest.param(variant(Sort, "SortDescending", forward=_sort_forward_descending), torch.sort,
                     lambda: (torch.randn(6),), ["output 1 is wrong", "exactly"], id="wrong-indices"),
        pytest.param(Cube, lambda x: (x ** 3, x), lambda: (torch.randn(4),), ["1 output", "returns 2"],
                     id="too-few-outputs"),
    ],
)
def test_wrong_forward_is_reported(function, reference, make_args, expected):
    message = failure(function, reference, *make_args(), check=check_forward)
    assert function.__name__ in message
    for words in expected:
        assert words in message


def test_wrong_forward_gives_check_functions_message():
    args = (torch.randn(5),)
    assert failure(CubeWrongForward, cube, *args, check=check_forward) == failure(CubeWrongForward, cube, *args)


# What is not a Function class at all is rejected as check_function rejects it (test_messages.py).


def test_function_without_backward_is_rejected():
    no_backward = type("NoBackward", (torch.autograd.Function,), {"forward": staticmethod(lambda ctx, x: x ** 3)})
    assert "does not define backward" in failure(no_backward, cube, torch.randn(5), check=check_forward)
