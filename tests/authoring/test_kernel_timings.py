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
from autograder.student.kernels import plot_kernel_share, reference_timings, timing_lines

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
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    plot_kernel_share(ax, record)
    assert list(ax.lines[0].get_ydata()) == shares and ax.lines[0].get_label() == record["kernels_variant"]


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
    (tmp_path / "kernels_cuda.json").write_text(json.dumps(dict(shown, what="a record of the solution")))
    assert reference_timings(tmp_path)["what"] == "a record of the solution"  # a shipped record comes first


def test_the_cells_it_runs_are_the_solution_notebooks():
    ids = [cell.get("id") for cell in json.loads(kernel_timings.NOTEBOOK.read_text())["cells"]]
    assert [c for c in kernel_timings.CELLS if c in ids] == list(kernel_timings.CELLS)
    assert sorted(ids.index(c) for c in kernel_timings.CELLS) == [ids.index(c) for c in kernel_timings.CELLS]


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
    for atomic in ((None,) if "forward" in name else (False, True)):
        constants = {k: v for k, v in namespace[tile].items() if k != "num_warps"} | ({} if atomic is None else {"ATOMIC": atomic})
        signature = {a: "i32" if a.startswith("n_") else "*fp32" for a in arguments} | {k: "constexpr" for k in constants}
        source = triton.compiler.ASTSource(fn=namespace[name], signature=signature, constexprs=constants,
                                           attrs={(i,): aligned for i, a in enumerate(arguments) if a != "n_rows"})
        ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": namespace[tile]["num_warps"]}).asm["ptx"]
        found[f"{name} ATOMIC={atomic}"] = sorted(set(re.findall(r"(?:ld|st)\.global\.[\w.]+", ptx)))
print(json.dumps(found))
"""


def test_the_solution_kernels_compile_for_an_sm_90_gpu_with_16_byte_loads_and_stores(tmp_path):
    # Without a GPU, Triton still compiles for one (H100 and H200 are sm_90) down to PTX: the kernels the GPU check
    # will launch compile, and read and write memory in 16-byte pieces (v4 of 32 bits), as Section 7 says.
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", COMPILE_FOR_SM_90], cwd=REPO, env=environment, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert sorted(found) == ["bias_gelu_backward_kernel ATOMIC=False", "bias_gelu_backward_kernel ATOMIC=True",
                             "bias_gelu_forward_kernel ATOMIC=None"]
    for kernel, accesses in found.items():
        assert "ld.global.v4.b32" in accesses and "st.global.v4.b32" in accesses, (kernel, accesses)


@pytest.mark.gpu
@needs_cuda
def test_record_on_a_gpu(tmp_path):
    record = kernel_timings.record(tmp_path)
    print("\n".join(kernel_timings.summary(record)))  # the figures, for whoever runs it: no speed is asserted
    assert record["device"] == "cuda" and (tmp_path / "kernels_cuda.json").is_file()
    assert record["bias_gradient_reproducibility"]["partial sums"] == 1
    assert max(v for k, v in record["max_abs_difference_from_torch"].items() if k != "elements") < 1e-4
    assert {r["elements"] for r in record["rows"]} == set(kernel_timings.SIZES)
