"""Tests for ``autograder.check_function``, the gradient checker every assignment relies on.

The Functions below are the kind students write: right ones, which the checker must accept
quietly, and wrong ones, for which it must raise ``AssertionError`` with a message that names
the failing input and, where the pattern is recognisable, the mistake. The assertions look for
key words only, so the wording of the messages can improve without breaking these tests.
"""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable

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


class CubeForwardNotStatic(Function):
    def forward(ctx, x):
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class CubeBackwardNotStatic(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad_output


# --------------------------------------------------------------------------------------------
# Helpers


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def failure(function, reference, *args, **kwargs) -> str:
    """The checker's message for a wrong Function; any exception but AssertionError fails."""
    with pytest.raises(AssertionError) as info:
        check_function(function, reference, *args, **kwargs)
    return str(info.value)


def randn(*shape):
    """Arguments for a one-input Function: a fresh random tensor of ``shape``."""
    return lambda: (torch.randn(*shape),)


# --------------------------------------------------------------------------------------------
# Right Functions pass quietly


@pytest.mark.parametrize(
    "function, reference, make_args",
    [
        pytest.param(Cube, cube, lambda: (torch.randn(3, 4),), id="one-input"),
        pytest.param(Poly, poly, lambda: (torch.randn(5), torch.randn(5)), id="two-inputs"),
        pytest.param(PolySetupContext, poly, lambda: (torch.randn(5), torch.randn(5)), id="setup-context"),
        pytest.param(Scale, lambda x, c: x * c, lambda: (torch.randn(4), 2.5), id="non-tensor-argument"),
        pytest.param(AddBias, lambda x, b: x + b, lambda: (torch.randn(2, 3), torch.randn(3)), id="broadcast-summed"),
        pytest.param(Polar, polar, lambda: (torch.randn(4), torch.randn(4)), id="two-outputs"),
        pytest.param(PolarCopesWithNone, polar, lambda: (torch.randn(4), torch.randn(4)),
                     id="two-outputs-unmaterialized"),
        pytest.param(Sort, torch.sort, lambda: (torch.randn(6),), id="non-differentiable-integer-output"),
        pytest.param(MatMul, matmul, lambda: (torch.randn(2, 3), torch.randn(3, 4)), id="matrix-product"),
        pytest.param(MatMul, matmul, lambda: (torch.randn(16, 16) * 100, torch.randn(16, 16) * 100),
                     id="float32-args"),
        pytest.param(Poly, poly, lambda: (torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True) * 2),
                     id="args-require-grad-and-non-leaf"),
    ],
)
def test_right_function_returns_none(function, reference, make_args):
    assert check_function(function, reference, *make_args()) is None


def test_float32_args_reach_the_function_as_float64():
    seen = []

    def forward(ctx, x):
        seen.append(x.dtype)
        return Cube.forward(ctx, x)

    check_function(variant(Cube, "CubeRecordsDtype", forward=forward), cube, torch.randn(5, dtype=torch.float32))
    assert seen and set(seen) == {torch.float64}


def test_inplace_function_with_mark_dirty_passes_with_inplace_true():
    assert check_function(Double_, lambda x: x * 2, torch.randn(4), inplace=True) is None


# --------------------------------------------------------------------------------------------
# Wrong Functions: what the message says


def test_names_the_failing_input_by_its_parameter_name():
    message = failure(PolyWrongX2, poly, torch.randn(5), torch.randn(5))
    assert "`x2`" in message
    assert "`x1`" not in message


def test_message_shows_torch_against_yours():
    message = failure(CubeFactorOff, cube, torch.randn(3, 4))
    assert "CubeFactorOff" in message
    for words in ("torch", "yours", "largest error", "at index"):
        assert words in message


