"""check_saved: what a Function keeps for backward, in the student's own process (autograder.student.checker.saved)."""

from __future__ import annotations

import pytest
import torch

from autograder import check_saved


def _relu(save):
    class ReLUMask(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            save(ctx, x)
            return x.clamp(min=0)

        @staticmethod
        def backward(ctx, g):
            return g * (ctx.saved_tensors[0] > 0) if ctx.saved_tensors else g

    return ReLUMask


MASK = [("the mask x > 0", lambda x: x > 0)]


def test_the_right_tensor_passes():
    check_saved(_relu(lambda ctx, x: ctx.save_for_backward(x > 0)), torch.relu, torch.randn(4, 5), saves=MASK)


@pytest.mark.parametrize("save, message", [
    (lambda ctx, x: ctx.save_for_backward(x), "saved tensor 1 should be the mask x > 0 (a bool tensor of shape [4, 5]); "
                                              "it is a float64 tensor of shape [4, 5]"),
    (lambda ctx, x: ctx.save_for_backward(x > 0, x), "should save 1 tensor for backward (the mask x > 0); it saved 2"),
    (lambda ctx, x: setattr(ctx, "mask", x > 0), "keeps tensors in ctx attributes (ctx.mask)"),
])
def test_a_wrong_saved_tensor_is_named(save, message):
    with pytest.raises(AssertionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        check_saved(_relu(save), torch.relu, torch.randn(4, 5), saves=MASK)


def test_max_saved_bounds_count_and_size():
    check_saved(_relu(lambda ctx, x: ctx.save_for_backward(x > 0)), torch.relu, torch.randn(6), max_saved=1)
    with pytest.raises(AssertionError, match="at most 1 tensor"):
        check_saved(_relu(lambda ctx, x: ctx.save_for_backward(x, x > 0)), torch.relu, torch.randn(6), max_saved=1)


def test_saves_or_max_saved_not_both():
    with pytest.raises(TypeError):
        check_saved(_relu(lambda ctx, x: None), torch.relu, torch.randn(3), saves=[], max_saved=1)
