"""What the notebooks say about PyTorch, pinned on plain torch (no notebook is run).

Each test names the notebook that makes the claim. When a torch upgrade changes one of these
behaviours, the test fails and the notebook's text must be revisited. Messages are matched on
key substrings, not whole sentences: wording drifts between releases.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn
from torch.autograd.gradcheck import GradcheckError
from torch.utils._python_dispatch import TorchDispatchMode


def _saved(function, *args):
    """The tensors autograd saves for backward while function(*args) runs."""
    seen = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        function(*args)
    return seen


# 01 / 02 -- ReLU's gradient at exactly 0 -----------------------------------------------------

def test_relu_gradient_at_zero_is_zero():
    """01's ReLU uses the mask x > 0 "like torch.relu"; 02's ReLUMask says the same."""
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    torch.relu(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0]


def test_clamp_passes_the_gradient_at_its_bound():
    """01 warns that x.clamp(min=0), unlike torch.relu, passes the gradient at x == 0."""
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    x.clamp(min=0).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0]


# 01 -- the legacy (non-static) style ----------------------------------------------------------

def test_legacy_instance_style_is_an_error_whose_message_says_deprecated():
    class OldStyleExp(torch.autograd.Function):
        def forward(self, x):
            return x.exp()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="non-static forward method is deprecated"):
            OldStyleExp()(torch.ones(1, requires_grad=True))
    assert any("should not be instantiated" in str(w.message) for w in caught)


# 01 -- grad_output is the upstream gradient: a vector-Jacobian product --------------------------

def test_backward_with_an_upstream_gradient_is_a_vector_jacobian_product():
    """01: y.backward(g) and torch.autograd.grad(y, x, g) give g * f'(x), not f'(x)."""
    x = torch.tensor([0.0, 1.0, 2.0], requires_grad=True)
    g = torch.tensor([1.0, 10.0, 100.0])
    (by_grad,) = torch.autograd.grad(x.exp(), x, g)
    x.exp().backward(g)
    assert torch.allclose(by_grad, g * x.detach().exp())
    assert torch.allclose(x.grad, by_grad)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        x.exp().backward()


def test_setup_context_split_style_is_equivalent():
    """01 shows forward(x) + setup_context(ctx, inputs, output) as the same Function."""

    class Exp(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x.exp()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output)

        @staticmethod
        def backward(ctx, grad_output):
            (result,) = ctx.saved_tensors
            return grad_output * result

    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(Exp.apply, (x,))
    # and only the split style works under torch.func transforms
    assert torch.allclose(torch.func.grad(lambda t: Exp.apply(t).sum())(x.detach()), x.detach().exp())


# 02 -- what x * sigmoid(x) keeps ----------------------------------------------------------------

def test_x_times_sigmoid_saves_three_references_to_two_storages():
    x = torch.randn(1000, requires_grad=True)
    saved = _saved(lambda t: t * torch.sigmoid(t), x)
    assert len(saved) == 3
    assert len({t.untyped_storage().data_ptr() for t in saved}) == 2
    assert sum(t is x for t in saved) == 1  # one of the two storages is the input itself


def test_checkpoint_keeps_only_the_input_and_save_on_cpu_moves_saved_tensors():
    """02: torch.utils.checkpoint recomputes instead of saving; save_on_cpu keeps saved tensors on the CPU."""
    from torch.utils.checkpoint import checkpoint

    x = torch.randn(1000, requires_grad=True)
    silu = lambda t: t * torch.sigmoid(t)
    kept = _saved(lambda t: checkpoint(silu, t, use_reentrant=False), x)
    assert len({t.untyped_storage().data_ptr() for t in kept}) == 1 and kept[0] is x
    (expected,) = torch.autograd.grad(silu(x).sum(), x)
    (g,) = torch.autograd.grad(checkpoint(silu, x, use_reentrant=False).sum(), x)
    assert torch.allclose(g, expected)
    with torch.autograd.graph.save_on_cpu(pin_memory=False):
        y = silu(x)
    (g2,) = torch.autograd.grad(y.sum(), x)
    assert torch.allclose(g2, expected)


def test_two_generators_on_one_device_seeded_alike_draw_the_same_mask():
    """02's SeededDropout draws its mask again in backward from a generator on x's device."""
    x = torch.randn(4, 5)
    draw = lambda: torch.rand(x.shape, generator=torch.Generator(x.device).manual_seed(7), device=x.device)  # noqa: E731
    assert torch.equal(draw(), draw())
    assert torch.Generator(x.device).device == x.device
    assert torch.equal(draw(), torch.rand(x.shape, generator=torch.Generator().manual_seed(7)))  # the CPU: as before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cpu_generator_cannot_draw_on_a_gpu_and_a_gpu_one_draws_other_numbers():
    """02: 'a CPU generator cannot draw a GPU tensor, and a GPU's generator gives other numbers than the CPU's'."""
    with pytest.raises(RuntimeError):
        torch.rand(3, generator=torch.Generator().manual_seed(7), device="cuda")
    on_gpu = torch.rand(1000, generator=torch.Generator("cuda").manual_seed(7), device="cuda")
    assert not torch.equal(on_gpu.cpu(), torch.rand(1000, generator=torch.Generator().manual_seed(7)))


# 03 -- an optional input and trailing Nones ----------------------------------------------------------

def test_nn_linear_without_bias_registers_a_none_parameter():
    layer = nn.Linear(3, 2, bias=False)
    assert "bias" in layer._parameters and layer._parameters["bias"] is None
    assert layer.bias is None
    assert [name for name, _ in layer.named_parameters()] == ["weight"]
    assert list(layer.state_dict()) == ["weight"]

    class PlainNone(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = None

    assert "bias" not in PlainNone()._parameters  # a plain attribute, not a registered parameter
    plain = PlainNone()
    plain.bias = torch.zeros(2)  # accepted, and still not a parameter
    assert list(dict(plain.named_parameters())) == []
    with pytest.raises(TypeError, match=r"torch.nn.Parameter or None expected"):
        nn.Linear(3, 2, bias=False).bias = torch.zeros(2)


def test_leaky_relu_gradient_is_the_slope_where_x_is_not_positive():
    """03's LeakyReLU uses torch.where(x > 0, 1, slope), like F.leaky_relu (at 0 too)."""
    x = torch.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    torch.nn.functional.leaky_relu(x, 0.1).sum().backward()
    assert torch.allclose(x.grad, torch.tensor([0.1, 0.1, 1.0]))


