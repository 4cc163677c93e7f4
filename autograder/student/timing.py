"""Timing autograd code on the CPU and the GPU: the helpers and workloads assignment 07 imports.

The notebook times forward and forward+backward passes of a few elementwise workloads (a plain
copy, built-in ops, custom Functions of the course, an unfused composition and a fused
bias-GELU) over tensor sizes, reads the reference records shipped with this package
(``data/reference_<device>.json``, found through the package so that a notebook downloaded on
its own, on Colab say, finds them too) and plots both. The records themselves are made by the course
author's ``python -m autograder.authoring.record_timings``, with these same workloads and helpers.
The made-up (model) two-device dataset that the analysis exercise is graded on is
``illustrative_dataset()``; it is labelled as a model and never presented as a measurement.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import io
import json
import math
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from importlib import resources
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

FORMAT = 1
ILLUSTRATIVE_FILE = "illustrative_two_devices.json"
# The recordings and figures assignment 07 reads: package data, wherever the package is installed.
DATA_DIR = Path(str(resources.files("autograder.student") / "data"))
COLUMNS = 1024  # the last dimension of every workload tensor (a hidden size); the bias has this length
PASSES = ("forward", "forward+backward")
LARGEST_EXPONENT = {"cuda": 27, "mps": 24, "cpu": 22}  # default sweep: 2**10 ... 2**this elements
# Keys every record has; the issue asks for device name, torch and CUDA versions and date.
PROVENANCE_KEYS = ("device", "device_name", "torch_version", "cuda_version", "date")


# --------------------------------------------------------------------------------------------
# Devices and timing


def available_devices() -> list[str]:
    """The device types this machine can run on: always "cpu", then "cuda" and/or "mps"."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def synchronizer(device) -> Callable[[], None]:
    """The call that waits until every kernel queued on ``device`` has finished (no-op on the CPU)."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.synchronize
    if kind == "mps":
        return torch.mps.synchronize
    return lambda: None


def median_time(fn: Callable[[], object], device="cpu", warmup: int = 5, repeats: int = 20) -> float:
    """Median seconds of one ``fn()`` call: warm-up calls first, and on a GPU a synchronisation
    before each clock read, so the time covers the work and not only its launch."""
    synchronize = synchronizer(device)
    for _ in range(warmup):
        fn()
    synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timer_median(fn: Callable[[], object], min_run_time: float = 1.0) -> float:
    """Median seconds of one ``fn()`` call by ``torch.utils.benchmark.Timer`` (it synchronises
    accelerators itself). It uses as many threads as torch does here: Timer's default is one."""
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
    return timer.blocked_autorange(min_run_time=min_run_time).median


def nominal_peak_bandwidth_gbps(device) -> float | None:
    """A CUDA GPU's memory bandwidth on paper (bus width x memory clock x 2), None elsewhere."""
    if torch.device(device).type != "cuda":
        return None
    props = torch.cuda.get_device_properties(device)
    width, clock_khz = getattr(props, "memory_bus_width", 0), getattr(props, "memory_clock_rate", 0)
    return 2 * width / 8 * clock_khz * 1000 / 1e9 if width and clock_khz else None


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
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.get_device_name(device)
    if kind == "mps":
        return f"Apple GPU (mps) on {cpu_name()}"
    return cpu_name()


# --------------------------------------------------------------------------------------------
# The Functions and workloads that are timed


