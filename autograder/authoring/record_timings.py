"""Record assignment 07's reference timings: ``python -m autograder.authoring.record_timings``.

The course author runs this (``make benchmark``) on a machine with the device to record, and
commits the JSON record and its two figures in ``autograder/student/data/`` (package data: the 07
notebook finds them through the installed package). The workloads, the sweep and the plots are
the student's library's (``autograder.student.timing``), so a reference and a live measurement
are made the same way. The custom Functions it times (``timed_functions``) and its timing helper
``median_time`` are exercise answers: they live here, with the instructor, and are not shipped
to students. Each timing helper is checked against its torch.utils.benchmark.Timer counterpart,
like with like (``timer_agreement``): ``median_time`` (latency) against ``Timer.timeit(1)``, and
``throughput_seconds`` (throughput) against ``Timer.blocked_autorange``, Timer keeping its own clock,
which synchronises the GPU. ``upgrade_record`` converts a record of format 1, keeping every figure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from autograder.authoring import record_tools
from autograder.authoring.timed_functions import FUSED, FUSED_EAGER, VARIANTS
from autograder.student.timing import (COLUMNS, DATA_DIR, COPY, BYTES_MODEL, FORMAT, ILLUSTRATIVE_FILE,
                                       LARGEST_EXPONENT, async_demo, available_devices, cpu_name, cpu_threads,
                                       device_name, illustrative_dataset, latency_and_throughput,
                                       nominal_peak_bandwidth_gbps, saved_bytes, sweep, sync_debug_report,
                                       throughput_seconds, timed_call, variant, workload_tensors, write_figures)
from autograder.student.traces import trace_file

RECORD_DIR = DATA_DIR  # package data: autograder/student/data/


def synchronizer(device) -> Callable[[], None]:
    """The call that waits until every kernel queued on ``device`` has finished (no-op on the CPU)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.synchronize
    if kind == "mps":
        return torch.mps.synchronize
    return lambda: None


def median_time(fn: Callable[[], object], device="cpu", warmup: int = 5, repeats: int = 20,
                clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds of one ``fn()`` call: warm-up calls first, and on a GPU a synchronisation
    before each clock read, so the time covers the work and not only its launch.

    The method assignment 07 teaches (its exercise ``measure``); the recordings keep using it, so
    that they time what a student's helper times, and check it against ``timer_latency``.
    """
    synchronize = synchronizer(device)
    for _ in range(warmup):
        fn()
    synchronize()
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        synchronize()
        times.append(clock() - start)
    return statistics.median(times)


def _timer(fn: Callable[[], object], clock: Callable[[], float] | None) -> Timer:
    """A ``torch.utils.benchmark.Timer`` of ``fn()`` on as many threads as torch uses here (Timer's default is
    one), with Timer's own clock, which synchronises the GPU before each read, unless a test gives ``clock``."""
    return Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(),
                 **({} if clock is None else {"timer": clock}))


def timer_median(fn: Callable[[], object], min_run_time: float = 1.0,
                 clock: Callable[[], float] | None = None) -> float:
    """Seconds per ``fn()`` call by ``Timer.blocked_autorange``: blocks of calls back to back between two
    reads of Timer's clock, so one synchronisation per block: throughput, like ``throughput_seconds``."""
    return _timer(fn, clock).blocked_autorange(min_run_time=min_run_time).median


def timer_latency(fn: Callable[[], object], repeats: int = 20, clock: Callable[[], float] | None = None) -> float:
    """Median seconds of one ``fn()`` call by ``Timer.timeit(1)``: Timer's clock read, synchronising, around a
    single call (after Timer's two warm-up calls), ``repeats`` times: latency, like ``median_time``."""
    timer = _timer(fn, clock)
    return statistics.median(timer.timeit(1).median for _ in range(repeats))


def _pair(ours: float, timer: float, ours_key: str, timer_key: str) -> dict:
    return {ours_key: ours, timer_key: timer, "relative_difference": abs(ours - timer) / timer}


