"""Tests for the optional checks (``autograder.student.checker.optional``): vmap, forward-mode AD,
double backward and torch.compile.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

from autograder import check_function
from checker_examples import (
    Cube, cube, CubeSignFlipped, failure, polar, Poly, poly, randn, Sort,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# --------------------------------------------------------------------------------------------
# Optional checks: vmap, forward-mode AD (jvp), double backward, torch.compile. Each is off by
# default; the wrong Functions below pass the ordinary checks and fail only the option about them.


class CubeModern(Function):
    """Cube in the split style with a generated vmap rule: what torch.func and vmap need."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x ** 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output


class CubeWithJvp(CubeModern):
    """CubeModern with forward-mode AD: jvp reads what setup_context saved with save_for_forward."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * x_t


class CubeHandWrittenVmap(CubeModern):
    """A hand-written vmap rule: move the batch dimension to the front, run the Function on the batch."""

    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, x):
        return CubeModern.apply(x.movedim(in_dims[0], 0)), 0


class PolyModern(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x1, x2):
        return x1 ** 3 + x2 ** 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad_output):
        x1, x2 = ctx.saved_tensors
        return 3 * x1 ** 2 * grad_output, 2 * x2 * grad_output

    @staticmethod
    def jvp(ctx, x1_t, x2_t):
        x1, x2 = ctx.saved_tensors
        return 3 * x1 ** 2 * x1_t + 2 * x2 * x2_t


class PolarModern(Function):
    """Two outputs, split style, generated vmap rule, and a jvp."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, y):
        return torch.sqrt(x * x + y * y), torch.atan2(y, x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs, output[0])
        ctx.save_for_forward(*inputs, output[0])

    @staticmethod
    def backward(ctx, grad_r, grad_theta):
        x, y, r = ctx.saved_tensors
        return (grad_r * x / r - grad_theta * y / r ** 2,
                grad_r * y / r + grad_theta * x / r ** 2)

    @staticmethod
    def jvp(ctx, x_t, y_t):
        x, y, r = ctx.saved_tensors
        return (x * x_t + y * y_t) / r, (x * y_t - y * x_t) / r ** 2


class ScaleModern(Function):
    """A non-tensor argument: it is never batched, has no tangent and gets None as its gradient."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x, c):
        return x * c

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.c = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.c, None

    @staticmethod
    def jvp(ctx, x_t, c_t):
        return x_t * ctx.c


class CubeNoVmapRule(CubeModern):
    generate_vmap_rule = False


class CubeVmapRuleAssumesDim0(CubeHandWrittenVmap):
    @staticmethod
    def vmap(info, in_dims, x):
        return CubeModern.apply(x), 0  # ignores in_dims: wrong when the batch is not in dim 0


class CubeVmapRuleReturnsOutputOnly(CubeHandWrittenVmap):
    @staticmethod
    def vmap(info, in_dims, x):
        return CubeModern.apply(x.movedim(in_dims[0], 0))


class PolyVmapRuleBatchesEverything(PolyModern):
    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, x1, x2):
        return PolyModern.apply(x1.movedim(in_dims[0], 0), x2.movedim(in_dims[1], 0)), 0


class CubeJvpForgetsTangent(CubeWithJvp):
    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2


class CubeJvpWithoutSaveForForward(CubeWithJvp):
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])


class PolyJvpWrongForX2(PolyModern):
    @staticmethod
    def jvp(ctx, x1_t, x2_t):
        x1, x2 = ctx.saved_tensors
        return 3 * x1 ** 2 * x1_t + x2 * x2_t


class CubeJvpReturnsSum(CubeWithJvp):
    @staticmethod
    def jvp(ctx, x_t):
        (x,) = ctx.saved_tensors
        return (3 * x ** 2 * x_t).sum()


class CubeSavesSquare(CubeModern):
    """Saves the intermediate x ** 2 computed in forward: right once, a constant to double backward."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0] ** 2)

    @staticmethod
    def backward(ctx, grad_output):
        (x_squared,) = ctx.saved_tensors
        return 3 * x_squared * grad_output


