"""The recorder of assignment 07's reference timings (``python -m autograder.authoring.record_timings``).

CPU tests run the real script on tiny sizes and check what it writes: the provenance the course
promises (device name, torch and CUDA versions, date), every measurement, the byte counts and
the figures. The Functions it times (``timed_functions``) are checked against torch. Tests marked
``gpu`` run the sweep on a real CUDA device (or read the one ``python -m autograder.authoring.gpu_check``
made, named by $AUTOGRADER_GPU_RECORD), check that each timing helper agrees with its
torch.utils.benchmark.Timer counterpart (latency with latency, throughput with throughput), and the
performance bar (on an H100 only). The shipped records themselves are checked in tests/student/test_timing.py.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from autograder.authoring import record_timings, record_tools
from autograder.authoring import timed_functions
from autograder.student import timing as bench
from autograder import check_function

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _run(tmp_path, *args) -> dict:
    output = tmp_path / "record.json"
    assert record_timings.main([*args, "--output", str(output)]) == 0
    return json.loads(output.read_text())


# --------------------------------------------------------------------------------------------
# The script on the CPU


def test_help_describes_the_command_line():
    result = subprocess.run([sys.executable, "-m", "autograder.authoring.record_timings", "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for option in ("--device", "--max-exp", "--repeats", "--output", "--illustrative", "--no-compile"):
        assert option in result.stdout


@pytest.fixture(scope="module")
def cpu_record(tmp_path_factory):
    """A real, tiny CPU sweep (sizes 2**8, 2**10, 2**12) written by the command line."""
    folder = tmp_path_factory.mktemp("cpu")
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    data = _run(folder, "--device", "cpu", "--min-exp", "8", "--max-exp", "12", "--repeats", "3", "--warmup", "1",
                "--no-compile", "--timer-seconds", "0.05")
    return data, folder, before


def test_cpu_record_has_the_provenance_the_course_promises(cpu_record):
    data, _, before = cpu_record
    assert bench.check_record(data) == []
    assert data["kind"] == "measurement" and data["device"] == "cpu"
    assert data["device_name"] == bench.cpu_name() and data["device_name"]
    assert data["torch_version"] == torch.__version__
    assert data["cuda_version"] == torch.version.cuda
    recorded = datetime.datetime.fromisoformat(data["date"])
    assert before <= recorded <= datetime.datetime.now(datetime.timezone.utc)
    assert "--max-exp 12" in data["command"]


def test_cpu_record_measures_every_variant_pass_and_size(cpu_record):
    data, _, _ = cpu_record
    measured = {(r["variant"], r["pass"], r["elements"]) for r in data["sweep"]}
    expected = {(v.name, p, n) for v in timed_functions.VARIANTS if not v.compiled
                for p in (bench.PASSES if v.backward else bench.PASSES[:1]) for n in (256, 1024, 4096)}
    assert measured == expected
    assert all(r["device"] == "cpu" and r["seconds"] > 0 for r in data["sweep"])
    assert data["fused_variant"] == timed_functions.FUSED_EAGER, "with --no-compile the eager fused Function is the one measured"


def test_cpu_record_bandwidths_come_from_its_own_rows(cpu_record):
    data, _, _ = cpu_record
    copy = record_timings._row(data["sweep"], "cpu", bench.COPY, "forward", 4096)
    fused = record_timings._row(data["sweep"], "cpu", timed_functions.FUSED_EAGER, "forward+backward", 4096)
    assert data["copy_bandwidth_gbps"] == pytest.approx(copy["bytes"] / copy["seconds"] / 1e9)
    assert data["fused_bandwidth_gbps"] == pytest.approx(fused["bytes"] / fused["seconds"] / 1e9)
    assert data["fused_fraction_of_copy"] == pytest.approx(data["fused_bandwidth_gbps"] / data["copy_bandwidth_gbps"])
    agreement = data["timer_agreement"]
    for way, (ours, timer) in bench.TIMER_FIGURES.items():
        half = agreement[way]
        assert half[ours] > 0 and half[timer] > 0
        assert half["relative_difference"] == pytest.approx(abs(half[ours] - half[timer]) / half[timer])
    assert len(agreement["rounds"]) == 4 and all(len(r) == 4 for r in agreement["rounds"])
    for way, name in (("latency", "median_time"), ("throughput", "blocked_autorange")):  # medians of the rounds
        assert agreement[way][f"{name}_seconds"] == statistics.median(r[name] for r in agreement["rounds"])
    assert "Timer.timeit(1)" in data["method"]["timer_check"] and "blocked_autorange" in data["method"]["timer_check"]
    assert data["saved_bytes_per_element"] == {"built-in F.gelu(x + bias)": 4.0, "unfused composition": 12.0,
                                               timed_functions.FUSED_EAGER: 4.0, timed_functions.EXERCISE_3: 4.0}


def test_cpu_record_byte_counts_follow_the_model(cpu_record):
    data, _, _ = cpu_record
    n, c = 4096, bench.COLUMNS  # 4 rows of 1024; float32
    expected = {("copy", "forward"): 2 * 4 * n, ("silu", "forward"): 2 * 4 * n, ("silu", "forward+backward"): 5 * 4 * n,
                ("bias_gelu", "forward"): 4 * (2 * n + c), ("bias_gelu", "forward+backward"): 4 * (5 * n + 3 * c)}
    for row in data["sweep"]:
        if row["elements"] == n:
            assert row["bytes"] == expected[row["workload"], row["pass"]], row


def test_cpu_record_writes_two_png_figures(cpu_record):
    _, folder, _ = cpu_record
    for name in ("record_time.png", "record_throughput.png"):
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG"


def test_cpu_record_holds_the_tools_and_its_trace_beside_it(cpu_record):
    data, folder, _ = cpu_record
    assert data["tool_errors"] == {}
    trace = json.loads((folder / data["profile"]["file"]).read_text())
    assert data["profile"]["file"] == "profile_cpu.json" and record_timings.TRACE not in data
    steps = [e["name"] for e in trace["traceEvents"] if e["cat"] == "user_annotation"]
    assert {name: steps.count(name) for name in steps} == data["profile"]["steps"] == trace["otherData"]["steps"]
    assert sorted(data["profile"]["elements"].values()) == [256, 65536], "the smallest and largest tool sizes"
    assert trace["otherData"]["workload"].startswith(timed_functions.EXERCISE_3)
    rows = data["launch_overhead"]
    assert [(r["elements"], r["way"]) for r in rows] == [(n, "eager") for n in (256, 4096, 65536)], \
        "on a CPU with --no-compile: eager only (CUDA graphs and reduce-overhead need CUDA)"
    assert all(r["latency_seconds"] > 0 and r["throughput_seconds"] > 0 and "do_bench_seconds" not in r for r in rows)
    memory = data["memory"]
    assert memory["elements"] == 65536 and all(memory[f"{way}_gbps"] > 0 for way in ("read", "write", "copy"))
    assert [r["n"] for r in data["matmul"]] == [64, 128, 256, 512]
    for r in data["matmul"]:
        assert r["flops"] == 2 * r["n"] ** 3 and r["bytes"] == 12 * r["n"] ** 2
        assert r["gflops"] == pytest.approx(r["flops"] / r["seconds"] / 1e9)
    assert "events" not in data, "CUDA events need CUDA"


def test_a_tool_that_fails_is_recorded_and_the_others_still_run(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no such tool here")

    monkeypatch.setattr(record_tools, "memory", broken)
    monkeypatch.setattr(record_tools, "launch_overhead", lambda *args, **kwargs: [])
    found = record_tools.tools("cpu", lambda call, device: 1e-3, lambda: None, compile=False, sizes=(256,))
    assert "RuntimeError: no such tool here" in found["tool_errors"]["memory"] and "memory" not in found
    assert set(found) == {"profile", "launch_overhead", "matmul", "tool_errors"} and found["launch_overhead"] == []


def test_a_missing_device_is_a_clear_error(tmp_path, capsys):
    missing = next((d for d in ("cuda", "mps") if d not in bench.available_devices()), None)
    if missing is None:
        pytest.skip("this machine has both cuda and mps")
    assert record_timings.main(["--device", missing, "--output", str(tmp_path / "x.json")]) == 2
    assert f"no {missing} device" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


# --------------------------------------------------------------------------------------------
# Timing helpers


def test_median_time_synchronises_only_a_gpu(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: calls.append("sync"))
    record_timings.median_time(lambda: calls.append("fn"), "cpu", warmup=2, repeats=3)
    assert calls == ["fn"] * 5, "the CPU needs no synchronisation"
    calls.clear()
    record_timings.median_time(lambda: calls.append("fn"), "cuda:0", warmup=2, repeats=3)
    assert calls == ["fn", "fn", "sync"] + ["fn", "sync"] * 3, "warm-up, sync, then each timed call followed by a sync"


class _FakeClock:
    """A clock that moves only when the timed call runs: each call takes ``step`` seconds exactly."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        return self.now

    def call(self) -> None:
        self.now += self.step


