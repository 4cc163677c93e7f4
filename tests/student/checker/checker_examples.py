"""The Functions the checker's tests share, and the helpers they use.

The Functions are the kind students write: right ones, which the checker must accept quietly, and
wrong ones, for which it must raise ``AssertionError`` with a message that names the failing input
and, where the pattern is recognisable, the mistake. The tests' assertions look for key words
only, so the wording of the messages can improve without breaking them.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Function

from autograder import check_function


# --------------------------------------------------------------------------------------------
# Right Functions, written the way the course teaches them.


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output


class Relu(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[x < 0] = 0
        return grad_input


class Poly(Function):
    @staticmethod
    def forward(ctx, x1, x2):
        ctx.save_for_backward(x1, x2)
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        return 3 * x1 ** 2 * grad_output, 2 * x2 * grad_output


class PolySetupContext(Function):
    """Poly in the ``setup_context`` style: ``forward`` takes no ctx."""

    @staticmethod
    def forward(x1, x2):
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        return 3 * x1 ** 2 * grad_output, 2 * x2 * grad_output


class Scale(Function):
    """x * c for a Python number c: c gets None as its gradient."""

    @staticmethod
    def forward(ctx, x, c):
        ctx.c = c
        return x * c

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.c, None


class AddBias(Function):
    """x (n, m) + b (m,): b's gradient must be summed over the broadcast dimension."""

    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, grad_output.sum(0)


class MatMul(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad_output):
        a, b = ctx.saved_tensors
        return grad_output @ b.mT, a.mT @ grad_output


class Polar(Function):
    """Two outputs: (r, theta) of the point (x, y)."""

    @staticmethod
    def forward(ctx, x, y):
        r = torch.sqrt(x * x + y * y)
        ctx.save_for_backward(x, y, r)
        return r, torch.atan2(y, x)

    @staticmethod
    def backward(ctx, grad_r, grad_theta):
        x, y, r = ctx.saved_tensors
        return (grad_r * x / r - grad_theta * y / r ** 2,
                grad_r * y / r + grad_theta * x / r ** 2)


def _polar_forward_unmaterialized(ctx, x, y):
    ctx.set_materialize_grads(False)
    return Polar.forward(ctx, x, y)


class PolarCopesWithNone(Polar):
    """set_materialize_grads(False), and a backward that handles a None grad_output."""

    forward = staticmethod(_polar_forward_unmaterialized)

    @staticmethod
    def backward(ctx, grad_r, grad_theta):
        x, y, r = ctx.saved_tensors
        grad_x, grad_y = torch.zeros_like(x), torch.zeros_like(y)
        if grad_r is not None:
            grad_x, grad_y = grad_x + grad_r * x / r, grad_y + grad_r * y / r
        if grad_theta is not None:
            grad_x, grad_y = grad_x - grad_theta * y / r ** 2, grad_y + grad_theta * x / r ** 2
        return grad_x, grad_y


class Sort(Function):
    """Sorted values and their integer indices, marked non-differentiable."""

    @staticmethod
    def forward(ctx, x):
        values, indices = torch.sort(x)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        return torch.zeros_like(grad_values).scatter(-1, indices, grad_values)