def timer_agreement(call: Callable[[], object], device, warmup: int = 5, repeats: int = 20,
                    timer_seconds: float = 1.0, rounds: int = 4) -> dict:
    """The timing helpers against ``torch.utils.benchmark.Timer``, like with like: four figures.

    Latency: ``median_time`` against ``Timer.timeit(1)`` (a synchronisation after each call); throughput:
    ``throughput_seconds`` against ``Timer.blocked_autorange`` (calls back to back). They run in
    ``rounds`` interleaved rounds, each in the other order from the round before, so that a change in
    the machine's speed (clocks, other programs) lands on every side; each figure is the median over rounds.
    """
    synchronize = synchronizer(device)
    measures = {
        "median_time": lambda: median_time(call, device, warmup=warmup, repeats=repeats),
        "timer_timeit_1": lambda: timer_latency(call, repeats=repeats),
        "throughput_seconds": lambda: throughput_seconds(call, synchronize),
        "blocked_autorange": lambda: timer_median(call, min_run_time=timer_seconds / rounds),
    }
    table = []
    for round_ in range(rounds):
        order = list(measures) if round_ % 2 == 0 else list(reversed(measures))
        seconds = {name: measures[name]() for name in order}
        table.append({name: seconds[name] for name in measures})
    median = {name: statistics.median(row[name] for row in table) for name in measures}
    return {"latency": _pair(median["median_time"], median["timer_timeit_1"], "median_time_seconds",
                             "timer_timeit_1_seconds"),
            "throughput": _pair(median["throughput_seconds"], median["blocked_autorange"], "throughput_seconds",
                                "blocked_autorange_seconds"),
            "rounds": table}


def cold_start(device, elements: int, repeats: int = 10) -> dict:
    """The first forward+backward on ``device`` in this process against the median of later ones.

    Meaningful only as the first work on the device: it then includes one-off costs (on CUDA,
    creating the context and loading kernels), which warm-up calls keep out of measurements.
    """
    synchronize = synchronizer(device)
    start = time.perf_counter()
    x, bias, grad_output = workload_tensors(elements, device)
    call = timed_call(variant("built-in F.gelu(x + bias)"), x, bias, grad_output, "forward+backward")
    call()
    synchronize()
    first = time.perf_counter() - start
    return {"elements": elements, "statement": "first F.gelu(x + bias) forward+backward, tensors made on the device",
            "first_call_seconds": first, "median_seconds": median_time(call, device, warmup=2, repeats=repeats)}


