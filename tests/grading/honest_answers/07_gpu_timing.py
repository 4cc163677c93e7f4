"""Honest answers to 07 (timing), several styles each (see test_scan.py)."""

# %% measure
def measure(fn, device="cpu", warmup=3, repeats=10, clock=time.perf_counter, synchronize=None):
    if synchronize is None:
        synchronize = {
            "cuda": torch.cuda.synchronize,
            "mps": torch.mps.synchronize,
        }.get(torch.device(device).type, lambda: None)
    for _ in range(warmup):
        fn()
    synchronize()
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        synchronize()
        times.append(clock() - t0)
    return statistics.median(times)

# %% measure
def measure(fn, device="cpu", warmup=3, repeats=10, clock=time.perf_counter, synchronize=None):
    kind = torch.device(device).type
    if synchronize is None and kind == "cuda":
        synchronize = torch.cuda.synchronize
    elif synchronize is None and kind == "mps":
        synchronize = torch.mps.synchronize
    elif synchronize is None:
        def synchronize():
            return None
    [fn() for _ in range(warmup)]
    synchronize()
    samples = []
    for _ in range(repeats):
        start = clock()
        fn()
        synchronize()
        samples.append(clock() - start)
    samples.sort()
    middle = len(samples) // 2
    return samples[middle] if len(samples) % 2 else (samples[middle - 1] + samples[middle]) / 2

# %% measure
from dataclasses import dataclass, field


