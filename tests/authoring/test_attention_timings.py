"""The GPU record of assignment 11's solution FlashAttention (``python -m autograder.authoring.attention_timings``)
and the timing helper of its Exercise 9 (``autograder.student.flash_timing``).

Without CUDA the recorder says "no CUDA: skipped" and writes no measurement. Its measuring code runs here on the CPU,
small, in a fresh Python under Triton's interpreter (``--device cpu``): the same code a GPU runs, so that a GPU's one
try finds it working; its times are the interpreter's and prove nothing about speed. The record the course ships was
made on a GPU; the test marked ``gpu`` makes one and prints its figures (no speed is asserted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from autograder.authoring import attention_timings
from autograder.student import flash_timing

REPO = attention_timings.NOTEBOOK.parents[2]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _recorder(*args: str, interpret: bool) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | ({"TRITON_INTERPRET": "1"} if interpret else {})
    return subprocess.run([sys.executable, "-m", "autograder.authoring.attention_timings", *args], cwd=REPO,
                          env=environment, capture_output=True, text=True, timeout=400)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")
def test_without_cuda_the_recorder_says_so_and_measures_nothing(tmp_path):
    done = _recorder(str(tmp_path), interpret=False)
    assert (done.returncode, done.stdout) == (0, "no CUDA: skipped\n"), done.stderr[-2000:]
    assert [p.name for p in tmp_path.iterdir()] == ["attention_cuda.txt"]


def test_the_measuring_code_runs_end_to_end_on_the_cpu_in_a_fresh_python(tmp_path):
    done = _recorder(str(tmp_path), "--device", "cpu", interpret=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    record = json.loads((tmp_path / "attention_cpu.json").read_text())
    assert (tmp_path / "attention_cpu.txt").read_text().splitlines() == attention_timings.summary(record)
    assert record["kind"] == "measurement" and record["device"] == "cpu" and record["triton_version"]
    assert [(r["variant"], r["pass"]) for r in record["rows"]] == [
        (v, p) for v in ("F.scaled_dot_product_attention (math, CPU)", attention_timings.SOLUTION)
        for p in flash_timing.PASSES]
    pytorch = {r["pass"]: r["milliseconds"] for r in record["rows"] if r["variant"] != attention_timings.SOLUTION}
    for row in record["rows"]:
        assert row["milliseconds"] > 0 and row["share_of_sdpa"] == pytest.approx(pytorch[row["pass"]] / row["milliseconds"])
    assert [t["shipped"] for t in record["tiles"]] == [True, False] and record["tiles"][0]["tile"] == record["tile"]
    assert [d["causal"] for d in record["max_abs_difference_from_pytorch"].values()] == [False, True]
    assert all(v < 1e-5 for d in record["max_abs_difference_from_pytorch"].values()
               for k, v in d.items() if k not in ("length", "causal"))


def test_the_shipped_record_is_a_gpu_measurement_of_the_notebooks_tiles_that_the_notebook_shows():
    record = flash_timing.reference_record()
    assert record["source"] == "python -m autograder.authoring.attention_timings" and record["device"] == "cuda"
    assert record["shape"] == list(flash_timing.SHAPE) and record["dtype"] in ("bfloat16", "float16")
    assert record["flops_forward_backward"] == flash_timing.attention_flops(*flash_timing.SHAPE, True, True)
    assert sum(t["shipped"] for t in record["tiles"]) == 1
    lines = flash_timing.result_lines(record)
    assert lines[0] == record["what"] and record["device_name"] in lines[1] and len(lines) == 2 + len(record["rows"])


def test_without_a_record_the_notebook_says_nothing_was_measured(tmp_path):
    assert flash_timing.reference_record(tmp_path) is None
    assert flash_timing.result_lines(None) == [flash_timing.NOT_MEASURED]
    assert "Not measured yet" in flash_timing.NOT_MEASURED


def test_the_usual_flop_count_and_the_peaks_on_paper():
    assert flash_timing.attention_flops(1, 1, 4, 2, False, False) == 4 * 4 * 4 * 2
    assert flash_timing.attention_flops(1, 1, 4, 2, True, True) == 4 * 4 * 4 * 2 * 0.5 * 3.5
    assert [flash_timing.peak_of(n) for n in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA L40S",
                                              "NVIDIA L4", "Tesla T4", "a GPU nobody listed")] == [
        989.4, 756.0, 989.4, 362.1, 121.0, 65.0, None]
    assert flash_timing.nominal_peak_tflops("cpu") is None


def test_time_attention_gives_a_row_per_variant_and_pass_with_shares_of_pytorch():
    def mine(q, k, v, causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    rows = flash_timing.time_attention(mine, (1, 1, 8, 16), dtype=torch.float32, device="cpu", name="mine")
    assert [(r["variant"], r["pass"]) for r in rows] == [
        ("F.scaled_dot_product_attention (math, CPU)", "forward"), ("F.scaled_dot_product_attention (math, CPU)",
                                                                    "forward+backward"),
        ("mine", "forward"), ("mine", "forward+backward")]
    assert all(r["share_of_peak"] is None and r["tflops"] > 0 for r in rows)
    alone = flash_timing.time_attention(mine, (1, 1, 8, 16), dtype=torch.float32, device="cpu", with_pytorch=False,
                                        passes=("forward+backward",))
    assert [(r["pass"], r["share_of_sdpa"]) for r in alone] == [("forward+backward", None)]


def test_the_cells_it_runs_are_the_solution_notebooks_in_order():
    ids = [cell.get("id") for cell in json.loads(attention_timings.NOTEBOOK.read_text())["cells"]]
    assert sorted(ids.index(c) for c in attention_timings.CELLS) == [ids.index(c) for c in attention_timings.CELLS]


@pytest.mark.gpu
@needs_cuda
def test_record_on_a_gpu(tmp_path):
    done = _recorder(str(tmp_path), interpret=False)
    print(done.stdout)  # the figures, for whoever runs it: no speed is asserted
    assert done.returncode == 0, done.stderr[-4000:]
    record = json.loads((tmp_path / "attention_cuda.json").read_text())
    assert record["device"] == "cuda" and record["shape"] == list(flash_timing.SHAPE)
    assert all(v < 0.05 for d in record["max_abs_difference_from_pytorch"].values()
               for k, v in d.items() if k not in ("length", "causal"))
