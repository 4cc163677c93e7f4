"""Honest answers to 01 (first Function): what students write, in several styles (see test_scan.py)."""

# %% cube
class Cube(torch.autograd.Function):
    """x ** 3, with its derivative 3 x ** 2."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.pow(3)

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        return grad_output.mul(input.pow(2)).mul(3)

# %% cube
from torch.autograd import Function


class Cube(Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:
        x = ctx.saved_tensors[0]
        assert grad_output.shape == x.shape, f"shapes differ: {tuple(grad_output.shape)} vs {tuple(x.shape)}"
        return 3.0 * x.square() * grad_output

# %% cube
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        squared = x * x
        ctx.save_for_backward(squared)  # all backward needs
        return squared * x

    @staticmethod
    def backward(ctx, grad_output):
        squared, = ctx.saved_variables  # the old spelling, still in published code
        return grad_output * 3 * squared

# %% cube
class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 3 * x ** 2


# checking it right here, with the course's checker, before moving on
check_function(Cube, lambda t: t ** 3, torch.randn(4, dtype=torch.float64))

# %% sqrt
import math


class Sqrt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"Sqrt expects a tensor, got {type(x).__name__}")
        out = torch.sqrt(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (out,) = ctx.saved_tensors
        return grad_output * 0.5 / out

# %% sqrt
class Sqrt(torch.autograd.Function):
    @classmethod
    def forward(cls, ctx, x):
        y = x ** 0.5
        ctx.save_for_backward(y)
        return y

    @classmethod
    def backward(cls, ctx, grad_output):
        y, = ctx.saved_tensors
        return torch.div(grad_output, y.mul(2))

# %% sqrt
class Sqrt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        result = x.sqrt()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        result = ctx.saved_tensors[0]
        return grad_output * torch.reciprocal(2 * result)

# %% poly_function
class PolyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2):
        ctx.save_for_backward(x1, x2)
        return torch.add(torch.pow(x1, 3), torch.pow(x2, 2))

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        grad_x1 = grad_x2 = None
        if ctx.needs_input_grad[0]:
            grad_x1 = 3 * x1 ** 2 * grad_output
        if ctx.needs_input_grad[1]:
            grad_x2 = 2 * x2 * grad_output
        return grad_x1, grad_x2

# %% poly_function
from typing import Optional, Tuple


class PolyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x1, x2)
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        x1, x2 = ctx.saved_tensors
        return tuple(g * grad_output for g in (3 * x1 ** 2, 2 * x2))

# %% net
class Poly(nn.Module):
    def forward(self, x1, x2):
        return PolyFunction.apply(x1, x2)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.poly = Poly()

    def forward(self, x1, x2):
        y = self.poly(x1, x2)
        return y.sum()

    def __repr__(self):
        return f"{self.__class__.__name__}(poly={self.poly!r})"

# %% net
import torch.nn as nn


class Poly(nn.Module):
    """A module around PolyFunction, so it can sit in a model."""

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        return PolyFunction.apply(x1, x2)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Poly()])

    def forward(self, x1, x2):
        out = x1.new_zeros(x1.shape)
        for layer in self.layers:
            out = out + layer(x1, x2)
        return torch.sum(out)