@dataclass
class Timing:
    samples: list = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def measure(fn, device="cpu", warmup=3, repeats=10, clock=time.perf_counter, synchronize=None):
    kind = torch.device(device).type
    sync = synchronize or {"cuda": torch.cuda.synchronize, "mps": torch.mps.synchronize}.get(kind, lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    timing = Timing()
    for _ in range(repeats):
        begin = clock()
        fn()
        sync()
        timing.samples.append(clock() - begin)
    return timing.median

# %% analysis
def achieved_gbps(nbytes, seconds):
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    return nbytes / (seconds * 1e9)


def speedups(baseline_seconds, candidate_seconds):
    assert len(baseline_seconds) == len(candidate_seconds), "one time per size in both lists"
    return list(map(lambda pair: pair[0] / pair[1], zip(baseline_seconds, candidate_seconds)))


def crossover_size(sizes, baseline_seconds, candidate_seconds):
    log_ratio = [math.log(c) - math.log(b) for b, c in zip(baseline_seconds, candidate_seconds)]
    if log_ratio[-1] >= 0:
        return None
    first = len(log_ratio) - 1
    while first > 0 and log_ratio[first - 1] < 0:
        first -= 1
    if first == 0:
        return sizes[0]
    x0, x1 = math.log(sizes[first - 1]), math.log(sizes[first])
    y0, y1 = log_ratio[first - 1], log_ratio[first]
    return math.exp(x0 + y0 * (x1 - x0) / (y0 - y1))

# %% analysis
import numpy as np


def achieved_gbps(nbytes, seconds):
    return float(nbytes) / float(seconds) / 1e9


def speedups(baseline_seconds, candidate_seconds):
    return (np.asarray(baseline_seconds, dtype=float) / np.asarray(candidate_seconds, dtype=float)).tolist()


def crossover_size(sizes, baseline_seconds, candidate_seconds):
    ratio = np.log(np.asarray(candidate_seconds) / np.asarray(baseline_seconds))
    if ratio[-1] >= 0:
        return None
    losing = np.flatnonzero(ratio >= 0)
    if losing.size == 0:
        return sizes[0]
    k = int(losing[-1]) + 1
    log_sizes = np.log(np.asarray(sizes, dtype=float))
    t = ratio[k - 1] / (ratio[k - 1] - ratio[k])
    return float(np.exp(log_sizes[k - 1] + t * (log_sizes[k] - log_sizes[k - 1])))

# %% bias_gelu
class BiasGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        h = x + bias
        ctx.save_for_backward(h)
        ctx.bias_shape = bias.shape
        return F.gelu(h)

    @staticmethod
    def backward(ctx, grad_output):
        h, = ctx.saved_tensors
        phi = torch.exp(-0.5 * h ** 2) / math.sqrt(2 * math.pi)
        Phi = 0.5 * (1.0 + torch.erf(h * (1.0 / math.sqrt(2.0))))
        grad_h = grad_output * (Phi + h * phi)
        return grad_h, grad_h.sum_to_size(ctx.bias_shape)

# %% bias_gelu
SQRT_HALF = 0.5 ** 0.5


class BiasGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        h = x + bias
        ctx.save_for_backward(h)
        ctx.bias_dim = bias.dim()
        return h * 0.5 * (1 + torch.special.erf(h * SQRT_HALF))

    @staticmethod
    def backward(ctx, grad_output):
        h, = ctx.saved_tensors
        cdf = 0.5 * (1 + torch.special.erf(h * SQRT_HALF))
        pdf = torch.exp(-h * h / 2) * (SQRT_HALF / math.sqrt(math.pi))
        grad_h = grad_output * (cdf + h * pdf)
        dims = [d for d in range(grad_h.dim() - ctx.bias_dim)]
        return grad_h, grad_h.sum(dim=dims) if dims else grad_h

# %% where_time_goes
def step_windows(trace, step):
    windows = []
    for event in trace["traceEvents"]:
        if event["cat"] == "user_annotation" and event["name"] == step:
            windows.append([event["ts"], event["ts"] + event["dur"]])
    windows.sort(key=lambda w: w[0])
    return windows


def top_level_ops(trace, step):
    windows = step_windows(trace, step)

    def in_a_window(event):
        return any(lo <= event["ts"] <= hi for lo, hi in windows)

    candidates = [e for e in trace["traceEvents"]
                  if e.get("cat") == "cpu_op" and e["name"].startswith("aten::") and in_a_window(e)]
    top = []
    for e in candidates:
        inside_another = False
        for other in candidates:
            if other is e or other["tid"] != e["tid"] or other["dur"] <= e["dur"]:
                continue
            if other["ts"] <= e["ts"] and e["ts"] + e["dur"] <= other["ts"] + other["dur"]:
                inside_another = True
                break
        if not inside_another:
            top.append(e)
    return top


def where_time_goes(trace, step):
    events = trace["traceEvents"]
    launch_time = {}
    for e in events:
        if e["cat"] in {"cuda_runtime", "cuda_driver"} and "correlation" in e.get("args", {}):
            launch_time[e["args"]["correlation"]] = e["ts"]
    ops = top_level_ops(trace, step)
    per_step = {"cpu_us": [], "aten_ops": [], "aten_us": [], "kernels": [], "kernel_us": []}
    windows = step_windows(trace, step)
    for lo, hi in windows:
        mine = [op for op in ops if lo <= op["ts"] <= hi]
        kernels = [k for k in events if k["cat"] == "kernel"
                   and lo <= launch_time.get(k["args"]["correlation"], -math.inf) <= hi]
        per_step["cpu_us"].append(hi - lo)
        per_step["aten_ops"].append(len(mine))
        per_step["aten_us"].append(sum(op["dur"] for op in mine))
        per_step["kernels"].append(len(kernels))
        per_step["kernel_us"].append(sum(k["dur"] for k in kernels))
    result = {"steps": len(windows)}
    result.update({name: statistics.median(values) for name, values in per_step.items()})
    return result

# %% gpu_time
def gpu_time(fn, new_event, synchronize, flush=None, warmup=3, repeats=10):
    for _ in range(warmup):
        fn()
    synchronize()
    events = []
    for _ in range(repeats):
        if flush:
            flush()
        before, after = new_event(), new_event()
        before.record()
        fn()
        after.record()
        events.append((before, after))
    synchronize()
    milliseconds = sorted(before.elapsed_time(after) for before, after in events)
    middle = len(milliseconds) // 2
    median = milliseconds[middle] if len(milliseconds) % 2 else (milliseconds[middle - 1] + milliseconds[middle]) / 2
    return median * 1e-3

# %% graphed
def graphed(fn, example_inputs, cuda, warmup=3):
    inputs = [example.clone() for example in example_inputs]
    stream = cuda.Stream()
    stream.wait_stream(cuda.current_stream())
    with cuda.stream(stream):
        for _ in range(warmup):
            fn(*inputs)
    cuda.current_stream().wait_stream(stream)
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        output = fn(*inputs)

    def run(*new_inputs):
        for mine, given in zip(inputs, new_inputs):
            mine.copy_(given)
        graph.replay()
        return output.clone()

    return run

# %% roofline
def matmul_cost(m, k, n, element_size=4):
    flops = 2 * m * n * k  # a multiply and an add for each of the k terms of each of the m * n outputs
    moved = (m * k + k * n + m * n) * element_size
    return flops, moved


def attainable_gflops(flops, nbytes, bandwidth_gbps, peak_gflops):
    intensity = flops / nbytes  # FLOP per byte
    memory_bound = intensity * bandwidth_gbps
    return peak_gflops if memory_bound > peak_gflops else memory_bound


def time_floor(flops, nbytes, bandwidth_gbps, peak_gflops):
    compute = flops / peak_gflops / 1e9
    memory = nbytes / bandwidth_gbps / 1e9
    return compute if compute > memory else memory