def test_median_time_and_benchmark_timer_give_the_same_time_per_call():
    # On a clock that only the workload moves, all say exactly what one call costs (no wall clock:
    # on a loaded machine sleeping 10 ms takes longer, which is not what is tested here).
    clock = _FakeClock(0.01)
    assert record_timings.median_time(clock.call, warmup=1, repeats=5, clock=clock) == pytest.approx(0.01)
    assert record_timings.timer_median(clock.call, min_run_time=0.1, clock=clock) == pytest.approx(0.01)
    assert record_timings.timer_latency(clock.call, repeats=3, clock=clock) == pytest.approx(0.01)


def test_timer_keeps_its_own_synchronising_clock_unless_a_test_gives_one():
    """Timer's own clock synchronises the GPU before each read; replacing it (timer=timeit.default_timer)
    made the H200 report 486-577 us for a forward+backward that takes about 900 us."""
    from torch.utils.benchmark.utils import timer as timer_module

    assert record_timings._timer(lambda: None, None)._timer.timer is timer_module.timer
    clock = _FakeClock(1.0)
    assert record_timings._timer(lambda: None, clock)._timer.timer is clock


def test_a_format_1_record_is_converted_keeping_every_figure_and_inventing_none():
    old = {"format": 1, "kind": "measurement", "sweep": [], "timer_agreement": {
        "workload": "w", "elements": 8, "median_time_seconds": 2.0, "benchmark_timer_seconds": 1.0,
        "rounds": [[2.0, 1.0], [3.0, 1.5]], "relative_difference": 1.0}}
    new = record_timings.upgrade_record(old, "converted for a test")
    assert new["format"] == bench.FORMAT and old["format"] == 1, "a new record; the old one unchanged"
    assert new["timer_agreement"] == {"workload": "w", "elements": 8, "latency": {"median_time_seconds": 2.0},
                                      "throughput": {"blocked_autorange_seconds": 1.0},
                                      "rounds": [{"median_time": 2.0, "blocked_autorange": 1.0},
                                                 {"median_time": 3.0, "blocked_autorange": 1.5}]}
    assert new["converted"]["note"] == "converted for a test" and new["converted"]["format_1_relative_difference"] == 1.0
    assert bench.figures(new, "timer_agreement") == (None, None), "half of each pair is absent, not invented"
    with pytest.raises(ValueError, match="not a format-1 record"):
        record_timings.upgrade_record(new, "twice")


