"""Profiler traces assignment 07 reads: where a call's time goes, on the host and on the GPU.

A trace here is ``torch.profiler``'s Chrome trace (``prof.export_chrome_trace``) cut down to what 07
reads (``trim``): its complete events (``"ph": "X"``) of the host (``user_annotation``: the steps a
``record_function`` names; ``cpu_op``: PyTorch's operators, nested), of the CUDA runtime and driver
(``cuda_runtime``, ``cuda_driver``: among them the launches) and of the GPU (``kernel``,
``gpu_memcpy``, ``gpu_memset``). Each keeps its name, category, start ``ts`` and duration ``dur``
(microseconds, from the first step's start), process and thread (on the GPU: device and stream)
and, where torch gave one, the ``correlation`` id that ties a kernel to the launch that queued it.
``otherData`` says where, when and how it was recorded. Perfetto (ui.perfetto.dev) opens it.

``profile_steps`` records one; ``reference_trace`` reads the ones shipped with the course (package data,
made by ``python -m autograder.authoring.record_timings``); ``illustrative_trace`` makes one up by a
formula, labelled so, with the shape a GPU's trace has (kernels that run after their launch returned).
"""

from __future__ import annotations

import datetime
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from autograder.student.records import DATA_DIR

KEPT = ("user_annotation", "cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset")
LAUNCHERS = ("cuda_runtime", "cuda_driver")  # the host's calls into CUDA: a kernel's launch is one of them


def trim(raw: dict, about: dict) -> dict:
    """``raw`` (a Chrome trace torch.profiler exported) cut to 07's events, times from the first step's start."""
    events = [e for e in raw.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in KEPT
              and not str(e.get("name", "")).startswith("ProfilerStep#")]  # the profiler's own rounds
    steps = [e["ts"] for e in events if e["cat"] == "user_annotation"]
    start = min(steps or [e["ts"] for e in events] or [0.0])
    kept = []
    for e in sorted(events, key=lambda e: e["ts"]):
        event = {"name": str(e["name"])[:200], "cat": e["cat"], "ph": "X", "ts": round(e["ts"] - start, 3),
                 "dur": round(e.get("dur", 0.0), 3), "pid": e.get("pid", 0), "tid": e.get("tid", 0)}
        if "correlation" in e.get("args", {}):
            event["args"] = {"correlation": e["args"]["correlation"]}
        kept.append(event)
    return {"traceEvents": kept, "displayTimeUnit": "ms", "otherData": about}


def profile_steps(calls: dict[str, Callable[[], object]], synchronize: Callable[[], object], cuda: bool = False,
                  steps: int = 3, warmup: int = 2, about: dict | None = None) -> dict:
    """A trimmed trace of ``steps`` runs of each call, each inside ``record_function(name)``.

    Every call runs ``warmup`` times first (not recorded); after each step the device is synchronised
    (``synchronize``, outside the step), so a step's kernels are done before the next step starts.
    ``cuda``: record the GPU's activity too (kernels, launches). ``about`` goes into ``otherData``.
    """
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    for call in calls.values():
        for _ in range(warmup):
            call()
    synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    # The profiler's own first round is slow (it sets itself up): one round in its warm-up, not recorded.
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        for _ in range(1 + steps):
            for name, call in calls.items():
                with record_function(name):
                    call()
                synchronize()
            prof.step()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        raw = json.loads(path.read_text(encoding="utf-8"))
    made = {"kind": "measurement", "torch_version": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "steps": {name: steps for name in calls}, "method": (
                f"torch.profiler ({', '.join(a.name for a in activities)}), {steps} rounds of one run of each step "
                f"inside record_function(step), after {warmup} runs of each and one round in the profiler's warm-up, "
                "not recorded; the device synchronised after each run")}
    return trim(raw, {**made, **(about or {})})


def trace_file(device: str) -> str:
    return f"profile_{device}.json"


def reference_trace(device: str, folder=DATA_DIR) -> dict | None:
    """The trace of ``device`` ("cuda", "cpu") shipped with the course, or None when there is none."""
    path = Path(folder) / trace_file(device)
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def reference_traces(folder=DATA_DIR) -> list[dict]:
    """Every shipped trace, the GPU's first."""
    return [t for t in (reference_trace(d, folder) for d in ("cuda", "mps", "cpu")) if t is not None]


def illustrative_trace(steps: int = 3, ops: int = 4, launch_us: float = 20.0, kernel_us: float = 5.0,
                       first_correlation: int = 100, step: str = "step") -> dict:
    """A GPU's trace MADE UP by a formula (not measured), with the shape a real one has.

    Each step runs ``ops`` operators on the host, ``launch_us`` each; each operator calls
    ``cudaLaunchKernel``, whose kernel (``kernel_us`` on the GPU, tied to it by a ``correlation`` id)
    starts when the GPU is free, so with short launches kernels run after the step's window has ended.
    Also, as real traces have: an operator nested in another (``aten::to`` calling ``aten::_to_copy``) that
    launches no kernel, a ``cudaMemsetAsync`` whose work is a ``gpu_memset`` (not a kernel), and a
    ``cudaDeviceSynchronize`` after each step that waits for the GPU.
    """
    events, now, gpu_free, correlation = [], 0.0, 0.0, first_correlation

    def add(name, cat, ts, dur, pid="host", tid=1, link=None):
        event = {"name": name, "cat": cat, "ph": "X", "ts": round(ts, 3), "dur": round(dur, 3), "pid": pid, "tid": tid}
        if link is not None:
            event["args"] = {"correlation": link}
        events.append(event)

    for _ in range(steps):
        start = now
        now += 1.0
        add("aten::to", "cpu_op", now, 3.0)
        add("aten::_to_copy", "cpu_op", now + 1.0, 1.5)
        now += 4.0
        add("aten::zero_", "cpu_op", now, 4.0)
        add("cudaMemsetAsync", "cuda_runtime", now + 1.0, 2.0, link=correlation)
        gpu_start = max(gpu_free, now + 3.0)
        add("[memset]", "gpu_memset", gpu_start, 1.0, pid=0, tid=7, link=correlation)
        gpu_free, correlation, now = gpu_start + 1.0, correlation + 1, now + 5.0
        for k in range(ops):
            add(f"aten::op{k}", "cpu_op", now, launch_us)
            launch_at = now + 0.5 * launch_us
            add("cudaLaunchKernel", "cuda_runtime", launch_at, 0.3 * launch_us, link=correlation)
            gpu_start = max(gpu_free, launch_at + 0.3 * launch_us + 2.0)
            add(f"kernel_op{k}", "kernel", gpu_start, kernel_us, pid=0, tid=7, link=correlation)
            gpu_free, correlation, now = gpu_start + kernel_us, correlation + 1, now + launch_us + 1.0
        add(step, "user_annotation", start, now - start)
        add("cudaDeviceSynchronize", "cuda_runtime", now, max(gpu_free - now, 0.0) + 1.0, link=correlation)
        correlation, now = correlation + 1, max(now, gpu_free) + 3.0
    events.sort(key=lambda e: e["ts"])
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {
        "kind": "illustrative", "warning": "MADE UP BY A FORMULA, NOT MEASURED on any device. For exercises only.",
        "steps": {step: steps}, "model": {"ops": ops, "launch_us": launch_us, "kernel_us": kernel_us}}}
