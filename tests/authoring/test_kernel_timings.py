"""The GPU record of assignment 10's solution kernels (``python -m autograder.authoring.kernel_timings``).

Without CUDA, ``record`` says "no CUDA: skipped" and writes no measurement. The measuring code itself runs
here on the CPU, small, in a fresh Python under Triton's interpreter (``--device cpu``): the same code a GPU
runs, so a GPU's one try finds it working; its times are the interpreter's and prove nothing about speed.
The test marked ``gpu`` records on a real GPU and prints the figures (no speed is asserted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from autograder.authoring import kernel_timings
from autograder.authoring.record_timings import crossover_elements
from autograder.student.kernel_records import GRAPHED
from autograder.student.kernels import plot_kernel_share, reference_timings, tile_lines, timing_lines

REPO = kernel_timings.NOTEBOOK.parents[2]  # not conftest's: a bare GPU machine runs this file with --noconftest

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_the_record_is_skipped_and_says_so(tmp_path):
    assert kernel_timings.record(tmp_path / "out") == {"status": "skipped", "reason": "no CUDA: skipped"}
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["kernels_cuda.txt"]
    assert (tmp_path / "out" / "kernels_cuda.txt").read_text() == "no CUDA: skipped\n"
    done = subprocess.run([sys.executable, "-m", "autograder.authoring.kernel_timings", str(tmp_path / "cli")],
                          cwd=REPO, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "no CUDA: skipped\n"), done.stderr[-2000:]


def test_the_measuring_code_runs_end_to_end_on_the_cpu_in_a_fresh_python(tmp_path):
    environment = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, "-m", "autograder.authoring.kernel_timings", str(tmp_path), "--device", "cpu"],
                          cwd=REPO, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    record = json.loads((tmp_path / "kernels_cpu.json").read_text())
    assert (tmp_path / "kernels_cpu.txt").read_text().splitlines() == kernel_timings.summary(record)
    assert record["kind"] == "measurement" and record["device"] == "cpu" and record["triton_version"]
    assert record["format"] == 2 and record["solution_sha256"] == kernel_timings.solution_sha256()
    assert record["compiled"] == [] and not any("do_bench_seconds" in r for r in record["rows"])  # a GPU's only
    # The notebook's tiles first, then the others; every row of every size: copy_, built-in, the solution.
    assert record["tiles_at_largest"][0]["shipped"] and not any(t["shipped"] for t in record["tiles_at_largest"][1:])
    assert [(r["elements"], r["variant"]) for r in record["rows"]] == [
        (n, v) for n in (2 ** 10, 2 ** 11) for v in ("copy_ (device to device)", "built-in F.gelu(x + bias)",
                                                      kernel_timings.SOLUTION)]
    for row in record["rows"]:
        assert row["latency_seconds"] > 0 and row["throughput_seconds"] > 0 and row["bytes"] > 0
        copy = next(r for r in record["rows"] if r["elements"] == row["elements"])
        expected = (row["bytes"] / row["latency_seconds"]) / (copy["bytes"] / copy["latency_seconds"])
        assert row["fraction_of_copy_latency"] == pytest.approx(expected)
    assert all(r["bytes"] == 20 * r["elements"] + 12 * min(r["elements"], 1024) for r in record["rows"]
               if r["variant"] != "copy_ (device to device)")
    # Under the interpreter the programs run in order: both bias gradients are the same bits every run.
    assert record["bias_gradient_reproducibility"] == {"runs": 2, "elements": 2 ** 11, "partial sums": 1,
                                                             "tl.atomic_add": 1}
    assert max(v for k, v in record["max_abs_difference_from_torch"].items() if k != "elements") < 1e-5
    assert timing_lines(record)[0] == record["what"]  # the notebook can show such a record
    _plotted(record, [r["fraction_of_copy_latency"] for r in record["rows"] if r["variant"] == kernel_timings.SOLUTION])


def _plotted(record: dict, shares: list) -> None:
    """The record's plot: the kernels' latency share first, their throughput and the built-in's after it."""
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    plot_kernel_share(ax, record)
    assert list(ax.lines[0].get_ydata()) == shares
    labels = [line.get_label() for line in ax.lines]
    if "fraction_of_copy_latency" in record["rows"][0]:
        assert labels[:4] == [f"{v}, {k}" for v in (record["kernels_variant"], "built-in F.gelu(x + bias)")
                              for k in ("latency", "throughput")]
    else:
        assert labels[0] == record["kernels_variant"]


