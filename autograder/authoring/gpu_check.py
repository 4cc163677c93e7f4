"""Check the course's GPU half on a GPU, in one command: ``python -m autograder.authoring.gpu_check OUT_DIR``.

For whoever next has an NVIDIA GPU (``make gpu-check``). It needs only python3 with torch, numpy,
matplotlib and pytest: no internet, none of the course's other dependencies (no nbgrader, Jupyter or
Playwright); run it from the repository's root with ``PYTHONPATH=.``. In order, each step within
the time left of ``--budget`` seconds (default 560: under the ten minutes one command may run on a lent GPU):

1. the machine: GPU, driver's CUDA, torch, Triton;
2. every checker entry point on CUDA tensors, with right and wrong Functions
   (``autograder.authoring.device_cases``): right ones pass, wrong ones fail saying why;
3. assignment 07's solution, every code cell in order as plain Python, on the GPU
   (``autograder.authoring.notebook_script``), and again with no GPU visible
   (``CUDA_VISIBLE_DEVICES=""``: a CUDA build of torch without a GPU, as on Colab's CPU runtime);
4. the recorder (``record_timings``) on a sweep small enough for the time, up to 2**27 elements,
   with its like-with-like timer checks (latency against ``Timer.timeit(1)``, throughput against
   ``blocked_autorange``, each within 10%), for the compiled fused Function and the built-in, and
   its tools (``record_tools``: a profiler trace of Exercise 3's Function, its launch overhead eager,
   from CUDA graphs, compiled with ``mode="reduce-overhead"`` and in the default mode, with
   ``triton.testing.do_bench``; CUDA events; read and write bandwidth; matrix products): a tool that
   fails fails the step, the others are still recorded;
5. the tests marked ``gpu`` (pytest), reading the record step 4 made;
6. assignment 10's kernel timings (``KERNEL_TIMINGS``, below: ``autograder.authoring.kernel_timings``);
7. assignment 11's attention timings (``autograder.authoring.attention_timings.record``: the solution's
   FlashAttention checked at the timed shape, then timed against PyTorch's flash and cuDNN backends, and
   FlashAttention-3 where installed, medians of five alternating rounds, with the GPU's clocks and a
   fingerprint of the timed cells).

It writes into OUT_DIR, which it creates: ``report.md`` (what ran and what it found), ``gpu_check.json``
(all of it as data), ``pytest.log``, and assignment 07's new record: ``reference_cuda.json``, its two figures
``reference_cuda_time.png`` and ``reference_cuda_throughput.png``, and its trace ``profile_cuda.json`` (copy
these four into ``autograder/student/data/`` to ship them); then assignment 10's ``kernels_cuda.json`` and
``kernels_cuda.txt``, and assignment 11's ``attention_cuda.json`` and ``attention_cuda.txt`` (eleven files in
all: a tool that brings back at most eight takes the folder as one archive, ``tar czf gpu-check.tgz OUT_DIR``).
Without CUDA every GPU step says "no CUDA: skipped" and the command still ends cleanly.
Exit status 0 when nothing failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_07 = REPO / "solutions" / "07_gpu_timing" / "07_gpu_timing.ipynb"
# The test files that hold the tests marked `gpu` (pytest is given these files only: the others import
# the course's other dependencies, which a bare GPU machine does not have).
GPU_TEST_FILES = ("tests/student/checker/test_devices.py", "tests/student/test_timing.py",
                  "tests/authoring/test_record_timings.py", "tests/authoring/test_torch_facts.py")
SWEEP = {"min_exp": 12, "max_exp": 27, "step": 3}  # 2**12, 2**15, ..., 2**27: six sizes
# --device cpu runs every step on the CPU, to check the command itself on a machine without a GPU: tiny sizes.
CPU_SWEEP = {"min_exp": 8, "max_exp": 12, "step": 2}
# Seconds of the budget kept from the recorder for the steps after it: the tests marked gpu and
# assignments 10's and 11's kernel timings (Triton compiles their kernels on a fresh machine first).
RESERVED = 330
ATTENTION_NEEDS = 60  # seconds the attention timings need at least; they get what is left of the budget
CPU_OPTIONS = ("--no-compile", "--warmup", "2", "--repeats", "5", "--timer-seconds", "0.1", "--threads", "1")
TOOL_KEYS = ("launch_overhead", "events", "memory", "matmul")  # what record_tools adds to the record, for the report
NO_CUDA = "no CUDA: skipped"

# ---------------------------------------------------------------------------------------------
# HOOK (assignment 10): the timings of its Triton kernels, KERNEL_TIMINGS = "module:function";
# the function is called as function(out_dir=Path, device=str) and returns a dict of plain data (JSON),
# which goes into gpu_check.json and report.md. It may write up to two files of its own into out_dir
# (the other steps write seven: nine in all, so a tool that brings back at most eight files takes the
# folder as one archive, `tar czf gpu-check.tgz OUT_DIR`). It runs last, within the
# budget's remaining time (it is skipped under 10 s). None: the step says it is not wired.
KERNEL_TIMINGS: str | None = "autograder.authoring.kernel_timings:record"
# ---------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One step's outcome: "passed", "failed", "error" (the step itself broke) or "skipped", and why."""

    name: str
    status: str = "skipped"
    summary: str = ""
    seconds: float = 0.0
    data: dict = field(default_factory=dict)