@pytest.mark.parametrize("sizes, base, cand, expected", [
    ([1, 10, 100, 1000], [1, 1, 1, 1], [4, 2, 0.5, 0.25], 10 ** 1.5),
    ([1, 10, 100], [1, 1, 1], [3, 2, 1.5], None),
    ([16, 64, 256], [1, 2, 4], [0.5, 1, 2], 16),
    ([1, 10, 100, 1000, 10000], [1] * 5, [2, 0.9, 4, 0.5, 0.1], 10 ** (2 + 2 / 3)),  # a lucky early win does not count
])
def test_crossover_elements_is_where_the_candidate_wins_for_good(sizes, base, cand, expected):
    got = record_timings.crossover_elements(sizes, base, cand)
    assert got == expected if expected is None else got == pytest.approx(expected)


def test_small_call_and_crossover_measure_latency_and_throughput_on_the_cpu():
    small = record_timings.small_call("cpu", elements=1024)
    assert small["elements"] == 1024 and small["latency_seconds"] > 0 and small["throughput_seconds"] > 0
    found = record_timings.crossover("cpu", sizes=(256, 1024), rounds=2)
    assert [r["elements"] for r in found["cpu"]] == [r["elements"] for r in found["gpu"]] == [256, 1024]
    assert set(found) >= {"latency_elements", "throughput_elements"} and found["against"] == "one CPU core"
    assert len(found["rounds"]) == 2 and all(set(r) == {"latency_elements", "throughput_elements"} for r in found["rounds"])
    for way in ("latency_elements", "throughput_elements"):  # the median of the rounds that found one
        seen = [r[way] for r in found["rounds"] if r[way] is not None]
        assert found[way] == (statistics.median(seen) if seen else None)


