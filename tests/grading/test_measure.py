"""What bench measures (``autograder.grading.measure``): CPU seconds by process, programs Triton's interpreter runs.

Counts and CPU a process is made to burn, never wall-clock times.
"""

from __future__ import annotations

import multiprocessing
import sys
import textwrap

import pytest

from autograder.grading.measure import Metered, cell_costs
from autograder.grading.running.messages.protocol import short_name, start

BURN = "import time\nwhile time.process_time() < 0.3: pass\n"  # 0.3 s of its own CPU, however busy the machine


def _comm(connection) -> None:
    with open("/proc/self/comm") as comm:
        connection.send(comm.read().strip())


def test_grading_processes_are_named_for_ps_and_for_the_bench():
    process, connection = start(multiprocessing.get_context("fork"), _comm, (), "autograder-examinee")
    assert connection.recv() == "ag-examinee" == short_name("autograder-examinee")
    process.join()


def test_metered_counts_every_process_of_a_command_detached_ones_too_and_the_named_ones_by_name(tmp_path):
    metered = Metered()
    if metered.group is None:
        pytest.skip("no cgroup v1 cpuacct group can be made here (not root, or cgroup v2)")
    named = tmp_path / "named.py"
    named.write_text("with open('/proc/self/comm', 'w') as comm:\n    comm.write('ag-notebook')\n" + BURN)
    command = textwrap.dedent(f"""
        import os, subprocess, sys
        if os.fork() == 0:  # a detached grandchild, as check's warm process is
            os.setsid()
            exec({BURN!r})
            os._exit(0)
        subprocess.run([sys.executable, {str(named)!r}], check=True)
        os.wait()
    """)
    try:
        result, cost = metered.run([sys.executable, "-c", command])
    finally:
        metered.close()
    assert result.returncode == 0
    assert cost.by_process["ag-notebook"] >= 0.25  # (sampled every 20 ms: at most that much of its end is lost)
    assert cost.cpu >= 0.3 + cost.by_process["ag-notebook"]  # the grandchild's too, and the interpreters' starts


def _cell(kind: str, source: str, grade_id: str | None = None) -> dict:
    nbgrader = {"solution": kind == "answer", "grade": kind == "test", "locked": kind != "answer"}
    if grade_id:
        nbgrader.update(grade_id=grade_id, points=1)
    return {"cell_type": "code", "source": source, "metadata": {"nbgrader": nbgrader} if kind != "given" else
            {"tags": ["setup"]}, "outputs": [], "execution_count": None}


KERNEL = """\
@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offsets, 2 * tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


def double(x):
    y = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), 8),)](x, y, x.numel(), BLOCK=8)
    return y
"""


def test_cell_costs_counts_the_programs_of_each_cell_and_of_each_check():
    pytest.importorskip("triton")
    notebook = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        _cell("given", "import torch\nimport triton\nimport triton.language as tl\n"
                       "from autograder import check_values"),
        _cell("answer", KERNEL, "double"),
        _cell("test", "double(torch.arange(30.0))  # 4 programs of 8\ncheck_values(double, lambda x: 2 * x, "
                      "torch.arange(30.0))\n### BEGIN HIDDEN TESTS\ncheck_values(double, lambda x: 2 * x, "
                      "torch.arange(5.0))\n### END HIDDEN TESTS", "test_double")]}
    cells, judged, setup = cell_costs(notebook, notebook)
    assert [(c.name, c.launches, c.programs, c.failed) for c in cells] == [
        ("", 0, 0, ""), ("double", 0, 0, ""), ("test_double", 2, 8, "")]  # the visible part: a launch, and a check's
    [test] = judged
    assert (test.name, test.failed, test.launches, test.programs) == ("test_double", "", 2, 5)
    assert [(c["kind"], c["target"], c["launches"], c["programs"]) for c in test.checks] == [
        ("values", "double", 1, 4), ("values", "double", 1, 1)]  # the visible check again, then the hidden one
    assert set(setup) == {"examinee's start", "referee's plan"}