@dataclass
class Check:
    """What the steps share: where to write, the device, when the time is up, and what they found."""

    out: Path
    budget: float
    started: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)
    device: str = "cuda"
    available: bool = False  # whether ``device`` is there to run on

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def run(self, name: str, needs: float, body: Callable[[Step], None], needs_device: bool = True) -> Step:
        """Run ``body`` as step ``name`` if the device is there (when ``needs_device``) and ``needs`` seconds are left."""
        step = Step(name)
        self.steps.append(step)
        if needs_device and not self.available:
            step.summary = NO_CUDA
        elif self.left() < needs:
            step.summary = f"skipped: {self.left():.0f} s left of the budget, {needs:.0f} s needed"
        else:
            start = time.monotonic()
            try:
                body(step)
            except Exception:  # noqa: BLE001 - a broken step is reported, the others still run
                step.status, step.summary = "error", traceback.format_exc()[-1500:]
            step.seconds = round(time.monotonic() - start, 1)
        print(f"[gpu_check] {name}: {step.status} {step.summary.splitlines()[0] if step.summary else ''}", flush=True)
        self.write()
        return step

    def write(self) -> None:
        """gpu_check.json and report.md as they stand (rewritten after each step: a cut run leaves both)."""
        data = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "budget_seconds": self.budget, "seconds": round(time.monotonic() - self.started, 1),
                "steps": [vars(s) for s in self.steps]}
        (self.out / "gpu_check.json").write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
        (self.out / "report.md").write_text(report(data), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# The steps


def machine(step: Step) -> None:
    import torch

    found = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
             "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
             "cpu_count": os.cpu_count()}
    try:
        import triton

        found["triton"] = triton.__version__
    except ImportError:
        found["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        found.update(device=torch.cuda.get_device_name(0), memory_gib=round(props.total_memory / 2 ** 30, 1),
                     capability=f"{props.major}.{props.minor}", devices=torch.cuda.device_count())
    step.data = found
    step.status = "passed"
    step.summary = (f"{found.get('device', 'no CUDA device')}; torch {found['torch']} (CUDA {found['torch_cuda']}), "
                    f"triton {found['triton']}, python {found['python']}")