class _MulAdd(torch.autograd.Function):
    """03's MulAdd: x * scale (+ shift), a backward that always returns three values (None for no shift)."""

    @staticmethod
    def forward(ctx, x, scale, shift=None):
        ctx.save_for_backward(x, scale)
        ctx.has_shift = shift is not None
        return x * scale if shift is None else x * scale + shift

    @staticmethod
    def backward(ctx, grad_output):
        x, scale = ctx.saved_tensors
        return grad_output * scale, grad_output * x, grad_output if ctx.has_shift else None


class _MulAddShiftGrad(_MulAdd):
    @staticmethod
    def backward(ctx, grad_output):
        x, scale = ctx.saved_tensors
        return grad_output * scale, grad_output * x, grad_output


def test_trailing_none_gradients_are_accepted():
    """03: MulAdd.apply(x, scale), two inputs, with a three-value backward works when the extra value is None;
    needs_input_grad has one entry per input given."""
    x, scale = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    y = _MulAdd.apply(x, scale)
    y.sum().backward()
    assert y.grad_fn.needs_input_grad == (True, True)
    assert x.grad.shape == (4,) and torch.equal(x.grad, scale.detach()) and torch.equal(scale.grad, x.detach())
    assert _MulAdd.apply(x, scale, None).grad_fn.needs_input_grad == (True, True, False)  # a None: always False


