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
import shutil
import statistics
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from autograder.authoring import attention_timings, kernel_timings
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
    assert record["format"] == 2 and record["rounds"] == attention_timings.ROUNDS == 5
    assert record["deterministic_algorithms"] is False and "return_mode='median'" in record["method"]
    # the fingerprint of the cells it timed: the notebook's as they are now
    assert record["solution_sha256"] == kernel_timings.solution_sha256(attention_timings.NOTEBOOK,
                                                                       attention_timings.TIMED_CELLS)
    assert [(r["variant"], r["pass"]) for r in record["rows"]] == [
        (v, p) for v in (flash_timing.MATH_CPU, attention_timings.SOLUTION) for p in flash_timing.PASSES]
    pytorch = {r["pass"]: r["milliseconds"] for r in record["rows"] if r["variant"] != attention_timings.SOLUTION}
    for row in record["rows"]:  # each figure the median of its five rounds
        assert len(row["rounds_milliseconds"]) == 5 and all(t > 0 for t in row["rounds_milliseconds"])
        assert row["milliseconds"] == statistics.median(row["rounds_milliseconds"])
        assert row["share_of_sdpa"] == pytest.approx(pytorch[row["pass"]] / row["milliseconds"])
        assert row["share_of_fastest"] == row["share_of_sdpa"] and row["fastest"] == flash_timing.MATH_CPU
    assert [t["shipped"] for t in record["tiles"]] == [True, False] and record["tiles"][0]["tile"] == record["tile"]
    # the accuracy asserted at the timed shape, and on a ragged sequence causal and not
    accuracy = record["accuracy"]
    assert accuracy["shape"] == record["shape"] and accuracy["causal"] is True and accuracy["reference_dtype"] == "float64"
    assert [(a["shape"], a["causal"]) for a in accuracy["ragged"]] == [([1, 1, 37, 16], False), ([1, 1, 37, 16], True)]
    for found in [accuracy, *accuracy["ragged"]]:
        assert set(found["solution"]) == set(found["pytorch"]) == {"o", "dq", "dk", "dv"}
        assert all(v < 1e-5 for v in found["solution"].values()), found
    assert accuracy["bar"] == attention_timings.ACCURACY_BAR
    assert record["clocks_before"] is None and record["clocks_after"] is None and record["not_available"] == {}


def test_a_solution_whose_error_at_the_timed_shape_is_too_large_stops_the_recorder(tmp_path):
    """A speed of wrong kernels means nothing: the recorder asserts the solution's accuracy before it times. Here the
    solution notebook's forward forgets the scale (in a copy of the notebook)."""
    notebook = json.loads(attention_timings.NOTEBOOK.read_text())
    cell = next(c for c in notebook["cells"] if c.get("id") == "attention_forward")
    source = "".join(cell["source"])
    assert "head_dim ** -0.5" in source
    cell["source"] = source.replace("head_dim ** -0.5", "1.0")
    copy = tmp_path / "11_flash_attention.ipynb"
    copy.write_text(json.dumps(notebook))
    script = (f"import sys; from pathlib import Path; from autograder.authoring import attention_timings as a; "
              f"a.NOTEBOOK = Path({str(copy)!r}); sys.exit(a.main([{str(tmp_path)!r}, '--device', 'cpu']))")
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=environment, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode != 0 and "AssertionError: the solution's error is above 0.05" in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "attention_cpu.json").exists()


def test_do_bench_is_asked_for_its_median(monkeypatch):
    """On a GPU each call is timed by triton.testing.do_bench, whose return_mode defaults to the mean (pinned in
    test_facts_10.py): the helper asks for the median. (No GPU here: do_bench is replaced by a recorder of its
    arguments, the one thing this test is about.)"""
    import triton.testing

    asked = []
    monkeypatch.setattr(triton.testing, "do_bench", lambda call, **options: asked.append(options) or 1.5)
    assert flash_timing._milliseconds(lambda: None, "cuda") == 1.5
    assert asked == [{"return_mode": "median"}]


def test_the_variants_alternate_over_rounds_and_each_figure_is_the_median_of_its_rounds():
    assert flash_timing.round_orders(["a", "b", "c"], 4) == [["a", "b", "c"], ["c", "b", "a"]] * 2
    times = {("flash", "forward"): [3.0, 1.0, 2.0, 9.0, 2.5], ("cudnn", "forward"): [1.0, 1.0, 1.0, 1.0, 1.0],
             ("mine", "forward"): [2.0, 2.0, 2.0, 2.0, 2.0]}
    rows = flash_timing.rows_of(times, (1, 1, 4, 2), True, torch.bfloat16, 100.0, ["flash", "cudnn"])
    found = {r["variant"]: r for r in rows}
    assert [found[v]["milliseconds"] for v in ("flash", "cudnn", "mine")] == [2.5, 1.0, 2.0]
    assert found["mine"]["share_of_sdpa"] == 2.5 / 2.0 and found["mine"]["compared_with"] == "flash"
    assert found["mine"]["share_of_fastest"] == 1.0 / 2.0 and found["mine"]["fastest"] == "cudnn"
    assert found["mine"]["tflops"] == pytest.approx(flash_timing.attention_flops(1, 1, 4, 2, True, False) / 2.0 / 1e9)
    assert found["mine"]["share_of_peak"] == pytest.approx(found["mine"]["tflops"] / 100.0)
    assert found["mine"]["rounds_milliseconds"] == times["mine", "forward"]