class SiLU(torch.autograd.Function):
    """x * sigmoid(x), keeping only x and recomputing sigmoid(x) in backward (assignment 02)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_output * s * (1 + x * (1 - s))


def _bias_grad(grad_h: torch.Tensor, bias_shape: torch.Size) -> torch.Tensor:
    """The bias was broadcast over the leading dimensions: its gradient sums over them.

    ``sum_to_size``, not ``sum(dim=tuple(range(grad_h.dim() - 1)))``: for a 1-D input that tuple
    is empty, and ``sum(dim=())`` sums over every dimension.
    """
    return grad_h.sum_to_size(bias_shape)


class BiasGELU(torch.autograd.Function):
    """gelu(x + bias) in eager torch ops, keeping only the pre-activation h = x + bias.

    Each torch op is still its own kernel: two forward (add, gelu), two backward (torch's GELU
    derivative, the bias sum). What the Function saves is memory: one tensor instead of three.
    """

    @staticmethod
    def forward(ctx, x, bias):
        h = x + bias
        ctx.save_for_backward(h)
        ctx.bias_shape = bias.shape  # a shape, not a tensor: an attribute is fine
        return F.gelu(h)

    @staticmethod
    def backward(ctx, grad_output):
        (h,) = ctx.saved_tensors
        grad_h = torch.ops.aten.gelu_backward(grad_output, h)
        return grad_h, _bias_grad(grad_h, ctx.bias_shape)


def _fused_forward(x, bias):
    return F.gelu(x + bias)


def _fused_backward(grad_output, x, bias):
    grad_h = torch.ops.aten.gelu_backward(grad_output, x + bias)
    return grad_h, _bias_grad(grad_h, bias.shape)


@functools.cache
def compiled_kernels() -> tuple[Callable, Callable]:
    """(forward, backward) of bias-GELU, each compiled by torch.compile into one fused kernel
    (Triton on CUDA, C++ on the CPU); compiled once per tensor shape, on first use."""
    # One static compilation per size of the sweep: more than dynamo's default limit of 8.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return (torch.compile(_fused_forward, dynamic=False, fullgraph=True),
            torch.compile(_fused_backward, dynamic=False, fullgraph=True))


class FusedBiasGELU(torch.autograd.Function):
    """gelu(x + bias) with one fused kernel each way (torch.compile).

    A fused kernel reads x and bias and writes the output without storing x + bias: it keeps only
    its inputs for backward and recomputes x + bias there, for free, since an elementwise kernel
    waits on memory, not on arithmetic.
    """

    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        return compiled_kernels()[0](x, bias)

    @staticmethod
    def backward(ctx, grad_output):
        x, bias = ctx.saved_tensors
        return compiled_kernels()[1](grad_output, x, bias)


def gelu_unfused(x, bias):
    """gelu(x + bias) written out with elementary ops: autograd keeps three tensors for it."""
    h = x + bias
    return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))


@dataclass(frozen=True)
class Variant:
    """One way to compute a workload: ``fn(x, bias)`` (copy and SiLU ignore the bias)."""

    workload: str
    name: str
    fn: Callable
    backward: bool = True
    compiled: bool = False


VARIANTS = (
    Variant("copy", "copy_ (device to device)", None, backward=False),
    Variant("silu", "built-in F.silu", lambda x, bias: F.silu(x)),
    Variant("silu", "custom Function SiLU", lambda x, bias: SiLU.apply(x)),
    Variant("bias_gelu", "built-in F.gelu(x + bias)", lambda x, bias: F.gelu(x + bias)),
    Variant("bias_gelu", "unfused composition", gelu_unfused),
    Variant("bias_gelu", "fused Function (eager)", BiasGELU.apply),
    Variant("bias_gelu", "fused Function (compiled)", FusedBiasGELU.apply, compiled=True),
)
FUSED = "fused Function (compiled)"
FUSED_EAGER = "fused Function (eager)"
COPY = "copy_ (device to device)"
BYTES_MODEL = ("bytes an ideal implementation must move: each input and output read or written once; "
               "backward reads the output's gradient and the inputs again and writes their gradients")


def variant(name: str) -> Variant:
    """The variant of VARIANTS called ``name``."""
    return next(v for v in VARIANTS if v.name == name)


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


def sweep(device, sizes, variants=VARIANTS, warmup: int = 5, repeats: int = 20,
          time_with: Callable = median_time, log: Callable[[str], None] = lambda line: None) -> list[dict]:
    """Time every variant, pass and size on ``device``; one row per measurement.

    ``time_with(call, device, warmup, repeats)`` gives the seconds of one call (assignment 07
    passes the student's own timing helper).
    """
    rows = []
    for elements in sizes:
        x, bias, grad_output = workload_tensors(elements, device)
        for variant in variants:
            for pass_ in PASSES if variant.backward else PASSES[:1]:
                call = timed_call(variant, x, bias, grad_output, pass_)
                seconds = time_with(call, device, warmup, repeats)
                nbytes = model_bytes(variant, x, bias, pass_)
                rows.append({"device": torch.device(device).type, "workload": variant.workload,
                             "variant": variant.name, "pass": pass_, "elements": elements,
                             "bytes": nbytes, "seconds": seconds})
                log(f"{rows[-1]['device']:4s} {variant.name:28s} {pass_:16s} {elements:>10d}  "
                    f"{seconds * 1e6:11.1f} us  {nbytes / seconds / 1e9:8.2f} GB/s")
        del x, bias, grad_output
    return rows


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


def async_demo(device, elements: int, repeats: int = 10) -> dict:
    """What the clock says right after a launch, and after waiting for the kernel (GPU only)."""
    synchronize = synchronizer(device)
    x, bias, _ = workload_tensors(elements, device)
    launch, finished = [], []
    for _ in range(repeats + 2):
        synchronize()
        start = time.perf_counter()
        F.gelu(x + bias)
        launched = time.perf_counter()
        synchronize()
        done = time.perf_counter()
        launch.append(launched - start)
        finished.append(done - start)
    return {"elements": elements, "statement": "F.gelu(x + bias)",
            "launch_seconds": statistics.median(launch[2:]),
            "finished_seconds": statistics.median(finished[2:])}


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


def check_record(data: dict) -> list[str]:
    """Problems that make ``data`` unfit to be shown as a measurement ([] when it is fine)."""
    required = PROVENANCE_KEYS + ("copy_bandwidth_gbps", "fused_bandwidth_gbps", "timer_agreement", "sweep")
    problems = [f"missing {key!r}" for key in required if key not in data]
    if problems:
        return problems
    if data.get("kind") != "measurement":
        problems.append(f"kind is {data.get('kind')!r}, not 'measurement'")
    if data["device"] == "cuda" and not data["cuda_version"]:
        problems.append("a CUDA record without a CUDA version")
    try:
        datetime.datetime.fromisoformat(data["date"])
    except (TypeError, ValueError):
        problems.append(f"date {data['date']!r} is not ISO 8601")
    if not any(r["device"] == data["device"] for r in data["sweep"]):
        problems.append(f"no measurement on the record's device {data['device']!r}")
    if any(not (r["seconds"] > 0 and r["bytes"] > 0 and r["elements"] > 0) for r in data["sweep"]):
        problems.append("a row of the sweep has a time, size or byte count that is not positive")
    return problems


def load_record(path) -> dict | None:
    """A reference record, or None when the file does not exist; raises if it is malformed."""
    path = Path(path)
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    problems = check_record(data) if data.get("kind") == "measurement" else []
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    return data


def reference_record(device: str, folder=DATA_DIR) -> dict | None:
    """The reference record of ``device`` ("cpu", "cuda", "mps") shipped with the course, or None."""
    return load_record(Path(folder) / f"reference_{device}.json")


def illustrative_record(folder=DATA_DIR) -> dict:
    """The made-up (model) two-device dataset shipped with the course (see ``illustrative_dataset``)."""
    return json.loads((Path(folder) / ILLUSTRATIVE_FILE).read_text(encoding="utf-8"))


def reference_gpu_record(folder=DATA_DIR) -> dict | None:
    """The GPU reference record in ``folder`` (CUDA first, then mps), or None if none was made."""
    for device in ("cuda", "mps"):
        data = load_record(Path(folder) / f"reference_{device}.json")
        if data is not None:
            return data
    return None


def series(rows: list[dict], device: str, variant: str, pass_: str = "forward+backward"):
    """(elements, seconds, bytes) of one curve of a sweep, sorted by size."""
    chosen = sorted((r for r in rows if (r["device"], r["variant"], r["pass"]) == (device, variant, pass_)),
                    key=lambda r: r["elements"])
    return ([r["elements"] for r in chosen], [r["seconds"] for r in chosen], [r["bytes"] for r in chosen])


def describe(data: dict) -> str:
    """One line saying where and when a record was made (or that it is a model)."""
    if data.get("kind") != "measurement":
        return f"ILLUSTRATIVE MODEL, not a measurement: {data['model']}"
    cuda = f", CUDA {data['cuda_version']}" if data.get("cuda_version") else ""
    threads = f", {data['cpu_threads']} CPU thread{'s' if data['cpu_threads'] > 1 else ''}" if data["device"] == "cpu" else ""
    return f"{data['device_name']} ({data['device']}{threads}), torch {data['torch_version']}{cuda}, {data['date'][:10]}"


# --------------------------------------------------------------------------------------------
# The illustrative (model) two-device dataset the analysis exercise is graded on


ILLUSTRATIVE_MODEL = {
    "formula": "seconds = fixed_seconds + bytes / bandwidth_bytes_per_second, times a seeded jitter",
    "devices": {
        "model CPU": {"fixed_seconds": 20e-6, "bandwidth_bytes_per_second": 20e9},
        "model GPU": {"fixed_seconds": 60e-6, "bandwidth_bytes_per_second": 2000e9},
        "model GPU + transfer": {"fixed_seconds": 80e-6, "bandwidth_bytes_per_second": 2000e9,
                                 "transfer_bytes_per_element": 8, "transfer_bytes_per_second": 25e9},
    },
    "jitter": "each time multiplied by exp(0.05 * z), z standard normal from torch.Generator seed 0",
    "workload": "bias_gelu forward+backward, float32: 20 bytes per element (model_bytes)",
}


def illustrative_dataset() -> dict:
    """A made-up CPU-versus-GPU sweep from ILLUSTRATIVE_MODEL: the same every time it is built.

    It has the shape real measurements have (a fixed cost per call, then a cost per byte, and
    noise) and is labelled a model everywhere it appears. Nothing in it was measured.
    """
    generator = torch.Generator().manual_seed(0)
    sizes = [2 ** k for k in range(8, 25)]
    rows = []
    for device, p in ILLUSTRATIVE_MODEL["devices"].items():
        for elements in sizes:
            nbytes = 20 * elements
            seconds = p["fixed_seconds"] + nbytes / p["bandwidth_bytes_per_second"]
            seconds += p.get("transfer_bytes_per_element", 0) * elements / p.get("transfer_bytes_per_second", 1)
            seconds *= math.exp(0.05 * torch.randn((), generator=generator, dtype=torch.float64).item())
            rows.append({"device": device, "workload": "bias_gelu", "variant": "model", "pass": "forward+backward",
                         "elements": elements, "bytes": nbytes, "seconds": float(f"{seconds:.6g}")})
    return {"format": FORMAT, "kind": "illustrative model",
            "warning": "MADE UP BY A FORMULA, NOT MEASURED on any device. For exercises only.",
            "model": ILLUSTRATIVE_MODEL["formula"], "parameters": ILLUSTRATIVE_MODEL,
            "generated_by": "python -m autograder.authoring.record_timings --illustrative", "sweep": rows}


# --------------------------------------------------------------------------------------------
# Figures


def plot_time(ax, rows, devices=None, pass_="forward+backward", label_suffix="", **style):
    """Log-log time per call against tensor size, one line per device and variant (copy_: forward)."""
    for device, name, curve_pass in _curves(rows, devices, pass_):
        elements, seconds, _ = series(rows, device, name, curve_pass)
        ax.loglog(elements, seconds, marker="o", markersize=3, label=f"{device}: {name}{label_suffix}", **style)
    ax.set_xlabel("tensor size (float32 elements)")
    ax.set_ylabel(f"seconds per call ({pass_})")
    ax.grid(True, which="major", alpha=0.3)


def plot_throughput(ax, rows, devices=None, pass_="forward+backward", label_suffix="", **style):
    """Achieved GB/s (model bytes / time) against tensor size; copy_ is the practical ceiling."""
    for device, name, curve_pass in _curves(rows, devices, pass_):
        elements, seconds, nbytes = series(rows, device, name, curve_pass)
        ax.semilogx(elements, [b / s / 1e9 for b, s in zip(nbytes, seconds)], marker="o", markersize=3,
                    label=f"{device}: {name}{label_suffix}", **style)
    ax.set_xlabel("tensor size (float32 elements)")
    ax.set_ylabel("achieved GB/s")
    ax.grid(True, which="major", alpha=0.3)


def _curves(rows, devices, pass_) -> list[tuple[str, str, str]]:
    """(device, variant, pass) of each curve to draw: ``pass_`` for most, forward for copy_."""
    curves = []
    for r in rows:
        key = (r["device"], r["variant"], r["pass"])
        if (devices is None or r["device"] in devices) and key not in curves and (
                r["pass"] == pass_ or r["workload"] == "copy"):
            curves.append(key)
    return curves


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