def test_an_extra_gradient_that_is_not_none_is_refused():
    with pytest.raises(RuntimeError, match=r"incorrect number of gradients \(expected 2, got 3\)"):
        _MulAddShiftGrad.apply(torch.randn(4, requires_grad=True), torch.randn(4)).sum().backward()


def test_gradient_for_a_none_input_is_refused_with_a_one_based_position():
    with pytest.raises(RuntimeError, match="different than None at position 3"):
        _MulAddShiftGrad.apply(torch.randn(4, requires_grad=True), torch.randn(4), None).sum().backward()


def test_a_shifted_needs_input_grad_index_raises_nothing_and_leaves_a_gradient_none():
    """03's Common mistake 3: [1] read for x, [2] (the absent shift's, False) for scale."""

    class ShiftedIndex(_MulAdd):
        @staticmethod
        def backward(ctx, grad_output):
            x, scale = ctx.saved_tensors
            grad_x = grad_output * scale if ctx.needs_input_grad[1] else None
            grad_scale = grad_output * x if ctx.needs_input_grad[2] else None
            return grad_x, grad_scale, None

    x, scale = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    ShiftedIndex.apply(x, scale, None).sum().backward()
    assert scale.grad is None and x.grad is not None


# 04 -- integer outputs and devices ----------------------------------------------------------------------


def _centre_of_mass(device_in_backward: bool, mark: bool = True):
    """04's CentreOfMass: each row's centre of mass and the position nearest to it (an integer output); the
    class keeps, in ``received``, the gradient its backward received for that output."""
    received = []

    class CentreOfMass(torch.autograd.Function):
        @staticmethod
        def forward(ctx, p):
            positions = torch.arange(p.shape[-1], dtype=p.dtype, device=p.device)
            total = p.sum(dim=-1)
            centre = (positions * p).sum(dim=-1) / total
            nearest = centre.round().long()
            if mark:
                ctx.mark_non_differentiable(nearest)
            ctx.save_for_backward(centre, total)
            ctx.n = p.shape[-1]
            return centre, nearest

        @staticmethod
        def backward(ctx, grad_centre, grad_nearest):
            received.append(grad_nearest)
            centre, total = ctx.saved_tensors
            where = {"device": grad_centre.device} if device_in_backward else {}
            positions = torch.arange(ctx.n, dtype=grad_centre.dtype, **where)
            return grad_centre.unsqueeze(-1) * (positions - centre.unsqueeze(-1)) / total.unsqueeze(-1)

    CentreOfMass.received = received
    return CentreOfMass


