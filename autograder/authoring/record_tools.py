"""What assignment 07's record holds about the tools, beside its size sweep (``record_timings`` calls ``tools``).

On the device being recorded, for Exercise 3's ``BiasGELU`` (the solution notebook's own Function):

- ``profile``: a ``torch.profiler`` trace of its forward+backward at a small and a large size (``traces``),
  written beside the record as ``profile_<device>.json``: where a call's time goes;
- ``launch_overhead``: its forward+backward at a few sizes, eager, under a CUDA graph
  (``torch.cuda.make_graphed_callables``), compiled with ``mode="reduce-overhead"`` (CUDA graphs again) and
  compiled in the default mode (the "compiled caller"): latency and throughput each, and the GPU's time by
  ``triton.testing.do_bench`` (CUDA events around each call, the L2 cache flushed before it);
- ``events``: CUDA events around one call and around many (what one call's window holds);
- ``memory``: bandwidth reading only, writing only and copying (why a kernel can beat ``copy_``);
- ``matmul``: float32 matrix products of a few sizes (the compute roof of a roofline, beside ``copy_``'s).

A tool that fails leaves its error in ``tool_errors`` and the others still run: a record is never lost to one.
"""

from __future__ import annotations

import contextlib
import statistics
import traceback
from collections.abc import Callable

import torch

from autograder.authoring.timed_functions import EXERCISE_3, _call_bias_gelu, calling, compiled_caller, exercise_3_bias_gelu
from autograder.student.timing import (Variant, device_name, throughput_seconds, timed_call, workload_tensors)
from autograder.student.traces import profile_steps

EXERCISE_3_VARIANT = Variant("bias_gelu", EXERCISE_3, _call_bias_gelu)
# Sizes of the tools' measurements: a small one, where a call's time is the host's, and a large one, the GPU's.
TOOL_SIZES = {"cuda": (2 ** 12, 2 ** 24), "cpu": (2 ** 8, 2 ** 12, 2 ** 16), "mps": (2 ** 12, 2 ** 22)}
MATMUL_SIZES = {"cuda": (256, 1024, 4096, 8192), "cpu": (64, 128, 256, 512), "mps": (256, 1024, 2048)}
EAGER, GRAPH, REDUCE_OVERHEAD, DEFAULT_COMPILE = ("eager", "CUDA graph (make_graphed_callables)",
                                                  'torch.compile(mode="reduce-overhead")', "torch.compile (default mode)")


def tools(device: str, latency: Callable, synchronize: Callable, compile: bool = True, sizes=None) -> dict:
    """Every tool's measurement on ``device`` (keys as in the module's docstring), each tool on its own.

    ``latency(call, device)`` times one call (the recorder's ``median_time``); ``synchronize`` waits for the device.
    """
    sizes = sizes or TOOL_SIZES[device]
    found, errors = {}, {}
    jobs = {"profile": lambda: profile(device, (sizes[0], sizes[-1]), synchronize),
            "launch_overhead": lambda: launch_overhead(device, sizes, latency, synchronize, compile),
            "memory": lambda: memory(device, sizes[-1], latency),
            "matmul": lambda: matmul(device, MATMUL_SIZES[device], latency)}
    if device == "cuda":
        jobs["events"] = lambda: events(device, latency)
    for name, job in jobs.items():
        try:
            found[name] = job()
        except Exception:  # noqa: BLE001 - one tool's failure is recorded, the others still run
            errors[name] = traceback.format_exc()[-1500:]
    return {**found, "tool_errors": errors}


def profile(device: str, sizes, synchronize: Callable, steps: int = 5) -> dict:
    """A trace of Exercise 3's BiasGELU forward+backward, ``steps`` runs at each size, each a step of its own."""
    calls = {f"BiasGELU forward+backward, {n} elements": timed_call(EXERCISE_3_VARIANT, *workload_tensors(n, device),
                                                                   "forward+backward") for n in sizes}
    return profile_steps(calls, synchronize, cuda=device == "cuda", steps=steps, about={
        "device": device, "device_name": device_name(device), "cuda_version": torch.version.cuda,
        "cpu_threads": torch.get_num_threads(), "made_by": "autograder.authoring.record_tools.profile",
        "workload": f"{EXERCISE_3}, forward+backward (torch.autograd.grad), float32",
        "elements": dict(zip(calls, sizes))})


def _graphed_call(x, bias, grad_output) -> Callable:
    """Forward+backward of Exercise 3's BiasGELU replayed from CUDA graphs (forward's and backward's)."""
    x, bias = x.detach().requires_grad_(True), bias.detach().requires_grad_(True)
    graphed = torch.cuda.make_graphed_callables(calling(exercise_3_bias_gelu()), (x, bias))
    return lambda: torch.autograd.grad(graphed(x, bias), (x, bias), grad_output)


