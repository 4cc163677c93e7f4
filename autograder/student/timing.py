"""Timing autograd code on the CPU and the GPU: the helpers and workloads assignment 07 imports.

The notebook times forward and forward+backward passes of a few elementwise workloads (a plain
copy, torch's built-in ops, an unfused composition, and the student's own custom Functions) over
tensor sizes, with the student's own timing helper, reads the reference records shipped with this
package (``autograder.student.records``, re-exported here) and plots both. The records themselves are made by the
course author's ``python -m autograder.authoring.record_timings``, with these same workloads and
helpers. This library holds no exercise answer: no custom Function, and no timing helper of its
own (``sweep`` times with the helper it is given, ``async_demo`` and ``throughput_seconds`` with
torch.utils.benchmark.Timer; ``latency_and_throughput`` with both).
The Functions the recordings time, and their timing helper, stay with the instructor.
The made-up (model) two-device dataset that the analysis exercise is graded on is
``illustrative_dataset()`` (in ``records``); it is labelled as a model and never presented as a
measurement.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from autograder.student.records import (  # noqa: F401 - re-exported: 07 and the recorder read them as bench.*
    DATA_DIR, FORMAT, FUSED_BAR, FUSED_BAR_DEVICES, ILLUSTRATIVE_FILE, ILLUSTRATIVE_MODEL, LATENCY_BAR,
    PROVENANCE_KEYS, THROUGHPUT_BAR, TIMER_FIGURES, check_record, complete, describe, figures,
    illustrative_dataset, illustrative_record, load_record, reference_gpu_record, reference_record,
)
from autograder.student.toy_cuda import TOY_CUDA  # noqa: F401 - re-exported: 07 reads it as bench.TOY_CUDA
from autograder.student.traces import (  # noqa: F401 - re-exported: 07 reads them as bench.*
    illustrative_trace, profile_steps, reference_trace, reference_traces,
)

COLUMNS = 1024  # the last dimension of every workload tensor (a hidden size); the bias has this length
PASSES = ("forward", "forward+backward")
LARGEST_EXPONENT = {"cuda": 27, "mps": 24, "cpu": 22}  # default sweep: 2**10 ... 2**this elements
# --------------------------------------------------------------------------------------------
# Devices


def available_devices() -> list[str]:
    """The device types this machine can run on: always "cpu", then "cuda" and/or "mps"."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def cpu_name() -> str:
    """The CPU's model name, as the operating system reports it."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    if platform.system() == "Darwin":
        import subprocess
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                  text=True, check=True).stdout.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device) -> str:
    """A human name for ``device``: the GPU's name, or the CPU's model name."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple GPU (mps) on {cpu_name()}"
    return cpu_name()


def live_label(what) -> str:
    """"LIVE <what>: <machine>, load <L> on <N> cores": what a live measurement is labelled with.

    ``what`` is a device ("cpu", "cuda") or a name for something that runs on this CPU ("toy device").
    A live number is this machine's at this moment: the label says which machine, and how busy it was
    (the 1-minute load average, where the system has one), so that a page built elsewhere, such as
    the course's book, does not pass its build machine's numbers off as the lesson's.
    """
    try:
        name = device_name(what)
    except RuntimeError:
        name = cpu_name()
    load = f", load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores" if hasattr(os, "getloadavg") else ""
    return f"LIVE {what}: {name}{load}"


def nominal_peak_bandwidth_gbps(device) -> float | None:
    """A CUDA GPU's memory bandwidth on paper (bus width x memory clock x 2), None elsewhere."""
    if torch.device(device).type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    width, clock_khz = getattr(props, "memory_bus_width", 0), getattr(props, "memory_clock_rate", 0)
    return 2 * width / 8 * clock_khz * 1000 / 1e9 if width and clock_khz else None


# --------------------------------------------------------------------------------------------
# The workloads that are timed


def gelu_unfused(x, bias):
    """gelu(x + bias) written out with elementary ops: autograd keeps three tensors for it."""
    h = x + bias
    return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))


