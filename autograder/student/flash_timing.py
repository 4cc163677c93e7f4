"""Timing assignment 11's FlashAttention on a GPU against PyTorch's own kernels (Exercise 9), and the record shipped
with it.

``time_attention(function)`` times ``function(q, k, v, causal)`` (a FlashAttention's ``apply``), forward alone and
forward with backward, against the attention kernels the GPU has (``attention_backends``: PyTorch's
``F.scaled_dot_product_attention`` with its flash backend, which is FlashAttention-2, and with cuDNN's, and
FlashAttention-3 where that package is installed), on the same bfloat16 (or float16) tensors, under the record's
conditions (``record_conditions``): ``triton.testing.do_bench``'s median of each call on a GPU, every variant once per
round, in alternating order, over ``ROUNDS`` rounds, and the median of the rounds. Each row gives milliseconds, TFLOP/s
by the usual count (``attention_flops``), the share of the GPU's 16-bit tensor-core peak on paper
(``nominal_peak_tflops``), of the flash backend's throughput and of the fastest kernel's. ``reference_record()`` is
the record that ``python -m autograder.authoring.attention_timings`` wrote on a GPU and the course ships (None until
one has), and ``result_lines`` prints rows or a record, saying what kind of record it is, or that nothing has been
measured.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from autograder.student.records import DATA_DIR

RECORD = "attention_cuda.json"
SHAPE = (4, 16, 4096, 64)  # batch, heads, sequence, head dimension: what Exercise 9 and the record time
ROUNDS = 5  # every variant is timed once a round, the order alternating; a row's figure is the median of its rounds
SDPA = "F.scaled_dot_product_attention (flash)"  # FlashAttention-2; on a CPU PyTorch runs its math backend
CUDNN = "F.scaled_dot_product_attention (cuDNN)"
EFFICIENT = "F.scaled_dot_product_attention (memory-efficient)"
MATH_CPU = "F.scaled_dot_product_attention (math, CPU)"
FLASH_3 = "FlashAttention-3 (flash_attn_interface)"
SHORT = {SDPA: "PyTorch's flash backend", CUDNN: "PyTorch's cuDNN backend", EFFICIENT: "PyTorch's memory-efficient backend",
         MATH_CPU: "PyTorch's math backend", FLASH_3: "FlashAttention-3"}  # names in sentences
PASSES = ("forward", "forward+backward")
# Dense 16-bit (bfloat16/float16) tensor-core throughput on paper, TFLOP/s, from the vendor's datasheets; the first
# name found in the GPU's name wins (so "H100 PCIe" before "H100", "L40S" before "L4").
PEAK_TFLOPS = (("H200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0), ("L40S", 362.1),
               ("L4", 121.0), ("A10", 125.0), ("T4", 65.0), ("V100", 125.0))
NOT_MEASURED = ("Not measured yet: no GPU has recorded the course's FlashAttention kernels. "
                "`python -m autograder.authoring.attention_timings OUT_DIR` on a GPU writes the record.")
FIRST_RECORDER = ("This record was made by the recorder's first version: its times are triton.testing.do_bench's "
                  "means, not medians (it passed no return_mode), from one run of each variant, with PyTorch's flash "
                  "backend the only kernel beside the solution's; it holds no fingerprint of the kernels it timed, and "
                  "the notebook's kernels have changed since.")


def attention_flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool, backward: bool) -> float:
    """Floating-point operations by the usual count: forward 4 B H S^2 d (Q K^T and P V), half of it causal; with
    backward 3.5 times that (backward is 2.5 forwards: five tile products against two)."""
    forward = 4 * batch * heads * seq_len * seq_len * head_dim * (0.5 if causal else 1.0)
    return forward * (3.5 if backward else 1.0)


def nominal_peak_tflops(device="cuda") -> float | None:
    """The GPU's dense 16-bit tensor-core TFLOP/s on paper (``PEAK_TFLOPS``), None for a GPU not listed or no GPU."""
    return peak_of(torch.cuda.get_device_name(device)) if torch.device(device).type == "cuda" else None


def peak_of(gpu_name: str) -> float | None:
    """``PEAK_TFLOPS``' figure for the GPU of that name (its first model found in the name), or None."""
    return next((peak for model, peak in PEAK_TFLOPS if model in gpu_name), None)


def half_dtype(device="cuda") -> torch.dtype:
    """bfloat16 where the GPU's tensor cores take it (compute capability 8 and later), else float16."""
    if torch.device(device).type == "cuda" and torch.cuda.get_device_capability(device)[0] < 8:
        return torch.float16
    return torch.bfloat16


