"""Timing assignment 11's FlashAttention on a GPU against PyTorch's own (Exercise 9), and the record shipped with it.

``time_attention(function)`` times ``function(q, k, v, causal)`` (a FlashAttention's ``apply``), forward alone and
forward with backward, against ``F.scaled_dot_product_attention`` with its flash backend, on the same bfloat16 (or
float16) tensors, with ``triton.testing.do_bench`` on a GPU; each row gives milliseconds, TFLOP/s by the usual count
(``attention_flops``), the share of the GPU's 16-bit tensor-core peak on paper (``nominal_peak_tflops``) and the
share of PyTorch's throughput. ``reference_record()`` is the record that
``python -m autograder.authoring.attention_timings`` wrote on a GPU and the course ships (None until one has), and
``result_lines`` prints rows or a record, or says that nothing has been measured.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from autograder.student.records import DATA_DIR

RECORD = "attention_cuda.json"
SHAPE = (4, 16, 4096, 64)  # batch, heads, sequence, head dimension: what Exercise 9 and the record time
SDPA = "F.scaled_dot_product_attention (flash)"  # its name on a GPU; on a CPU it runs its math backend
PASSES = ("forward", "forward+backward")
# Dense 16-bit (bfloat16/float16) tensor-core throughput on paper, TFLOP/s, from the vendor's datasheets; the first
# name found in the GPU's name wins (so "H100 PCIe" before "H100", "L40S" before "L4").
PEAK_TFLOPS = (("H200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0), ("L40S", 362.1),
               ("L4", 121.0), ("A10", 125.0), ("T4", 65.0), ("V100", 125.0))
NOT_MEASURED = ("Not measured yet: no GPU has recorded the course's FlashAttention kernels. "
                "`python -m autograder.authoring.attention_timings OUT_DIR` on a GPU writes the record.")


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


def pytorch_attention(device="cuda", dtype=None):
    """(name, function(q, k, v, causal)) of PyTorch's attention to time against: the flash backend on a GPU that has
    it, else the memory-efficient one (GPUs before the A100's generation); the math backend on a CPU."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if torch.device(device).type != "cuda":
        choices = [("F.scaled_dot_product_attention (math, CPU)", SDPBackend.MATH)]
    else:
        choices = [(SDPA, SDPBackend.FLASH_ATTENTION),
                   ("F.scaled_dot_product_attention (memory-efficient)", SDPBackend.EFFICIENT_ATTENTION)]
    for name, backend in choices:
        def run(q, k, v, causal, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        try:
            run(*(torch.zeros(1, 1, 16, 64, dtype=dtype or half_dtype(device), device=device) for _ in range(3)), True)
        except RuntimeError:  # "No available kernel": this GPU has no such backend
            continue
        return name, run
    raise RuntimeError("PyTorch has no attention backend for this GPU and dtype")


def _milliseconds(call, device) -> float:
    """``call``'s time: triton.testing.do_bench on a GPU (its median, ms); elsewhere the median of a few calls."""
    if torch.device(device).type == "cuda":
        from triton.testing import do_bench

        return float(do_bench(call))
    call()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return sorted(times)[1] * 1e3


def time_attention(function, shape=SHAPE, causal: bool = True, dtype=None, device="cuda", name: str = "FlashAttention",
                   with_pytorch: bool = True, passes=PASSES) -> list[dict]:
    """``passes`` (forward, forward+backward) of ``function(q, k, v, causal)`` and, ``with_pytorch``, of PyTorch's
    flash attention before it, on the same random tensors of ``shape`` (batch, heads, sequence, d): one row per
    variant and pass, with its share of PyTorch's throughput where PyTorch was timed."""
    dtype = dtype or half_dtype(device)
    generator = torch.Generator(device=device).manual_seed(0)
    q, k, v, grad_output = (torch.randn(shape, dtype=dtype, device=device, generator=generator) for _ in range(4))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    peak = nominal_peak_tflops(device)
    rows = []
    pytorch_name, pytorch = pytorch_attention(device, dtype)
    for variant, run in ((pytorch_name, pytorch),) * with_pytorch + ((name, function),):
        def forward(run=run):
            with torch.no_grad():
                return run(q, k, v, causal)

        def forward_backward(run=run):
            return torch.autograd.grad(run(*leaves, causal), leaves, grad_output)

        for pass_ in passes:
            milliseconds = _milliseconds(forward_backward if pass_ == "forward+backward" else forward, device)
            tflops = attention_flops(*shape, causal, pass_ == "forward+backward") / milliseconds / 1e9
            rows.append({"variant": variant, "pass": pass_, "shape": list(shape), "causal": causal,
                         "dtype": str(dtype).removeprefix("torch."), "milliseconds": milliseconds, "tflops": tflops,
                         "share_of_peak": tflops / peak if peak else None})
    for row in rows:
        theirs = next((r for r in rows if r["variant"] == pytorch_name and r["pass"] == row["pass"]), None)
        row["share_of_sdpa"] = theirs["milliseconds"] / row["milliseconds"] if theirs else None
    return rows


def reference_record(folder=None) -> dict | None:
    """The record the course ships (``attention_cuda.json``), or None while no GPU has recorded one."""
    path = Path(folder or DATA_DIR) / RECORD
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def result_lines(record: dict | None) -> list[str]:
    """A record's provenance and rows (or rows alone, ``{"rows": ...}``), as lines to print; ``NOT_MEASURED`` for
    None."""
    if record is None:
        return [NOT_MEASURED]
    lines = []
    if "device_name" in record:
        lines += [record["what"], f"measured on {record['device_name']} with torch {record['torch_version']}, triton "
                                  f"{record['triton_version']}, {record['date'][:10]} ({record['source']})"]
    for row in record["rows"]:
        peak = f", {row['share_of_peak']:.0%} of the peak on paper" if row.get("share_of_peak") else ""
        pytorch = f", {row['share_of_sdpa']:.0%} of PyTorch's" if row.get("share_of_sdpa") else ""
        lines.append(f"  {row['variant']:40} {row['pass']:16} {row['milliseconds']:8.3f} ms  {row['tflops']:6.1f} TFLOP/s"
                     f"{peak}{pytorch}")
    return lines
