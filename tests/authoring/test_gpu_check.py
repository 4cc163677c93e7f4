"""``python -m autograder.authoring.gpu_check``, the one command that checks the GPU half on a GPU: its CPU side.

The command runs on a bare CUDA machine (torch, numpy, matplotlib, pytest; none of the course's
other dependencies). Here it runs as it would there, with those dependencies made unimportable, and
without CUDA its GPU steps say so and it ends cleanly. Its steps, and the notebook runner it uses,
run on the CPU. On a GPU the command itself is the test (README: "Checking the GPU half").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from autograder.authoring import gpu_check
from autograder.authoring.device_cases import CASES
from autograder.authoring.timed_functions import FUSED_EAGER
from autograder.authoring.notebook_script import code_cells, run_notebook

REPO = Path(__file__).resolve().parents[2]
# What a bare GPU machine does not have: the course's other dependencies (pyproject.toml's extras).
ABSENT = ("nbgrader", "jupyter", "jupyter_server", "jupyterlab", "notebook", "IPython", "ipykernel", "playwright",
          "traitlets", "nbformat", "nbconvert", "nbclient", "rich", "myst_nb", "sphinx", "psycopg", "sqlalchemy",
          "xdist", "copydetect", "canvasapi", "tqdm")
BLOCKER = f'''
import sys

# A machine without these: importing one raises ModuleNotFoundError, importlib.util.find_spec gives None.
for _name in {ABSENT!r}:
    sys.modules[_name] = None
'''


def _bare_environment(tmp_path) -> dict:
    """This environment with the course's other dependencies unimportable, in every process it starts
    (a sitecustomize module on PYTHONPATH), and the repository importable as PYTHONPATH=. makes it."""
    site = tmp_path / "bare_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER)
    import os

    # pytest's plugins installed here (xdist, ...) are absent there: not loaded, as they would not be found
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}", "MPLBACKEND": "Agg",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the command runs every step: run it as README says")
def test_without_cuda_on_a_bare_machine_every_gpu_step_says_so_and_the_command_ends_cleanly(tmp_path):
    out = tmp_path / "out"
    env = _bare_environment(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import nbformat"], env=env, capture_output=True, text=True)
    assert "ModuleNotFoundError: import of nbformat halted" in probe.stderr, "the blocker works"
    ran = subprocess.run([sys.executable, "-m", "autograder.authoring.gpu_check", str(out), "--budget", "120"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    data = json.loads((out / "gpu_check.json").read_text())
    outcome = {s["name"]: (s["status"], s["summary"]) for s in data["steps"]}
    assert outcome["machine"][0] == "passed" and "no CUDA device" in outcome["machine"][1]
    skipped = [name for name, (status, summary) in outcome.items() if summary == gpu_check.NO_CUDA]
    assert skipped == ["checker entry points on cuda", "07 on the GPU, cell by cell",
                       "07 with no GPU visible (CUDA build, as on Colab's CPU runtime)",
                       "recorder: sweep and like-with-like timer checks", "assignment 10's kernel timings (hook)",
                       "assignment 11's attention timings"]
    # the tests marked gpu ran there, conftest and all, and skipped for want of CUDA
    status, summary = outcome["tests marked gpu"]
    assert status == "passed" and "skipped" in summary and "error" not in summary, summary
    log = (out / "pytest.log").read_text()
    assert "SKIPPED" in log and "needs a CUDA device" in log and "ModuleNotFoundError" not in log
    report = (out / "report.md").read_text()
    assert report.count(gpu_check.NO_CUDA) >= 6 and "| tests marked gpu | passed |" in report
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "pytest.log", "report.md"]


def test_the_gpu_test_files_run_on_a_bare_machine_conftest_and_all(tmp_path):
    """What `tests marked gpu` meets on a GPU, short of the GPU: a test of those files that runs (not one that
    skips for want of CUDA), with conftest's session fixtures, where nbgrader and traitlets are absent (found on an
    H200: conftest's check-process fixture imported them, and every gpu test errored at setup)."""
    ran = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                          "tests/student/test_timing.py::test_cpu_threads_sets_the_count_inside_the_block_and_restores_it_after"],
                         cwd=REPO, env=_bare_environment(tmp_path), capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr


def test_the_entry_point_and_recorder_steps_run_on_the_cpu(tmp_path):
    step = gpu_check.Step("entry points")
    gpu_check.entry_points(step, "cpu")
    cases = len(CASES)
    assert cases >= 35 and len(step.data["rows"]) == cases and step.summary.startswith(f"{cases} of {cases}")
    assert step.status == "passed"
    step = gpu_check.Step("recorder")
    # (the recorder's tools are left out here: tests/authoring/test_record_timings.py records them on the CPU, and
    # test_a_tool_that_failed_fails_the_recorder_step_and_says_which below runs the step with them)
    gpu_check.recorder(step, tmp_path, "cpu", {"min_exp": 8, "max_exp": 10, "step": 2},
                       (*gpu_check.CPU_OPTIONS, "--no-tools"))
    record = json.loads((tmp_path / "reference_cpu.json").read_text())
    assert record["largest_elements"] == 1024 and record["cpu_threads"] == 1
    assert {p.name for p in tmp_path.iterdir()} == {"reference_cpu.json", "reference_cpu_time.png",
                                                     "reference_cpu_throughput.png"}
    assert step.data["tool_errors"] == {} and step.data["profile"] is None
    checks = step.data["timer_checks"]
    assert set(checks) == {FUSED_EAGER, "built-in F.gelu(x + bias)"}
    for name, check in checks.items():
        for way, bar in (("latency", 0.10), ("throughput", 0.10)):  # on a loaded CPU they may disagree: reported
            assert step.data["within_bars"][f"{name}, {way}"] == (check[way]["relative_difference"] <= bar)
    assert step.status == ("passed" if all(step.data["within_bars"].values()) else "failed")
    assert f"| {FUSED_EAGER}, 1024 elements |" in gpu_check.report(
        {"date": "d", "seconds": 1, "budget_seconds": 2, "steps": [vars(step)]})


def test_a_tool_that_failed_fails_the_recorder_step_and_says_which(tmp_path, monkeypatch):
    """A recorder whose tool broke (CUPTI missing for the profile, say) still writes its record; the step fails,
    naming the tool and its error, so that no one copies a record with a hole in it unawares. (The recorder runs
    in this process here, so that one of its tools can be made to fail.)"""
    from autograder.authoring import record_timings

    recorded = record_timings.record

    def record_with_a_broken_tool(*args, **kwargs):
        data = recorded(*args, **kwargs)
        data["tool_errors"] = {"profile": "Traceback ...\nRuntimeError: CUPTI is not available\n"}
        return data

    def run_here(command, **kwargs):  # the recorder's command here; any other (platform's uname) as it is
        if command[1:3] != ["-m", "autograder.authoring.record_timings"]:
            return run(command, **kwargs)
        return SimpleNamespace(returncode=record_timings.main(command[3:]), stdout="", stderr="")

    run = subprocess.run

    monkeypatch.setattr(record_timings, "record", record_with_a_broken_tool)
    monkeypatch.setattr(gpu_check.subprocess, "run", run_here)
    step = gpu_check.Step("recorder")
    gpu_check.recorder(step, tmp_path, "cpu", {"min_exp": 8, "max_exp": 8, "step": 2},
                       (*gpu_check.CPU_OPTIONS, "--no-figures"))
    assert step.status == "failed" and "tool profile failed: RuntimeError: CUPTI is not available" in step.summary
    assert json.loads((tmp_path / "reference_cpu.json").read_text())["tool_errors"] == step.data["tool_errors"]
    assert (tmp_path / "profile_cpu.json").exists(), "the other tools were recorded: the trace beside the record"
    assert [r["way"] for r in step.data["launch_overhead"]] == ["eager"] * 3 and step.data["matmul"]


def test_a_step_that_breaks_or_finds_no_time_is_reported_and_the_others_still_run(tmp_path):
    check = gpu_check.Check(tmp_path, budget=60, device="cpu", available=True)

    def broken(step):
        raise ValueError("this step broke")

    check.run("broken", 0, broken)
    check.run("too long", 1000, lambda step: None)
    check.available = False
    check.run("needs the device", 0, lambda step: None)
    data = json.loads((tmp_path / "gpu_check.json").read_text())
    states = [(s["name"], s["status"]) for s in data["steps"]]
    assert states == [("broken", "error"), ("too long", "skipped"), ("needs the device", "skipped")]
    assert "ValueError: this step broke" in data["steps"][0]["summary"]
    assert "1000 s needed" in data["steps"][1]["summary"] and data["steps"][2]["summary"] == gpu_check.NO_CUDA
    assert "| broken | error |" in (tmp_path / "report.md").read_text()


