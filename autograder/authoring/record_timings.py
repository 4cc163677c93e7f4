"""Record assignment 07's reference timings: ``python -m autograder.authoring.record_timings``.

The course author runs this (``make benchmark``) on a machine with the device to record, and
commits the JSON record and its two figures in ``autograder/student/data/`` (package data: the 07
notebook finds them through the installed package). The workloads, the sweep and the plots are
the student's library's (``autograder.student.timing``), so a reference and a live measurement
are made the same way. The custom Functions it times (``timed_functions``) and its timing helper
``median_time`` are exercise answers: they live here, with the instructor, and are not shipped
to students.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.benchmark import Timer

from autograder.authoring.timed_functions import FUSED, FUSED_EAGER, VARIANTS
from autograder.student.timing import (COLUMNS, DATA_DIR, COPY, BYTES_MODEL, FORMAT, ILLUSTRATIVE_FILE,
                                       LARGEST_EXPONENT, async_demo, available_devices, cpu_name, device_name,
                                       illustrative_dataset, nominal_peak_bandwidth_gbps, saved_bytes, sweep,
                                       sync_debug_report, timed_call, variant, workload_tensors, write_figures)

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
    that they time what a student's helper times, and check it against ``timer_median``.
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


def timer_median(fn: Callable[[], object], min_run_time: float = 1.0,
                 clock: Callable[[], float] = timeit.default_timer) -> float:
    """Median seconds of one ``fn()`` call by ``torch.utils.benchmark.Timer`` (it synchronises
    accelerators itself). It uses as many threads as torch does here: Timer's default is one."""
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads(), timer=clock)
    return timer.blocked_autorange(min_run_time=min_run_time).median


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
           repeats: int = 20, timer_seconds: float = 1.0, log: Callable[[str], None] = print) -> dict:
    """Run the sweep on ``device`` (and on the CPU too, for comparison) and return the record."""
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

    # The timing helper against torch.utils.benchmark.Timer, on one large workload, in
    # interleaved rounds so that a busy spell of other programs does not land on one side only.
    x, bias, grad_output = workload_tensors(largest, device)
    call = timed_call(variant(fused_name, VARIANTS), x, bias, grad_output, "forward+backward")
    rounds = []
    for round_ in range(4):  # who goes first alternates, so a drift in speed does not favour one side
        if round_ % 2:
            timer = timer_median(call, min_run_time=timer_seconds / 4)
            rounds.append((median_time(call, device, warmup=warmup, repeats=repeats), timer))
        else:
            ours = median_time(call, device, warmup=warmup, repeats=repeats)
            rounds.append((ours, timer_median(call, min_run_time=timer_seconds / 4)))
    ours, timer = (statistics.median(side) for side in zip(*rounds))
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
                   "bytes": BYTES_MODEL},
        "copy_bandwidth_gbps": copy_gbps,
        "nominal_peak_bandwidth_gbps": nominal_peak_bandwidth_gbps(device),
        "fused_variant": fused_name,
        "fused_bandwidth_gbps": fused_gbps,
        "fused_fraction_of_copy": fused_gbps / copy_gbps,
        "largest_elements": largest,
        "timer_agreement": {"workload": f"bias_gelu, {fused_name}, forward+backward", "elements": largest,
                            "median_time_seconds": ours, "benchmark_timer_seconds": timer,
                            "rounds": [list(r) for r in rounds],
                            "relative_difference": abs(ours - timer) / timer},
        "saved_bytes_per_element": {
            v.name: saved_bytes(v.fn, *big[:2]) / big[0].numel()
            for v in variants if v.workload == "bias_gelu"},
        "sweep": rows,
    }
    result["cold_start"] = first
    if device == "cuda":
        result["async_demo"] = async_demo(device, largest)
        result["sync_debug"] = sync_debug_report(device)
    return result


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
                  repeats=args.repeats, timer_seconds=args.timer_seconds)
    data["command"] = " ".join(["python -m autograder.authoring.record_timings", *(argv if argv is not None else sys.argv[1:])])
    output = args.output or RECORD_DIR / f"reference_{device}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {output}")
    if not args.no_figures:
        for path in write_figures(data, output.with_suffix("")):
            print(f"wrote {path}")
    print(f"copy_ bandwidth {data['copy_bandwidth_gbps']:.1f} GB/s; {data['fused_variant']} forward+backward "
          f"{data['fused_bandwidth_gbps']:.1f} GB/s = {100 * data['fused_fraction_of_copy']:.0f}% of it; "
          f"timing helper vs torch.utils.benchmark.Timer: "
          f"{100 * data['timer_agreement']['relative_difference']:.1f}% apart")
    return 0


if __name__ == "__main__":
    sys.exit(main())