def test_the_notebook_shows_a_recorded_measurement_labelled_with_what_and_which_code(tmp_path):
    shown = reference_timings()
    if shown["what"].startswith("NOT this notebook's solution"):  # no GPU has recorded the solution yet
        assert shown["device_name"] == "NVIDIA H200" and shown["triton_version"] == "3.6.0"
        assert [r["elements"] for r in shown["rows"]][:5] == [2 ** k for k in (20, 22, 24, 26, 27)]
    else:
        assert shown["source"] == "python -m autograder.authoring.kernel_timings"
    _plotted(shown, [r.get("fraction_of_copy", r.get("fraction_of_copy_latency")) for r in shown["rows"]
                     if r["variant"] == shown["kernels_variant"]])
    lines = timing_lines(shown)
    assert lines[0] == shown["what"] and shown["device_name"] in lines[1] and len(lines) == 2 + len(shown["rows"])
    compared = shown.get("tiles_at_largest") or []
    assert len(tile_lines(shown)) == (1 + len(compared) if compared else 0)
    (tmp_path / "kernels_cuda.json").write_text(json.dumps(dict(shown, what="a record of the solution")))
    assert reference_timings(tmp_path)["what"] == "a record of the solution"  # a shipped record comes first


def test_the_cells_it_runs_are_the_solution_notebooks():
    ids = [cell.get("id") for cell in json.loads(kernel_timings.NOTEBOOK.read_text())["cells"]]
    assert [c for c in kernel_timings.CELLS if c in ids] == list(kernel_timings.CELLS)
    assert sorted(ids.index(c) for c in kernel_timings.CELLS) == [ids.index(c) for c in kernel_timings.CELLS]


def _section_7() -> str:
    cells = json.loads(kernel_timings.NOTEBOOK.read_text())["cells"]
    return "".join(next(c for c in cells if c["id"] == "section-7")["source"])


def _row(record: dict, variant: str, elements: int) -> dict:
    return next(r for r in record["rows"] if r["variant"] == variant and r["elements"] == elements)


