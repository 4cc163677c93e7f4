"""Time assignment 11's solution FlashAttention on a GPU: ``python -m autograder.authoring.attention_timings OUT_DIR``.

The kernels are the solution notebook's own cells (``solutions/11_flash_attention``), read from its JSON and run as
plain Python, compiled by Triton (``kernel_timings.solution_namespace``: one copy of the kernels, the notebook's).
``measure`` first checks them at the timed shape: their output and gradients, and those of PyTorch's flash backend,
against attention computed in float32, causal, 4 batches of 16 heads of 4096 tokens, head dimension 64, bfloat16
(float16 before compute capability 8); an error above ``ACCURACY_BAR`` stops the run (an AssertionError), since a
speed of wrong kernels means nothing. The same on a sequence that is no multiple of the tiles, causal and not. Then it
times, with the notebook's Exercise 9 helper (``autograder.student.flash_timing.time_attention``), forward and
forward+backward of the solution's ``FlashAttention`` and of the attention kernels the GPU has (PyTorch's flash
backend, FlashAttention-2; cuDNN's; FlashAttention-3 where installed), each variant once a round in alternating order
over ``ROUNDS`` rounds, each call ``triton.testing.do_bench``'s median, each figure the median of its rounds: TFLOP/s,
the shares of the GPU's tensor-core peak on paper, of PyTorch's flash throughput and of the fastest kernel's, whose
``AIM`` the notebook aims at. It also times forward+backward with a few other tiles than the notebook's.

The record holds ``solution_sha256``, a fingerprint of the cells it timed (``TIMED_CELLS``), so a test can tell when
the notebook's kernels changed after it was made, and the GPU's clocks before and after (``gpu_clocks``:
``nvidia-smi``). It writes ``attention_cuda.json`` (the record the notebook shows, once copied to
``autograder/student/data/``) and ``attention_cuda.txt`` (a summary), in a few minutes on an H200 (Triton compiles each
tile's kernels first). ``record(out_dir)`` runs it in a fresh Python, as ``gpu_check``'s last step does. It needs
torch, triton and numpy, not Jupyter or nbgrader. Without CUDA it writes only the summary, "no CUDA: skipped".
(``--device cpu`` runs the same code small under Triton's interpreter, for the tests: its times are the
interpreter's, and its files are named ``attention_cpu``.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from autograder.authoring.kernel_timings import (
    kernel_provenance, run_recorder, solution_namespace, solution_sha256, write_record,
)

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "11_flash_attention" / "11_flash_attention.ipynb"
CELLS = ("setup", "tiles", "attention-references", "attention_forward", "attention_backward",
         "flash_attention_function")  # the cells' ids, in order
TIMED_CELLS = ("tiles", "attention_forward", "attention_backward", "flash_attention_function")  # solution_sha256's
AIM = 0.5  # of the fastest attention kernel's throughput, forward+backward (the notebook's Section 9)
ROUNDS = 5
ACCURACY_BAR = 0.05  # relative error (Frobenius) of the output and each gradient against attention in float32
# Other tiles tried, beside the notebook's own (ATTENTION_TILE of its "tiles" cell), forward+backward.
# (The first record, 2026-11-27, also tried 128 x 128 with 8 warps and 2 stages: 0.93 of the flash backend's
# throughput where the notebook's tiles reached 1.36; left out, for the time a lent GPU has.)
TILES = ({"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
         {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4},
         {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 4})
SOLUTION = "solution FlashAttention"
SKIPPED = "no CUDA: skipped"
CLOCKS = ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem", "temperature.gpu", "power.draw", "pstate")


def measure(device: str = "cuda", shape=None, tiles=TILES, ragged=(2, 3, 1000), rounds: int = ROUNDS) -> dict:
    """The record: the solution's and PyTorch's accuracy at ``shape`` (default the notebook's 4 x 16 x 4096 x 64) and
    on (batch, heads, sequence) ``ragged``, asserted; then forward and forward+backward of the solution and of the
    GPU's attention kernels at ``shape``, ``rounds`` rounds, and forward+backward with ``tiles``."""
    import torch

    from autograder.student.flash_timing import (
        SHAPE, attention_backends, attention_flops, half_dtype, nominal_peak_tflops, record_conditions, time_attention,
    )
    shape = tuple(shape or SHAPE)
    started = time.monotonic()
    namespace = solution_namespace(NOTEBOOK, CELLS)  # (its setup cell imports triton, interpreted without a GPU)
    function = namespace["FlashAttention"].apply
    dtype = half_dtype(device) if device == "cuda" else torch.float32
    clocks_before = gpu_clocks(device)
    with record_conditions():  # the setup cell's NaN fill of new tensors is for the exercises
        backends, not_available = attention_backends(device, dtype)
        accuracy = {**_accuracy(function, backends[0][1], shape, True, dtype, device), "compared_with": backends[0][0],
                    "ragged": [_accuracy(function, backends[0][1], (*ragged, shape[-1]), causal, dtype, device)
                               for causal in (False, True)]}
    wrong = {f"{found['shape']}, causal={found['causal']}: {k}": v for found in [accuracy, *accuracy["ragged"]]
             for k, v in found["solution"].items() if not v <= ACCURACY_BAR}
    assert not wrong, f"the solution's error is above {ACCURACY_BAR} (relative, against float32): {wrong}"
    rows = time_attention(function, shape, causal=True, dtype=dtype, device=device, name=SOLUTION, rounds=rounds,
                          backends=backends)
    both = [r for r in rows if r["pass"] == "forward+backward" and r["variant"] != SOLUTION]
    pytorch, fastest = both[0], min(both, key=lambda r: r["milliseconds"])
    shipped = dict(namespace["ATTENTION_TILE"])
    compared = []
    for tile in (shipped,) + tuple(tiles):
        namespace["ATTENTION_TILE"] = tile  # the launchers read it at every call
        mine = time_attention(function, shape, causal=True, dtype=dtype, device=device, name=SOLUTION,
                              with_pytorch=False, passes=("forward+backward",), rounds=1)[0]
        compared.append({"tile": tile, "shipped": tile == shipped, "milliseconds": mine["milliseconds"],
                         "tflops": mine["tflops"], "share_of_sdpa": pytorch["milliseconds"] / mine["milliseconds"],
                         "share_of_fastest": fastest["milliseconds"] / mine["milliseconds"]})
    namespace["ATTENTION_TILE"] = shipped
    data = {
        "format": 2,
        "kind": "measurement",
        "what": ("this course's solution kernels (11_flash_attention, Exercises 4 to 7: FlashAttention's forward and "
                 "backward Triton kernels), forward and forward+backward, causal, against the attention kernels this "
                 "GPU has: F.scaled_dot_product_attention with its flash backend (FlashAttention-2) and its cuDNN "
                 "backend, and FlashAttention-3 where installed"),
        "solution_sha256": solution_sha256(NOTEBOOK, TIMED_CELLS),
        **kernel_provenance(device, "python -m autograder.authoring.attention_timings"),
        "method": (f"autograder.student.flash_timing.time_attention, with torch's deterministic algorithms off: "
                   f"triton.testing.do_bench(return_mode='median') of one call, forward under no_grad, forward+backward "
                   f"as torch.autograd.grad for a random upstream gradient; every variant once a round, the order "
                   f"alternating, {rounds} rounds, each figure the median of its rounds (the rounds are kept); "
                   f"TFLOP/s by the usual count (forward 4 B H S^2 d, half of it causal; backward 2.5 forwards). "
                   f"Accuracy: relative error (Frobenius norm of the difference over the reference's) of the output "
                   f"and gradients against attention computed in float32, asserted at most {ACCURACY_BAR}"),
        "rounds": rounds,
        "shape": list(shape),
        "dtype": str(dtype).removeprefix("torch."),
        "deterministic_algorithms": False,
        "flops_forward_backward": attention_flops(*shape, True, True),
        "nominal_peak_tflops": nominal_peak_tflops(device),
        "aim_share_of_fastest": AIM,
        "fastest_forward_backward": fastest["variant"],
        "tile": shipped,
        "rows": rows,
        "not_available": not_available,
        "tiles": compared,
        "accuracy": {**accuracy, "bar": ACCURACY_BAR},
        "clocks_before": clocks_before,
        "clocks_after": gpu_clocks(device),
    }
    data["seconds_taken"] = round(time.monotonic() - started, 1)
    return data


def _accuracy(function, pytorch, shape: tuple, causal: bool, dtype, device: str) -> dict:
    """Relative errors (Frobenius norm of the difference over the reference's) of the output and gradients of
    ``function`` and of ``pytorch`` (each ``run(q, k, v, causal)``), both in ``dtype``, against attention computed on
    the same tensors in float32 (float64 on a CPU), for a random upstream gradient."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator(device=device).manual_seed(1)
    q, k, v, grad_output = (torch.randn(shape, dtype=dtype, device=device, generator=generator) for _ in range(4))
    precise = torch.float32 if device == "cuda" else torch.float64

    def outcome(run, dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
        o = run(*leaves, causal)
        return [o.detach(), *torch.autograd.grad(o, leaves, grad_output.to(dtype))]

    reference = outcome(lambda q, k, v, causal: F.scaled_dot_product_attention(q, k, v, is_causal=causal), precise)

    def errors(run):
        return {name: float((got.to(precise) - want).norm() / want.norm())
                for name, got, want in zip(("o", "dq", "dk", "dv"), outcome(run, dtype), reference)}

    return {"shape": list(shape), "causal": causal, "reference_dtype": str(precise).removeprefix("torch."),
            "solution": errors(function), "pytorch": errors(pytorch)}


def gpu_clocks(device: str = "cuda", run=subprocess.run) -> dict | None:
    """The GPU's clocks, temperature, power and performance state now (``CLOCKS``, from ``nvidia-smi``), as
    {field: value}; {"error": why} where nvidia-smi does not answer; None on a CPU."""
    if device != "cuda":
        return None
    import torch

    try:  # the GPU torch calls cuda:0, by its UUID (nvidia-smi numbers GPUs in its own order)
        selector = f"GPU-{torch.cuda.get_device_properties(0).uuid}"
    except Exception:  # noqa: BLE001 - no such property, or no CUDA here: nvidia-smi's first GPU
        selector = "0"
    command = ["nvidia-smi", f"--query-gpu={','.join(CLOCKS)}", "--format=csv,noheader,nounits", "-i", selector]
    try:
        done = run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return parse_clocks(done.stdout) if done.returncode == 0 else {"error": (done.stdout + done.stderr).strip()[:300]}


def parse_clocks(text: str) -> dict:
    """``nvidia-smi --query-gpu=<CLOCKS> --format=csv,noheader,nounits``'s first line as {field: number or text}."""
    values = [value.strip() for value in text.strip().splitlines()[0].split(",")]
    if len(values) != len(CLOCKS):
        return {"error": f"nvidia-smi answered {text.strip()[:300]!r}"}
    return {field: _number(value) for field, value in zip(CLOCKS, values)}


def _number(value: str):
    try:
        return float(value)
    except ValueError:
        return value  # "P0", "[N/A]"


def summary(data: dict) -> list[str]:
    """The record in a few lines: what was measured where, the rows, the tiles."""
    from autograder.student.flash_timing import SHORT, result_lines

    tile = lambda t: ", ".join(f"{k}={v}" for k, v in t.items())  # noqa: E731
    first, fastest = data["accuracy"]["compared_with"], data["fastest_forward_backward"]
    lines = result_lines(data)
    lines.append(f"shape {data['shape']} (batch, heads, sequence, d), {data['dtype']}, causal; aim: "
                 f"{data['aim_share_of_fastest']:.0%} of the fastest kernel's forward+backward throughput "
                 f"({SHORT.get(fastest, fastest)}'s); {data['seconds_taken']} s")
    lines.append("forward+backward by tile:")
    for t in sorted(data["tiles"], key=lambda t: t["milliseconds"]):
        lines.append(f"  {tile(t['tile']):60} {t['milliseconds']:8.3f} ms {t['tflops']:6.1f} TFLOP/s "
                     f"({t['share_of_sdpa']:.0%} of {SHORT.get(first, first)}'s, {t['share_of_fastest']:.0%} of "
                     f"{SHORT.get(fastest, fastest)}'s)"
                     + ("  <- the notebook's" if t["shipped"] else ""))
    for found in data["accuracy"]["ragged"]:
        lines.append(f"relative error against {found['reference_dtype']} on {found['shape']}, causal={found['causal']}: solution "
                     + ", ".join(f"{k} {v:.1e}" for k, v in found["solution"].items()) + "; PyTorch's "
                     + ", ".join(f"{k} {v:.1e}" for k, v in found["pytorch"].items()))
    lines.append(f"GPU clocks before: {data['clocks_before']}; after: {data['clocks_after']}")
    return lines


def write(out_dir: Path, data: dict) -> list[Path]:
    """``attention_<device>.json`` and ``attention_<device>.txt`` in ``out_dir``."""
    return write_record(out_dir, "attention", data, summary(data))


def record(out_dir, device: str = "cuda", timeout: float = 540) -> dict:
    """Measure on this machine's GPU, write the record and its summary into ``out_dir``, and return the record
    (``{"status": "skipped", ...}`` without CUDA, or for another ``device``). ``autograder.authoring.gpu_check`` calls
    it (``kernel_timings.run_recorder``: this module's command line in a fresh Python, Triton compiling)."""
    return run_recorder("autograder.authoring.attention_timings", "attention", out_dir, device, timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.authoring.attention_timings",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for attention_<device>.json and attention_<device>.txt")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cuda (default); cpu runs the same code small, in Triton's interpreter, as the tests do: "
                             "its times measure the interpreter, nothing else")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds of every variant (default {ROUNDS})")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported, or kernels cannot run here
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        args.out_dir.mkdir(parents=True, exist_ok=True)
        (args.out_dir / "attention_cuda.txt").write_text(SKIPPED + "\n", encoding="utf-8")
        print(SKIPPED)
        return 0
    if args.device == "cuda" and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("error: TRITON_INTERPRET is set: the kernels would run in Triton's interpreter, not on the GPU",
              file=sys.stderr)
        return 2
    data = (measure("cuda", rounds=args.rounds) if args.device == "cuda" else
            measure("cpu", shape=(1, 2, 40, 16), tiles=TILES[-1:], ragged=(1, 1, 37), rounds=args.rounds))
    write(args.out_dir, data)
    print("\n".join(summary(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