def record(device, sizes, also_cpu: bool = True, compile: bool = True, warmup: int = 5,
           repeats: int = 20, timer_seconds: float = 1.0, log: Callable[[str], None] = print,
           tools: bool = True) -> dict:
    """Run the sweep on ``device`` (and on the CPU too, for comparison) and return the record; with ``tools``,
    also what ``record_tools`` measures (its trace under the key ``TRACE``, for ``main`` to write apart)."""
    device = torch.device(device).type
    load_before = _load_average()
    first = cold_start(device, min(sizes))  # before anything else runs on the device
    devices = [device] + (["cpu"] if also_cpu and device != "cpu" else [])
    variants = [v for v in VARIANTS if compile or not v.compiled]
    if compile and device == "mps":
        variants = [v for v in variants if not v.compiled]  # inductor's mps support is experimental
    rows = []
    for d in devices:
        # The CPU beside a GPU: up to the CPU's default largest size, without the compiled variant.
        own = d == device
        rows += sweep(d, sizes if own else [n for n in sizes if n <= 2 ** LARGEST_EXPONENT["cpu"]],
                      [v for v in variants if own or not v.compiled], time_with=median_time, warmup=warmup,
                      repeats=repeats, log=log)
    largest = max(sizes)
    fused_name = FUSED if any(v.compiled for v in variants) else FUSED_EAGER
    copy_row = _row(rows, device, COPY, "forward", largest)
    fused_row = _row(rows, device, fused_name, "forward+backward", largest)
    copy_gbps = copy_row["bytes"] / copy_row["seconds"] / 1e9
    fused_gbps = fused_row["bytes"] / fused_row["seconds"] / 1e9

    # The timing helpers against torch.utils.benchmark.Timer, like with like, on one large workload.
    x, bias, grad_output = workload_tensors(largest, device)
    call = timed_call(variant(fused_name, VARIANTS), x, bias, grad_output, "forward+backward")
    agreement = timer_agreement(call, device, warmup=warmup, repeats=repeats, timer_seconds=timer_seconds)
    del x, bias, grad_output, call

    big = workload_tensors(largest, device)  # a size the sweep compiled for already
    result = {
        "format": FORMAT,
        "kind": "measurement",
        "device": device,
        "device_name": device_name(device),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_name": cpu_name(),
        "cpu_threads": torch.get_num_threads(),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "load_average_before_after": [load_before, _load_average()],  # other programs running: noisy times
        "method": {"timer": "median of repeats of time.perf_counter() around one call, after warm-up; "
                            "on a GPU torch.cuda/mps.synchronize() before reading the clock",
                   "warmup": warmup, "repeats": repeats, "dtype": "float32", "columns": COLUMNS,
                   "bytes": BYTES_MODEL, "timer_check": TIMER_CHECK},
        "copy_bandwidth_gbps": copy_gbps,
        "nominal_peak_bandwidth_gbps": nominal_peak_bandwidth_gbps(device),
        "fused_variant": fused_name,
        "fused_bandwidth_gbps": fused_gbps,
        "fused_fraction_of_copy": fused_gbps / copy_gbps,
        "largest_elements": largest,
        "timer_agreement": {"workload": f"bias_gelu, {fused_name}, forward+backward", "elements": largest,
                            **agreement},
        "saved_bytes_per_element": {
            v.name: saved_bytes(v.fn, *big[:2]) / big[0].numel()
            for v in variants if v.workload == "bias_gelu"},
        "sweep": rows,
    }
    result["cold_start"] = first
    if device != "cpu":
        result["small_call"] = small_call(device)
        result["crossover"] = crossover(device)
    if device == "cuda":
        result["async_demo"] = async_demo(device, largest)
        result["sync_debug"] = sync_debug_report(device)
    if tools:
        found = record_tools.tools(device, lambda call, where: median_time(call, where, warmup=warmup, repeats=repeats),
                                   synchronizer(device), compile=compile)
        trace = found.pop("profile", None)
        if trace is not None:
            result["profile"] = {"file": trace_file(device), "steps": trace["otherData"]["steps"],
                                 "elements": trace["otherData"]["elements"]}
            result[TRACE] = trace  # main writes it beside the record, as the file named above
        result.update(found)
    return result


TRACE = "trace (written to its own file)"


SMALL = 4096  # elements of the small call: far below the size where a GPU starts to pay off
CROSSOVER_SIZES = tuple(2 ** k for k in range(8, 21, 2))  # assignment 07's CPU sizes
TIMER_CHECK = ("latency: median_time against torch.utils.benchmark.Timer.timeit(1) (Timer's own clock, which "
               "synchronises the GPU before each read); throughput: throughput_seconds against "
               "Timer.blocked_autorange; the median of interleaved rounds of each")


def small_call(device, elements: int = SMALL) -> dict:
    """One small F.silu forward (no autograd) on ``device``, as latency and as throughput.

    Small enough that the GPU's work is shorter than the CPU's launching it: back to back, each
    call costs the launch (throughput), and one call alone the launch, the work and the wait (latency).
    """
    x = workload_tensors(elements, device)[0]
    call = lambda: F.silu(x)  # noqa: E731
    return {"statement": "F.silu(x), no autograd", "elements": elements,
            "latency_seconds": median_time(call, device, warmup=10, repeats=50),
            "throughput_seconds": throughput_seconds(call, synchronizer(device), calls=100)}


