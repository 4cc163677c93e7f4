"""The checker on Functions nobody on this project wrote, as they ship (issue 40).

- torch's own corpus, ``torch.testing._internal.autograd_function_db`` (imported from the pinned torch):
  every Function in it that is right passes as shipped, with the sample inputs its OpInfo gives; the three
  that are not (their gradients disagree with their forward, which ``torch.autograd.gradcheck`` confirms
  independently here) fail, naming the mistake; and mutations of the right ones, written here, fail
  naming theirs.
- Functions torch ships elsewhere: reentrant gradient checkpointing (``CheckpointFunction``), quantisation's
  ``FakeQuantPerChannel`` (float32 only: ``dtype="keep"``), and the legacy ``CrossMapLRN2d`` (its backward
  fails gradcheck on this torch, and the checker fails it too).
- Activations written the way timm's memory-efficient ones are (``timm/layers/activations_me.py``, Apache-2.0,
  Ross Wightman): the same formulas, written for these tests, not copied.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
import torch.testing._internal.autograd_function_db as db
from torch.ao.quantization.fx._decomposed import FakeQuantPerChannel
from torch.nn.modules._functions import CrossMapLRN2d
from torch.utils.checkpoint import CheckpointFunction

from autograder import check_function
from checker_examples import failure


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def assert_words(message: str, words) -> None:
    for word in words:
        assert word in message, f"{word!r} not in:\n{message}"


def sample(opinfo_name: str) -> tuple:
    """The first sample input torch's OpInfo of ``opinfo_name`` gives (CPU, float64), as positional arguments."""
    opinfo = next(o for o in db.autograd_function_db if o.name == opinfo_name)
    first = next(iter(opinfo.sample_inputs(device="cpu", dtype=torch.float64, requires_grad=False)))
    assert not first.kwargs
    return (first.input, *first.args)


def _sorted(x, dim):
    indices = torch.argsort(x, dim=dim)
    return torch.take_along_dim(x, indices, dim), indices, torch.argsort(indices, dim=dim)


def _cube(x):
    return x ** 3, 3 * x ** 2


# (Function, reference, its OpInfo, options): the right Functions of torch's corpus.
RIGHT = [
    (db.NumpyCube, _cube, "NumpyCubeAutogradFunction", {}),
    (db.NumpyMul, lambda x, y: x * y, "NumpyMulAutogradFunction", {"vmap": True}),  # a [3, 4] gradient for x: [4]
    (db.MulGenVmap, lambda x, y: x * y, "MulGenVmapAutogradFunction", {"vmap": True, "forward_ad": True}),
    (db.NumpyExp_, torch.exp, "NumpyExpMarkDirtyAutogradFunction", {"inplace": True, "vmap": True}),
    (db.SortGenVmap, _sorted, "SortGenVmapAutogradFunction", {}),
    (db.NumpyTake, lambda x, ind, ind_inv, dim: torch.take_along_dim(x, ind, dim), "NumpyTakeAutogradFunction", {}),
    (db.TakeGenVmap, lambda x, ind, ind_inv, dim: torch.take_along_dim(x, ind, dim), "NumpyTakeAutogradFunction", {}),
    (db.Select, lambda x, idx: x[idx], "SelectAutogradFunction", {"vmap": True}),
    (db.SelectGenVmap, lambda x, idx: x[idx], "SelectGenVmapAutogradFunction", {"vmap": True}),
    # Its backward scales the gradient by 3.14 on purpose: the reference has that gradient.
    (db.ScaleGradGenVmap, lambda x: 3.14 * x - 2.14 * x.detach(), "ScaleGradGenVmapAutogradFunction", {}),
    # Zero gradients on purpose, one of shape [3, 4, 4] for an input of shape [4], which autograd sums.
    (db.ZeroGradientsGenVmap, lambda x, y: (0 * x + x.detach(), 0 * y + y.detach()),
     "ZeroGradientsGenVmapAutogradFunction", {}),
    (db.ForwardHasDefaultArgs, lambda x, idx=(2,): x[idx], "ForwardHasDefaultArgsAutogradFunction", {}),
]


