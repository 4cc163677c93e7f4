"""check_built_on: a Module built on the student's Function follows it when it changes (autograder.student.checker.built_on)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from autograder import check_built_on
from autograder.student.checker.built_on import other, stand_in, substituted

POLY = '''
import torch
from torch import nn


class PolyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2):
        ctx.save_for_backward(x1, x2)
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        return grad_output * 3 * x1 ** 2, grad_output * 2 * x2


poly = PolyFunction.apply


class Net(nn.Module):
    function = PolyFunction

    def forward(self, x1, x2):
        BODY
'''
SPLIT = '''
class PolyFunction(torch.autograd.Function):  # forward without ctx, and setup_context
    @staticmethod
    def forward(x1, x2):
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs, output)

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2, output = ctx.saved_tensors
        assert torch.allclose(output, x1 ** 3 + x2 ** 2), "setup_context sees forward's own output"
        return grad_output * 3 * x1 ** 2, grad_output * 2 * x2
'''
VJP = '''
class PolyFunction(torch.autograd.Function):  # classmethods, and vjp in place of backward
    @classmethod
    def forward(cls, ctx, x1, x2):
        ctx.save_for_backward(x1, x2)
        return x1 ** 3 + x2 ** 2

    @classmethod
    def vjp(cls, ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        return grad_output * 3 * x1 ** 2, grad_output * 2 * x2
'''
RIGHT = "(x1 ** 3 + x2 ** 2).sum()"


def net_on(poly):
    return lambda x1, x2: poly(x1, x2).sum()


def _net(body: str, poly: str = "") -> types.ModuleType:
    """The module a notebook's cells make: PolyFunction (or ``poly``'s), and a Net whose forward is ``body``."""
    module = types.ModuleType(f"built_on_{abs(hash((body, poly)))}")
    sys.modules[module.__name__] = module
    source = POLY.replace("BODY", body)
    if poly:
        source = source.replace("\npoly = PolyFunction.apply", poly + "\npoly = PolyFunction.apply")
    exec(source, module.__dict__)
    return module


def _check(module, shapes=((6,), (2, 3), ())) -> None:
    for shape in shapes:
        check_built_on(module.Net, net_on, torch.randn(shape), torch.randn(shape),
                       on={"PolyFunction": lambda x1, x2: x1 ** 3 + x2 ** 2})


@pytest.mark.parametrize("body, poly", [
    ("return PolyFunction.apply(x1, x2).sum()", ""),
    ("return poly(x1, x2).sum()", ""),  # the alias torch's docs recommend
    ("return self.function.apply(x1, x2).sum()", ""),  # a class attribute bound when Net was defined
    ("return PolyFunction.apply(x1, x2).sum()", SPLIT),
    ("return PolyFunction.apply(x1, x2).sum()", VJP),
])
def test_a_net_built_on_the_function_follows_it_however_it_reaches_it(body, poly):
    module = _net(body, poly)
    originals = dict(vars(module.PolyFunction))
    _check(module)
    assert dict(vars(module.PolyFunction)) == originals  # the Function is put back as it was


BROKEN_X2 = POLY.replace("grad_output * 2 * x2", "grad_output * x2")  # a PolyFunction whose x2 gradient is half
# The right result computed otherwise, and PolyFunction used only in appearance.
LOOKS_BUILT_ON = {
    "adds_zero_times_poly": (f"return {RIGHT} + 0 * PolyFunction.apply(x1, x2).sum()", "Net does not follow PolyFunction: "
                             "with PolyFunction replaced by another function of the same inputs"),
    # The value from PolyFunction on detached copies, the gradient from torch: the graph holds PolyFunction's node
    # through a term that is zero.
    "on_a_detached_copy": ("p = PolyFunction.apply(x1.detach(), x2.detach())\n        r = x1 ** 3 + x2 ** 2\n"
                           "        return (r + (p - r).detach()).sum() + 0 * PolyFunction.apply(x1, x2).sum()",
                           "the gradient for `x1` is wrong"),
    "discards_poly": (f"PolyFunction.apply(x1, x2)\n        return {RIGHT}", "Net's output should come from PolyFunction.apply"),
    "on_the_visible_shape_only": (f"if x1.shape == (3,):\n            return PolyFunction.apply(x1, x2).sum()\n"
                                  f"        return {RIGHT}", "Net's output should come from PolyFunction.apply"),
    # The value from PolyFunction, the gradient computed by Net itself.
    "its_own_gradient": ("p = PolyFunction.apply(x1, x2)\n        r = x1 ** 3 + x2 ** 2\n"
                         "        return (p + (r - r.detach())).sum() - (p - p.detach()).sum()",
                         "Net does not follow PolyFunction"),
}


@pytest.mark.parametrize("name", sorted(LOOKS_BUILT_ON))
def test_a_net_that_only_looks_built_on_the_function_fails(name):
    body, says = LOOKS_BUILT_ON[name]
    with pytest.raises(AssertionError, match=says.replace("(", r"\(").replace(")", r"\)")):
        _check(_net(body))


# Issue 45: a PolyFunction whose backward is wrong (x2's gradient half the right one), and a Net that mends it: it
# calls PolyFunction twice, the second time with x1 detached, so that x2's gradient path runs through it twice.
# With PolyFunction shifted and its gradients scaled (the check before issue 45), Net followed. This one mends only
# where PolyFunction's values are the polynomial's, and follows otherwise: it follows PolyFunction replaced by
# another function (values and gradients), and not PolyFunction keeping its forward with another backward.
MENDING = ("p = PolyFunction.apply(x1, x2)\n        if not torch.equal(p.detach(), (x1 ** 3 + x2 ** 2).detach()):\n"
           "            return p.sum()\n        q = PolyFunction.apply(x1.detach(), x2)\n"
           "        return (p + (q - q.detach())).sum()")


def test_a_net_that_mends_a_wrong_backward_of_its_function_does_not_follow_it():
    module = types.ModuleType("built_on_mending")
    sys.modules[module.__name__] = module
    exec(BROKEN_X2.replace("BODY", MENDING), module.__dict__)
    x1, x2 = torch.randn(5, dtype=torch.float64, requires_grad=True), torch.randn(5, dtype=torch.float64, requires_grad=True)
    module.Net()(x1, x2).backward()
    assert torch.allclose(x2.grad, 2 * x2)  # right, with the real (wrong) PolyFunction: it mends it
    with pytest.raises(AssertionError, match="keeping its forward but given the backward of another function"):
        _check(module)
    # An honest Net on the same wrong PolyFunction follows it (its own test, which compares with the right poly, fails).
    honest = types.ModuleType("built_on_honest_on_broken")
    sys.modules[honest.__name__] = honest
    exec(BROKEN_X2.replace("BODY", "return PolyFunction.apply(x1, x2).sum()"), honest.__dict__)
    with pytest.raises(AssertionError, match="the gradient for `x2` is wrong") as failure:
        _check(honest)
    assert "does not follow" not in str(failure.value)  # the unchanged check fails, not the follow checks


def test_a_missing_function_is_named():
    module = _net(f"return {RIGHT}")
    del module.PolyFunction
    with pytest.raises(AssertionError, match="your notebook has no torch.autograd.Function named PolyFunction"):
        _check(module, shapes=((3,),))


@pytest.mark.parametrize("kind", ["values", "gradients"])
def test_the_stand_in_and_the_substituted_function_change_alike(kind):
    """What the referee computes (the stand-in) and what the examinee runs (the student's Function, changed)."""
    module = _net("return PolyFunction.apply(x1, x2).sum()")
    x1, x2, g = (torch.randn(4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    Standin = stand_in("PolyFunction", lambda a, b: a ** 3 + b ** 2, change=(kind, 7))
    want = Standin.apply(x1, x2)
    with substituted([module.PolyFunction], (kind, 7)):  # (backward runs while it is changed too)
        got = module.PolyFunction.apply(x1, x2)
        grads = torch.autograd.grad(got, (x1, x2), g)
    poly = x1 ** 3 + x2 ** 2
    (replaced,) = other(7, (x1, x2), (poly,))
    assert torch.allclose(got, want) and torch.allclose(got, replaced if kind == "values" else poly)
    assert type(want.grad_fn).__name__ == type(got.grad_fn).__name__ == "PolyFunctionBackward"
    right = torch.autograd.grad(replaced, (x1, x2), g)
    for a, b, c in zip(grads, torch.autograd.grad(want, (x1, x2), g), right):
        assert torch.allclose(a, b) and torch.allclose(a, c)
    # Another function indeed: its gradient is not the polynomial's, nor a multiple of it
    assert not torch.allclose(right[0] / (g * 3 * x1 ** 2), (right[0] / (g * 3 * x1 ** 2)).mean().expand(4))


LAYER = '''
import torch
import torch.nn.functional as F
from torch import nn


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, (g * x).sum(0)


class Layer(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return OUTPUT
'''


def losses(Layer, n, x):  # a harness, as a notebook's visible cell defines it: a short training loop
    layer = Layer(n)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    found = []
    for _ in range(5):
        loss = (layer(x) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        found.append(loss.item())
    return found


def layer_on(scale):
    class Reference(torch.nn.Module):
        def __init__(self, n):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(n))

        def forward(self, x):
            return scale(x, self.w)

    return Reference


@pytest.mark.parametrize("output, says", [("Scale.apply(x, self.w)", None),
                                          ("x * self.w + 0 * Scale.apply(x, self.w)", "Layer does not follow Scale")])
def test_with_a_harness_the_harness_results_must_follow_the_function(output, says):
    module = types.ModuleType(f"layer_{abs(hash(output))}")
    sys.modules[module.__name__] = module
    exec(LAYER.replace("OUTPUT", output), module.__dict__)
    check = lambda: check_built_on(module.Layer, layer_on, 3, torch.randn(8, 3), on={"Scale": lambda x, w: x * w},  # noqa: E731
                                   harness=losses, rtol=1e-6, atol=1e-9)
    if says is None:
        check()
    else:
        with pytest.raises(AssertionError, match=says):
            check()