# --------------------------------------------------------------------------------------------
# The Functions that are timed


@pytest.mark.parametrize("shapes", [((4, 8), (8,)), ((2, 3, 5), (5,)), ((6,), (6,))], ids=["2d", "3d", "1d"])
def test_eager_fused_bias_gelu_matches_torch(shapes):
    check_function(timed_functions.BiasGELU, lambda x, b: F.gelu(x + b), torch.randn(shapes[0]), torch.randn(shapes[1]))


def test_silu_matches_torch():
    check_function(timed_functions.SiLU, F.silu, torch.randn(3, 4))


def test_compiled_fused_bias_gelu_matches_torch_and_keeps_only_its_inputs():
    """torch.compile (inductor's C++ backend here, Triton on CUDA) turns each pass into one kernel."""
    check_function(timed_functions.FusedBiasGELU, lambda x, b: F.gelu(x + b), torch.randn(4, 8), torch.randn(8))
    x, bias = torch.randn(4, 8), torch.randn(8)  # (the same shapes: each new one compiles again, seconds each)
    assert bench.saved_bytes(timed_functions.FusedBiasGELU.apply, x, bias) == 4 * (32 + 8)


def test_exercise_3_s_function_is_the_solution_notebook_s_and_compiles_whole_in_its_caller():
    """The record times the students' Function: the solution's cell, run as it is (erf and exp in backward)."""
    function = timed_functions.exercise_3_bias_gelu()
    assert function.__name__ == "BiasGELU" and function is not timed_functions.BiasGELU
    check_function(function, lambda x, b: F.gelu(x + b), torch.randn(4, 8), torch.randn(8))
    compiled = torch.compile(timed_functions.calling(function), backend="aot_eager", fullgraph=True)
    x, bias = torch.randn(3, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    grads = torch.autograd.grad(compiled(x, bias).sum(), (x, bias))
    expected = torch.autograd.grad(F.gelu(x + bias).sum(), (x, bias))
    assert all(torch.allclose(g, e, atol=1e-6) for g, e in zip(grads, expected))


def test_fused_functions_keep_a_third_of_the_unfused_composition():
    x, bias = torch.randn(100, 8), torch.randn(8)
    assert bench.saved_bytes(bench.gelu_unfused, x, bias) == 3 * 4 * 800
    assert bench.saved_bytes(timed_functions.BiasGELU.apply, x, bias) == 4 * 800


# --------------------------------------------------------------------------------------------
# On a real NVIDIA GPU


@pytest.fixture(scope="module")
def gpu_record(tmp_path_factory):
    """The record ``gpu_check`` made on this machine ($AUTOGRADER_GPU_RECORD), else a sweep on CUDA of
    large sizes only (2**18 ... 2**27) with the compiled Functions."""
    made = os.environ.get("AUTOGRADER_GPU_RECORD")
    if made:
        if not os.path.exists(made):
            pytest.skip(f"gpu_check's recorder step made no record ({made}): its report says why")
        return json.loads(open(made, encoding="utf-8").read())
    return _run(tmp_path_factory.mktemp("gpu"), "--device", "cuda", "--min-exp", "18", "--max-exp", "27",
                "--step", "3", "--no-cpu", "--no-figures")


@pytest.mark.gpu
@needs_cuda
def test_gpu_record_has_provenance_and_each_timing_helper_agrees_with_its_timer_counterpart(gpu_record):
    data = gpu_record
    assert bench.check_record(data) == []
    assert data["device"] == "cuda" and data["device_name"] == torch.cuda.get_device_name()
    assert data["cuda_version"] == torch.version.cuda and data["largest_elements"] == 2 ** 27
    assert data["fused_variant"] == timed_functions.FUSED
    assert {r["variant"] for r in data["sweep"]} >= {timed_functions.FUSED, timed_functions.COMPILED_CALLER,
                                                      timed_functions.EXERCISE_3}
    assert data["tool_errors"] == {}, data["tool_errors"]
    ways = {r["way"] for r in data["launch_overhead"]}
    assert ways == {record_tools.EAGER, record_tools.GRAPH, record_tools.REDUCE_OVERHEAD, record_tools.DEFAULT_COMPILE}
    assert all(r["do_bench_seconds"] > 0 for r in data["launch_overhead"])
    assert data["events"]["per_call_seconds"] > 0 and data["memory"]["read_gbps"] > 0 and data["matmul"]
    assert data["profile"]["file"] == "profile_cuda.json"
    assert data["async_demo"]["launch_seconds"] < data["async_demo"]["finished_seconds"]
    agreement, source = bench.figures(data, "timer_agreement")
    assert source is None, "this run measured all four figures"
    assert agreement["latency"]["relative_difference"] <= bench.LATENCY_BAR, agreement
    assert agreement["throughput"]["relative_difference"] <= bench.THROUGHPUT_BAR, agreement
    assert data["small_call"]["elements"] == 4096 and set(data["crossover"]) >= {"latency_elements", "throughput_elements"}
    syncs = {entry["snippet"]: entry["synchronizes"] for entry in data["sync_debug"]}
    assert syncs["x.sum().item()"] and syncs["x.cpu()"] and not syncs["x * 2"], syncs


@pytest.mark.gpu
@needs_cuda
def test_gpu_fused_function_meets_the_course_bar_on_the_gpus_it_is_set_for(gpu_record):
    if not any(device in gpu_record["device_name"] for device in bench.FUSED_BAR_DEVICES):
        pytest.skip(f"the performance bar is set for an NVIDIA {' or '.join(bench.FUSED_BAR_DEVICES)}; this is "
                    f"{gpu_record['device_name']} (fused: {gpu_record['fused_fraction_of_copy']:.0%} of copy_)")
    assert gpu_record["fused_fraction_of_copy"] >= bench.FUSED_BAR, (
        f"{gpu_record['fused_bandwidth_gbps']:.0f} GB/s against copy_ {gpu_record['copy_bandwidth_gbps']:.0f} GB/s")


@pytest.mark.gpu
@needs_cuda
def test_gpu_median_time_agrees_with_cuda_events():
    x = torch.randn(4096, 4096, device="cuda")
    seconds = record_timings.median_time(lambda: x @ x, "cuda", warmup=3, repeats=10)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        x @ x
    end.record()
    end.synchronize()
    events = start.elapsed_time(end) / 1e3 / 10
    assert abs(seconds - events) / events < 0.10, f"median_time {seconds * 1e6:.0f} us, CUDA events {events * 1e6:.0f} us"