@pytest.mark.parametrize("function, reference, opinfo, options", RIGHT, ids=lambda v: getattr(v, "__name__", ""))
def test_every_right_function_of_torchs_corpus_passes_as_shipped(function, reference, opinfo, options):
    assert function.__module__.startswith("torch"), "defined in a module named torch...: once a false alarm"
    assert check_function(function, reference, *sample(opinfo), **options) is None


def _gradcheck_fails(function, *args) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return not torch.autograd.gradcheck(function, args, raise_exception=False)


def test_the_three_wrong_functions_of_torchs_corpus_fail_and_gradcheck_agrees():
    """Their gradients disagree with their forward: gradcheck, which knows nothing of a reference, says so too."""
    (x,) = sample("CubeGenVmapAutogradFunction")
    leaf = x.clone().requires_grad_()
    # CubeGenVmap's backward adds 6 * dinput where the chain rule has 6 * x * grad_saved.
    assert _gradcheck_fails(db.CubeGenVmap.apply, leaf)
    message = failure(db.CubeGenVmap, _cube, x)
    assert_words(message, ["the gradient for `x` is wrong", "only output 1 used", "does not depend on grad_output"])
    assert "constant factor" not in message, "a ratio of single numbers shows no constant factor"

    # NumpyCubeNotComposable's backward never multiplies by grad_output (and its output 1 is a NumPy array).
    assert _gradcheck_fails(lambda t: db.NumpyCubeNotComposable.apply(t)[0], leaf)
    message = failure(db.NumpyCubeNotComposable, lambda t: (t ** 3, t.detach().numpy()), x)
    assert_words(message, ["the gradient for `input` is wrong", "forgot to multiply by grad_output"])

    # NumpySort's forward returns x unsorted, and its backward un-permutes as if it had sorted it.
    x, dim = sample("NumpySortAutogradFunction")
    assert _gradcheck_fails(lambda t: db.NumpySort.apply(t, dim)[0], x.clone().requires_grad_())
    message = failure(db.NumpySort, _sorted, x, dim)
    assert_words(message, ["forward's output 0 is wrong", "fix forward first"])


# Mutations of right Functions of the corpus: each a mistake students make, and the words that name it.
class MulForgetsGradOutput(db.MulGenVmap):
    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return y.expand_as(grad_output), x.expand_as(grad_output)


class MulSwapped(db.MulGenVmap):
    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        return grad_output * x, grad_output * y


class TakeSignFlipped(db.TakeGenVmap):
    @staticmethod
    def backward(ctx, grad_output):
        ind, ind_inv = ctx.saved_tensors
        return -db.TakeGenVmap.apply(grad_output, ind_inv, ind, ctx.dim), None, None, None


class TakeWrongSaved(db.TakeGenVmap):
    """Un-permutes with the forward's own indices instead of their inverse."""

    @staticmethod
    def backward(ctx, grad_output):
        ind, ind_inv = ctx.saved_tensors
        return db.TakeGenVmap.apply(grad_output, ind, ind_inv, ctx.dim), None, None, None


class SelectZeroGradient(db.SelectGenVmap):
    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.new_zeros(ctx.x_shape), None


class MulPackedRows(db.MulGenVmap):
    """Reads x as if its rows were packed (row * n_columns), as a kernel that ignores the row stride does."""

    @staticmethod
    def forward(x, y):
        return torch.as_strided(x, x.shape, (x.shape[-1], 1)) * y


class CubeHalfGradient(db.CubeGenVmap):
    generate_vmap_rule = True

    @staticmethod
    def backward(ctx, grad_output, grad_saved):
        x, dinput = ctx.saved_tensors
        return 0.5 * (grad_output * dinput + 6 * x * grad_saved)