@pytest.mark.parametrize(
    "grads",
    [
        pytest.param(lambda x1, x2, g: (-3 * x1 ** 2 * g, 4 * x2 * g), id="both-values-wrong"),
        pytest.param(lambda x1, x2, g: (None, -2 * x2 * g), id="none-and-value"),
        pytest.param(lambda x1, x2, g: ((3 * x1 ** 2 * g).float(), -2 * x2 * g), id="dtype-and-value"),
        pytest.param(lambda x1, x2, g: ((3 * x1 ** 2 * g).unsqueeze(0), -2 * x2 * g), id="shape-and-value"),
    ],
)
def test_reports_every_failing_input(grads):
    message = failure(variant(Poly, "PolyTwoMistakes", grads=grads), poly, torch.randn(5), torch.randn(5))
    assert "`x1`" in message and "`x2`" in message


_SQUARE = lambda: (torch.randn(3, 3), torch.randn(3, 3))  # noqa: E731
_NON_SQUARE = lambda: (torch.randn(2, 3), torch.randn(3, 4))  # noqa: E731


@pytest.mark.parametrize(
    "function, reference, make_args, words",
    [
        pytest.param(CubeForgetsGradOutput, cube, randn(5), ["`x`", "forgot", "grad_output"],
                     id="forgot-grad-output"),
        pytest.param(CubeSignFlipped, cube, randn(5), ["`x`", "sign"], id="sign-flipped"),
        pytest.param(CubeFactorOff, cube, randn(5), ["`x`", "0.3333", "constant factor"], id="constant-factor"),
        pytest.param(CubeZeroGradient, cube, randn(5), ["`x`", "zero everywhere"], id="zero-gradient"),
        pytest.param(PolySwapped, poly, lambda: (torch.randn(5), torch.randn(5)), ["`x1`", "`x2`", "wrong order"],
                     id="wrong-order"),
        pytest.param(MatMulSwapped, matmul, _NON_SQUARE, ["`a`", "`b`", "wrong order"], id="wrong-order-shapes-differ"),
        pytest.param(MatMulTransposed, matmul, _NON_SQUARE, ["`a`", "shape [3, 2]", "transpose"],
                     id="transposed-non-square"),
        pytest.param(MatMulTransposed, matmul, _SQUARE, ["`a`", "transpose"], id="transposed-square"),
        pytest.param(ReluSumsGradient, torch.relu, randn(2, 3), ["`x`", "shape [3]", "[2, 3]"], id="wrong-shape"),
        pytest.param(AddBiasUnsummed, lambda x, b: x + b, lambda: (torch.randn(2, 3), torch.randn(3)),
                     ["`b`", "shape [2, 3]", "silently sum"], id="broadcastable-shape"),
        pytest.param(MatMulFloat32, matmul, _NON_SQUARE, ["`a`", "dtype", "float32"], id="wrong-dtype"),
        pytest.param(CubeWrongForward, cube, randn(5), ["forward", "fix forward first"], id="wrong-forward"),
        pytest.param(PolarIgnoresTheta, polar, lambda: (torch.randn(4), torch.randn(4)),
                     ["`x`", "`y`", "only output 1 used", "ignores the gradient of output 1"],
                     id="ignores-an-output-gradient"),
        pytest.param(ReluReturnsNone, torch.relu, randn(5), ["`x`", "None", "needs a gradient"],
                     id="none-for-a-tensor-input"),
    ],
)
def test_recognises_wrong_gradients(function, reference, make_args, words):
    message = failure(function, reference, *make_args())
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "function, reference, make_args, words",
    [
        pytest.param(ScaleWithoutNone, lambda x, c: x * c, lambda: (torch.randn(4), 2.5),
                     ["1 gradient", "(x, c)", "None"], id="missing-none-for-non-tensor"),
        pytest.param(PolyOneGradient, poly, lambda: (torch.randn(5), torch.randn(5)),
                     ["1 gradient", "(x1, x2)"], id="too-few-gradients"),
        pytest.param(ScaleGradForC, lambda x, c: x * c, lambda: (torch.randn(4), 2.5),
                     ["`c`", "not a tensor", "None"], id="gradient-for-non-tensor"),
        pytest.param(ReluEditsGradOutput, torch.relu, randn(5), ["grad_output", "in place"],
                     id="grad-output-modified-in-place"),
        pytest.param(ReluCallsAutogradGrad, torch.relu, randn(5), ["autograd", "torch.autograd.grad"],
                     id="backward-calls-autograd-grad"),
        pytest.param(ReluCallsBackward, torch.relu, randn(5), ["autograd", ".backward()"],
                     id="backward-calls-dot-backward"),
        pytest.param(ScaleSavesC, lambda x, c: x * c, lambda: (torch.randn(4), 2.5),
                     ["save_for_backward", "float"], id="save-for-backward-non-tensor"),
        pytest.param(CubeForwardNotStatic, cube, randn(5), ["forward", "@staticmethod"], id="forward-not-static"),
        pytest.param(CubeBackwardNotStatic, cube, randn(5), ["backward", "@staticmethod"], id="backward-not-static"),
        pytest.param(CubeTemplate, cube, randn(5), ["forward is not implemented yet"], id="template-untouched"),
        pytest.param(CubeBackwardTodo, cube, randn(5), ["backward is not implemented yet"], id="backward-todo"),
        pytest.param(CubeIndexError, cube, randn(5), ["backward raised IndexError", "x[10]"],
                     id="exception-in-backward-shows-student-line"),
        pytest.param(PolarUnmaterialized, polar, lambda: (torch.randn(4), torch.randn(4)),
                     ["backward raised TypeError", "None"], id="unmaterialized-none-arithmetic"),
    ],
)
def test_recognises_structural_mistakes(function, reference, make_args, words):
    message = failure(function, reference, *make_args())
    for word in words:
        assert word in message


