"""The custom Functions the reference recordings of assignment 07 time, and the recorded variants.

They are exercise answers (assignment 02's ``SiLU``; 07's ``BiasGELU`` of Exercise 3, read from the
solution notebook itself, so that the record times the Function students write) or would pass their
tests (the compiled fused Function), so they stay with the instructor: the student's library
(``autograder.student.timing``) defines only the copy and torch's built-ins, and a notebook adds
the student's own Functions as ``Variant``s. ``record_timings`` times the variants listed here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from autograder.authoring.notebook_script import run_cells
from autograder.student.timing import COPY, Variant, variant

SOLUTION_07 = Path(__file__).resolve().parents[2] / "solutions" / "07_gpu_timing" / "07_gpu_timing.ipynb"
FUSED = "fused Function (compiled)"  # torch.compile'd kernels called inside forward and backward
# BiasGELU below: keeps one tensor, but its forward and backward are torch's own GELU kernels (gelu, gelu_backward),
# which the students' Function of Exercise 3 is not (its backward is written with erf and exp: about a dozen kernels).
FUSED_EAGER = "Function on torch's GELU kernels (eager)"
EXERCISE_3 = "Exercise 3's BiasGELU (eager)"  # the solution notebook's own Function
COMPILED_CALLER = "compiled caller (Exercise 3's BiasGELU inside)"  # torch.compile of the code that calls it


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
    """gelu(x + bias) on torch's own GELU kernels, keeping only the pre-activation h = x + bias.

    Each torch op is still its own kernel: two forward (add, gelu), two backward (torch's GELU
    derivative ``gelu_backward``, the bias sum). Not Exercise 3's Function (``exercise_3_bias_gelu``),
    whose backward computes the derivative from erf and exp in about a dozen kernels.
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


@functools.cache
def exercise_3_bias_gelu(notebook: Path = SOLUTION_07) -> type:
    """Exercise 3's ``BiasGELU`` as the solution notebook defines it (its cell ``bias_gelu``, run as plain Python)."""
    return run_cells(notebook, ["bias_gelu"], "solution_07", {"torch": torch, "math": math, "F": F})["BiasGELU"]


def calling(function: type) -> Callable:
    """``call(x, bias)`` that applies ``function``: code that calls a Function, for torch.compile or a CUDA graph to
    take whole (the class is a constant of the closure, so that tracing it reads no notebook)."""
    def call(x, bias):
        return function.apply(x, bias)
    return call


def _call_bias_gelu(x, bias):
    return exercise_3_bias_gelu().apply(x, bias)


@functools.cache
def compiled_caller() -> Callable:
    """The usual way to compile: the code that calls Exercise 3's eager ``BiasGELU``, compiled whole. torch.compile
    traces through the Function's forward and backward into graphs of its own, fused by inductor; no
    compiled code is called from inside the Function."""
    return _compiled(calling(exercise_3_bias_gelu()))


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
    Variant("bias_gelu", EXERCISE_3, _call_bias_gelu),
    Variant("bias_gelu", FUSED, FusedBiasGELU.apply, compiled=True),
    Variant("bias_gelu", COMPILED_CALLER, lambda x, bias: compiled_caller()(x, bias), compiled=True),
)