def test_section_7_states_the_shipped_records_figures_both_ways():
    # Every figure Section 7 quotes is the shipped record's, as latency and as throughput, rounded as written.
    record = json.loads((REPO / "autograder" / "student" / "data" / "kernels_cuda.json").read_text())
    text = " ".join(_section_7().split())
    us = lambda seconds: f"{seconds * 1e6:,.0f}"  # noqa: E731
    mine, builtin, largest = kernel_timings.SOLUTION, "built-in F.gelu(x + bias)", 2 ** 27
    said = [f"{us(_row(record, mine, largest)['latency_seconds'])} µs against the built-in's "
            f"{us(_row(record, builtin, largest)['latency_seconds'])} µs as latency "
            f"({_row(record, mine, largest)['fraction_of_copy_latency']:.0%} of `copy_`'s bandwidth against "
            f"{_row(record, builtin, largest)['fraction_of_copy_latency']:.0%})",
            f"{us(_row(record, mine, largest)['throughput_seconds'])} against "
            f"{us(_row(record, builtin, largest)['throughput_seconds'])} µs as throughput "
            f"({_row(record, mine, largest)['fraction_of_copy_throughput']:.0%} against "
            f"{_row(record, builtin, largest)['fraction_of_copy_throughput']:.0%})",
            f"at $2^{{24}}$, {us(_row(record, mine, 2 ** 24)['latency_seconds'])} against "
            f"{us(_row(record, builtin, 2 ** 24)['latency_seconds'])} µs as latency and "
            f"{us(_row(record, mine, 2 ** 24)['throughput_seconds'])} against "
            f"{us(_row(record, builtin, 2 ** 24)['throughput_seconds'])} µs as throughput",
            f"at $2^{{20}}$, {us(_row(record, mine, 2 ** 20)['latency_seconds'])} against "
            f"{us(_row(record, builtin, 2 ** 20)['latency_seconds'])} µs as latency",
            f"({_row(record, mine, 2 ** 20)['bytes'] / 1e6:.0f} MB at {record['copy_bandwidth_gbps']:,.0f} GB/s)",
            f"yet a call takes {us(_row(record, mine, 2 ** 20)['latency_seconds'])} µs",
            f"({us(_row(record, builtin, 2 ** 20)['latency_seconds'])} µs for "
            f"{_row(record, mine, 2 ** 20)['bytes'] / record['copy_bandwidth_gbps'] / 1e3:.0f} µs of memory work)"]
    for phrase in said:
        assert phrase in text, phrase
    sizes = sorted({r["elements"] for r in record["rows"]})
    for way in ("latency", "throughput"):  # slower at every size up to 2^24, both ways; the crossover as said
        mine_s, builtin_s = ([_row(record, v, n)[f"{way}_seconds"] for n in sizes] for v in (mine, builtin))
        assert all(m > b for n, m, b in zip(sizes, mine_s, builtin_s) if n <= 2 ** 24)
    crossings = [crossover_elements(sizes, *([_row(record, v, n)[f"{w}_seconds"] for n in sizes] for v in (builtin, mine)))
                 for w in ("latency", "throughput")]
    assert f"near ${crossings[0] / 1e7:.1f} \\times 10^7$ elements as latency and ${crossings[1] / 1e7:.1f} \\times " \
           f"10^7$ as throughput" in text
    # The tiles: the notebook's twice at 2^27 in one run, and its lead over the next fastest, both ways.
    compared = record["tiles_at_largest"]
    ours = next(t for t in compared if t["shipped"])
    others = [t for t in compared if not t["shipped"]]
    lead = {way: min(t[f"{way}_seconds"] for t in others) / ours[f"{way}_seconds"] - 1 for way in ("latency", "throughput")}
    assert all(value > 0 for value in lead.values())  # the notebook's tiles were the fastest, both ways
    apart = _row(record, mine, largest)["latency_seconds"] / ours["latency_seconds"] - 1
    assert (f"took {us(ours['latency_seconds'])} µs there ({ours['fraction_of_copy_latency']:.0%} of `copy_`) against "
            f"{us(_row(record, mine, largest)['latency_seconds'])} µs "
            f"({_row(record, mine, largest)['fraction_of_copy_latency']:.0%}) in the sweep over sizes, {apart:.0%} apart") in text
    assert f"by {lead['latency']:.0%} as latency and {lead['throughput']:.0%} as throughput over the next" in text
    assert max(lead.values()) < apart  # "by less than that spread"


def test_section_7_says_whether_the_shipped_record_timed_the_kernels_the_notebook_has_now():
    # The record keeps a fingerprint of the kernel cells it timed (solution_sha256; the first record, of
    # 2026-11-26, predates it). Until a record of the current kernels ships, Section 7 says it is older.
    record = json.loads((REPO / "autograder" / "student" / "data" / "kernels_cuda.json").read_text())
    older = "It timed the kernels as they were before they took int64 row offsets"
    current = record.get("solution_sha256") == kernel_timings.solution_sha256()
    text = " ".join(_section_7().split())
    assert (older in text) != current, "Section 7 must say whether the shipped record timed the notebook's current kernels"
    graphed = any(row["variant"].endswith(GRAPHED) for row in record["rows"])
    assert ("the shipped record was made before that, and has no such figure yet" in text) != graphed


