"""Triton's interpreter without the work it does for nothing (``lighten_interpreter``): same values, same errors.

Real kernels run by Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET before anything imports triton).
"""

from __future__ import annotations

import inspect

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from autograder.student.kernels import guard_memory, interpreted, lighten_interpreter  # noqa: E402

pytestmark = pytest.mark.skipif(not interpreted(), reason="these tests run Triton's interpreter")


@triton.jit
def _row_stats_kernel(x_ptr, y_ptr, total_ptr, n_columns, BLOCK: tl.constexpr):
    columns = tl.arange(0, BLOCK)
    inside = columns < n_columns
    offsets = tl.program_id(0) * n_columns + columns  # int32 arithmetic: what the overflow checks redid in int64
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    centred = tl.where(inside, x - tl.sum(x, axis=0) / n_columns, 0.0)  # tl.sum: a @triton.jit helper, patched again
    tl.store(y_ptr + offsets, (centred * 2).to(y_ptr.dtype.element_ty), mask=inside)
    tl.atomic_add(total_ptr, tl.max(tl.abs(centred), axis=0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_kernels_compute_what_torch_does_and_stay_inside_the_memory_guard(dtype):
    assert lighten_interpreter() and lighten_interpreter() and guard_memory()  # idempotent, beside the guard
    x = torch.randn(5, 37).to(dtype)
    y, total = torch.empty_like(x), torch.zeros(1, dtype=torch.float32)
    _row_stats_kernel[(5,)](x, y, total, 37, BLOCK=64)
    centred = x.float() - x.float().mean(1, keepdim=True)
    tolerance = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-5
    torch.testing.assert_close(y, (2 * centred).to(dtype), rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(total, centred.abs().amax(1).sum().reshape(1), rtol=1e-5, atol=1e-5)


def test_builtins_are_listed_once_per_module_not_at_every_launch(monkeypatch):
    lighten_interpreter()
    x = torch.randn(3, 10)
    y, total = torch.empty_like(x), torch.zeros(1)
    _row_stats_kernel[(3,)](x, y, total, 10, BLOCK=16)  # (lists them, if no launch has yet)
    listed = []
    real = inspect.getmembers
    monkeypatch.setattr(inspect, "getmembers", lambda *args, **kwargs: listed.append(args[0]) or real(*args, **kwargs))
    _row_stats_kernel[(3,)](x, y, total, 10, BLOCK=16)
    assert listed == []  # 3 programs calling tl.sum and tl.max: without the list kept, 6 modules a launch and a call


def test_overflow_checks_that_could_fail_nothing_are_left_out_and_kept_where_debug_makes_them_count():
    from triton.runtime import interpreter

    lighten_interpreter()
    options = interpreter.interpreter_builder.options
    assert not options.debug and not options.sanitize_overflow  # debug off: device_assert was a no-op anyway
    semantic = interpreter.interpreter_semantic
    big = semantic.to_tensor(2**31 - 1)
    try:
        interpreter.interpreter_builder.options = type(options)(debug=True, sanitize_overflow=True)
        with pytest.raises(AssertionError, match="int32 overflow"):  # what debug asks for still fails
            semantic.add(big, semantic.to_tensor(1), True)
    finally:
        interpreter.interpreter_builder.options = options
    assert int(semantic.add(big, semantic.to_tensor(1), True).handle.data[0]) == -(2**31)  # wraps, as on a GPU


def test_numpy_dtypes_are_the_interpreters_own_for_scalars_blocks_and_pointers():
    from triton.runtime import interpreter

    lighten_interpreter()
    for dtype in (tl.float32, tl.float16, tl.bfloat16, tl.int32, tl.int64, tl.int1):
        block, pointer = tl.block_type(dtype, [4, 8]), tl.pointer_type(dtype)
        assert interpreter._get_np_dtype(dtype) == interpreter._get_np_dtype(block)
        assert interpreter._get_np_dtype(pointer) == interpreter._get_np_dtype(tl.block_type(pointer, [4])) == "uint64"
    assert str(interpreter._get_np_dtype(tl.bfloat16)) == "uint16"  # (bfloat16 is stored as 16 bits)


@triton.jit
def _erf_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, tl.math.erf(tl.load(x_ptr + offsets, mask=offsets < n)), mask=offsets < n)


def test_erf_of_float32_is_the_interpreters_own_lane_by_lane_value_and_torch_s_modes_do_not_see_it():
    import math

    import numpy as np
    from torch.testing._internal.logging_tensor import capture_logs_with_logging_tensor_mode

    lighten_interpreter()
    generator = np.random.default_rng(0)
    magnitudes = 10.0 ** generator.uniform(-40, 2, 200_000)  # subnormal to saturated, both signs
    x = torch.from_numpy(np.concatenate([magnitudes * generator.choice([-1.0, 1.0], magnitudes.size),
                                         [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32))
    lane_by_lane = torch.from_numpy(np.vectorize(math.erf, otypes=[np.float32])(x.numpy()))

    threads = torch.get_num_threads()
    try:
        for count in (1, 2):  # one thread (as in grading): the whole tile at once; more: lane by lane, as before
            torch.set_num_threads(count)
            y = torch.empty_like(x)
            with capture_logs_with_logging_tensor_mode() as seen:  # a torch dispatch mode, as the checkers use
                _erf_kernel[(triton.cdiv(x.numel(), 8192),)](x, y, x.numel(), BLOCK=8192)
            assert torch.equal(y.view(torch.int32), lane_by_lane.view(torch.int32))  # bit for bit: -0.0, NaN too
            assert not any("erf" in op for op in seen), seen  # (the launch's own copies it does see)
    finally:
        torch.set_num_threads(threads)
