"""Time assignment 11's solution FlashAttention on a GPU: ``python -m autograder.authoring.attention_timings OUT_DIR``.

The kernels are the solution notebook's own cells (``solutions/11_flash_attention``), read from its JSON and run as
plain Python, compiled by Triton (``kernel_timings.solution_namespace``: one copy of the kernels, the notebook's).
``measure`` then times, with the notebook's Exercise 9 helper (``autograder.student.flash_timing.time_attention``:
``triton.testing.do_bench``), forward and forward+backward of the solution's ``FlashAttention`` against
``F.scaled_dot_product_attention`` with its flash backend, causal, 4 batches of 16 heads of 4096 tokens, head
dimension 64, in bfloat16 (float16 before compute capability 8): TFLOP/s, the share of the GPU's tensor-core peak on
paper and of PyTorch's throughput, whose half is the notebook's aim. It also times forward+backward with a few other
tiles than the notebook's, and compares the solution's output and gradients with PyTorch's (bfloat16, causal and
not, on a sequence that is no multiple of the tiles).

It writes ``attention_cuda.json`` (the record the notebook shows, once copied to ``autograder/student/data/``) and
``attention_cuda.txt`` (a summary), in about a minute on an H200 (Triton compiles each tile's kernels first). It needs
torch, triton and numpy, not Jupyter or nbgrader. Without CUDA it writes only the summary, "no CUDA: skipped".
(``--device cpu`` runs the same code small under Triton's interpreter, for the tests: its times are the
interpreter's, and its files are named ``attention_cpu``.)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from autograder.authoring.kernel_timings import kernel_provenance, solution_namespace, write_record

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "11_flash_attention" / "11_flash_attention.ipynb"
CELLS = ("setup", "tiles", "attention-references", "attention_forward", "attention_backward",
         "flash_attention_function")  # the cells' ids, in order
AIM = 0.5  # of PyTorch's flash throughput, forward+backward (the notebook's Section 9)
# Other tiles tried, beside the notebook's own (ATTENTION_TILE of its "tiles" cell), forward+backward.
TILES = ({"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
         {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4},
         {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},
         {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 4})
SOLUTION = "solution FlashAttention"
SKIPPED = "no CUDA: skipped"


def measure(device: str = "cuda", shape=None, tiles=TILES, check_shape=(2, 3, 1000)) -> dict:
    """The record: forward and forward+backward of the solution and PyTorch at ``shape`` (default the notebook's
    4 x 16 x 4096 x 64), forward+backward with ``tiles``, and the largest differences from PyTorch's results on
    (batch, heads, sequence) ``check_shape``, causal and not."""
    import torch

    from autograder.student.flash_timing import (
        SHAPE, attention_flops, half_dtype, nominal_peak_tflops, time_attention,
    )
    shape = tuple(shape or SHAPE)
    started = time.monotonic()
    namespace = solution_namespace(NOTEBOOK, CELLS)  # (its setup cell imports triton, interpreted without a GPU)
    torch.use_deterministic_algorithms(False)  # the setup cell's NaN fill of new tensors is for the exercises
    function = namespace["FlashAttention"].apply
    dtype = half_dtype(device) if device == "cuda" else torch.float32
    differences = {causal: _difference(namespace, device, dtype, (*check_shape, shape[-1]), causal)
                   for causal in (False, True)}
    rows = time_attention(function, shape, causal=True, dtype=dtype, device=device, name=SOLUTION)
    pytorch = next(r for r in rows if r["pass"] == "forward+backward" and r["variant"] != SOLUTION)
    shipped = dict(namespace["ATTENTION_TILE"])
    compared = []
    for tile in (shipped,) + tuple(tiles):
        namespace["ATTENTION_TILE"] = tile  # the launchers read it at every call
        mine = time_attention(function, shape, causal=True, dtype=dtype, device=device, name=SOLUTION,
                              with_pytorch=False, passes=("forward+backward",))[0]
        compared.append({"tile": tile, "shipped": tile == shipped, "milliseconds": mine["milliseconds"],
                         "tflops": mine["tflops"], "share_of_sdpa": pytorch["milliseconds"] / mine["milliseconds"]})
    namespace["ATTENTION_TILE"] = shipped
    data = {
        "format": 1,
        "kind": "measurement",
        "what": ("this course's solution kernels (11_flash_attention, Exercises 4 to 7: FlashAttention's forward and "
                 "backward Triton kernels), forward and forward+backward, causal, against F.scaled_dot_product_attention "
                 "with its flash backend"),
        **kernel_provenance(device, "python -m autograder.authoring.attention_timings"),
        "method": ("autograder.student.flash_timing.time_attention: triton.testing.do_bench (median ms) of one call, "
                   "forward under no_grad, forward+backward as torch.autograd.grad for a random upstream gradient; "
                   "TFLOP/s by the usual count (forward 4 B H S^2 d, half of it causal; backward 2.5 forwards)"),
        "shape": list(shape),
        "dtype": str(dtype).removeprefix("torch."),
        "flops_forward_backward": attention_flops(*shape, True, True),
        "nominal_peak_tflops": nominal_peak_tflops(device),
        "aim_share_of_sdpa": AIM,
        "tile": shipped,
        "rows": rows,
        "tiles": compared,
        "max_abs_difference_from_pytorch": differences,
    }
    data["seconds_taken"] = round(time.monotonic() - started, 1)
    return data


def _difference(namespace: dict, device: str, dtype, shape: tuple, causal: bool) -> dict:
    """Largest differences of the solution's output and gradients from PyTorch's, both in ``dtype``, on q, k and v of
    ``shape`` (its sequence no multiple of the tiles)."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator(device=device).manual_seed(1)
    q, k, v, grad_output = (torch.randn(shape, dtype=dtype, device=device, generator=generator) for _ in range(4))
    mine, theirs = ([t.detach().requires_grad_() for t in (q, k, v)] for _ in range(2))
    o = namespace["FlashAttention"].apply(*mine, causal)
    o_pytorch = F.scaled_dot_product_attention(*theirs, is_causal=causal)
    grads = torch.autograd.grad(o, mine, grad_output)
    grads_pytorch = torch.autograd.grad(o_pytorch, theirs, grad_output)
    found = {"length": shape[-2], "causal": causal, "o": float((o - o_pytorch).detach().abs().max())}
    found.update({f"d{name}": float((a - b).abs().max()) for name, a, b in zip("qkv", grads, grads_pytorch)})
    return found