MUTATIONS = [
    (MulForgetsGradOutput, lambda x, y: x * y, (torch.randn(3, 4), torch.randn(3, 4)),
     ["`x`", "forgot to multiply by grad_output"]),
    (MulSwapped, lambda x, y: x * y, (torch.randn(3, 4), torch.randn(3, 4)), ["`x`", "`y`", "wrong order"]),
    (TakeSignFlipped, lambda x, i, j, d: torch.take_along_dim(x, i, d), sample("NumpyTakeAutogradFunction"),
     ["`x`", "sign is flipped"]),
    (TakeWrongSaved, lambda x, i, j, d: torch.take_along_dim(x, i, d), sample("NumpyTakeAutogradFunction"),
     ["the gradient for `x` is wrong"]),
    (SelectZeroGradient, lambda x, idx: x[idx], sample("SelectAutogradFunction"), ["`x`", "zero everywhere"]),
    (MulPackedRows, lambda x, y: x * y, (torch.randn(3, 4), torch.randn(3, 4)),
     ["right answer on contiguous inputs", "a slice of `x` and `y`", "row stride"]),
    (CubeHalfGradient, _cube, (torch.randn(5),), ["`x`", "0.5 times the right gradient", "constant factor"]),
]


@pytest.mark.parametrize("function, reference, args, words", MUTATIONS, ids=lambda v: getattr(v, "__name__", ""))
def test_mutations_of_the_corpus_fail_naming_the_mistake(function, reference, args, words):
    assert_words(failure(function, reference, *args), words)


# --------------------------------------------------------------------------------------------
# Other Functions torch ships


def _layer(x, w):
    return torch.tanh(x @ w)


def test_reentrant_checkpointing_passes_with_autograd_in_backward():
    """torch.utils.checkpoint(..., use_reentrant=True) refuses torch.autograd.grad: the check uses .backward()."""
    args = (_layer, True, torch.randn(3, 4), torch.randn(4, 2))
    assert check_function(CheckpointFunction, lambda f, keep, x, w: f(x, w), *args, autograd_in_backward=True) is None


def _fake_quant(x, scales, zero_points, axis, low, high):
    return torch.fake_quantize_per_channel_affine(x, scales, zero_points, axis, low, high)


def test_a_float32_only_function_is_checked_in_its_dtype():
    args = (4 * torch.randn(3, 5), torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0, 1, -1], dtype=torch.int32), 0, -8, 7)
    message = failure(FakeQuantPerChannel, _fake_quant, *args, constants=("scales",))
    assert_words(message, ["forward raised AssertionError", "float32"])  # float64 copies: it refuses them
    assert check_function(FakeQuantPerChannel, _fake_quant, *args, constants=("scales",), dtype="keep") is None


def test_torchs_legacy_cross_map_lrn_fails_as_gradcheck_does():
    """CrossMapLRN2d (torch/nn/modules/_functions.py) on torch 2.13: its backward is not its forward's derivative."""
    x = torch.randn(2, 3, 3, 4, dtype=torch.float64)
    assert _gradcheck_fails(lambda t: CrossMapLRN2d.apply(t, 5, 0.1, 0.75, 1.0), x.clone().requires_grad_())
    message = failure(CrossMapLRN2d, lambda t, size, alpha, beta, k: F.local_response_norm(t, size, alpha, beta, k),
                      x, 5, 0.1, 0.75, 1.0)
    assert_words(message, ["the gradient for `input` is wrong"])


# --------------------------------------------------------------------------------------------
# Activations in the style of timm's memory-efficient ones: save x, recompute in backward.


def _saves_input(name, function, derivative):
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return function(x)

    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * derivative(x)

    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), methods)


def _swish_derivative(x):
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


def _mish_derivative(x):
    t = F.softplus(x).tanh()
    return t + x * torch.sigmoid(x) * (1 - t * t)


ACTIVATIONS = [
    (_saves_input("Swish", lambda x: x * torch.sigmoid(x), _swish_derivative), F.silu),
    (_saves_input("Mish", lambda x: x * F.softplus(x).tanh(), _mish_derivative), F.mish),
    (_saves_input("HardSigmoid", lambda x: (x + 3).clamp(0, 6) / 6, lambda x: ((x > -3) & (x < 3)) / 6),
     F.hardsigmoid),
    (_saves_input("HardSwish", lambda x: x * (x + 3).clamp(0, 6) / 6,
                  lambda x: torch.where((x > -3) & (x < 3), x / 3 + 0.5, (x >= 3).to(x.dtype))), F.hardswish),
]


@pytest.mark.parametrize("function, reference", ACTIVATIONS, ids=lambda v: getattr(v, "__name__", ""))
def test_activations_written_as_timm_writes_them_pass(function, reference):
    assert check_function(function, reference, 3 * torch.randn(4, 6)) is None
