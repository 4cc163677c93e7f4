"""What notebook 10 says about Triton and PyTorch, pinned on the installed versions (triton 3.7.1, torch 2.13.0).

The kernels run in Triton's interpreter on the CPU (tests/conftest.py sets TRITON_INTERPRET before anything
imports triton). What the notebook says about GPUs comes from the recorded H200 evidence, not from here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from autograder.student.kernels import interpreted  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreted(), reason="the notebook's CPU facts: Triton's interpreter")


@triton.jit
def _last_writer_kernel(out_ptr):
    tl.store(out_ptr, tl.program_id(0))  # every program writes the same place: a race on a GPU


@triton.jit
def _add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)


def test_the_interpreter_runs_the_programs_one_after_another_in_order():
    out = torch.full((1,), -1, dtype=torch.int32)
    for _ in range(3):
        _last_writer_kernel[(7,)](out)
        assert out.item() == 6  # the last program always wins: no race shows


def test_without_the_course_guard_the_interpreter_gives_0_in_masked_lanes_of_a_load_without_other(tmp_path):
    script = tmp_path / "masked.py"  # a fresh Python: this one's interpreter is guarded (NaN there)
    script.write_text(textwrap.dedent('''
        import os
        os.environ["TRITON_INTERPRET"] = "1"
        import torch, triton, triton.language as tl

        @triton.jit
        def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.arange(0, BLOCK)
            tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n))

        x, out = torch.full((8,), 5.0), torch.full((8,), 7.0)
        kernel[(1,)](x, out, 3, BLOCK=8)
        print(out.tolist())
    '''))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == str([5.0, 5.0, 5.0] + [0.0] * 5), done.stderr[-2000:]


def test_deterministic_mode_fills_new_tensors_with_nan():
    before = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(True)
        assert torch.utils.deterministic.fill_uninitialized_memory
        assert torch.empty(5).isnan().all() and torch.empty_like(torch.ones(2, 3, dtype=torch.float64)).isnan().all()
    finally:
        torch.use_deterministic_algorithms(before)


def test_the_same_float32_numbers_added_in_another_order_differ_in_their_last_bits():
    generator = torch.Generator().manual_seed(0)
    column_sums = torch.randn(16, 1000, generator=generator)
    other_order = column_sums[torch.randperm(16, generator=generator)].sum(0)
    differ = int((column_sums.sum(0) != other_order).sum())
    assert 0 < differ < 1000 and (column_sums.sum(0) - other_order).abs().max() < 1e-5


def test_triton_specialises_integer_arguments_divisible_by_16():
    from triton.backends.compiler import BaseBackend

    assert BaseBackend.get_int_specialization(1024, align=True) == "D"
    assert BaseBackend.get_int_specialization(1000, align=True) != "D"
    assert ["tt.divisibility", 16] in BaseBackend.parse_attr("D")


class _AddOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.empty_like(x)
        _add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


def test_torch_compile_cannot_trace_a_function_that_launches_an_interpreted_kernel():
    x = torch.randn(10, requires_grad=True)
    assert torch.equal(_AddOne.apply(x), x + 1)
    torch.compiler.reset()
    with pytest.raises(Exception, match="data_ptr"):
        torch.compile(lambda x: _AddOne.apply(x), backend="aot_eager", fullgraph=True)(x)


def test_triton_op_runs_eagerly_but_fails_compile_and_opcheck_under_the_interpreter():
    from torch.library import triton_op, wrap_triton

    @triton_op("course_facts::add_one_seen_inside", mutates_args=())
    def add_one(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        wrap_triton(_add_kernel)[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y

    x = torch.randn(10)
    assert torch.equal(add_one(x), x + 1)
    torch.compiler.reset()
    with pytest.raises(Exception, match="Cannot access data pointer of Tensor"):
        torch.compile(add_one, backend="aot_eager", fullgraph=True)(x)
    with pytest.raises(Exception, match='test_faketensor failed with Attempted to set the storage of a tensor on '
                                        'device "meta" to a storage on different device "cpu"'):
        torch.library.opcheck(add_one, (x,))


def test_gelu_is_half_h_times_one_plus_erf_and_its_derivative_cdf_plus_h_pdf():
    h = torch.linspace(-4, 4, 41, dtype=torch.float64, requires_grad=True)
    assert torch.allclose(F.gelu(h), 0.5 * h * (1 + torch.erf(h / 2 ** 0.5)))
    (derivative,) = torch.autograd.grad(F.gelu(h).sum(), h)
    h = h.detach()
    cdf, pdf = 0.5 * (1 + torch.erf(h * 0.7071067811865476)), 0.3989422804014327 * torch.exp(-0.5 * h * h)
    assert torch.allclose(derivative, cdf + h * pdf)


# --------------------------------------------------------------------------------------------
# Precision and sizes (Section 2's "Precision, and sizes past 2^31"), and what needs a GPU (Exercise 6)


@triton.jit
def _erf_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, CONVERT: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n)
    if CONVERT:
        x = x.to(tl.float32)
    tl.store(y_ptr + offsets, tl.math.erf(x).to(y_ptr.dtype.element_ty), mask=offsets < n)


@triton.jit
def _twice_kernel(x_ptr, y_ptr, CONVERT: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    if CONVERT:
        x = x.to(tl.float32)
    tl.store(y_ptr + offsets, (x + x).to(y_ptr.dtype.element_ty))


@triton.jit
def _add_into_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offsets, tl.load(x_ptr + offsets))


@triton.jit
def _row_start_kernel(row_ptr, start_ptr, n_columns, WIDE: tl.constexpr):
    row = tl.load(row_ptr)
    if WIDE:
        row = row.to(tl.int64)
    tl.store(start_ptr, row * n_columns)


def test_erf_refuses_float16_and_a_kernel_that_converts_to_float32_gives_float16_within_one_rounding():
    x = torch.randn(8, dtype=torch.float16)
    y = torch.empty_like(x)
    with pytest.raises(Exception, match=r"Expected dtype \['fp32', 'fp64'\] but got fp16"):
        _erf_kernel[(1,)](x, y, 8, BLOCK=8, CONVERT=False)
    _erf_kernel[(1,)](x, y, 8, BLOCK=8, CONVERT=True)
    assert y.dtype == torch.float16 and (y.float() - torch.erf(x.float())).abs().max() < 1e-3


def test_the_interpreter_adds_bfloat16_bits_as_integers_refuses_bfloat16_atomics_and_converts_them_right():
    x = torch.tensor([1.0, 2.0, 3.0, -0.5], dtype=torch.bfloat16)
    y = torch.empty_like(x)
    _twice_kernel[(1,)](x, y, CONVERT=False, BLOCK=4)
    assert y.tolist() != [2.0, 4.0, 6.0, -1.0] and max(abs(v) for v in y.tolist()) > 1e30  # nothing like 2x
    _twice_kernel[(1,)](x, y, CONVERT=True, BLOCK=4)
    assert y.tolist() == [2.0, 4.0, 6.0, -1.0]
    with pytest.raises(Exception, match="Unsupported data type"):
        _add_into_kernel[(1,)](x, torch.zeros(4, dtype=torch.bfloat16), BLOCK=4)
    total = torch.zeros(4, dtype=torch.float16)  # float16 atomics work here
    _add_into_kernel[(1,)](x.to(torch.float16), total, BLOCK=4)
    assert total.tolist() == [1.0, 2.0, 3.0, -0.5]


def test_an_int32_offset_past_2_to_the_31_wraps_around_and_an_int64_one_does_not():
    row = torch.tensor([3_000_000], dtype=torch.int32)
    starts = []
    for wide in (False, True):
        start = torch.zeros(1, dtype=torch.int64)
        _row_start_kernel[(1,)](row, start, 1024, WIDE=wide)
        starts.append(start.item())
    assert starts == [3_000_000 * 1024 - 2 ** 32, 3_000_000 * 1024]


def test_autotune_over_several_configs_and_do_bench_need_a_gpu_driver_the_interpreter_has_not():
    autotuned = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                                key=["n"])(_add_kernel)
    x = torch.randn(300)
    with pytest.raises(RuntimeError, match="0 active drivers"):
        autotuned[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, torch.empty_like(x), 300)
    with pytest.raises(RuntimeError, match="0 active drivers"):
        triton.testing.do_bench(lambda: x + 1)


def test_empty_like_copies_a_transposed_inputs_strides_and_new_empty_of_its_shape_is_contiguous():
    x = torch.randn(7, 5).t()
    assert x.stride() == (1, 5) and torch.empty_like(x).stride() == (1, 5)
    assert x.new_empty(x.shape).stride() == (7, 1) and torch.empty_like(x.contiguous()).stride() == (7, 1)


def test_opchecks_fake_tensor_test_names_the_real_outputs_strides_first_then_the_fakes():
    @torch.library.custom_op("course_facts::copy_contiguous", mutates_args=())
    def copy_contiguous(x: torch.Tensor) -> torch.Tensor:
        return x.contiguous().clone()

    @copy_contiguous.register_fake
    def _(x):
        return torch.empty_like(x)  # dishonest for a transposed x

    with pytest.raises(Exception) as caught:
        torch.library.opcheck(copy_contiguous, (torch.randn(7, 5).t(),))
    assert "test_faketensor failed" in str(caught.value) and "(scroll up for stack trace)" in str(caught.value)
    assert "Stride mismatch! Strides are (7, 1) and (1, 5)" in str(caught.value.__cause__)
    torch.library.opcheck(copy_contiguous, (torch.randn(5, 7),))  # contiguous: the same strides, nothing seen


def test_do_bench_returns_the_mean_unless_asked_for_the_median():
    import inspect

    assert inspect.signature(triton.testing.do_bench).parameters["return_mode"].default == "mean"


TRITON_OP_DEMO = r'''
import json, sys, torch
from autograder.authoring.kernel_timings import NOTEBOOK
from autograder.authoring.notebook_script import run_cells
contiguous = "    x = x.contiguous()"
if sys.argv[1] == "without":  # the demonstration as it was: y = torch.empty_like(x) of whatever x was given
    import autograder.authoring.notebook_script as script
    compile_cell = script.compile_cell
    script.compile_cell = lambda source, name: compile_cell(source.replace(contiguous + "  #", "    pass  #"), name)
names = run_cells(NOTEBOOK, ["setup", "tiles", "bias_gelu_forward", "cell-triton-op"], "solution_10_triton_op")
torch.use_deterministic_algorithms(False)
torch.manual_seed(0)
x, bias = torch.randn(40, 9).t(), torch.randn(40)  # shape [9, 40], strides (1, 40): rows not in order in memory
y = names["bias_gelu_seen_inside"](x, bias)
print(json.dumps({"difference": float((y - names["bias_gelu_reference"](x, bias)).abs().max()),
                  "contiguous": y.is_contiguous()}))
'''


@pytest.mark.parametrize("demo", ["with", "without"])
def test_the_triton_op_demonstration_is_right_on_a_transposed_input_and_was_not_before(demo):
    """10's `triton_op` demonstration makes x contiguous before it launches a kernel that reads rows in order (the
    stride slip the notebook teaches students to avoid); without that line, a transposed x gives wrong values."""
    done = subprocess.run([sys.executable, "-c", TRITON_OP_DEMO, demo], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if demo == "with":
        assert found == {"difference": pytest.approx(0.0, abs=1e-5), "contiguous": True}
    else:
        assert found["difference"] > 0.1, found