@dataclass(frozen=True)
class Variant:
    """One way to compute a workload: ``fn(x, bias)`` (copy and SiLU ignore the bias).

    The library's variants are the copy and torch's own ops (VARIANTS); a notebook adds the
    student's Functions as Variants of its own.
    """

    workload: str
    name: str
    fn: Callable
    backward: bool = True
    compiled: bool = False


COPY = "copy_ (device to device)"
VARIANTS = (
    Variant("copy", COPY, None, backward=False),
    Variant("silu", "built-in F.silu", lambda x, bias: F.silu(x)),
    Variant("bias_gelu", "built-in F.gelu(x + bias)", lambda x, bias: F.gelu(x + bias)),
    Variant("bias_gelu", "unfused composition", gelu_unfused),
)
BYTES_MODEL = ("bytes an ideal implementation must move: each input and output read or written once; "
               "backward reads the output's gradient and the inputs again and writes their gradients")


def variant(name: str, variants=VARIANTS) -> Variant:
    """The variant of ``variants`` called ``name``."""
    return next(v for v in variants if v.name == name)


def workload_tensors(elements: int, device, seed: int = 0):
    """(x, bias, grad_output) for a workload of ``elements`` float32 numbers, as (rows, COLUMNS)."""
    columns = min(elements, COLUMNS)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(elements // columns, columns, generator=generator).to(device)
    bias = torch.randn(columns, generator=generator).to(device)
    return x, bias, torch.randn(x.shape, generator=generator).to(device)


def tensor_bytes(*tensors: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def model_bytes(variant: Variant, x, bias, pass_: str) -> int:
    """The bytes an ideal implementation must move: every input and output read or written once;
    backward reads the output's gradient and the inputs again and writes their gradients.

    The same count for every variant of a workload, so GB/s compares variants as speed does.
    """
    inputs = (x,) if variant.workload in ("copy", "silu") else (x, bias)
    forward = tensor_bytes(*inputs) + tensor_bytes(x)  # the output has x's shape
    if pass_ == "forward":
        return forward
    return forward + tensor_bytes(x) + 2 * tensor_bytes(*inputs)  # grad_output; inputs again; their grads


def timed_call(variant: Variant, x, bias, grad_output, pass_: str) -> Callable[[], object]:
    """A no-argument call that runs ``variant`` once: forward only, or forward and backward.

    The inputs require grad in both, as in training, so the forward pass includes autograd's
    bookkeeping. Backward uses ``torch.autograd.grad``, not ``.backward()``: accumulating into
    ``.grad`` would add one more kernel to every call after the first.
    """
    if variant.workload == "copy":
        out = torch.empty_like(x)
        return lambda: out.copy_(x)
    x = x.detach().requires_grad_(True)
    bias = bias.detach().requires_grad_(True)
    inputs = (x,) if variant.workload == "silu" else (x, bias)
    if pass_ == "forward":
        return lambda: variant.fn(x, bias)
    return lambda: torch.autograd.grad(variant.fn(x, bias), inputs, grad_output)


def saved_bytes(function: Callable, *args) -> int:
    """Bytes of the tensors autograd keeps for backward when ``function(*args)`` runs."""
    args = [a.detach().requires_grad_(True) if torch.is_tensor(a) else a for a in args]
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        function(*args)
    return tensor_bytes(*saved)


# --------------------------------------------------------------------------------------------
# The sweep and the record it writes


def sweep(device, sizes, variants, time_with: Callable, warmup: int = 5, repeats: int = 20,
          log: Callable[[str], None] = lambda line: None, passes=PASSES) -> list[dict]:
    """Time every variant, pass (of ``passes``) and size on ``device``; one row per measurement.

    ``time_with(call, device, warmup, repeats)`` gives the seconds of one call: assignment 07
    passes the student's own timing helper (the library has none of its own). A variant without
    backward (copy_) is timed forward only, if "forward" is one of ``passes``.
    """
    rows = []
    for elements in sizes:
        x, bias, grad_output = workload_tensors(elements, device)
        for variant in variants:
            for pass_ in [p for p in passes if variant.backward or p == "forward"]:
                call = timed_call(variant, x, bias, grad_output, pass_)
                seconds = time_with(call, device, warmup, repeats)
                nbytes = model_bytes(variant, x, bias, pass_)
                rows.append({"device": torch.device(device).type, "workload": variant.workload,
                             "variant": variant.name, "pass": pass_, "elements": elements,
                             "bytes": nbytes, "seconds": seconds, "cpu_threads": torch.get_num_threads()})
                log(f"{rows[-1]['device']:4s} {variant.name:28s} {pass_:16s} {elements:>10d}  "
                    f"{seconds * 1e6:11.1f} us  {nbytes / seconds / 1e9:8.2f} GB/s")
        del x, bias, grad_output
    return rows


@contextlib.contextmanager
def cpu_threads(threads: int):
    """Run the ``with`` block with torch on ``threads`` CPU threads; the count before is restored after it.

    ``with bench.cpu_threads(os.cpu_count()): rows = bench.sweep("cpu", ...)`` times the CPU with all
    of its cores in a notebook that otherwise runs on one thread.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


def throughput_seconds(call: Callable[[], object], synchronize: Callable[[], object], calls: int = 10,
                       blocks: int = 3, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds per call of ``call`` when calls run back to back: throughput, not latency.

    torch.utils.benchmark.Timer runs ``calls`` calls between two clock reads, and the clock it is
    given waits for the device (``synchronize``) before reading: one synchronisation per block of
    calls, so an asynchronous device works on one call while the next is launched. The median
    over ``blocks`` blocks (each after Timer's own warm-up), divided by ``calls``.
    """
    def synchronised_clock():
        synchronize()
        return clock()

    timer = Timer("call()", globals={"call": call}, timer=synchronised_clock, num_threads=torch.get_num_threads())
    return statistics.median(timer.timeit(calls).median for _ in range(blocks))


def latency_and_throughput(sizes, call_at: Callable[[int], Callable[[], object]], time_with: Callable,
                           synchronize: Callable[[], object], device="cpu", warmup: int = 1, repeats: int = 5,
                           calls: int = 10, blocks: int = 3) -> list[dict]:
    """One call's seconds at every size, measured two ways; one row per size.

    ``latency``: ``time_with(call, device, warmup=, repeats=, synchronize=)`` (assignment 07 passes the
    student's ``measure``, which synchronises after every call). ``throughput``:
    ``throughput_seconds`` (``calls`` calls back to back, one synchronisation). ``call_at(n)``
    makes the call for size ``n``.
    """
    rows = []
    for elements in sizes:
        call = call_at(elements)
        latency = time_with(call, device, warmup=warmup, repeats=repeats, synchronize=synchronize)
        throughput = throughput_seconds(call, synchronize, calls=calls, blocks=blocks)
        rows.append({"elements": elements, "latency": latency, "throughput": throughput})
    return rows


def async_demo(device, elements: int, repeats: int = 10) -> dict:
    """When one call returns, and when its work is done (CUDA only); and what a call costs back to back.

    On an idle GPU, the clock is read just after the call returns (``launch_seconds``) and again after
    ``torch.cuda.synchronize`` (``finished_seconds``): the same call, medians of ``repeats``. Then
    ``torch.utils.benchmark.Timer.blocked_autorange``: seconds per call when calls run back to back
    (``back_to_back_seconds``, a throughput: not one call's time).
    """
    x, bias, _ = workload_tensors(elements, device)
    launch, finished = [], []
    for _ in range(repeats):
        torch.cuda.synchronize(device)  # an empty queue: the launch does not wait for earlier kernels
        start = time.perf_counter()
        F.gelu(x + bias)
        launch.append(time.perf_counter() - start)
        torch.cuda.synchronize(device)
        finished.append(time.perf_counter() - start)
    work = Timer("F.gelu(x + bias)", globals={"F": F, "x": x, "bias": bias}).blocked_autorange(min_run_time=0.2)
    return {"elements": elements, "statement": "F.gelu(x + bias)", "launch_seconds": statistics.median(launch),
            "finished_seconds": statistics.median(finished), "back_to_back_seconds": work.median}


SYNC_SNIPPETS = ("x.sum().item()", "x.cpu()", "print(x[:2, :2])", "bool((x > 0).any())",
                 "x[x > 0]", "x.nonzero()", "x * 2", "x.sum(dim=0)")


def sync_debug_report(device="cuda") -> list[dict]:
    """Which snippets synchronise, as ``torch.cuda.set_sync_debug_mode("warn")`` reports them."""
    x = workload_tensors(COLUMNS * 8, device)[0]
    report = []
    for snippet in SYNC_SNIPPETS:
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("always")
                eval(snippet, {"x": x, "torch": torch})  # noqa: S307 - fixed snippets above
        finally:
            torch.cuda.set_sync_debug_mode("default")
        messages = [str(w.message).splitlines()[0] for w in caught]
        report.append({"snippet": snippet, "synchronizes": bool(messages), "warnings": messages[:3]})
    return report


def series(rows: list[dict], device: str, variant: str, pass_: str = "forward+backward"):
    """(elements, seconds, bytes) of one curve of a sweep, sorted by size."""
    chosen = sorted((r for r in rows if (r["device"], r["variant"], r["pass"]) == (device, variant, pass_)),
                    key=lambda r: r["elements"])
    return ([r["elements"] for r in chosen], [r["seconds"] for r in chosen], [r["bytes"] for r in chosen])


# --------------------------------------------------------------------------------------------
# Figures


def _line_label(device: str, name: str, suffix: str, device_label: dict | None) -> str:
    """"<device>: <variant><suffix>", the device named by ``device_label`` where it names it."""
    return f"{(device_label or {}).get(device, device)}: {name}{suffix}"


def plot_time(ax, rows, devices=None, pass_="forward+backward", label_suffix="", device_label=None, **style):
    """Log-log time per call against tensor size, one line per device and variant (copy_: forward).

    A line is labelled "<device>: <variant><label_suffix>"; ``device_label`` ({"cpu": "CPU, one core"})
    names a device otherwise.
    """
    for device, name, curve_pass in _curves(rows, devices, pass_):
        elements, seconds, _ = series(rows, device, name, curve_pass)
        ax.loglog(elements, seconds, marker="o", markersize=3,
                  label=_line_label(device, name, label_suffix, device_label), **style)
    ax.set_xlabel("tensor size (float32 elements)")
    ax.set_ylabel(f"seconds per call ({pass_})")
    ax.grid(True, which="major", alpha=0.3)


def plot_throughput(ax, rows, devices=None, pass_="forward+backward", label_suffix="", device_label=None, **style):
    """Achieved GB/s (model bytes / time) against tensor size; copy_ (a plain copy) is a yardstick.

    Lines are labelled as in ``plot_time``.
    """
    for device, name, curve_pass in _curves(rows, devices, pass_):
        elements, seconds, nbytes = series(rows, device, name, curve_pass)
        ax.semilogx(elements, [b / s / 1e9 for b, s in zip(nbytes, seconds)], marker="o", markersize=3,
                    label=_line_label(device, name, label_suffix, device_label), **style)
    ax.set_xlabel("tensor size (float32 elements)")
    ax.set_ylabel("achieved GB/s")
    ax.grid(True, which="major", alpha=0.3)


def _curves(rows, devices, pass_) -> list[tuple[str, str, str]]:
    """(device, variant, pass) of each curve to draw: ``pass_`` for most, forward for copy_."""
    keys = []
    for r in rows:
        key = (r["device"], r["variant"], r["pass"])
        if (devices is None or r["device"] in devices) and key not in keys and (
                r["pass"] == pass_ or r["workload"] == "copy"):
            keys.append(key)
    return keys


def write_figures(data: dict, stem: Path) -> list[Path]:
    """``<stem>_time.png`` and ``<stem>_throughput.png`` from a record; returns their paths."""
    from matplotlib.figure import Figure

    paths = []
    for name, plot in (("time", plot_time), ("throughput", plot_throughput)):
        fig = Figure(figsize=(9, 5.5), layout="constrained")
        ax = fig.subplots()
        plot(ax, [r for r in data["sweep"] if r["workload"] in ("copy", "bias_gelu")])
        ax.set_title(f"{name}, forward+backward (copy_: forward)\n{describe(data)}", fontsize=9)
        ax.legend(fontsize=7)
        paths.append(stem.with_name(f"{stem.name}_{name}.png"))
        fig.savefig(paths[-1], dpi=90)
    return paths
