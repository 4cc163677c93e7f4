"""Every entry point of the checker on one device, with right and wrong Functions: what should pass passes,
what should fail fails with the right words.

``run_cases(device)`` runs each case on tensors of ``device`` and returns one row per case: its entry
point, what it checks, what was expected, what happened, and whether the two agree. On a GPU the
Functions that make a tensor without ``device=`` must fail, saying so; on a CPU those same Functions
are right (every tensor is a CPU tensor), except under ``check_device``, which runs them on ``meta``
tensors and so finds them anywhere. ``python -m autograder.authoring.gpu_check`` runs them on CUDA;
the test suite runs them on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd import Function

from autograder import (check_built_on, check_callable, check_device, check_forward, check_function, check_saved,
                        check_values, check_with)
from autograder.student.checker.diagnoses import (check_backward_size, check_keeps_dtype, explain_known_mistakes,
                                                  explain_non_finite)


# --------------------------------------------------------------------------------------------
# Functions: right ones, and the mistakes a GPU shows


class Exp(Function):
    """exp(x), keeping its output (right)."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * y


class ExpOnesOnCpu(Exp):
    """A device mistake: backward multiplies by torch.ones(shape), made without device= (on the CPU)."""

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return grad_output * y * torch.ones(y.shape, dtype=y.dtype)


class ExpDoubled(Exp):
    """A math mistake: the gradient is twice the right one."""

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        return 2 * grad_output * y


class ExpSavesInput(Function):
    """Right values, but it keeps its input and recomputes exp (check_saved asks for the output)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * x.exp()


class ExpKeepsItsInput(Exp):
    """Saves its output, as asked, and keeps its input on ctx too, in a tuple (issue 39)."""

    @staticmethod
    def forward(ctx, x):
        ctx.inputs = (x,)
        return Exp.forward(ctx, x)


class ExpForwardOnCpu(Exp):
    """A device mistake in forward: it adds torch.zeros(shape), made on the CPU."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp() + torch.zeros(x.shape, dtype=x.dtype)
        ctx.save_for_backward(y)
        return y


class Scale(Function):
    """x * factor, for a Python number factor (right: None for the number)."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.factor, None


class TopK(Function):
    """The k largest values along the last dimension and their indices (assignment 04; right)."""

    @staticmethod
    def forward(ctx, x, k):
        values, indices = torch.topk(x, k)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.x_shape = x.shape
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad_x = torch.zeros(ctx.x_shape, dtype=grad_values.dtype, device=grad_values.device)
        return grad_x.scatter(-1, indices, grad_values), None


class TopKZerosOnCpu(TopK):
    """The device mistake assignment 04 warns about: the zeros of backward made without device=."""

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        grad_x = torch.zeros(ctx.x_shape, dtype=grad_values.dtype)
        return grad_x.scatter(-1, indices, grad_values), None


class SinSplit(Function):
    """sin(x) in the split style (setup_context), with a vmap rule and a jvp: right under every option."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * torch.cos(x)

    @staticmethod
    def jvp(ctx, x_tangent):
        (x,) = ctx.saved_tensors
        return x_tangent * torch.cos(x)


class SinNoJvp(SinSplit):
    """The same without jvp, for torch.compile (a Function with a jvp compiles only with graph breaks)."""

    jvp = Function.jvp