def crossover(device, sizes=CROSSOVER_SIZES, rounds: int = 3) -> dict:
    """From what size built-in F.silu forward+backward on ``device`` beats one CPU core, as latency and as
    throughput: assignment 07's comparison, measured the way its notebook measures it, in ``rounds`` rounds
    (one round's crossover moves from round to round: the record keeps each, and their median)."""
    def call_at(where):
        return lambda n: timed_call(variant("built-in F.silu"), *workload_tensors(n, where), "forward+backward")

    def latency(call, where, warmup, repeats, synchronize):
        return median_time(call, where, warmup=warmup, repeats=repeats)

    runs = []
    for _ in range(rounds):
        with cpu_threads(1):
            cpu = latency_and_throughput(sizes, call_at("cpu"), latency, lambda: None)
        gpu = latency_and_throughput(sizes, call_at(device), latency, synchronizer(device), device=device)
        runs.append({**{f"{way}_elements": crossover_elements(sizes, [r[way] for r in cpu], [r[way] for r in gpu])
                        for way in ("latency", "throughput")}, "cpu": cpu, "gpu": gpu})
    found = {}
    for key in ("latency_elements", "throughput_elements"):
        values = [run[key] for run in runs if run[key] is not None]
        found[key] = statistics.median(values) if values else None
    return {"workload": "built-in F.silu, forward+backward", "against": "one CPU core", **found,
            "rounds": [{k: v for k, v in run.items() if k.endswith("_elements")} for run in runs],
            "cpu": runs[-1]["cpu"], "gpu": runs[-1]["gpu"]}


def crossover_elements(sizes, baseline, candidate) -> float | None:
    """The size from which ``candidate`` is faster than ``baseline`` for good, interpolated in log-log
    (assignment 07's ``crossover_size``); None when it is not faster at the largest size."""
    r = [math.log(c / b) for b, c in zip(baseline, candidate)]
    if r[-1] >= 0:
        return None
    k = len(r) - 1
    while k > 0 and r[k - 1] < 0:
        k -= 1
    if k == 0:
        return sizes[0]
    lo, hi = math.log(sizes[k - 1]), math.log(sizes[k])
    return math.exp(lo + r[k - 1] * (hi - lo) / (r[k - 1] - r[k]))


def upgrade_record(data: dict, note: str) -> dict:
    """A format-1 record as format 2: every figure kept as measured, none invented.

    Format 1's timer check compared ``median_time`` (latency) with ``Timer.blocked_autorange``
    (throughput) and called their difference an agreement: its two figures become the latency half's
    ``median_time_seconds`` and the throughput half's ``blocked_autorange_seconds``. The two it did not
    measure (``Timer.timeit(1)``, ``throughput_seconds``), and so both halves' relative differences,
    stay absent. ``note`` says who converted it, when and why; format 1's own difference is kept there.
    """
    if data.get("format") != 1:
        raise ValueError(f"not a format-1 record (format {data.get('format')!r})")
    old = data["timer_agreement"]
    upgraded = {**data, "format": FORMAT}
    upgraded["timer_agreement"] = {
        "workload": old["workload"], "elements": old["elements"],
        "latency": {"median_time_seconds": old["median_time_seconds"]},
        "throughput": {"blocked_autorange_seconds": old["benchmark_timer_seconds"]},
        "rounds": [{"median_time": ours, "blocked_autorange": timer} for ours, timer in old["rounds"]]}
    upgraded["converted"] = {"from_format": 1, "note": note,
                             "format_1_relative_difference": old["relative_difference"],
                             "format_1_compared": "median_time (latency) with blocked_autorange (throughput)"}
    return upgraded