def _instance():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that Functions should not be instantiated
        return Cube()


@pytest.mark.parametrize(
    "make_function, words",
    [
        pytest.param(_instance, ["instance", "Cube.apply"], id="instance"),
        pytest.param(lambda: cube, ["not a subclass of torch.autograd.Function"], id="plain-function"),
        pytest.param(lambda: torch.sin, ["not a subclass of torch.autograd.Function"], id="torch-function"),
        pytest.param(lambda: torch.nn.ReLU, ["not a subclass of torch.autograd.Function"], id="module-class"),
    ],
)
def test_rejects_what_is_not_a_function_class(make_function, words):
    message = failure(make_function(), cube, torch.randn(5))
    for word in words:
        assert word in message


# --------------------------------------------------------------------------------------------
# A broken reference is the test's fault, not the student's


def _reference_raises(x):
    raise ValueError("reference bug")


def _reference_asserts(x):
    assert False, "reference bug"


@pytest.mark.parametrize(
    "reference",
    [
        pytest.param(_reference_raises, id="raises"),
        pytest.param(_reference_asserts, id="raises-assertion-error"),
        pytest.param(lambda x: x @ torch.ones(5, 5, dtype=torch.float32), id="float32-constant"),
        pytest.param(lambda x: (x ** 3).detach(), id="not-differentiable"),
    ],
)
def test_reference_error_is_runtime_error_blaming_the_test(reference):
    with pytest.raises(RuntimeError, match="problem with the test"):
        check_function(Cube, reference, torch.randn(5))


# --------------------------------------------------------------------------------------------
# Side effects, speed, tampering


_ANY_FUNCTION = [
    pytest.param(Poly, id="right"),
    pytest.param(variant(Poly, "PolyWrong", grads=lambda x1, x2, g: (-3 * x1 ** 2 * g, 4 * x2 * g)), id="wrong"),
    pytest.param(variant(Poly, "PolyForgets", grads=lambda x1, x2, g: (3 * x1 ** 2, 2 * x2)), id="forgets-grad-output"),
]


def _check_ignoring_failure(function, reference, *args, **kwargs):
    try:
        check_function(function, reference, *args, **kwargs)
    except AssertionError:
        pass