class Double_(Function):
    """Doubles x in place, declared with ctx.mark_dirty."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


def polar(x, y):
    return torch.sqrt(x * x + y * y), torch.atan2(y, x)


def cube(x):
    return x ** 3


def poly(x1, x2):
    return x1 ** 3 + x2 ** 2


def matmul(a, b):
    return a @ b


# --------------------------------------------------------------------------------------------
# Wrong Functions. Most differ from a right one only in backward (or forward); ``variant``
# builds them. ``grads`` receives the saved tensors, then the gradients of the outputs.


def variant(base, name, *, grads=None, forward=None):
    namespace = {}
    if grads is not None:
        def backward(ctx, *grad_outputs):
            return grads(*ctx.saved_tensors, *grad_outputs)

        namespace["backward"] = staticmethod(backward)
    if forward is not None:
        namespace["forward"] = staticmethod(forward)
    return type(name, (base,), namespace)


def _via_autograd_grad(x, grad_output):
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        return torch.autograd.grad(x.clamp(min=0), x, grad_output)[0]


def _via_dot_backward(x, grad_output):
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        x.clamp(min=0).backward(grad_output)
        return x.grad


def _cube_forward_squares(ctx, x):
    ctx.save_for_backward(x)
    return x ** 2


def _not_implemented(*args):
    raise NotImplementedError()


CubeForgetsGradOutput = variant(Cube, "CubeForgetsGradOutput", grads=lambda x, g: 3 * x ** 2)
CubeSignFlipped = variant(Cube, "CubeSignFlipped", grads=lambda x, g: -3 * x ** 2 * g)
CubeFactorOff = variant(Cube, "CubeFactorOff", grads=lambda x, g: x ** 2 * g)
CubeWrongForward = variant(Cube, "CubeWrongForward", forward=_cube_forward_squares)
CubeBackwardTodo = variant(Cube, "CubeBackwardTodo", grads=_not_implemented)
CubeZeroGradient = variant(Cube, "CubeZeroGradient", grads=lambda x, g: torch.zeros_like(x))
ReluReturnsNone = variant(Relu, "ReluReturnsNone", grads=lambda x, g: None)
ReluSumsGradient = variant(Relu, "ReluSumsGradient", grads=lambda x, g: g.sum(0))
ReluEditsGradOutput = variant(Relu, "ReluEditsGradOutput", grads=lambda x, g: g.masked_fill_(x < 0, 0))
ReluCallsAutogradGrad = variant(Relu, "ReluCallsAutogradGrad", grads=_via_autograd_grad)
ReluCallsBackward = variant(Relu, "ReluCallsBackward", grads=_via_dot_backward)
PolySwapped = variant(Poly, "PolySwapped", grads=lambda x1, x2, g: (2 * x2 * g, 3 * x1 ** 2 * g))
PolyWrongX2 = variant(Poly, "PolyWrongX2", grads=lambda x1, x2, g: (3 * x1 ** 2 * g, 2 * x1 * g))
PolyOneGradient = variant(Poly, "PolyOneGradient", grads=lambda x1, x2, g: 3 * x1 ** 2 * g)
AddBiasUnsummed = variant(AddBias, "AddBiasUnsummed", grads=lambda g: (g, g))
MatMulTransposed = variant(MatMul, "MatMulTransposed", grads=lambda a, b, g: ((g @ b.mT).mT, a.mT @ g))
MatMulSwapped = variant(MatMul, "MatMulSwapped", grads=lambda a, b, g: (a.mT @ g, g @ b.mT))
MatMulFloat32 = variant(MatMul, "MatMulFloat32", grads=lambda a, b, g: ((g @ b.mT).float(), a.mT @ g))
PolarIgnoresTheta = variant(Polar, "PolarIgnoresTheta",
                            grads=lambda x, y, r, g_r, g_theta: (g_r * x / r, g_r * y / r))
PolarUnmaterialized = variant(Polar, "PolarUnmaterialized", forward=_polar_forward_unmaterialized)


class ScaleWithoutNone(Scale):
    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.c


class ScaleGradForC(Scale):
    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.c, grad_output


class ScaleSavesC(Scale):
    @staticmethod
    def forward(ctx, x, c):
        ctx.save_for_backward(x, c)
        return x * c


class CubeTemplate(Function):
    """The exercise cell as handed out."""

    @staticmethod
    def forward(ctx, x):
        # YOUR CODE HERE
        raise NotImplementedError()

    @staticmethod
    def backward(ctx, grad_output):
        # YOUR CODE HERE
        raise NotImplementedError()


class CubeIndexError(Cube):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x[10] ** 2 * grad_output


class CubeForwardNotStatic(Cube):
    """forward without @staticmethod, written for an instance: PyTorch passes ctx as `self`, and fails."""

    def forward(self, ctx, x):
        ctx.save_for_backward(x)
        return x ** 3


class CubeBackwardNotStatic(Cube):
    """backward without @staticmethod, written for an instance: PyTorch passes ctx as `self`, and fails."""

    def backward(self, ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output


# --------------------------------------------------------------------------------------------
# Helpers


def failure(function, reference, *args, check=check_function, **kwargs) -> str:
    """The checker's message for a wrong Function; any exception but AssertionError fails."""
    with pytest.raises(AssertionError) as info:
        check(function, reference, *args, **kwargs)
    return str(info.value)


def randn(*shape):
    """Arguments for a one-input Function: a fresh random tensor of ``shape``."""
    return lambda: (torch.randn(*shape),)

