"""Tests for ``check_callable``: plain functions, custom operators and nn.Module classes against a
torch reference, outputs and gradients, with messages that say what is wrong."""

from __future__ import annotations

import pytest
import torch

from autograder import check_callable
from checker_examples import Cube, cube


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _failure(*args, **kwargs) -> str:
    with pytest.raises(AssertionError) as error:
        check_callable(*args, **kwargs)
    return str(error.value)


def _distance(x, y):
    return torch.cdist(x, y)


@torch.library.custom_op("course_tests::squared", mutates_args=())
def squared(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2)


@squared.register_fake
def _(x):
    return torch.empty_like(x)


def _squared_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _squared_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return 2 * x * grad


squared.register_autograd(_squared_backward, setup_context=_squared_setup)


class CubeSum(torch.nn.Module):
    def forward(self, x, weight):
        return (Cube.apply(x) * weight).sum()


class HalfGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x  # should be 2 * x


def test_right_functions_operators_and_module_classes_pass():
    check_callable(_distance, torch.cdist, torch.randn(4, 3), torch.randn(5, 3))
    check_callable(squared, lambda x: x ** 2, torch.randn(2, 3))
    check_callable(CubeSum, lambda x, weight: (cube(x) * weight).sum(), torch.randn(6), torch.randn(6))
    check_callable(lambda x, k: torch.topk(x, k), lambda x, k: torch.topk(x, k), torch.randn(7), 3)


def test_a_wrong_value_is_shown_where_it_differs():
    message = _failure(lambda x, y: torch.cdist(x, y) + 1e-3, torch.cdist, torch.randn(4, 3), torch.randn(5, 3))
    assert "output is wrong" in message and "a difference of 0.001" in message


def test_a_wrong_gradient_names_its_argument():
    message = _failure(lambda x, scale: HalfGradient.apply(x) * scale, lambda x, scale: x ** 2 * scale,
                       torch.randn(5), 2.0)
    assert "the gradient for `x` is wrong" in message and "`scale`" not in message


def test_a_wrong_number_of_outputs_and_a_detached_output_are_reported():
    assert "returned 2 outputs, but the reference returns 1" in _failure(
        lambda x: (x * 2, x), lambda x: x * 2, torch.randn(3))
    assert "is not connected to its inputs" in _failure(lambda x: (x * 2).detach(), lambda x: x * 2, torch.randn(3))


@pytest.mark.parametrize("given, says", [
    (Cube, "is a torch.autograd.Function: check it with check_function(Cube, ...)"),
    (CubeSum(), "is a Module instance: pass the class itself, check_callable(CubeSum, ...)"),
    (42, "is not a function or an nn.Module class"),
])
def test_what_is_not_a_function_or_module_class_is_refused(given, says):
    assert says in _failure(given, cube, torch.randn(3))


def test_an_error_in_the_students_code_is_explained_not_raised():
    def broken(x):
        return x[10]

    assert "the call raised IndexError" in _failure(broken, cube, torch.randn(3))


def test_a_function_left_as_released_is_not_done_yet():
    def unfinished(x):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError, match=r"^not done yet \(replace `raise NotImplementedError\(\)`"):
        check_callable(unfinished, cube, torch.randn(3))