def summary(data: dict) -> list[str]:
    """The record in a few lines: what was measured where, the rows, the tiles."""
    from autograder.student.flash_timing import result_lines

    tile = lambda t: ", ".join(f"{k}={v}" for k, v in t.items())  # noqa: E731
    lines = result_lines(data)
    lines.append(f"shape {data['shape']} (batch, heads, sequence, d), {data['dtype']}, causal; aim: "
                 f"{data['aim_share_of_sdpa']:.0%} of PyTorch's forward+backward throughput; {data['seconds_taken']} s")
    lines.append("forward+backward by tile:")
    for t in sorted(data["tiles"], key=lambda t: t["milliseconds"]):
        lines.append(f"  {tile(t['tile']):60} {t['milliseconds']:8.3f} ms {t['tflops']:6.1f} TFLOP/s "
                     f"({t['share_of_sdpa']:.0%} of PyTorch's)" + ("  <- the notebook's" if t["shipped"] else ""))
    for found in data["max_abs_difference_from_pytorch"].values():
        lines.append(f"largest difference from PyTorch, {found['length']} tokens, causal={found['causal']}: " + ", ".join(
            f"{k} {v:.1e}" for k, v in found.items() if k not in ("length", "causal")))
    return lines


def write(out_dir: Path, data: dict) -> list[Path]:
    """``attention_<device>.json`` and ``attention_<device>.txt`` in ``out_dir``."""
    return write_record(out_dir, "attention", data, summary(data))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.authoring.attention_timings",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for attention_<device>.json and attention_<device>.txt")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cuda (default); cpu runs the same code small, in Triton's interpreter, as the tests do: "
                             "its times measure the interpreter, nothing else")
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
    data = measure("cuda") if args.device == "cuda" else measure("cpu", shape=(1, 2, 40, 16), tiles=TILES[-1:],
                                                                 check_shape=(1, 1, 37))
    write(args.out_dir, data)
    print("\n".join(summary(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