def test_the_kernel_timings_hook_calls_assignment_10s_recorder_or_says_it_is_not_wired(tmp_path, monkeypatch):
    assert gpu_check.KERNEL_TIMINGS == "autograder.authoring.kernel_timings:record"
    step = gpu_check.Step("hook")
    gpu_check.kernel_timings(step, tmp_path, "cpu")  # assignment 10's kernels are timed on CUDA only
    assert step.status == "passed" and step.data["status"] == "skipped"
    assert (tmp_path / "kernels_cuda.txt").read_text().startswith("no CUDA")
    monkeypatch.setattr(gpu_check, "KERNEL_TIMINGS", None)
    step = gpu_check.Step("hook")
    gpu_check.kernel_timings(step, tmp_path, "cpu")
    assert step.status == "skipped" and "not wired" in step.summary
    (tmp_path / "fake_kernels.py").write_text("def timings(out_dir, device):\n    return {'device': device}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(gpu_check, "KERNEL_TIMINGS", "fake_kernels:timings")
    step = gpu_check.Step("hook")
    gpu_check.kernel_timings(step, tmp_path, "cpu")
    assert step.status == "passed" and step.data == {"device": "cpu"}


def test_the_attention_timings_step_runs_assignment_11s_recorder_and_says_when_it_cannot(tmp_path, monkeypatch):
    """The step's GPU half is the recorder's command line (tests/authoring/test_attention_timings.py runs it on the CPU
    with --device cpu); here, what the step makes of the recorder's answers."""
    from autograder.authoring import attention_timings

    step = gpu_check.Step("attention")
    gpu_check.attention_timings(step, tmp_path, "cpu")  # timed on CUDA only
    assert (step.status, step.summary) == ("skipped", attention_timings.SKIPPED)
    assert (tmp_path / "attention_cuda.txt").read_text() == attention_timings.SKIPPED + "\n"

    def recorded(out, device, timeout):
        (out / f"attention_{device}.txt").write_text("the summary\n")
        return {"device": device, "timeout": timeout}

    monkeypatch.setattr(attention_timings, "record", recorded)
    step = gpu_check.Step("attention")
    gpu_check.attention_timings(step, tmp_path, "cuda", timeout=123)
    assert (step.status, step.summary, step.data) == ("passed", "the summary\n", {"device": "cuda", "timeout": 123})


NOTEBOOK = {"cells": [
    {"cell_type": "markdown", "metadata": {}, "source": ["# a notebook"]},
    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
     "source": ["%pip install nothing\n", "!ls\n", "from pathlib import Path\n", "here = Path.cwd().name\n",
                "print('in', here)"]},
    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
     "source": ["import matplotlib.pyplot as plt\n", "plt.plot([1, 2]); plt.show()\n", "print(here)"]},
    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": ["1 / 0"]},
    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": ["print('never')"]},
], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_a_notebook_runs_cell_by_cell_without_magics_in_its_folder_and_stops_at_the_first_error(tmp_path):
    folder = tmp_path / "07_somewhere"
    folder.mkdir()
    path = folder / "nb.ipynb"
    path.write_text(json.dumps(NOTEBOOK))
    assert [c.splitlines()[0] for c in code_cells(NOTEBOOK)] == ["from pathlib import Path",
                                                                   "import matplotlib.pyplot as plt", "1 / 0",
                                                                   "print('never')"]
    rows = run_notebook(path)
    assert [(r["cell"], r["ok"]) for r in rows] == [(1, True), (2, True), (3, False)]
    assert rows[0]["printed"] == "in 07_somewhere\n" and rows[1]["printed"] == "07_somewhere\n"
    assert rows[2]["error"] == "ZeroDivisionError: division by zero"
    step = gpu_check.Step("notebook")
    gpu_check.notebook(step, path=path, timeout=120)
    assert step.status == "failed" and "2 of 4 code cells ran" in step.summary and "ZeroDivisionError" in step.summary


def test_the_command_is_documented_for_instructors_and_in_the_makefile():
    readme = (REPO / "README.md").read_text()
    assert "PYTHONPATH=. python3 -m autograder.authoring.gpu_check" in readme and "make gpu-check" in readme
    makefile = (REPO / "Makefile").read_text()
    assert "gpu-check:" in makefile and "autograder.authoring.gpu_check" in makefile


TRITON_NOTEBOOK = {"cells": [
    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
     "source": ["import torch, triton\n", "import triton.language as tl\n"]},
    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
     "source": ["@triton.jit\n", "def double_kernel(x_ptr, n, BLOCK: tl.constexpr):\n",
                "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n",
                "    tl.store(x_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)\n"]},
    {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
     "source": ["x = torch.ones(5)\n", "double_kernel[(1,)](x, 5, BLOCK=8)\n", "print(x.tolist())"]},
], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_a_triton_kernel_defined_in_a_cell_compiles_and_runs(tmp_path):
    """@triton.jit reads its function's source when a kernel is defined for a GPU: a cell's source must be where
    inspect finds it (found on an H200: 10's first kernel cell failed with "@jit functions should be defined in a
    Python file"). Defined without the interpreter (no GPU is needed to define one), then run in the interpreter."""
    pytest.importorskip("triton")
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(TRITON_NOTEBOOK))
    compiled = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    defined = subprocess.run([sys.executable, "-m", "autograder.authoring.notebook_script", str(path)],
                             capture_output=True, text=True, env=compiled, timeout=300)
    assert "cell   2" in defined.stdout and "FAILED" not in defined.stdout.split("cell   3")[0], defined.stdout
    ran = subprocess.run([sys.executable, "-m", "autograder.authoring.notebook_script", str(path)], capture_output=True,
                         text=True, env=dict(os.environ, TRITON_INTERPRET="1"), timeout=300)
    assert ran.returncode == 0 and "3 of 3 code cells ran" in ran.stdout, ran.stdout + ran.stderr
