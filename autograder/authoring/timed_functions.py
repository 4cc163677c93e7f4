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

FUSED = "fused Function (compiled)"  # torch.compile'd kernels called inside forward and backward
FUSED_EAGER = "fused Function (eager)"
COMPILED_CALLER = "compiled caller (eager Function inside)"  # torch.compile of the code that calls the Function


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


def _compiled(function: Callable) -> Callable:
    """``function`` compiled by torch.compile (Triton on CUDA, C++ on the CPU), once per tensor shape."""
    # One static compilation per size of the sweep: more than dynamo's default limit of 8.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(function, dynamic=False, fullgraph=True)


@functools.cache
def compiled_kernels() -> tuple[Callable, Callable]:
    """(forward, backward) of bias-GELU, each compiled into one fused kernel, on first use."""
    return _compiled(_fused_forward), _compiled(_fused_backward)


def _call_bias_gelu(x, bias):
    return BiasGELU.apply(x, bias)


@functools.cache
def compiled_caller() -> Callable:
    """The usual way to compile: the code that calls the eager ``BiasGELU``, compiled whole. torch.compile
    traces through the Function's forward and backward into graphs of its own, fused by inductor; no
    compiled code is called from inside the Function."""
    return _compiled(_call_bias_gelu)


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
    Variant("bias_gelu", COMPILED_CALLER, lambda x, bias: compiled_caller()(x, bias), compiled=True),
)