def _compiled_call(compiled: Callable, x, bias, grad_output) -> Callable:
    return timed_call(Variant("bias_gelu", "compiled", compiled), x, bias, grad_output, "forward+backward")


def _do_bench_seconds(call: Callable) -> float | None:
    """``triton.testing.do_bench``'s median, in seconds (None where Triton is missing)."""
    try:
        from triton.testing import do_bench
    except ImportError:
        return None
    return do_bench(call, return_mode="median") / 1e3


def launch_overhead(device: str, sizes, latency: Callable, synchronize: Callable, compile: bool = True) -> list[dict]:
    """One row per size and way of running Exercise 3's BiasGELU forward+backward: latency, throughput and
    (on CUDA) do_bench's GPU time. CUDA graphs and reduce-overhead on CUDA only; the compiled ways if ``compile``."""
    reduce_overhead = None
    if compile and device == "cuda":
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        reduce_overhead = torch.compile(calling(exercise_3_bias_gelu()), mode="reduce-overhead", dynamic=False,
                                        fullgraph=True)
    rows = []
    for n in sizes:
        tensors = workload_tensors(n, device)
        ways = {EAGER: lambda: timed_call(EXERCISE_3_VARIANT, *tensors, "forward+backward")}
        if device == "cuda":
            ways[GRAPH] = lambda: _graphed_call(*tensors)
        if reduce_overhead is not None:
            ways[REDUCE_OVERHEAD] = lambda: _compiled_call(reduce_overhead, *tensors)
        if compile:
            ways[DEFAULT_COMPILE] = lambda: _compiled_call(compiled_caller(), *tensors)
        for way, make in ways.items():
            call = make()
            row = {"elements": n, "way": way, "latency_seconds": latency(call, device),
                   "throughput_seconds": throughput_seconds(call, synchronize)}
            if device == "cuda":
                row["do_bench_seconds"] = _do_bench_seconds(call)
            rows.append(row)
            del call
    return rows


def events(device: str, latency: Callable, elements: int = 2 ** 22, calls: int = 100, repeats: int = 10) -> dict:
    """CUDA events around one call of F.gelu(x) (the median of ``repeats``, each after the GPU went idle) and
    around ``calls`` calls in a row (per call), beside the latency of one call on the host's clock."""
    x = workload_tensors(elements, device)[0]
    call = lambda: torch.nn.functional.gelu(x)  # noqa: E731

    def window(count: int) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(count):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / count

    window(1)
    return {"statement": "torch.nn.functional.gelu(x)", "elements": elements, "calls": calls,
            "one_call_seconds": statistics.median(window(1) for _ in range(repeats)),
            "per_call_seconds": statistics.median(window(calls) for _ in range(3)),
            "latency_seconds": latency(call, device)}


def memory(device: str, elements: int, latency: Callable) -> dict:
    """GB/s of a kernel that only reads (``x.sum()``), one that only writes (``out.fill_(1.0)``) and ``out.copy_(x)``."""
    x = workload_tensors(elements, device)[0]
    out = torch.empty_like(x)
    nbytes = x.numel() * x.element_size()
    seconds = {"read": latency(lambda: x.sum(), device), "write": latency(lambda: out.fill_(1.0), device),
               "copy": latency(lambda: out.copy_(x), device)}
    moved = {"read": nbytes, "write": nbytes, "copy": 2 * nbytes}
    return {"elements": elements, "statements": {"read": "x.sum()", "write": "out.fill_(1.0)", "copy": "out.copy_(x)"},
            **{f"{way}_gbps": moved[way] / s / 1e9 for way, s in seconds.items()}}


def matmul(device: str, sizes, latency: Callable) -> list[dict]:
    """float32 ``a @ b`` of n x n matrices (full float32 precision: no TF32), one row per n, GFLOP/s = 2 n^3 / time."""
    rows = []
    with _float32_precision("highest"):
        for n in sizes:
            a, b = (torch.randn(n, n, device=device) for _ in range(2))
            seconds = latency(lambda: a @ b, device)
            rows.append({"n": n, "dtype": "float32", "precision": "highest", "flops": 2 * n ** 3,
                         "bytes": 3 * n * n * 4, "seconds": seconds, "gflops": 2 * n ** 3 / seconds / 1e9})
    return rows


@contextlib.contextmanager
def _float32_precision(precision: str):
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(precision)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