@contextlib.contextmanager
def record_conditions():
    """Within the block, what the record is measured under, live or recorded: torch's deterministic algorithms off.
    The notebook's setup cell turns them on for the exercises, which fills every new tensor with NaN (a write per
    allocation) and makes PyTorch's flash backward take its deterministic path."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _sdpa(backend):
    from torch.nn.attention import sdpa_kernel

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def _flash_attention_3():
    """FlashAttention-3's ``flash_attn_func`` as ``run(q, k, v, causal)`` on (batch, heads, sequence, d) tensors (it
    takes (batch, sequence, heads, d): transposed views); ImportError where the package is not installed."""
    from flash_attn_interface import flash_attn_func

    def run(q, k, v, causal):
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal)
        return (out[0] if isinstance(out, tuple) else out).transpose(1, 2)

    return run


def attention_backends(device="cuda", dtype=None) -> tuple[list[tuple[str, object]], dict[str, str]]:
    """The attention kernels to time against, as ([(name, run(q, k, v, causal))], {name: why not}). On a GPU: PyTorch's
    flash backend (FlashAttention-2; the memory-efficient one on GPUs without it), first, then cuDNN's and
    FlashAttention-3, each kept where a small causal forward and backward runs; on a CPU, the math backend."""
    from torch.nn.attention import SDPBackend

    if torch.device(device).type != "cuda":
        return [(MATH_CPU, _sdpa(SDPBackend.MATH))], {}
    dtype = dtype or half_dtype(device)
    found, missing = [], {}
    candidates = [(SDPA, lambda: _sdpa(SDPBackend.FLASH_ATTENTION)),
                  (EFFICIENT, lambda: _sdpa(SDPBackend.EFFICIENT_ATTENTION)),
                  (CUDNN, lambda: _sdpa(SDPBackend.CUDNN_ATTENTION)), (FLASH_3, _flash_attention_3)]
    for name, make in candidates:
        if name == EFFICIENT and found:
            continue  # only where the flash backend is missing (GPUs before the A100's generation)
        try:
            run = make()
            q, k, v = (torch.randn(1, 2, 128, 64, dtype=dtype, device=device, requires_grad=True) for _ in range(3))
            run(q, k, v, True).sum().backward()
        except Exception as error:  # noqa: BLE001 - "No available kernel", not installed: a fact about this GPU
            missing[name] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200] if str(error).strip() else ''}"
            continue
        found.append((name, run))
    if not found:
        raise RuntimeError(f"PyTorch has no attention backend for this GPU and dtype: {missing}")
    return found, missing


def _milliseconds(call, device) -> float:
    """``call``'s time in ms: on a GPU, triton.testing.do_bench's median (CUDA events around each call, the L2 cache
    flushed before it); elsewhere the median of three calls after one."""
    if torch.device(device).type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(call, return_mode="median"))
    call()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def round_orders(variants: list, rounds: int) -> list[list]:
    """The order of ``variants`` in each of ``rounds`` rounds: as given, then reversed, alternately (a drift of the
    GPU's clocks over the run then falls on every variant alike)."""
    return [list(variants) if r % 2 == 0 else list(reversed(variants)) for r in range(rounds)]


def time_attention(function, shape=SHAPE, causal: bool = True, dtype=None, device="cuda", name: str = "FlashAttention",
                   with_pytorch: bool = True, passes=PASSES, rounds: int = ROUNDS, backends=None) -> list[dict]:
    """``passes`` (forward, forward+backward) of ``function(q, k, v, causal)`` and, ``with_pytorch``, of each kernel of
    ``backends`` (``attention_backends``' list by default), on the same random tensors of ``shape`` (batch, heads,
    sequence, d), under ``record_conditions``: every variant once a round, the order alternating, for ``rounds``
    rounds. One row per variant and pass: the median of its rounds (and the rounds), with its share of the first
    backend's throughput (PyTorch's flash backend) and of the fastest kernel's beside the function's."""
    dtype = dtype or half_dtype(device)
    with record_conditions():
        generator = torch.Generator(device=device).manual_seed(0)
        q, k, v, grad_output = (torch.randn(shape, dtype=dtype, device=device, generator=generator) for _ in range(4))
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        others = (backends if backends is not None else attention_backends(device, dtype)[0]) if with_pytorch else []
        variants = list(others) + [(name, function)]
        times = {(variant, pass_): [] for variant, _ in variants for pass_ in passes}
        for order in round_orders(variants, rounds):
            for variant, run in order:
                def forward(run=run):
                    with torch.no_grad():
                        return run(q, k, v, causal)

                def forward_backward(run=run):
                    return torch.autograd.grad(run(*leaves, causal), leaves, grad_output)

                for pass_ in passes:
                    call = forward_backward if pass_ == "forward+backward" else forward
                    times[variant, pass_].append(_milliseconds(call, device))
    return rows_of(times, shape, causal, dtype, nominal_peak_tflops(device), [n for n, _ in others])


def rows_of(times: dict, shape, causal: bool, dtype, peak: float | None, others: list[str]) -> list[dict]:
    """Rows from ``times`` ({(variant, pass): [ms of each round]}): each the median of its rounds, with TFLOP/s and
    its shares of the peak on paper, of the first of ``others`` (``share_of_sdpa``) and of the fastest of ``others``
    (``share_of_fastest``, and which it was), where those were timed."""
    rows = []
    for (variant, pass_), rounds in times.items():
        milliseconds = statistics.median(rounds)
        tflops = attention_flops(*shape, causal, pass_ == "forward+backward") / milliseconds / 1e9
        rows.append({"variant": variant, "pass": pass_, "shape": list(shape), "causal": causal,
                     "dtype": str(dtype).removeprefix("torch."), "milliseconds": milliseconds,
                     "rounds_milliseconds": list(rounds), "tflops": tflops,
                     "share_of_peak": tflops / peak if peak else None})
    for row in rows:
        theirs = [r for r in rows if r["variant"] in others and r["pass"] == row["pass"]]
        first = next((r for r in theirs if r["variant"] == others[0]), None) if others else None
        fastest = min(theirs, key=lambda r: r["milliseconds"], default=None)
        row["share_of_sdpa"] = first["milliseconds"] / row["milliseconds"] if first else None
        row["compared_with"] = first["variant"] if first else None
        row["share_of_fastest"] = fastest["milliseconds"] / row["milliseconds"] if fastest else None
        row["fastest"] = fastest["variant"] if fastest else None
    return rows


def reference_record(folder=None) -> dict | None:
    """The record the course ships (``attention_cuda.json``), or None while no GPU has recorded one."""
    path = Path(folder or DATA_DIR) / RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def result_lines(record: dict | None) -> list[str]:
    """A record's provenance, what kind of record it is, and its rows (or rows alone, ``{"rows": ...}``), as lines to
    print; ``NOT_MEASURED`` for None."""
    if record is None:
        return [NOT_MEASURED]
    lines = []
    if "device_name" in record:
        lines += [record["what"], f"measured on {record['device_name']} with torch {record['torch_version']}, triton "
                                  f"{record['triton_version']}, {record['date'][:10]} ({record['source']})"]
        if record.get("format", 1) < 2:
            lines.append(FIRST_RECORDER)
        else:
            accuracy = record["accuracy"]
            lines.append(f"each figure: the median of {record['rounds']} rounds, the variants alternating; the "
                         f"solution's relative error at this shape: {_errors(accuracy['solution'])} "
                         f"({SHORT.get(accuracy['compared_with'], accuracy['compared_with'])}'s: "
                         f"{_errors(accuracy['pytorch'])}), against attention in {accuracy['reference_dtype']}")
            lines += [f"  not timed: {name} ({why})" for name, why in record.get("not_available", {}).items()]
    for row in record["rows"]:
        first = row.get("compared_with") or SDPA  # (the first record's rows did not say: its flash backend)
        peak = f", {row['share_of_peak']:.0%} of the peak on paper" if row.get("share_of_peak") else ""
        pytorch = f", {row['share_of_sdpa']:.0%} of {SHORT.get(first, first)}'s" if row.get("share_of_sdpa") else ""
        fastest = (f", {row['share_of_fastest']:.0%} of {SHORT.get(row['fastest'], row['fastest'])}'s, the fastest"
                   if row.get("share_of_fastest") and row.get("fastest") not in (first, row["variant"]) else "")
        lines.append(f"  {row['variant']:48} {row['pass']:16} {row['milliseconds']:8.3f} ms  {row['tflops']:6.1f} TFLOP/s"
                     f"{peak}{pytorch}{fastest}")
    return lines


def _errors(found: dict) -> str:
    return ", ".join(f"{k} {v:.1e}" for k, v in found.items())