def _load_average() -> float | None:
    """The operating system's 1-minute load average (busy cores), None where there is none."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _row(rows, device, variant, pass_, elements) -> dict:
    return next(r for r in rows if (r["device"], r["variant"], r["pass"], r["elements"]) == (device, variant, pass_, elements))



def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m autograder.authoring.record_timings",
        description="Time forward and forward+backward of built-in ops, custom Functions and a fused "
                    "bias-GELU over tensor sizes, on the GPU (if any) and the CPU, and write a JSON record "
                    "with its provenance plus two figures (time and throughput against size).")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda", "mps"],
                        help="device to sweep (auto: cuda, else mps, else cpu)")
    parser.add_argument("--min-exp", type=int, default=10, help="smallest size is 2**MIN_EXP elements (default 10)")
    parser.add_argument("--max-exp", type=int, default=None,
                        help="largest size is 2**MAX_EXP elements (default: 27 cuda, 24 mps, 22 cpu)")
    parser.add_argument("--step", type=int, default=2, help="exponent step between sizes (default 2)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up calls before timing (default 5)")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls; the median is kept (default 20)")
    parser.add_argument("--timer-seconds", type=float, default=1.0,
                        help="min_run_time of torch.utils.benchmark.Timer for the agreement check (default 1)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch (default: torch's choice). On a busy machine, 1 avoids threads "
                             "waiting for each other a whole scheduler tick")
    parser.add_argument("--no-cpu", action="store_true", help="on a GPU, do not sweep the CPU as well")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile'd fused Function")
    parser.add_argument("--output", type=Path, default=None,
                        help="JSON file to write (default: autograder/student/data/reference_<device>.json); "
                             "figures go beside it as <name>_time.png and <name>_throughput.png")
    parser.add_argument("--no-figures", action="store_true", help="write the JSON only")
    parser.add_argument("--no-tools", action="store_true",
                        help="skip the tools (profile, launch overhead, events, memory, matmul: record_tools)")
    parser.add_argument("--illustrative", type=Path, nargs="?", const=RECORD_DIR / ILLUSTRATIVE_FILE,
                        metavar="PATH", help="instead of measuring, write the made-up (model) two-device "
                                             f"dataset (default path: autograder/student/data/{ILLUSTRATIVE_FILE})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.illustrative:
        args.illustrative.write_text(json.dumps(illustrative_dataset(), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.illustrative} (illustrative model, not a measurement)")
        return 0
    device = args.device
    if device == "auto":
        device = next((d for d in ("cuda", "mps") if d in available_devices()), "cpu")
    if device not in available_devices():
        print(f"error: no {device} device on this machine (available: {', '.join(available_devices())})",
              file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    max_exp = args.max_exp if args.max_exp is not None else LARGEST_EXPONENT[device]
    sizes = [2 ** k for k in range(args.min_exp, max_exp + 1, args.step)]
    if sizes[-1] != 2 ** max_exp:
        sizes.append(2 ** max_exp)
    print(f"sweeping {device} ({device_name(device)}): sizes 2**{args.min_exp} .. 2**{max_exp}")
    data = record(device, sizes, also_cpu=not args.no_cpu, compile=not args.no_compile, warmup=args.warmup,
                  repeats=args.repeats, timer_seconds=args.timer_seconds, tools=not args.no_tools)
    data["command"] = " ".join(["python -m autograder.authoring.record_timings", *(argv if argv is not None else sys.argv[1:])])
    output = args.output or RECORD_DIR / f"reference_{device}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    trace = data.pop(TRACE, None)
    if trace is not None:
        path = output.with_name(data["profile"]["file"])
        path.write_text(json.dumps(trace) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    output.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {output}")
    for tool, error in data.get("tool_errors", {}).items():
        print(f"error in {tool}: {error.splitlines()[-1]}", file=sys.stderr)
    if not args.no_figures:
        for path in write_figures(data, output.with_suffix("")):
            print(f"wrote {path}")
    print(f"copy_ bandwidth {data['copy_bandwidth_gbps']:.1f} GB/s; {data['fused_variant']} forward+backward "
          f"{data['fused_bandwidth_gbps']:.1f} GB/s = {100 * data['fused_fraction_of_copy']:.0f}% of it; "
          f"against torch.utils.benchmark.Timer: latency "
          f"{100 * data['timer_agreement']['latency']['relative_difference']:.1f}% apart, throughput "
          f"{100 * data['timer_agreement']['throughput']['relative_difference']:.1f}% apart")
    return 0


if __name__ == "__main__":
    sys.exit(main())
