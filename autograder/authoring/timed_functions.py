"""The custom Functions the reference recordings of assignment 07 time, and the recorded variants.

They are exercise answers (assignment 02's ``SiLU``, 07's ``BiasGELU``) or would pass their
tests (the compiled fused Function), so they stay with the instructor: the student's library
(``autograder.student.timing``) defines only the copy and torch's built-ins, and a notebook adds
the student's own Functions as ``Variant``s. ``record_timings`` times the variants listed here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

from autograder.student.timing import COPY, Variant, variant

FUSED = "fused Function (compiled)"
FUSED_EAGER = "fused Function (eager)"


class SiLU(torch.autograd.Function):
    """x * sigmoid(x), keeping only x and recomputing sigmoid(x) in backward (assignment 02)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * s * (1 + x * (1 - s))


def _bias_grad(grad_h: torch.Tensor, bias_shape: torch.Size) -> torch.Tensor:
    """The bias was broadcast over the leading dimensions: its gradient sums over them.

    ``sum_to_size``, not ``sum(dim=tuple(range(grad_h.dim() - 1)))``: for a 1-D input that tuple
    is empty, and ``sum(dim=())`` sums over every dimension.
    """
    return grad_h.sum_to_size(bias_shape)


class BiasGELU(torch.autograd.Function):
    """gelu(x + bias) in eager torch ops, keeping only the pre-activation h = x + bias.

    Each torch op is still its own kernel: two forward (add, gelu), two backward (torch's GELU
    derivative, the bias sum). What the Function saves is memory: one tensor instead of three.
    """

    @staticmethod
    def forward(ctx, x, bias):
        h = x + bias
        ctx.save_for_backward(h)
        ctx.bias_shape = bias.shape  # a shape, not a tensor: an attribute is fine
        return F.gelu(h)

    @staticmethod
    def backward(ctx, grad_output):
        (h,) = ctx.saved_tensors
        grad_h = torch.ops.aten.gelu_backward(grad_output, h)
        return grad_h, _bias_grad(grad_h, ctx.bias_shape)


def _fused_forward(x, bias):
    return F.gelu(x + bias)


def _fused_backward(grad_output, x, bias):
    grad_h = torch.ops.aten.gelu_backward(grad_output, x + bias)
    return grad_h, _bias_grad(grad_h, bias.shape)


@functools.cache
def compiled_kernels() -> tuple[Callable, Callable]:
    """(forward, backward) of bias-GELU, each compiled by torch.compile into one fused kernel
    (Triton on CUDA, C++ on the CPU); compiled once per tensor shape, on first use."""
    # One static compilation per size of the sweep: more than dynamo's default limit of 8.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return (torch.compile(_fused_forward, dynamic=False, fullgraph=True),
            torch.compile(_fused_backward, dynamic=False, fullgraph=True))


class FusedBiasGELU(torch.autograd.Function):
    """gelu(x + bias) with one fused kernel each way (torch.compile).

    A fused kernel reads x and bias and writes the output without storing x + bias: it keeps only
    its inputs for backward and recomputes x + bias there, for free, since an elementwise kernel
    waits on memory, not on arithmetic.
    """

    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        return compiled_kernels()[0](x, bias)

    @staticmethod
    def backward(ctx, grad_output):
        x, bias = ctx.saved_tensors
        return compiled_kernels()[1](grad_output, x, bias)


# What the recordings time, in this order: the library's copy and built-ins, with these Functions.
VARIANTS = (
    variant(COPY),
    variant("built-in F.silu"),
    Variant("silu", "custom Function SiLU", lambda x, bias: SiLU.apply(x)),
    variant("built-in F.gelu(x + bias)"),
    variant("unfused composition"),
    Variant("bias_gelu", FUSED_EAGER, BiasGELU.apply),
    Variant("bias_gelu", FUSED, FusedBiasGELU.apply, compiled=True),
)