class ExpScale(torch.nn.Module):
    """A Module with a parameter, built with no arguments: exp(x) times its weight (right)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((3,), 0.5))  # float32, which every device has

    def forward(self, x):
        return Exp.apply(x) * self.weight


def exp_twice(x):
    return Exp.apply(x) * 2


def exp_twice_around(x):
    """2 exp(x) computed with torch, with Exp.apply added times 0: it does not follow Exp (issue 39)."""
    return 2 * x.exp() + 0 * Exp.apply(x)


def exp_twice_ones_on_cpu(x):
    return ExpOnesOnCpu.apply(x) * 2


def exp_twice_doubled(x):
    return ExpDoubled.apply(x) * 2


def sin_twice(x):
    return SinNoJvp.apply(x) * 2


def summed(t):
    return t.sum(dim=0)


def averaged(t):
    return t.mean(dim=0)


def gradient_of_sum(function, x):
    """A harness for check_with: the gradient of the sum of function.apply(x), as a list of numbers."""
    x = x.detach().requires_grad_(True)
    function.apply(x).sum().backward()
    return x.grad.tolist()


MISTAKES = {"doubled: backward returns twice the right gradient": lambda x, g: {"x": 2 * g * x.exp()}}


# --------------------------------------------------------------------------------------------
# The cases


@dataclass(frozen=True)
class Case:
    """One call of an entry point. ``fails``: None (must pass), or words its failure must contain;
    ``device_mistake``: the Function is right on a CPU and wrong on an accelerator (a tensor made
    there without device=), so it must pass on the CPU and fail elsewhere."""

    entry: str
    what: str
    call: Callable[[torch.device], object]
    fails: str | None = None
    device_mistake: bool = False


def _x(device, *shape, dtype=torch.float64):
    """Seeded random numbers on ``device`` (drawn on the CPU, the same on every device; float32 on mps,
    which has no float64)."""
    dtype = torch.float32 if torch.device(device).type == "mps" else dtype
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7), dtype=dtype).to(device)


def _no_ties(device):
    """A (3, 4, 6) tensor whose rows hold distinct values (a shuffled range), so the top k are unambiguous."""
    rows = [torch.randperm(6, generator=torch.Generator().manual_seed(r)) for r in range(12)]
    return torch.stack(rows).reshape(3, 4, 6).to(torch.float32).to(device)


ON_CPU_WORDS = "CPU tensor"  # "made a CPU tensor", or "returned a CPU tensor"
CASES = (
    Case("check_function", "right Exp", lambda d: check_function(Exp, torch.exp, _x(d, 3, 4))),
    Case("check_function", "right Scale (a Python number argument)",
         lambda d: check_function(Scale, lambda x, f: x * f, _x(d, 5), 2.5)),
    Case("check_function", "right TopK (two outputs, one of them integer)",
         lambda d: check_function(TopK, lambda x, k: torch.topk(x, k), _no_ties(d), 3)),
    Case("check_function", "Exp with a wrong gradient", lambda d: check_function(ExpDoubled, torch.exp, _x(d, 3, 4)),
         fails="2 times the right gradient"),
    Case("check_function", "Exp whose backward makes torch.ones without device=",
         lambda d: check_function(ExpOnesOnCpu, torch.exp, _x(d, 3, 4)), fails=ON_CPU_WORDS, device_mistake=True),
    Case("check_function", "TopK whose backward makes torch.zeros without device=",
         lambda d: check_function(TopKZerosOnCpu, lambda x, k: torch.topk(x, k), _no_ties(d), 3),
         fails=ON_CPU_WORDS, device_mistake=True),
    Case("check_function", "right SinSplit under vmap, forward-mode AD and double backward",
         lambda d: check_function(SinSplit, torch.sin, _x(d, 4, 3), vmap=True, forward_ad=True, double_backward=True)),
    Case("check_function", "right SinNoJvp under torch.compile",
         lambda d: check_function(SinNoJvp, torch.sin, _x(d, 4, 3), compile=True)),
    Case("check_forward", "right Exp", lambda d: check_forward(Exp, torch.exp, _x(d, 2, 5))),
    Case("check_forward", "Exp whose forward adds torch.zeros without device=",
         lambda d: check_forward(ExpForwardOnCpu, torch.exp, _x(d, 2, 5)), fails=ON_CPU_WORDS, device_mistake=True),
    Case("check_callable", "right function calling Exp", lambda d: check_callable(exp_twice, lambda x: 2 * x.exp(),
                                                                                  _x(d, 4), uses=("Exp",))),
    Case("check_callable", "right Module class with a parameter",
         lambda d: check_callable(ExpScale, lambda x: x.exp() * 0.5, _x(d, 2, 3))),
    Case("check_callable", "right function under vmap and torch.compile",
         lambda d: check_callable(sin_twice, lambda x: 2 * x.sin(), _x(d, 4), vmap=True, compile=True)),
    Case("check_callable", "function with a wrong gradient",
         lambda d: check_callable(exp_twice_doubled, lambda x: 2 * x.exp(), _x(d, 4)),
         fails="gradient for `x` is wrong"),
    Case("check_callable", "function whose Function makes torch.ones without device=",
         lambda d: check_callable(exp_twice_ones_on_cpu, lambda x: 2 * x.exp(), _x(d, 4)), fails=ON_CPU_WORDS,
         device_mistake=True),
    Case("check_saved", "right Exp keeps its output",
         lambda d: check_saved(Exp, torch.exp, _x(d, 3), saves=["output"])),
    Case("check_saved", "Exp that keeps its input",
         lambda d: check_saved(ExpSavesInput, torch.exp, _x(d, 3), saves=["output"]), fails="should be the output"),
    Case("check_saved", "Exp that keeps its input on ctx too",
         lambda d: check_saved(ExpKeepsItsInput, torch.exp, _x(d, 3), saves=["output"]),
         fails="ExpKeepsItsInput keeps a tensor (the input `x`) in `ctx.inputs[0]`, outside save_for_backward"),
    Case("check_built_on", "right function built on Exp", lambda d: check_built_on(
        exp_twice, lambda exp: lambda x: 2 * exp(x), _x(d, 3, 2), on={"Exp": torch.exp})),
    Case("check_built_on", "function that adds 0 * Exp.apply to its own result", lambda d: check_built_on(
        exp_twice_around, lambda exp: lambda x: 2 * exp(x), _x(d, 3, 2), on={"Exp": torch.exp}),
         fails="exp_twice_around does not follow Exp"),
    Case("check_values", "right sum over dim 0", lambda d: check_values(summed, lambda t: t.sum(dim=0), _x(d, 3, 2))),
    Case("check_values", "a mean where a sum is asked",
         lambda d: check_values(averaged, lambda t: t.sum(dim=0), _x(d, 3, 2)), fails="expected"),
    Case("check_with", "right Exp in a harness", lambda d: check_with(gradient_of_sum, Exp, ExpSavesInput, _x(d, 3))),
    Case("check_with", "Exp with a wrong gradient in a harness",
         lambda d: check_with(gradient_of_sum, ExpDoubled, ExpSavesInput, _x(d, 3)), fails="with a right ExpDoubled"),
    Case("check_device", "right TopK on meta tensors", lambda d: check_device(TopK, _no_ties("cpu"), 3)),
    Case("check_device", "TopK with CPU zeros in backward, on meta tensors",
         lambda d: check_device(TopKZerosOnCpu, _no_ties("cpu"), 3), fails="returned a CPU tensor"),
    Case("check_device", "Exp with CPU ones in backward, on meta tensors",
         lambda d: check_device(ExpOnesOnCpu, _x("cpu", 3)), fails=ON_CPU_WORDS),
    Case("check_device", "right TopK on this device", lambda d: check_device(TopK, _no_ties("cpu"), 3, device=d)),
    Case("check_device", "TopK with CPU zeros in backward, on this device",
         lambda d: check_device(TopKZerosOnCpu, _no_ties("cpu"), 3, device=d), fails=ON_CPU_WORDS,
         device_mistake=True),
    Case("diagnoses", "check_keeps_dtype: right Exp on float32",
         lambda d: check_keeps_dtype(Exp, _x(d, 4, dtype=torch.float32))),
    Case("diagnoses", "check_backward_size: right Exp", lambda d: check_backward_size(Exp, _x(d, 8), below=64)),
    Case("diagnoses", "explain_non_finite: right Exp",
         lambda d: explain_non_finite(Exp, (_x(d, 5),), "on small inputs", "forward advice", "backward advice")),
    Case("diagnoses", "explain_known_mistakes: right Exp",
         lambda d: explain_known_mistakes(Exp, (_x(d, 5),), MISTAKES)),
    Case("diagnoses", "explain_known_mistakes: the doubled gradient",
         lambda d: explain_known_mistakes(ExpDoubled, (_x(d, 5),), MISTAKES), fails="doubled"),
    Case("gradcheck", "torch.autograd.gradcheck and gradgradcheck: right SinSplit",
         lambda d: _assert(torch.autograd.gradcheck(SinSplit.apply, (_x(d, 4).requires_grad_(),))
                           and torch.autograd.gradgradcheck(SinSplit.apply, (_x(d, 4).requires_grad_(),)))),
)


def _assert(ok: bool) -> None:
    assert ok


def expected(case: Case, device) -> str | None:
    """The words ``case``'s failure must contain on ``device``, or None when it must pass."""
    if case.device_mistake and torch.device(device).type == "cpu":
        return None
    return case.fails


def run_cases(device, cases=CASES) -> list[dict]:
    """Each case on ``device``: one row with what was expected, what happened and whether they agree."""
    rows = []
    for case in cases:
        want = expected(case, device)
        try:
            case.call(torch.device(device))
            outcome, message = "passed", ""
        except AssertionError as error:
            outcome, message = "failed", str(error)
        except Exception as error:  # noqa: BLE001 - the checker itself broke: that is what this looks for
            outcome, message = "error", f"{type(error).__name__}: {error}"
        ok = outcome == "passed" if want is None else (outcome == "failed" and want in message)
        rows.append({"entry": case.entry, "case": case.what, "device": str(device),
                     "expected": "pass" if want is None else f"fail, saying {want!r}", "outcome": outcome,
                     "message": message[:600], "ok": ok})
    return rows