def test_time_attention_times_every_variant_once_a_round_alternating_with_deterministic_algorithms_off():
    seen = []

    def variant(name):
        def run(q, k, v, causal):
            if not seen or seen[-1] != (name, torch.are_deterministic_algorithms_enabled()):
                seen.append((name, torch.are_deterministic_algorithms_enabled()))
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return run

    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)  # as the notebook's setup cell leaves them
    try:
        rows = flash_timing.time_attention(variant("mine"), (1, 1, 8, 16), dtype=torch.float32, device="cpu",
                                           name="mine", rounds=3, backends=[("a", variant("a")), ("b", variant("b"))])
        assert torch.are_deterministic_algorithms_enabled(), "restored after the timing"
    finally:
        torch.use_deterministic_algorithms(before)
    # (each variant runs several times a round, forward then forward+backward: consecutive calls counted once)
    assert seen == [(name, False) for name in ["a", "b", "mine", "b", "a", "b", "mine"]]
    assert [(r["variant"], r["pass"], len(r["rounds_milliseconds"])) for r in rows] == [
        (v, p, 3) for v in ("a", "b", "mine") for p in flash_timing.PASSES]


def test_the_gpu_clocks_are_read_from_nvidia_smi_and_a_failure_is_recorded_as_such():
    line = "1980, 3201, 1980, 3201, 45, 120.53, P0\n"
    assert attention_timings.parse_clocks(line) == {
        "clocks.sm": 1980.0, "clocks.mem": 3201.0, "clocks.max.sm": 1980.0, "clocks.max.mem": 3201.0,
        "temperature.gpu": 45.0, "power.draw": 120.53, "pstate": "P0"}
    assert "error" in attention_timings.parse_clocks("Field is not a valid field to query.\n")
    assert attention_timings.gpu_clocks("cpu") is None
    if shutil.which("nvidia-smi") is None:  # this machine: the record says why it has no clocks
        found = attention_timings.gpu_clocks("cuda")
        assert list(found) == ["error"] and "nvidia-smi" in found["error"], found


def test_the_fingerprint_changes_with_a_timed_cell_and_with_no_other(tmp_path):
    notebook = json.loads(attention_timings.NOTEBOOK.read_text())
    copy = tmp_path / "copy.ipynb"
    copy.write_text(json.dumps(notebook))
    original = kernel_timings.solution_sha256(copy, attention_timings.TIMED_CELLS)
    assert original == kernel_timings.solution_sha256(attention_timings.NOTEBOOK, attention_timings.TIMED_CELLS)
    for cell_id, changed in (("exercise-9", False), ("test_causal", False), ("attention_backward", True),
                             ("tiles", True)):
        edited = json.loads(json.dumps(notebook))
        cell = next(c for c in edited["cells"] if c.get("id") == cell_id)
        cell["source"] = "".join(cell["source"]) + "\n# changed"
        copy.write_text(json.dumps(edited))
        assert (kernel_timings.solution_sha256(copy, attention_timings.TIMED_CELLS) != original) == changed, cell_id


def test_the_shipped_record_is_a_gpu_measurement_of_the_notebooks_tiles_that_the_notebook_shows():
    record = flash_timing.reference_record()
    assert record["source"] == "python -m autograder.authoring.attention_timings" and record["device"] == "cuda"
    assert record["shape"] == list(flash_timing.SHAPE) and record["dtype"] in ("bfloat16", "float16")
    assert record["flops_forward_backward"] == flash_timing.attention_flops(*flash_timing.SHAPE, True, True)
    assert sum(t["shipped"] for t in record["tiles"]) == 1
    lines = flash_timing.result_lines(record)
    assert lines[0] == record["what"] and record["device_name"] in lines[1]
    if record.get("format", 1) < 2:  # the first recorder's: the notebook says what kind of record it is
        assert lines[2] == flash_timing.FIRST_RECORDER and len(lines) == 3 + len(record["rows"])
        assert "solution_sha256" not in record and "return_mode" not in record["method"]
    else:
        assert record["solution_sha256"] == kernel_timings.solution_sha256(attention_timings.NOTEBOOK,
                                                                           attention_timings.TIMED_CELLS)


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
    record = attention_timings.record(tmp_path)
    print("\n".join(attention_timings.summary(record)))  # the figures, for whoever runs it: no speed is asserted
    assert record["device"] == "cuda" and record["shape"] == list(flash_timing.SHAPE) and record["format"] == 2
    assert record["solution_sha256"] == kernel_timings.solution_sha256(attention_timings.NOTEBOOK,
                                                                       attention_timings.TIMED_CELLS)
    assert record["rows"][0]["variant"] in (flash_timing.SDPA, flash_timing.EFFICIENT)
    assert all(len(r["rounds_milliseconds"]) == attention_timings.ROUNDS for r in record["rows"])
    assert all(v <= attention_timings.ACCURACY_BAR for found in [record["accuracy"], *record["accuracy"]["ragged"]]
               for v in found["solution"].values())
    assert isinstance(record["clocks_before"], dict) and isinstance(record["clocks_after"], dict)