COMPILE_FOR_SM_90 = r"""
import json, re, sys, torch, triton
torch.cuda.is_available = lambda: True  # no GPU here: the setup cell must still define compiled kernels
from triton.backends.compiler import GPUTarget
from autograder.authoring.kernel_timings import solution_namespace
namespace = solution_namespace()
aligned = [["tt.divisibility", 16]]  # what a launch gives pointers and n_columns = 1024 (divisible by 16)
found = {}
for name, arguments, tile in [
        ("bias_gelu_forward_kernel", ["x_ptr", "bias_ptr", "y_ptr", "n_rows", "n_columns"], "FORWARD_TILE"),
        ("bias_gelu_backward_kernel", ["x_ptr", "bias_ptr", "grad_output_ptr", "grad_x_ptr", "grad_bias_ptr", "n_rows",
                                       "n_columns"], "BACKWARD_TILE")]:
    for atomic, dtype in [(a, d) for a in ((None,) if "forward" in name else (False, True)) for d in ("fp32", "fp16", "bf16")
                          if d == "fp32" or not a]:  # (atomics add into float32 sums whatever the input's dtype)
        constants = {k: v for k, v in namespace[tile].items() if k != "num_warps"} | ({} if atomic is None else {"ATOMIC": atomic})
        signature = {a: "i32" if a.startswith("n_") else "*fp32" if a == "grad_bias_ptr" else f"*{dtype}"  # sums: fp32
                     for a in arguments} | {k: "constexpr" for k in constants}
        source = triton.compiler.ASTSource(fn=namespace[name], signature=signature, constexprs=constants,
                                           attrs={(i,): aligned for i, a in enumerate(arguments) if a != "n_rows"})
        ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": namespace[tile]["num_warps"]}).asm["ptx"]
        found[f"{name} ATOMIC={atomic} {dtype}"] = sorted(set(re.findall(r"(?:ld|st)\.global\.[\w.]+", ptx)))
print(json.dumps(found))
"""


def test_the_solution_kernels_compile_for_an_sm_90_gpu_with_16_byte_loads_and_stores(tmp_path):
    # Without a GPU, Triton still compiles for one (H100 and H200 are sm_90) down to PTX: the kernels the GPU check
    # will launch compile, in float32, float16 and bfloat16, and float32 reads and writes memory in 16-byte pieces
    # (v4 of 32 bits), as Section 7 says.
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_SM_90], cwd=REPO, env=environment, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert sorted(found) == sorted([f"{kernel} {dtype}" for kernel in ("bias_gelu_backward_kernel ATOMIC=False",
                                                                        "bias_gelu_forward_kernel ATOMIC=None")
                                    for dtype in ("bf16", "fp16", "fp32")] + ["bias_gelu_backward_kernel ATOMIC=True fp32"])
    for kernel, accesses in found.items():  # float16 and bfloat16 compile too (at_least_float32, int64 offsets)
        assert any(a.startswith("ld.global") for a in accesses) and any(a.startswith("st.global") for a in accesses)
        if kernel.endswith("fp32"):
            assert "ld.global.v4.b32" in accesses and "st.global.v4.b32" in accesses, (kernel, accesses)


@pytest.mark.gpu
@needs_cuda
def test_record_on_a_gpu(tmp_path):
    record = kernel_timings.record(tmp_path)
    print("\n".join(kernel_timings.summary(record)))  # the figures, for whoever runs it: no speed is asserted
    assert record["device"] == "cuda" and (tmp_path / "kernels_cuda.json").is_file()
    assert record["solution_sha256"] == kernel_timings.solution_sha256()
    variants = {r["variant"] for r in record["rows"]}
    assert {kernel_timings.SOLUTION + GRAPHED, "built-in F.gelu(x + bias)" + GRAPHED} <= variants
    assert all(r["do_bench_seconds"] > 0 for r in record["rows"])
    assert record["compiled"], "the compiled variants: their rows, or the error that stopped them"
    assert record["bias_gradient_reproducibility"]["partial sums"] == 1
    assert max(v for k, v in record["max_abs_difference_from_torch"].items() if k != "elements") < 1e-4
    assert {r["elements"] for r in record["rows"]} == set(kernel_timings.SIZES)