def test_centre_of_mass_matches_torch_and_its_integer_output_gets_integer_zeros():
    """04: the centre's gradient is (i - c) / sum(p), as torch's autograd finds in float64; backward receives an
    int64 tensor of zeros for the marked integer output, which does not require grad."""
    p = torch.tensor([[1.0, 2.0, 1.0, 0.0], [0.0, 0.0, 1.0, 3.0]], dtype=torch.float64, requires_grad=True)
    function = _centre_of_mass(device_in_backward=True)
    centre, nearest = function.apply(p)
    assert centre.tolist() == [1.0, 2.75] and nearest.tolist() == [1, 3] and not nearest.requires_grad
    (mine,) = torch.autograd.grad((centre * torch.tensor([1.0, -2.0], dtype=torch.float64)).sum(), p)
    assert function.received[0].dtype == torch.int64 and function.received[0].tolist() == [0, 0]
    reference = (torch.arange(4, dtype=torch.float64) * p).sum(dim=-1) / p.sum(dim=-1)
    (torchs,) = torch.autograd.grad((reference * torch.tensor([1.0, -2.0], dtype=torch.float64)).sum(), p)
    assert torch.allclose(mine, torchs, rtol=1e-12, atol=0)
    assert (mine[0] * 4).tolist() == [-1.0, 0.0, 1.0, 2.0]  # row 0, centre 1: negative left of it, zero at it
    (plain,) = torch.autograd.grad(function.apply(p)[0].sum(), p)  # the notebook's loss, centre.sum()
    # the sign of i - c: zero at the centre (row 0, position 1), positive where the mass is 0 (row 0, position 3)
    assert (plain * 16).tolist() == [[-4.0, 0.0, 4.0, 8.0], [-11.0, -7.0, -3.0, 1.0]]
    masses = (torch.rand(3, 5, dtype=torch.float64) + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(lambda p: function.apply(p)[0], (masses,))


def test_an_integer_output_never_requires_grad_even_unmarked():
    """04's UnmarkedCentreOfMass: without mark_non_differentiable the integer output still needs no gradient."""
    centre, nearest = _centre_of_mass(device_in_backward=True, mark=False).apply(torch.rand(2, 3, requires_grad=True))
    assert nearest.dtype == torch.int64 and not nearest.requires_grad and centre.requires_grad


def test_a_tensor_made_without_device_in_backward_fails_against_another_devices_tensors():
    """04: torch.arange(n) in backward lands on the CPU, and the first operation mixing it with the input's
    device fails. The "meta" device stands in for a GPU here: the same device check, no GPU needed."""
    p = torch.rand(2, 3, device="meta", requires_grad=True)
    centre, _ = _centre_of_mass(device_in_backward=False).apply(p)
    with pytest.raises(RuntimeError, match="not on the expected device"):
        torch.autograd.grad(centre.sum(), p)
    centre, _ = _centre_of_mass(device_in_backward=True).apply(p)
    (grad,) = torch.autograd.grad(centre.sum(), p)
    assert grad.device.type == "meta"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_a_cpu_tensor_made_in_backward_fails_there_too():
    """04: what the meta device stands in for, on a real GPU."""
    p = torch.rand(2, 3, device="cuda", requires_grad=True)
    centre, _ = _centre_of_mass(device_in_backward=False).apply(p)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.autograd.grad(centre.sum(), p)
    centre, _ = _centre_of_mass(device_in_backward=True).apply(p)
    assert torch.autograd.grad(centre.sum(), p)[0].device == p.device


def test_a_gradient_allocated_without_device_is_on_the_cpu_and_refused_elsewhere():
    """04: a gradient backward makes with torch.zeros(shape) lands on the CPU; any other device refuses it (what
    TopK's check_device catches). The "meta" device stands in for a GPU here: same device check, no GPU needed."""

    def floor(with_device):
        class Floor(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.shape = x.shape
                return x.floor()

            @staticmethod
            def backward(ctx, grad_output):  # floor is flat almost everywhere
                where = {"device": grad_output.device} if with_device else {}
                return torch.zeros(ctx.shape, dtype=grad_output.dtype, **where)

        return Floor

    x = torch.randn(2, 3, device="meta", requires_grad=True)
    with pytest.raises(RuntimeError, match="expected device meta but got cpu"):
        torch.autograd.grad(floor(with_device=False).apply(x).sum(), x)
    (grad,) = torch.autograd.grad(floor(with_device=True).apply(x).sum(), x)
    assert grad.device.type == "meta"


# 04 -- shapes and views ----------------------------------------------------------------------------------


def test_an_expandable_wrong_gradient_shape_is_silently_summed():
    """04: autograd accepts a (2, 3) gradient for a (3,) input (pytorch issue 65244): the
    same-shape rule is a best practice the checker enforces, not something autograd insists on."""

    class Broadcasting(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            return x * w

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output, grad_output  # w's gradient left unreduced: shape (2, 3)

    w = torch.randn(3, requires_grad=True)
    Broadcasting.apply(torch.randn(2, 3, requires_grad=True), w).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("outputs", [1, 2])
def test_a_view_of_the_input_returned_as_output_cannot_be_modified_in_place(outputs):
    """04: single-output and multi-output Functions alike."""

    class Tail(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return (2 * x[0], x[1:]) if outputs == 2 else x[1:]

        @staticmethod
        def backward(ctx, *grads):
            if outputs == 2:
                return torch.cat([2 * grads[0].unsqueeze(0), grads[1]])
            return torch.cat([grads[0].new_zeros(1), grads[0]])

    result = Tail.apply(torch.randn(4, requires_grad=True) * 1)
    tail = result[1] if outputs == 2 else result
    with pytest.raises(RuntimeError, match="is a view and is being modified inplace"):
        tail.clamp_(-1, 1)


# 07_gpu_timing -- summing a bias gradient over dim=() ----------------------------------------------------

class _BiasTimesTwo(torch.autograd.Function):
    """2 * (x + bias), with the bias gradient summed over "every dimension but the last"."""

    @staticmethod
    def forward(ctx, x, bias):
        return 2 * (x + bias)

    @staticmethod
    def backward(ctx, grad_output):
        grad_h = 2 * grad_output
        return grad_h, grad_h.sum(dim=tuple(range(grad_h.dim() - 1)))


def test_sum_over_an_empty_dim_tuple_sums_everything():
    assert torch.tensor([1.0, 2.0, 3.0]).sum(dim=()).shape == ()


def test_an_empty_dim_tuple_bias_gradient_fails_only_for_a_1d_input():
    bias = torch.randn(3, requires_grad=True)
    _BiasTimesTwo.apply(torch.randn(4, 3, requires_grad=True), bias).sum().backward()
    assert bias.grad.tolist() == [8.0, 8.0, 8.0]  # 2-D input: right, the bug hides
    with pytest.raises(RuntimeError, match=r"invalid gradient at index 1 - got \[\] but expected shape compatible with \[3\]"):
        _BiasTimesTwo.apply(torch.randn(3, requires_grad=True), bias).sum().backward()


# 07_gpu_timing -- what torch.utils.benchmark.Timer does ----------------------------------------------------

def test_timer_runs_number_calls_between_two_reads_of_its_clock():
    """So a clock that synchronises first gives one synchronisation per N calls: throughput, not latency."""
    from torch.utils.benchmark import Timer

    events = []
    clock = lambda: events.append("clock") or float(len(events))  # noqa: E731
    Timer("events.append('call')", globals={"events": events}, timer=clock).timeit(25)
    reads = [i for i, e in enumerate(events) if e == "clock"]
    assert reads[-1] - reads[-2] - 1 == 25 and events[reads[-2] + 1:reads[-1]] == ["call"] * 25
    assert events.count("call") > 25, "after a warm-up run of its own"


def test_timer_s_own_clock_synchronises_the_accelerator_before_each_read():
    """07: Timer "synchronises the accelerator before each read of its clock" (its default clock, kept by
    the recorder: replacing it with timeit.default_timer made the H200 report half the real time)."""
    import inspect

    from torch.utils.benchmark import Timer
    from torch.utils.benchmark.utils import timer as timer_module

    assert inspect.signature(Timer).parameters["timer"].default is timer_module.timer
    assert "synchronize()" in inspect.getsource(timer_module.timer)


def test_timer_timeit_one_times_one_call_between_two_reads_of_its_clock():
    """07: Timer(...).timeit(1) synchronises around a single call (latency), like measure; after 2 warm-up calls."""
    from torch.utils.benchmark import Timer

    events = []
    clock = lambda: events.append("clock") or float(len(events))  # noqa: E731
    Timer("events.append('call')", globals={"events": events}, timer=clock).timeit(1)
    assert events == ["clock", "call", "call", "clock", "clock", "call", "clock"]


def test_timer_runs_on_one_thread_unless_given_num_threads():
    from torch.utils.benchmark import Timer

    seen, before = [], torch.get_num_threads()
    Timer("seen.append(torch.get_num_threads())", globals={"seen": seen}).timeit(1)
    Timer("seen.append(torch.get_num_threads())", globals={"seen": seen}, num_threads=3).timeit(1)
    assert set(seen[:2]) == {1} and set(seen[-2:]) == {3}
    assert torch.get_num_threads() == before, "and the count is restored after"


# 07_gpu_timing -- kernels per call, and CUDA calls without a GPU ----------------------------------------------

class _OpLog(TorchDispatchMode):
    """The aten operations that run (each one kernel on a GPU, for these elementwise ops)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class _SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * s * (1 + x * (1 - s))


@pytest.mark.parametrize("function, forward, backward", [(_SiLU.apply, 2, 6), (torch.nn.functional.silu, 1, 1)],
                         ids=["your-SiLU", "F.silu"])
def test_kernels_per_forward_and_backward(function, forward, backward):
    """07: "Your SiLU runs 2 kernels forward and 6 backward; F.silu runs one each way" (6 more launches on a GPU)."""
    x, grad_output = torch.randn(8, requires_grad=True), torch.randn(8)
    with _OpLog() as ran_forward:
        y = function(x)
    with _OpLog() as ran_backward:
        torch.autograd.grad(y, x, grad_output)
    assert (len(ran_forward.ops), len(ran_backward.ops)) == (forward, backward), (ran_forward.ops, ran_backward.ops)


@pytest.mark.skipif(torch.version.cuda is not None, reason="a torch built without CUDA")
def test_synchronize_on_a_torch_built_without_cuda_raises_an_assertion_error():
    """07: 'a torch built without CUDA raises AssertionError ("Torch not compiled with CUDA enabled")'."""
    with pytest.raises(AssertionError, match="not compiled with CUDA"):
        torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (and so a CUDA build of torch)")
def test_a_cuda_build_with_no_gpu_visible_raises_a_runtime_error_and_creates_events():
    """07: on a CUDA build with no GPU (Colab's CPU runtime) synchronize raises RuntimeError; Event() raises nothing."""
    code = ("import torch\nassert not torch.cuda.is_available()\ntorch.cuda.Event(enable_timing=True)\n"
            "try:\n    torch.cuda.synchronize()\nexcept RuntimeError as error:\n    print('RuntimeError:', error)\n")
    ran = subprocess.run([sys.executable, "-c", code], env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "RuntimeError: No CUDA GPUs are available" in ran.stdout, ran.stdout


# 01 -- when not to write a Function ---------------------------------------------------------------

def test_a_tensor_hook_replaces_the_gradient_flowing_through_it():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x ** 2
    y.register_hook(lambda grad: grad.clamp(max=1.0))
    (10 * y).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]  # 2x * 1 instead of 2x * 10


def test_the_detach_trick_has_the_value_of_f_and_the_gradient_of_the_identity():
    x = torch.tensor([0.2, 1.7, 2.5], requires_grad=True)
    rounded = x + (x.round() - x).detach()
    rounded.sum().backward()
    assert rounded.tolist() == [0.0, 2.0, 2.0] and x.grad.tolist() == [1.0, 1.0, 1.0]


# 06 -- a backward that writes into grad_output: gradcheck passes it -----------------------------------------

def test_writing_into_grad_output_passes_gradcheck_and_zeroes_an_expanded_one_with_a_warning():
    """06's BrokenClip (what its collapsed "After Exercise 2" note says): gradcheck's fresh one-hot gradients
    hide the in-place write; after .sum() grad_output is one number expanded, torch warns, and all of it is
    zeroed."""

    class BrokenClip(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clamp(-1, 1)

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            grad_output[x.abs() > 1] = 0
            return grad_output

    x = torch.tensor([1.5, -0.2, -2.2], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(BrokenClip.apply, (x,))
    x = torch.tensor([-2.0, 0.5, 3.0], requires_grad=True)
    with pytest.warns(UserWarning, match="on expanded tensors is deprecated"):
        BrokenClip.apply(x).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]
    x = torch.tensor([-2.0, 0.5, 3.0], requires_grad=True)
    x.clamp(-1, 1).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 0.0]


# 06 -- double backward: the two documented ways to keep an intermediate ---------------------------------

class _SinSavedCos(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x.cos())
        return x.sin()

    @staticmethod
    def backward(ctx, grad_output):
        (cos_x,) = ctx.saved_tensors
        return grad_output * cos_x


class _SinAndCos(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        sin_x, cos_x = x.sin(), x.cos()
        ctx.save_for_backward(sin_x, cos_x)
        return sin_x, cos_x

    @staticmethod
    def backward(ctx, grad_sin, grad_cos):
        sin_x, cos_x = ctx.saved_tensors
        return grad_sin * cos_x - grad_cos * sin_x


def test_a_saved_intermediate_fails_gradgradcheck_and_an_extra_output_fixes_it():
    x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_SinSavedCos.apply, (x,))
    assert not torch.autograd.gradgradcheck(_SinSavedCos.apply, (x,), raise_exception=False)
    assert torch.autograd.gradgradcheck(lambda t: _SinAndCos.apply(t)[0], (x,))


def test_a_backward_written_as_a_second_function_is_differentiated_through_it():
    import numpy as np

    class SinGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, grad_output, x):
            ctx.save_for_backward(grad_output, x)
            return torch.from_numpy(grad_output.detach().numpy() * np.cos(x.detach().numpy()))

        @staticmethod
        def backward(ctx, grad_grad):
            grad_output, x = ctx.saved_tensors
            return grad_grad * x.cos(), -grad_grad * grad_output * x.sin()

    class Sin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin()

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            return SinGrad.apply(grad_output, x)

    x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(Sin.apply, (x,))


# 02 / 06 / 09 -- in-place without mark_dirty, a forgotten grad_output, forward without a graph ----

def test_an_in_place_function_without_mark_dirty_gives_a_silently_wrong_gradient():
    """02's Common mistake 4: NegNoDirty_ negates its input in place without ctx.mark_dirty; the gradient of
    a.sum() comes out as [1, 1] (a's old history, a = leaf * 1) where -1 is right, with no error."""

    class NegNoDirty_(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.neg_()
            return x

        @staticmethod
        def backward(ctx, grad_output):
            return -grad_output

    leaf = torch.tensor([-1.0, 2.0], requires_grad=True)
    a = leaf * 1
    NegNoDirty_.apply(a)
    a.sum().backward()
    assert leaf.grad.tolist() == [1.0, 1.0] and type(a.grad_fn).__name__ == "MulBackward0"


class _ForgetfulSin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return x.cos()  # not multiplied by grad_output


def test_gradcheck_names_a_forgotten_grad_output_on_one_element_and_sum_backward_hides_it():
    """06's ForgetfulSin: .sum().backward() gives cos(x), as if right; gradcheck on one element says
    'backward not multiplied by grad_output'; its analytical Jacobian repeats one row (Section 7's picture)."""
    x = torch.tensor([0.5], dtype=torch.float64, requires_grad=True)
    _ForgetfulSin.apply(x).sum().backward()
    assert torch.allclose(x.grad, x.detach().cos())
    with pytest.raises(GradcheckError, match="backward not multiplied by grad_output"):
        torch.autograd.gradcheck(_ForgetfulSin.apply, (x,))
    xs = torch.linspace(-2, 2, 6, dtype=torch.float64, requires_grad=True)
    y = _ForgetfulSin.apply(xs)
    rows = [torch.autograd.grad(y, xs, torch.eye(6, dtype=torch.float64)[i], retain_graph=True)[0] for i in range(6)]
    assert all(torch.equal(row, xs.detach().cos()) for row in rows)


def test_a_functions_forward_records_no_graph():
    """09's CheckpointedMLP needs no torch.no_grad() in forward: a Function's forward runs with grad disabled,
    so the activations it computes are not kept (06's Peek prints the same)."""
    seen = {}

    class Block(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            seen["grad enabled"] = torch.is_grad_enabled()
            hidden = torch.nn.functional.gelu(x @ w)
            seen["hidden has a graph"] = hidden.requires_grad
            return hidden.sum(-1)

        @staticmethod
        def backward(ctx, grad_output):
            return None, None

    kept = _saved(Block.apply, torch.randn(3, 4, requires_grad=True), torch.randn(4, 5, requires_grad=True))
    assert seen == {"grad enabled": False, "hidden has a graph": False} and kept == []
