"""The student's timing library behind assignment 07 (``autograder.student.timing``) and its shipped data.

The library times with a helper it is given (the student's own ``measure``) and the student's own
Functions as ``Variant``s: it has none of its own. The shipped records are checked to be what they
say they are: measurements with provenance, or the illustrative model exactly as its formula gives it.
"""

from __future__ import annotations

import json
import os
import statistics

import pytest
import torch

from autograder.student import timing as bench


class Square(torch.autograd.Function):
    """A student-made Function (no exercise's): x * x, keeping x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return 2 * x * grad_output


def test_sweep_times_every_variant_with_the_helper_it_is_given():
    """One row per variant, pass and size, each with the seconds the given helper returned."""
    calls = []

    def helper(call, device, warmup, repeats):
        calls.append((device, warmup, repeats))
        times = []
        for _ in range(repeats):
            call()
            times.append(1e-3 * (len(calls) + len(times)))
        return statistics.median(times)

    mine = bench.Variant("silu", "my Square", lambda x, bias: Square.apply(x))
    variants = [bench.variant(bench.COPY), bench.variant("built-in F.gelu(x + bias)"), mine]
    rows = bench.sweep("cpu", [256, 2048], variants, time_with=helper, warmup=1, repeats=3)
    assert [(r["variant"], r["pass"], r["elements"]) for r in rows] == [
        (name, p, n) for n in (256, 2048) for name, passes in
        ((bench.COPY, ["forward"]), ("built-in F.gelu(x + bias)", bench.PASSES), ("my Square", bench.PASSES))
        for p in passes]
    assert calls == [("cpu", 1, 3)] * 10
    assert [r["seconds"] for r in rows] == [1e-3 * (k + 1) for k in range(1, 11)]
    square = next(r for r in rows if r["variant"] == "my Square" and r["pass"] == "forward+backward")
    assert square["bytes"] == 5 * 4 * 256, "x, y; then grad_output, x again and its gradient"


def test_cpu_threads_sets_the_count_inside_the_block_and_restores_it_after():
    """The all-cores sweep of assignment 07: every row measured inside the block says so, the count is back after."""
    seen = []

    def helper(call, device, warmup, repeats):
        seen.append(torch.get_num_threads())
        return 1e-3

    before = torch.get_num_threads()
    others = 3 if before != 3 else 2
    with bench.cpu_threads(others) as threads:
        assert threads == others
        rows = bench.sweep("cpu", [256, 1024], [bench.variant("built-in F.silu")], time_with=helper)
    assert torch.get_num_threads() == before
    assert seen == [others] * 4 and [r["cpu_threads"] for r in rows] == [others] * 4
    rows = bench.sweep("cpu", [256], [bench.variant(bench.COPY), bench.variant("built-in F.silu")], time_with=helper,
                       passes=("forward+backward",))
    assert [(r["variant"], r["pass"], r["cpu_threads"]) for r in rows] == [("built-in F.silu", "forward+backward", before)]
    with pytest.raises(ZeroDivisionError), bench.cpu_threads(others):
        1 / 0
    assert torch.get_num_threads() == before, "restored even when the block raises"


class FakeAsyncDevice:
    """A scripted device: each call queues 1 s of work on a fake clock; every event is logged."""

    def __init__(self):
        self.now, self.events = 0.0, []

    def call(self):
        self.events.append("call")
        self.now += 1.0

    def synchronize(self):
        self.events.append("sync")

    def clock(self):
        self.events.append("clock")
        return self.now


def test_throughput_runs_the_calls_back_to_back_with_one_synchronisation_per_block():
    device = FakeAsyncDevice()
    seconds = bench.throughput_seconds(device.call, device.synchronize, calls=7, blocks=3, clock=device.clock)
    assert seconds == 1.0
    clock_reads = [i for i, e in enumerate(device.events) if e == "clock"]
    assert all(device.events[i - 1] == "sync" for i in clock_reads), "the device is synchronised before every clock read"
    assert device.events.count("sync") == len(clock_reads), "and at no other time"
    runs = [device.events[a:b].count("call") for a, b in zip(clock_reads[::2], clock_reads[1::2])]
    assert runs[1::2] == [7, 7, 7], f"Timer reads the clock before and after each run (warm-up, block): {runs}"


def test_latency_and_throughput_measure_every_size_both_ways():
    device = FakeAsyncDevice()
    made, latency_calls = [], []

    def call_at(elements):
        made.append(elements)
        return device.call

    def time_with(call, device_name, warmup, repeats, synchronize):
        latency_calls.append((call, device_name, warmup, repeats, synchronize))
        return 0.5 * len(latency_calls)

    rows = bench.latency_and_throughput([10, 100], call_at, time_with, device.synchronize, device="toy",
                                        warmup=2, repeats=4, calls=5, blocks=1)
    assert made == [10, 100]
    assert latency_calls == [(device.call, "toy", 2, 4, device.synchronize)] * 2
    assert [(r["elements"], r["latency"]) for r in rows] == [(10, 0.5), (100, 1.0)]
    assert all(r["throughput"] > 0 for r in rows)


def test_plots_name_a_device_as_they_are_told():
    from matplotlib.figure import Figure

    rows = [{"device": "cpu", "workload": "silu", "variant": "built-in F.silu", "pass": "forward+backward",
             "elements": n, "bytes": 20 * n, "seconds": 1e-6 * n} for n in (256, 1024)]
    ax = Figure().subplots()
    bench.plot_time(ax, rows, label_suffix=" [LIVE]", device_label={"cpu": "CPU, all 2 cores"})
    bench.plot_throughput(ax, rows, label_suffix=" [LIVE]")
    assert [line.get_label() for line in ax.get_lines()] == [
        "CPU, all 2 cores: built-in F.silu [LIVE]", "cpu: built-in F.silu [LIVE]"]


def test_the_library_has_only_the_copy_and_torch_s_own_variants():
    assert [v.name for v in bench.VARIANTS] == [bench.COPY, "built-in F.silu", "built-in F.gelu(x + bias)",
                                               "unfused composition"]


def test_the_unfused_composition_keeps_three_tensors():
    x, bias = torch.randn(100, 8), torch.randn(8)
    assert bench.saved_bytes(bench.gelu_unfused, x, bias) == 3 * 4 * 800
    assert bench.saved_bytes(lambda x, b: torch.nn.functional.gelu(x + b), x, bias) == 4 * 800


# --------------------------------------------------------------------------------------------
# The data shipped with assignment 07


def test_shipped_illustrative_dataset_is_exactly_the_labelled_model():
    shipped = json.loads((bench.DATA_DIR / bench.ILLUSTRATIVE_FILE).read_text())
    assert shipped == json.loads(json.dumps(bench.illustrative_dataset())), \
        "regenerate it with `python -m autograder.authoring.record_timings --illustrative`"
    assert shipped["kind"] == "illustrative model" and "NOT MEASURED" in shipped["warning"]
    assert {r["device"] for r in shipped["sweep"]} == {"model CPU", "model GPU", "model GPU + transfer"}
    assert bench.check_record(shipped), "the model must never pass as a measurement"


def test_shipped_cpu_reference_is_a_measurement_with_provenance():
    data = bench.load_record(bench.DATA_DIR / "reference_cpu.json")
    assert data is not None, "run `python -m autograder.authoring.record_timings --device cpu` to record it"
    assert bench.check_record(data) == [] and data["device"] == "cpu"
    assert {r["device"] for r in data["sweep"]} == {"cpu"}
    assert bench.reference_record("cpu") == data
    for name in ("reference_cpu_time.png", "reference_cpu_throughput.png"):
        assert (bench.DATA_DIR / name).read_bytes()[:4] == b"\x89PNG"


def test_a_missing_record_is_none_and_a_bad_one_an_error(tmp_path):
    assert bench.load_record(tmp_path / "reference_cuda.json") is None
    assert bench.reference_gpu_record(tmp_path) is None
    (tmp_path / "reference_mps.json").write_text(json.dumps({"kind": "measurement", "device": "mps"}))
    with pytest.raises(ValueError, match="missing 'device_name'"):
        bench.reference_gpu_record(tmp_path)


GPU_RECORDS = ("reference_cuda.json", "reference_cuda_h100.json")


@pytest.mark.parametrize("name", GPU_RECORDS)
def test_a_shipped_gpu_record_is_a_measurement_with_its_provenance(name):
    data = bench.load_record(bench.DATA_DIR / name)
    assert bench.check_record(data) == [] and data["device"] == "cuda" and data["cuda_version"]
    assert {r["device"] for r in data["sweep"]} == {"cuda", "cpu"} and data["largest_elements"] == 2 ** 27
    if "converted" in data:  # recorded before the recorder wrote this format: the note says how and from what
        note = data["converted"]["note"]
        assert "EVIDENCE.md" in note and "timer=timeit.default_timer" in note, "the one change to the recorder it ran with"
        assert "relabelled" in note and "'fused Function (eager)'" not in {r["variant"] for r in data["sweep"]}
    else:
        assert data["command"].startswith("python -m autograder.authoring.record_timings")
    if name == "reference_cuda.json":
        assert data == bench.reference_gpu_record()
        for figure in ("reference_cuda_time.png", "reference_cuda_throughput.png"):
            assert (bench.DATA_DIR / figure).read_bytes()[:4] == b"\x89PNG"


def test_the_shipped_gpu_records_are_the_h200_and_h100_recordings_of_2026_11_26():
    """Should a new recording replace one, this test says which one it was."""
    found = [(d["device_name"], d["torch_version"], d["date"]) for d in map(bench.load_record, (
        bench.DATA_DIR / name for name in GPU_RECORDS))]
    assert found == [("NVIDIA H200", "2.11.0+cu130", "2026-11-26T00:37:11+00:00"),
                     ("NVIDIA H100 80GB HBM3", "2.11.0+cu130", "2026-11-26T01:56:59+00:00")]


@pytest.mark.parametrize("name", GPU_RECORDS)
def test_a_shipped_gpu_record_keeps_only_the_figures_each_run_measured(name):
    data = bench.load_record(bench.DATA_DIR / name)
    own = data["timer_agreement"]
    if not bench.complete("timer_agreement", own):  # a run that compared latency with throughput: one of each pair
        assert set(own["latency"]) == {"median_time_seconds"} and set(own["throughput"]) == {"blocked_autorange_seconds"}
        assert own["latency"]["median_time_seconds"] == statistics.median(r["median_time"] for r in own["rounds"])
        assert own["throughput"]["blocked_autorange_seconds"] == statistics.median(
            r["blocked_autorange"] for r in own["rounds"])
    agreement, source = bench.figures(data, "timer_agreement")
    if agreement is not None:
        assert source is None or "EVIDENCE.md section 6" in source, "like with like: another run says so"
        assert agreement["latency"]["relative_difference"] <= bench.LATENCY_BAR
        assert agreement["throughput"]["relative_difference"] <= bench.THROUGHPUT_BAR
    for key in ("small_call", "crossover"):
        found, source = bench.figures(data, key)
        assert found is None or source is None or "EVIDENCE.md section 4" in source
    if any(device in data["device_name"] for device in bench.FUSED_BAR_DEVICES):
        assert data["fused_fraction_of_copy"] >= bench.FUSED_BAR


def test_figures_come_from_the_record_s_own_run_first():
    half = {"latency": {"median_time_seconds": 1.0, "timer_timeit_1_seconds": 1.0},
            "throughput": {"throughput_seconds": 1.0, "blocked_autorange_seconds": 1.0}}
    other = {"source": "elsewhere", "timer_agreement": half, "crossover": {"latency_elements": 5}}
    assert bench.figures({"timer_agreement": half, "other_runs": [other]}, "timer_agreement") == (half, None)
    assert bench.figures({"timer_agreement": {"latency": {}}, "other_runs": [other]}, "timer_agreement") == (
        half, "elsewhere")
    assert bench.figures({"other_runs": [other]}, "crossover") == ({"latency_elements": 5}, "elsewhere")
    assert bench.figures({}, "small_call") == (None, None)


def test_a_live_label_names_the_machine_and_how_busy_it_was():
    label = bench.live_label("cpu")
    assert label.startswith(f"LIVE cpu: {bench.cpu_name()}") and f"on {os.cpu_count()} cores" in label
    assert bench.live_label("toy device").startswith(f"LIVE toy device: {bench.cpu_name()}")


def test_check_record_names_what_is_wrong():
    halves = {"latency": {}, "throughput": {}}
    good = {"format": bench.FORMAT, "kind": "measurement", "device": "cuda", "device_name": "GPU",
            "torch_version": "2.13.0", "cuda_version": "12.8", "date": "2026-01-01T00:00:00+00:00",
            "copy_bandwidth_gbps": 1.0, "fused_bandwidth_gbps": 1.0, "timer_agreement": halves,
            "sweep": [{"device": "cuda", "seconds": 1.0, "bytes": 8, "elements": 2}]}
    assert bench.check_record(good) == []
    assert "format 1, not 2" in bench.check_record({**good, "format": 1})[0]
    assert bench.check_record({**good, "timer_agreement": {}}) == ["a timer check without its latency and throughput halves"]
    assert bench.check_record({**good, "cuda_version": None}) == ["a CUDA record without a CUDA version"]
    assert "not ISO 8601" in bench.check_record({**good, "date": "yesterday"})[0]
    assert bench.check_record({k: v for k, v in good.items() if k != "device_name"}) == ["missing 'device_name'"]
    assert "not positive" in bench.check_record({**good, "sweep": [{**good["sweep"][0], "seconds": 0.0}]})[0]