def entry_points(step: Step, device: str = "cuda") -> None:
    from autograder.authoring.device_cases import run_cases

    rows = run_cases(device)
    step.data = {"rows": rows}
    wrong = [r for r in rows if not r["ok"]]
    step.status = "failed" if wrong else "passed"
    step.summary = (f"{len(rows) - len(wrong)} of {len(rows)} cases as expected on {device}"
                    + "".join(f"\n- {r['entry']}, {r['case']}: expected {r['expected']}, {r['outcome']}: "
                              f"{r['message'][:300]}" for r in wrong))


def notebook(step: Step, path: Path = NOTEBOOK_07, hide_gpu: bool = False, timeout: float = 150) -> None:
    """``path``'s code cells in order, as plain Python, in a process of their own (with no GPU visible)."""
    import torch

    from autograder.authoring.notebook_script import read_code_cells

    if hide_gpu and torch.version.cuda is None:
        step.summary = "skipped: this torch has no CUDA build, so there is no GPU to hide"
        return
    env = _env()
    if hide_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    with tempfile.TemporaryDirectory() as folder:
        rows_file = Path(folder) / "cells.json"
        ran = subprocess.run([sys.executable, "-m", "autograder.authoring.notebook_script", str(path), "--json",
                              str(rows_file)], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        rows = json.loads(rows_file.read_text()) if rows_file.exists() else []
    total = len(read_code_cells(path))
    step.data = {"cells": rows, "code_cells": total, "stderr_tail": ran.stderr[-2000:]}
    ok = ran.returncode == 0 and len(rows) == total and all(r["ok"] for r in rows)
    step.status = "passed" if ok else "failed"
    failed = next((r for r in rows if not r["ok"]), None)
    step.summary = (f"{sum(r['ok'] for r in rows)} of {total} code cells ran, "
                    f"{sum(r['seconds'] for r in rows):.0f} s" + (f"; cell {failed['cell']}: {failed['error']}"
                                                                  if failed else "")
                    + ("" if ok or failed else f"; the process ended with {ran.returncode}: {ran.stderr[-500:]}"))


def recorder(step: Step, out: Path, device: str = "cuda", sweep: dict = SWEEP, options: tuple = (),
             timeout: float = 240) -> None:
    """The recorder's sweep in a process of its own (so that its cold start is one), written to ``out`` as
    reference_<device>.json and its figures; then the timer checks of the built-in at the largest size."""
    from autograder.authoring import record_timings
    from autograder.authoring.timed_functions import VARIANTS
    from autograder.student import timing as bench

    output = out / f"reference_{device}.json"
    command = [sys.executable, "-m", "autograder.authoring.record_timings", "--device", device,
               "--min-exp", str(sweep["min_exp"]), "--max-exp", str(sweep["max_exp"]), "--step", str(sweep["step"]),
               "--output", str(output), *options]
    ran = subprocess.run(command, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)
    step.data = {"command": " ".join(command[1:]), "printed_tail": ran.stdout[-3000:], "stderr_tail": ran.stderr[-2000:]}
    if ran.returncode != 0 or not output.exists():
        step.status, step.summary = "failed", f"the recorder ended with {ran.returncode}: {ran.stderr[-800:]}"
        return
    data = json.loads(output.read_text())
    x, bias, grad_output = bench.workload_tensors(data["largest_elements"], device)
    builtin = bench.timed_call(bench.variant("built-in F.gelu(x + bias)", VARIANTS), x, bias, grad_output,
                               "forward+backward")
    checks = {data["fused_variant"]: data["timer_agreement"],
              "built-in F.gelu(x + bias)": {"elements": data["largest_elements"],
                                             **record_timings.timer_agreement(builtin, device)}}
    del x, bias, grad_output, builtin
    bars = {"latency": bench.LATENCY_BAR, "throughput": bench.THROUGHPUT_BAR}
    verdicts = {f"{name}, {way}": check[way]["relative_difference"] <= bars[way]
                for name, check in checks.items() for way in bars}
    errors = data.get("tool_errors", {})
    step.data.update(record=output.name, timer_checks=checks, within_bars=verdicts,
                     copy_bandwidth_gbps=data["copy_bandwidth_gbps"],
                     nominal_peak_bandwidth_gbps=data["nominal_peak_bandwidth_gbps"],
                     fused_fraction_of_copy=data["fused_fraction_of_copy"], small_call=data.get("small_call"),
                     crossover={k: v for k, v in (data.get("crossover") or {}).items() if k != "cpu" and k != "gpu"},
                     profile=data.get("profile"), tool_errors=errors, **{key: data.get(key) for key in TOOL_KEYS})
    step.status = "passed" if all(verdicts.values()) and not errors else "failed"
    step.summary = "; ".join([f"{name}: {check[way]['relative_difference']:.1%} apart (bar {bars[way]:.0%})"
                              for name, check in checks.items() for way in bars]
                             + [f"tool {tool} failed: {error.strip().splitlines()[-1]}" for tool, error in errors.items()])


def _env() -> dict:
    """The environment of the steps' processes: this one's, with the repository importable and figures off screen."""
    return {**os.environ, "MPLBACKEND": "Agg",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}


def gpu_tests(step: Step, out: Path, files=GPU_TEST_FILES, timeout: float = 240) -> None:
    """The tests marked ``gpu``, with the record the recorder step made (``$AUTOGRADER_GPU_RECORD``)."""
    env = {**_env(), "AUTOGRADER_GPU_RECORD": str(out / "reference_cuda.json")}  # a missing one: those tests skip
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-rA", "--durations=5", *files]
    ran = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    (out / "pytest.log").write_text(f"$ {' '.join(command)}\n\n{ran.stdout}\n{ran.stderr}", encoding="utf-8")
    last = (ran.stdout.strip().splitlines() or ["(no output)"])[-1]
    step.data = {"returncode": ran.returncode, "last_line": last, "log": "pytest.log"}
    step.status = "passed" if ran.returncode == 0 else "failed"
    step.summary = last.strip("= ")


def kernel_timings(step: Step, out: Path, device: str = "cuda") -> None:
    """Assignment 10's hook: KERNEL_TIMINGS's function, when it is wired."""
    if KERNEL_TIMINGS is None:
        step.summary = "not wired yet: set KERNEL_TIMINGS in autograder/authoring/gpu_check.py"
        return
    import importlib

    module, _, name = KERNEL_TIMINGS.partition(":")
    step.data = getattr(importlib.import_module(module), name)(out_dir=out, device=device)
    step.status = "passed"
    text = out / f"kernels_{device}.txt"  # the recorder's own summary, where it wrote one
    step.summary = text.read_text(encoding="utf-8") if text.is_file() else f"{KERNEL_TIMINGS}: {len(step.data)} entries"


def attention_timings(step: Step, out: Path, device: str = "cuda", timeout: float = 540) -> None:
    """Assignment 11's recorder (``attention_timings.record``), in a fresh Python: its record, or what stopped it."""
    from autograder.authoring import attention_timings as recorder

    step.data = recorder.record(out, device, timeout=timeout)
    if step.data.get("status") == "skipped":
        step.summary = step.data["reason"]
        return
    step.status = "passed"
    step.summary = (out / f"attention_{device}.txt").read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# The report


def report(data: dict) -> str:
    """report.md: every step's outcome, then what each found."""
    lines = ["# GPU check", "", f"{data['date']}; {data['seconds']:.0f} s of a {data['budget_seconds']:.0f} s budget.",
             "Made by `python -m autograder.authoring.gpu_check` (see its docstring for what each step does).", "",
             "| step | outcome | seconds | summary |", "|---|---|---|---|"]
    for s in data["steps"]:
        first = (s["summary"].splitlines() or [""])[0].replace("|", "/")
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']} | {first} |")
    for s in data["steps"]:
        lines += ["", f"## {s['name']}: {s['status']}", "", "```", s["summary"] or "(nothing to say)", "```"]
        rows = s["data"].get("rows")
        if rows and all("entry" in r for r in rows):  # the checker's cases (assignment 10's record has rows too)
            lines += ["", "| entry point | case | expected | outcome | ok |", "|---|---|---|---|---|"]
            lines += [f"| {r['entry']} | {r['case']} | {r['expected']} | {r['outcome']} | {'yes' if r['ok'] else 'NO'} |"
                      for r in rows]
        cells = s["data"].get("cells")
        if cells:
            slow = sorted(cells, key=lambda r: -r["seconds"])[:5]
            lines += ["", "Slowest cells: " + ", ".join(f"{r['cell']} ({r['seconds']:.1f} s)" for r in slow)]
        checks = s["data"].get("timer_checks")
        if checks:
            lines += ["", "| workload | latency: median_time / Timer.timeit(1) | throughput: throughput_seconds / "
                          "blocked_autorange |", "|---|---|---|"]
            for name, check in checks.items():
                lat, thr = check["latency"], check["throughput"]
                lines.append(f"| {name}, {check.get('elements', '')} elements | {lat['median_time_seconds'] * 1e6:.1f} / "
                             f"{lat['timer_timeit_1_seconds'] * 1e6:.1f} us ({lat['relative_difference']:.1%}) | "
                             f"{thr['throughput_seconds'] * 1e6:.1f} / {thr['blocked_autorange_seconds'] * 1e6:.1f} us "
                             f"({thr['relative_difference']:.1%}) |")
            lines += ["", "```", json.dumps({k: v for k, v in s["data"].items() if k != "timer_checks"}, indent=1), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.authoring.gpu_check",
                                     description="Check the course's GPU half on a GPU; write a report into OUT_DIR.")
    parser.add_argument("out_dir", type=Path, help="the folder to write report.md, gpu_check.json, pytest.log and "
                                                   "the new record into (created)")
    parser.add_argument("--budget", type=float, default=560.0, help="seconds for all steps (default 560)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: run every step on the CPU, on tiny sizes, to check this command without a GPU")
    args = parser.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    import torch

    args.out_dir.mkdir(parents=True, exist_ok=True)
    device = args.device
    check = Check(args.out_dir.resolve(), args.budget, device=device,
                  available=device == "cpu" or torch.cuda.is_available())
    sweep, options = (SWEEP, ()) if device == "cuda" else (CPU_SWEEP, CPU_OPTIONS)
    if device == "cpu":
        torch.set_num_threads(1)  # as the recorder's CPU run: threads of a loaded machine wait for each other
    check.run("machine", 0, machine, needs_device=False)
    check.run(f"checker entry points on {device}", 20, lambda step: entry_points(step, device))
    check.run(f"07 on the {'GPU' if device == 'cuda' else 'CPU'}, cell by cell", 30,
              lambda step: notebook(step, timeout=check.left()))
    check.run("07 with no GPU visible (CUDA build, as on Colab's CPU runtime)", 30,
              lambda step: notebook(step, hide_gpu=True, timeout=check.left()))
    check.run("recorder: sweep and like-with-like timer checks", 60,
              lambda step: recorder(step, check.out, device, sweep, options, timeout=max(check.left() - RESERVED, 30)))
    check.run("tests marked gpu", 20, lambda step: gpu_tests(step, check.out, timeout=max(check.left(), 20)),
              needs_device=False)
    check.run("assignment 10's kernel timings (hook)", 30, lambda step: kernel_timings(step, check.out, device))
    check.run("assignment 11's attention timings", ATTENTION_NEEDS,
              lambda step: attention_timings(step, check.out, device, timeout=check.left()))
    print(f"[gpu_check] wrote {check.out / 'report.md'}")
    return 0 if all(s.status != "failed" and s.status != "error" for s in check.steps) else 1


if __name__ == "__main__":
    sys.exit(main())