class CubeOnceDifferentiable(CubeModern):
    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output


class CubeDetachesGradient(CubeModern):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (3 * x ** 2 * grad_output).detach()


class CubeBranchesInBackward(CubeModern):
    """Scales large gradients down with a Python `if` on a tensor's value: a graph break."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        if grad_output.abs().max() > 1e6:
            grad_output = grad_output / 1e6
        return 3 * x ** 2 * grad_output


_ALL_OPTIONS = {"vmap": True, "forward_ad": True, "double_backward": True, "compile": True}


@pytest.mark.parametrize(
    "function, reference, make_args, options",
    [
        pytest.param(CubeModern, cube, randn(3, 4), {"vmap": True, "double_backward": True, "compile": True},
                     id="generated-vmap-rule"),
        pytest.param(CubeHandWrittenVmap, cube, randn(3, 4), {"vmap": True}, id="hand-written-vmap-rule"),
        pytest.param(CubeHandWrittenVmap, cube, lambda: (torch.tensor(1.5),), {"vmap": True}, id="vmap-0-dim"),
        pytest.param(CubeWithJvp, cube, randn(3, 4), {"vmap": True, "forward_ad": True, "double_backward": True},
                     id="jvp"),
        pytest.param(PolyModern, poly, lambda: (torch.randn(5), torch.randn(5)),
                     {"vmap": True, "forward_ad": True, "double_backward": True}, id="two-inputs"),
        pytest.param(PolarModern, polar, lambda: (torch.randn(4), torch.randn(4)),
                     {"vmap": True, "forward_ad": True, "double_backward": True}, id="two-outputs"),
        pytest.param(ScaleModern, lambda x, c: x * c, lambda: (torch.randn(4), 2.5),
                     {"vmap": True, "forward_ad": True, "double_backward": True}, id="non-tensor-argument"),
        pytest.param(Poly, poly, lambda: (torch.randn(5), torch.randn(5)), {"double_backward": True, "compile": True},
                     id="old-style-double-backward-and-compile"),
        pytest.param(Sort, torch.sort, randn(6), {"double_backward": True, "compile": True},
                     id="integer-output-compile"),
    ],
)
def test_right_function_passes_the_optional_checks(function, reference, make_args, options):
    assert check_function(function, reference, *make_args(), **options) is None


@pytest.mark.parametrize(
    "function, reference, make_args, option, words",
    [
        pytest.param(CubeNoVmapRule, cube, randn(3, 4), "vmap",
                     ["under vmap", "no vmap support", "generate_vmap_rule = True", "vmap staticmethod"],
                     id="vmap-no-rule"),
        pytest.param(Cube, cube, randn(3, 4), "vmap", ["under vmap", "split style", "setup_context"],
                     id="vmap-old-style"),
        pytest.param(CubeVmapRuleAssumesDim0, cube, randn(3, 4), "vmap",
                     ["under vmap (batch along the last dim)", "forward's output", "in_dims"],
                     id="vmap-rule-assumes-dim-0"),
        pytest.param(CubeVmapRuleReturnsOutputOnly, cube, randn(3, 4), "vmap",
                     ["under vmap", "must return two things", "out_dims"], id="vmap-rule-without-out-dims"),
        pytest.param(PolyVmapRuleBatchesEverything, poly, lambda: (torch.randn(5), torch.randn(5)), "vmap",
                     ["under vmap (only `x1` batched)", "in vmap, line", "in_dims holds None"],
                     id="vmap-rule-ignores-unbatched"),
        pytest.param(CubeBranchesInBackward, cube, randn(3, 4), "vmap",
                     ["under vmap", "a different branch for each example", "torch.where", "in backward, line"],
                     id="vmap-branch-in-backward"),
        pytest.param(CubeModern, cube, randn(3, 4), "forward_ad",
                     ["forward-mode AD (jvp)", "no jvp staticmethod", "save_for_forward"], id="jvp-missing"),
        pytest.param(CubeJvpForgetsTangent, cube, randn(3, 4), "forward_ad",
                     ["forward-mode AD (jvp)", "tangent of forward's output is wrong", "multiply by the tangent"],
                     id="jvp-forgets-tangent"),
        pytest.param(PolyJvpWrongForX2, poly, lambda: (torch.randn(5), torch.randn(5)), "forward_ad",
                     ["forward-mode AD (jvp)", "tangent of `x2` is wrong"], id="jvp-wrong-for-one-input"),
        pytest.param(CubeJvpWithoutSaveForForward, cube, randn(3, 4), "forward_ad",
                     ["forward-mode AD (jvp)", "ValueError", "only the tensors saved with ctx.save_for_forward"],
                     id="jvp-without-save-for-forward"),
        pytest.param(CubeJvpReturnsSum, cube, randn(3, 4), "forward_ad",
                     ["forward-mode AD (jvp)", "shape []", "shape [3, 4]"], id="jvp-wrong-shape"),
        pytest.param(CubeSavesSquare, cube, randn(3, 4), "double_backward",
                     ["double backward", "with respect to `x` is wrong", "Yours is zero", "intermediate"],
                     id="double-backward-saved-intermediate"),
        pytest.param(CubeOnceDifferentiable, cube, randn(3, 4), "double_backward",
                     ["double backward", "@once_differentiable"], id="double-backward-once-differentiable"),
        pytest.param(CubeDetachesGradient, cube, randn(3, 4), "double_backward",
                     ["double backward", "gradient for `x` is not differentiable", ".detach()"],
                     id="double-backward-detached"),
        pytest.param(CubeBranchesInBackward, cube, randn(3, 4), "compile",
                     ["under torch.compile", "one graph", "data-dependent", "in backward, line",
                      "grad_output.abs().max() > 1e6", "torch.where"], id="compile-branch-in-backward"),
        pytest.param(CubeWithJvp, cube, randn(3, 4), "compile",
                     ["under torch.compile", "custom jvp"], id="compile-function-with-jvp"),
    ],
)
def test_optional_check_names_itself_when_it_fails(function, reference, make_args, option, words):
    args = make_args()
    assert check_function(function, reference, *args) is None, "the ordinary checks should pass"
    message = failure(function, reference, *args, **{option: True})
    for word in words:
        assert word in message


def test_optional_checks_are_off_by_default():
    """Without options, a Function that has no vmap rule, no jvp and a graph break passes."""
    assert check_function(CubeBranchesInBackward, cube, torch.randn(4)) is None


def test_optional_checks_run_after_the_ordinary_ones_pass():
    message = failure(CubeSignFlipped, cube, torch.randn(5), **_ALL_OPTIONS)
    assert "sign" in message
    assert "under vmap" not in message and "under torch.compile" not in message


@pytest.mark.parametrize("options", [pytest.param({k: True}, id=k) for k in _ALL_OPTIONS])
def test_optional_checks_leave_rng_and_stderr_alone(options, capfd):
    """nbgrader scores a test cell that writes to stderr zero: a passing check must print nothing."""
    function = CubeWithJvp if options.get("forward_ad") else CubeModern
    x = torch.randn(3, 4)
    before = torch.random.get_rng_state()
    assert check_function(function, cube, x, **options) is None
    assert torch.equal(torch.random.get_rng_state(), before)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_patched_transforms_do_not_make_a_wrong_function_pass():
    saved = torch.compile, torch.func.vmap, torch.autograd.forward_ad.make_dual
    try:
        torch.compile = lambda fn, **kwargs: fn
        torch.func.vmap = lambda fn, **kwargs: fn
        torch.autograd.forward_ad.make_dual = lambda primal, tangent: primal
        assert "data-dependent" in failure(CubeBranchesInBackward, cube, torch.randn(4), compile=True)
        assert "no vmap support" in failure(CubeNoVmapRule, cube, torch.randn(4), vmap=True)
        assert "multiply by the tangent" in failure(CubeJvpForgetsTangent, cube, torch.randn(4), forward_ad=True)
    finally:
        torch.compile, torch.func.vmap, torch.autograd.forward_ad.make_dual = saved