@pytest.mark.parametrize("function", _ANY_FUNCTION)
def test_does_not_disturb_the_global_rng(function):
    args = torch.randn(4, 4), torch.randn(4, 4)
    before = torch.random.get_rng_state()
    _check_ignoring_failure(function, poly, *args)
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize(
    "function, reference, make_args, kwargs",
    [
        pytest.param(Poly, poly, lambda: (torch.randn(5, requires_grad=True), torch.randn(5).double()), {},
                     id="leaf-requiring-grad-and-float64"),
        pytest.param(Poly, poly, lambda: (torch.randn(5, requires_grad=True) * 2, torch.randn(5)), {},
                     id="non-leaf"),
        pytest.param(PolySwapped, poly, lambda: (torch.randn(5, requires_grad=True), torch.randn(5)), {},
                     id="wrong-function"),
        pytest.param(Double_, lambda x: x * 2, lambda: (torch.randn(5),), {"inplace": True}, id="inplace"),
        pytest.param(Scale, lambda x, c: x * c, lambda: (torch.randn(5), 2.5), {}, id="non-tensor-argument"),
    ],
)
def test_does_not_modify_the_callers_tensors(function, reference, make_args, kwargs):
    args = make_args()
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    before = [(t.detach().clone(), t.requires_grad, t.dtype, t._version) for t in tensors]
    _check_ignoring_failure(function, reference, *args, **kwargs)
    for t, (value, requires_grad, dtype, version) in zip(tensors, before):
        assert torch.equal(t.detach(), value)
        assert (t.requires_grad, t.dtype, t._version) == (requires_grad, dtype, version)
        if t.is_leaf:
            assert t.grad is None


@pytest.mark.parametrize("function", _ANY_FUNCTION)
def test_a_check_is_fast(function):
    args = torch.randn(32, 32), torch.randn(32, 32)
    _check_ignoring_failure(function, poly, *args)  # warm-up: first calls pay torch's start-up costs
    start = time.perf_counter()
    _check_ignoring_failure(function, poly, *args)
    assert time.perf_counter() - start < 0.5


def _forward_that_tampers(ctx, x):
    torch.allclose = lambda *a, **k: True
    ctx.save_for_backward(x)
    return x ** 3


@pytest.mark.parametrize(
    "function, tamper_first",
    [
        pytest.param(CubeSignFlipped, True, id="patched-before-the-check"),
        pytest.param(variant(CubeSignFlipped, "CubeTampers", forward=_forward_that_tampers), False,
                     id="patched-by-forward"),
    ],
)
def test_patched_allclose_does_not_make_a_wrong_function_pass(function, tamper_first):
    real_allclose = torch.allclose
    try:
        if tamper_first:
            torch.allclose = lambda *a, **k: True
        message = failure(function, cube, torch.randn(5))
    finally:
        torch.allclose = real_allclose
    assert "sign" in message


# --------------------------------------------------------------------------------------------
# Integer outputs (indices) are compared exactly, dtype included.


class SortFloatIndices(Sort):
    @staticmethod
    def forward(ctx, x):
        values, indices = Sort.forward(ctx, x)
        return values, indices.to(values.dtype)


class IndexOffByOne(Function):
    @staticmethod
    def forward(ctx, x):
        index = torch.tensor([2_000_001])
        ctx.mark_non_differentiable(index)
        return x * 2, index

    @staticmethod
    def backward(ctx, grad_output, grad_index):
        return 2 * grad_output


def test_integer_output_of_the_wrong_dtype_is_reported():
    message = failure(SortFloatIndices, torch.sort, torch.randn(6))
    assert "output 1" in message and "dtype float64, expected int64" in message


def test_integer_output_is_compared_exactly():
    message = failure(IndexOffByOne, lambda x: (x * 2, torch.tensor([2_000_000])), torch.randn(3))
    assert "output 1 is wrong" in message and "exactly" in message


# --------------------------------------------------------------------------------------------
# In-place Functions must declare the modified input with ctx.mark_dirty.


class Double_NoMarkDirty(Function):
    @staticmethod
    def forward(ctx, x):
        return x.mul_(2)

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


def test_in_place_without_mark_dirty_is_reported():
    message = failure(Double_NoMarkDirty, lambda x: 2 * x, torch.randn(4), inplace=True)
    assert "`x`" in message and "mark_dirty" in message


def test_in_place_change_in_an_out_of_place_check_is_reported():
    message = failure(Double_NoMarkDirty, lambda x: 2 * x, torch.randn(4))
    assert "modified its input `x` in place" in message


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
