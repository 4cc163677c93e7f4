"""Time assignment 10's solution kernels on a GPU: ``python -m autograder.authoring.kernel_timings OUT_DIR``.

The kernels are the solution notebook's own cells (``solutions/10_triton_kernels``), read from its JSON
and run here as plain Python, compiled by Triton (never its interpreter): one copy of the kernels, the
notebook's. ``record(out_dir)`` then measures, with the notebook's Exercise 6 helper
(``autograder.student.kernel_records.time_bias_gelu``: 07's workloads and clocks), forward+backward of
``BiasGELU`` against ``copy_`` and the built-in ``F.gelu(x + bias)``:

- at 2^27 float32 elements, for the notebook's tiles and a few others (which tile sizes and
  ``num_warps`` get the solution to the notebook's aim, 85% of ``copy_``'s bandwidth);
- over sizes from 2^20 to 2^27, with the notebook's tiles, as latency and as throughput, each call also
  replayed from a CUDA graph (the host's per-call work taken away) and each also timed by
  ``triton.testing.do_bench``;
- the notebook's custom operator (Exercise 5) and the built-in under ``torch.compile(mode="reduce-overhead")``
  (CUDA graphs made by the compiler) at 2^20 and 2^27 elements;
- whether the two bias gradients (partial sums, ``tl.atomic_add``) give the same bits from run to run,
  and how far the solution's gradients are from torch's.

It writes ``kernels_cuda.json`` (the record the notebook shows, once copied to
``autograder/student/data/``) and ``kernels_cuda.txt`` (a summary), in about a minute or two (the compiled
variants take most of it). The record holds ``solution_sha256``, a fingerprint of the kernel cells it
timed, so a test can tell when the notebook's kernels changed after it was made. It needs torch, triton,
numpy and matplotlib, not Jupyter or nbgrader. Without CUDA it writes only the summary, "no CUDA:
skipped", and returns that. (``--device cpu`` runs the same code small under Triton's interpreter, for
the tests: its times are the interpreter's, its files are named ``kernels_cpu``, and it leaves out what
needs a GPU: CUDA graphs, ``do_bench``, the compiled variants.)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.authoring.notebook_script import compile_cell

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "10_triton_kernels" / "10_triton_kernels.ipynb"
CELLS = ("setup", "tiles", "bias_gelu_forward", "cell-backward-reference", "bias_gelu_backward",
         "bias_gelu_function", "bias_gelu_op")  # the cells' ids, in order
KERNEL_CELLS = ("tiles", "bias_gelu_forward", "bias_gelu_backward")  # what is timed: solution_sha256 covers these
COMPILED_SIZES = (2 ** 20, 2 ** 27)  # where torch.compile(mode="reduce-overhead") is timed
SIZES = tuple(2 ** k for k in (20, 22, 24, 26, 27))
AIM = 0.85  # of copy_'s bandwidth, forward+backward of 2^27 elements (the notebook's Section 7)
# Other tiles tried at 2^27, beside the notebook's own (FORWARD_TILE, BACKWARD_TILE of its "tiles" cell).
TILES = (
    ({"BLOCK_ROWS": 8, "BLOCK_COLUMNS": 512, "num_warps": 8}, {"BLOCK_ROWS": 32, "BLOCK_COLUMNS": 128, "num_warps": 8}),
    ({"BLOCK_ROWS": 4, "BLOCK_COLUMNS": 1024, "num_warps": 4}, {"BLOCK_ROWS": 16, "BLOCK_COLUMNS": 256, "num_warps": 8}),
    ({"BLOCK_ROWS": 4, "BLOCK_COLUMNS": 512, "num_warps": 4}, {"BLOCK_ROWS": 16, "BLOCK_COLUMNS": 128, "num_warps": 4}),
)
SOLUTION = "solution BiasGELU"
OPERATOR = 'solution custom op, torch.compile(mode="reduce-overhead")'
BUILT_IN_COMPILED = 'built-in F.gelu(x + bias), torch.compile(mode="reduce-overhead")'
SKIPPED = "no CUDA: skipped"


def solution_namespace(notebook: Path = NOTEBOOK, cells: tuple[str, ...] = CELLS, changes=()) -> dict:
    """The solution notebook's ``cells`` (by id, in order: for 10 its setup, tiles, references, kernels, launchers
    and ``BiasGELU``), run as plain Python; ``changes``, (old, new) pairs, are replaced in their sources first (a
    test types a student's mistake into a right answer that way).

    Each cell's source goes into ``linecache`` under a name of its own, as IPython does: Triton reads a
    kernel's source when it defines one. The setup cell decides, as in the notebook, where the kernels
    run: compiled for the GPU, or in Triton's interpreter without CUDA (or with TRITON_INTERPRET=1 set
    before triton was first imported in this process).
    """
    sources = {cell.get("id"): "".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"]}
    for old, new in changes:
        found = [name for name in cells if old in sources[name]]
        if not found:
            raise ValueError(f"no cell of {notebook.name} among {', '.join(cells)} holds {old!r}")
        for name in found:
            sources[name] = sources[name].replace(old, new)
    namespace = {"__name__": f"solution_{notebook.stem[:2]}"}
    for name in cells:
        with contextlib.redirect_stdout(io.StringIO()):  # the setup cell says where kernels run
            code = compile_cell(sources[name], f"<{notebook.stem} cell {name}>")
            exec(code, namespace)  # noqa: S102 - the course's own notebook
    return namespace


def kernel_provenance(device: str, source: str) -> dict:
    """Where and with what a kernel record was made: the device, torch, CUDA, Triton and Python versions, when,
    and the command (``source``); 10's and 11's recorders both start their records with it."""
    import torch
    import triton

    from autograder.student.timing import device_name

    return {"device": device, "device_name": device_name(device), "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda, "triton_version": triton.__version__,
            "python_version": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "source": source}


def record(out_dir, device: str = "cuda") -> dict:
    """Measure the solution kernels on this machine's GPU, write the record and its summary into ``out_dir``, and
    return the record (``{"status": "skipped", ...}`` without CUDA, or for another ``device``: the kernels are
    timed on CUDA only). ``autograder.authoring.gpu_check`` calls it (``run_recorder``: in a fresh Python)."""
    return run_recorder("autograder.authoring.kernel_timings", "kernels", out_dir, device, timeout=600)


def run_recorder(module: str, name: str, out_dir, device: str = "cuda", timeout: float = 600) -> dict:
    """Run 10's or 11's recorder (``python -m module OUT_DIR``) on this machine's GPU and return the record it wrote,
    ``<name>_cuda.json`` in ``out_dir`` (``{"status": "skipped", ...}``, with ``<name>_cuda.txt`` saying so, without
    CUDA or for another ``device``).

    The measurement runs in a fresh Python without TRITON_INTERPRET: whether Triton compiles or interprets is fixed
    when a process first imports it, and the caller (a GPU check that also grades) may have imported it for the
    interpreter.
    """
    import torch

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available() or torch.device(device).type != "cuda":
        (out_dir / f"{name}_cuda.txt").write_text(SKIPPED + "\n", encoding="utf-8")
        return {"status": "skipped", "reason": SKIPPED}
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    with tempfile.TemporaryDirectory(prefix=f"{name}-timings-triton-") as cache:  # compiled kernels: not in a home
        environment.setdefault("TRITON_CACHE_DIR", cache)
        done = subprocess.run([sys.executable, "-m", module, str(out_dir.resolve())], cwd=NOTEBOOK.parents[2],
                              env=environment, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{name} timings failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads((out_dir / f"{name}_cuda.json").read_text(encoding="utf-8"))


def write_record(out_dir: Path, name: str, data: dict, lines: list[str]) -> list[Path]:
    """``<name>_<device>.json`` (``data``) and ``<name>_<device>.txt`` (``lines``) in ``out_dir``: 10's and 11's
    records alike."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{name}_{data['device']}"
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    stem.with_suffix(".txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [stem.with_suffix(".json"), stem.with_suffix(".txt")]


def write(out_dir: Path, data: dict) -> list[Path]:
    """``kernels_<device>.json`` and ``kernels_<device>.txt`` in ``out_dir``."""
    return write_record(out_dir, "kernels", data, summary(data))


def solution_sha256(notebook: Path = NOTEBOOK, cells: tuple[str, ...] = KERNEL_CELLS) -> str:
    """A fingerprint of the cells a record times (by default 10's ``KERNEL_CELLS``; 11's recorder names its own):
    it changes when their sources do."""
    sources = {cell.get("id"): "".join(cell["source"]) for cell in json.loads(notebook.read_text())["cells"]}
    return hashlib.sha256("\n".join(sources[name] for name in cells).encode()).hexdigest()


def measure(device: str = "cuda", sizes=SIZES, tiles=TILES, check_elements: int = 2 ** 20,
            same_elements: int = 2 ** 24, runs: int = 20, clock: dict | None = None,
            compiled_sizes=COMPILED_SIZES) -> dict:
    """The record: the notebook's tiles and ``tiles`` at the largest size, the notebook's tiles at every size
    (on CUDA also replayed from CUDA graphs and timed by do_bench), the custom operator and the built-in under
    torch.compile(mode="reduce-overhead") at ``compiled_sizes`` (CUDA), the bias gradients' reproducibility
    (``runs`` runs on ``same_elements``) and the gradients' difference from torch (on ``check_elements``).
    ``record`` asks for CUDA; the tests run it small on a CPU."""
    import torch

    from autograder.student.kernel_records import time_bias_gelu
    from autograder.student.timing import nominal_peak_bandwidth_gbps

    clock = clock or {}  # time_bias_gelu's repeats, calls and blocks (its defaults on a GPU)
    on_gpu = torch.device(device).type == "cuda"
    started = time.monotonic()
    namespace = solution_namespace()
    torch.use_deterministic_algorithms(False)  # the setup cell's NaN fill of new tensors is for the exercises
    function, shipped = namespace["BiasGELU"].apply, (namespace["FORWARD_TILE"], namespace["BACKWARD_TILE"])
    accuracy = _gradient_difference(namespace, device, check_elements)
    compared = []
    for forward, backward in (shipped,) + tuple(tiles):
        namespace["FORWARD_TILE"], namespace["BACKWARD_TILE"] = forward, backward
        rows = time_bias_gelu(function, [max(sizes)], device, name=SOLUTION, **clock)
        compared.append({"forward_tile": forward, "backward_tile": backward, "shipped": (forward, backward) == shipped,
                         **{key: rows[-1][key] for key in ("bytes", "latency_seconds", "throughput_seconds",
                                                            "fraction_of_copy_latency", "fraction_of_copy_throughput")},
                         "copy_latency_seconds": rows[0]["latency_seconds"]})
    namespace["FORWARD_TILE"], namespace["BACKWARD_TILE"] = shipped
    sweep = time_bias_gelu(function, list(sizes), device, name=SOLUTION, graphs=on_gpu, bench=on_gpu, **clock)
    copy = next(row for row in sweep if row["elements"] == max(sizes))
    data = {
        "format": 2,
        "kind": "measurement",
        "what": ("this course's solution kernels (10_triton_kernels, Exercises 1 to 3: BiasGELU with its forward and "
                 "backward Triton kernels, bias gradient from partial sums), forward+backward of float32 (rows, "
                 "1024) tensors, against copy_ and the built-in F.gelu(x + bias)"),
        "solution_sha256": solution_sha256(),
        **kernel_provenance(device, "python -m autograder.authoring.kernel_timings"),
        "method": ("autograder.student.kernel_records.time_bias_gelu: latency = one call between two synchronised "
                   "clock reads (median of 20), throughput = 10 calls back to back (median of 3 blocks), with "
                   "torch.utils.benchmark.Timer; fraction_of_copy = (20 bytes per element / time) / copy_'s "
                   "(8 bytes per element / time) at the same size. Variants ending ', CUDA graph': the same call "
                   "captured once with torch.cuda.graph and replayed. do_bench_seconds: triton.testing.do_bench's "
                   "median (CUDA events around each call, L2 flushed before it)"),
        "copy_bandwidth_gbps": copy["bytes"] / copy["latency_seconds"] / 1e9,
        "nominal_peak_bandwidth_gbps": nominal_peak_bandwidth_gbps(device),
        "aim_fraction_of_copy": AIM,
        "kernels_variant": SOLUTION,
        "largest_elements": max(sizes),
        "tiles_at_largest": compared,
        "rows": sweep,
        "compiled": _compiled(namespace, device, [n for n in compiled_sizes if n in sizes], clock) if on_gpu else [],
        "bias_gradient_reproducibility": _reproducibility(namespace, device, same_elements, runs),
        "max_abs_difference_from_torch": accuracy,
    }
    data["seconds_taken"] = round(time.monotonic() - started, 1)
    return data


def _compiled(namespace: dict, device: str, sizes, clock: dict) -> list[dict]:
    """The custom operator (Exercise 5) and the built-in under torch.compile(mode="reduce-overhead"), at ``sizes``:
    their rows, or one row saying what failed (the record keeps a failure as what was measured)."""
    import torch
    import torch.nn.functional as F

    from autograder.student.kernel_records import time_bias_gelu

    operator = namespace["bias_gelu_op"]
    try:
        torch.compiler.reset()
        return time_bias_gelu(torch.compile(lambda x, bias: operator(x, bias), mode="reduce-overhead"), list(sizes),
                              device, name=OPERATOR, others=((BUILT_IN_COMPILED, torch.compile(
                                  lambda x, bias: F.gelu(x + bias), mode="reduce-overhead")),), **clock)
    except Exception as error:  # noqa: BLE001 - a compiler that fails here is a finding, not a reason to lose the rest
        return [{"variant": OPERATOR, "error": f"{type(error).__name__}: {str(error)[:1000]}"}]


def _gradient_difference(namespace: dict, device: str, elements: int) -> dict:
    """Largest differences of the solution's output and gradients from torch's, on ``elements`` elements."""
    import torch
    import torch.nn.functional as F

    from autograder.student.timing import workload_tensors

    x, bias, grad_output = workload_tensors(elements, device)
    mine = [t.detach().requires_grad_() for t in (x, bias)]
    theirs = [t.detach().requires_grad_() for t in (x, bias)]
    y, y_torch = namespace["BiasGELU"].apply(*mine), F.gelu(theirs[0] + theirs[1])
    grads, grads_torch = torch.autograd.grad(y, mine, grad_output), torch.autograd.grad(y_torch, theirs, grad_output)
    return {"elements": elements, "output": float((y - y_torch).detach().abs().max()),
            "grad_x": float((grads[0] - grads_torch[0]).abs().max()),
            "grad_bias": float((grads[1] - grads_torch[1]).abs().max())}


def _reproducibility(namespace: dict, device: str, elements: int, runs: int) -> dict:
    """How many different bias gradients ``runs`` calls of each backward give on ``elements`` elements."""
    from autograder.student.timing import workload_tensors

    x, bias, grad_output = workload_tensors(elements, device)
    different = {name: len({namespace[launcher](x, bias, grad_output)[1].cpu().numpy().tobytes() for _ in range(runs)})
                 for name, launcher in (("partial sums", "bias_gelu_backward"),
                                        ("tl.atomic_add", "bias_gelu_backward_atomic"))}
    return {"runs": runs, "elements": elements, **different}


def summary(data: dict) -> list[str]:
    """The record in a few lines: what got where, at 2^27 and over sizes (``kernel_records``' lines)."""
    from autograder.student.kernel_records import row_lines, tile_lines, timing_lines

    shown = timing_lines(data)
    lines = shown[:2] + [f"{data['seconds_taken']} s; CUDA {data['cuda_version']}; copy_ "
                         f"{data['copy_bandwidth_gbps']:.0f} GB/s; on paper " + (
                             f"{data['nominal_peak_bandwidth_gbps']:.0f} GB/s" if data["nominal_peak_bandwidth_gbps"]
                             else "unknown") + f"; the aim: {data['aim_fraction_of_copy']:.0%} of copy_"]
    lines += tile_lines(data) + ["the notebook's tiles by size:"] + shown[2:]
    if data.get("compiled"):
        lines += ['torch.compile(mode="reduce-overhead"):'] + row_lines(data["compiled"])
    same = data["bias_gradient_reproducibility"]
    lines.append(f"bias gradient, {same['runs']} runs on {same['elements']:,} elements: partial sums "
                 f"{same['partial sums']} different result(s), tl.atomic_add {same['tl.atomic_add']}")
    difference = data["max_abs_difference_from_torch"]
    lines.append(f"largest difference from torch on {difference['elements']:,} elements: " + ", ".join(
        f"{k} {v:.1e}" for k, v in difference.items() if k != "elements"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.authoring.kernel_timings", description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path, help="folder for kernels_<device>.json and kernels_<device>.txt")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cuda (default); cpu runs the same code small, in Triton's interpreter, as the tests do: "
                             "its times measure the interpreter, nothing else")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        (args.out_dir).mkdir(parents=True, exist_ok=True)
        (args.out_dir / "kernels_cuda.txt").write_text(SKIPPED + "\n", encoding="utf-8")
        print(SKIPPED)
        return 0
    if args.device == "cuda" and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("error: TRITON_INTERPRET is set: the kernels would run in Triton's interpreter, not on the GPU",
              file=sys.stderr)
        return 2
    data = measure("cuda") if args.device == "cuda" else measure(
        "cpu", sizes=(2 ** 10, 2 ** 11), tiles=TILES[:1], check_elements=2 ** 10, same_elements=2 ** 11, runs=2,
        clock={"repeats": 2, "calls": 1, "blocks": 1})
    write(args.out_dir, data)
    print("\n".join(summary(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
