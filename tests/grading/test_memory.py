"""``--memory`` bounds all of a notebook's processes together, through the real executor and sandbox.

A notebook forks four children that each touch 200 MB under a 512 MB allowance. Each child reports every 20 MB
it holds, then waits until the notebook has heard from all of them; the notebook then counts what the children
still alive hold at once. With a memory cgroup (what this machine gives the grader: cgroup v1, as root) the
kernel stops children until the rest fits; with ``one process`` (forced here: the bound of machines without one)
no child starts. Both sandboxed modes: namespaces (the grader is root) and Landlock (forced). And: a notebook whose
own process the kernel stops says so in its cell; the examinee's allowance is its own; a cgroup a killed grader
left is removed by the next run.
"""

from __future__ import annotations

import json
import os

import pytest

from autograder.grading.running.confinement import memory
from autograder.grading.running.confinement.limits import Limits, confine
from autograder.grading.running.executor import execute
from autograder.grading.running.judging import referee
from autograder.grading.running.preparation import cells_to_run, prepare
from conftest import REPO, filled_release, solution_answers

MB = 1024**2
ALLOWANCE = 512 * MB

FORKING = """
import json, os
MB = 1024**2
children, refused = [], None
for _ in range(4):
    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    try:
        pid = os.fork()
    except OSError as error:
        refused = type(error).__name__
        break
    if pid == 0:  # touch 200 MB, saying each 20 MB held; then wait to be let go
        for fd in [go_w, report_r] + [fd for _, r, w in children for fd in (r, w)]:
            os.close(fd)  # (the go pipe ends when the notebook alone closes it)
        held = []
        try:
            for _ in range(10):
                held.append(bytearray(20 * MB))
                os.write(report_w, b"20 ")
            os.write(report_w, b"done ")
        except MemoryError:
            os.write(report_w, b"refused ")
        if os.read(go_r, 1) == b"?":  # asked whether it still lives: it says so, then waits to be let go
            os.write(report_w, b"alive ")
            os.read(go_r, 1)
        os._exit(0)
    os.close(report_w)
    children.append((pid, report_r, go_w))
reports = {}
for pid, report_r, _ in children:  # until each is done, refused or stopped (its pipe then ends)
    text = b""
    while not text.endswith((b"done ", b"refused ")) and (chunk := os.read(report_r, 100)):
        text += chunk
    reports[pid] = text.decode().split()
# Who is still alive, once no child allocates any more: the kernel's OOM killer may have stopped any child, one that
# said done while another allocated included (it picks the largest), and a stopped child never runs again, so one
# that answers now lives on; the pipe of one stopped ends (a waitpid(WNOHANG) could still see it alive for a moment)
alive = set()
for pid, report_r, go_w in children:
    try:
        os.write(go_w, b"?")
        if os.read(report_r, 100) == b"alive ":
            alive.add(pid)
    except BrokenPipeError:
        pass
held = sum(20 * r.count("20") for pid, r in reports.items() if pid in alive)
for pid, _, go_w in children:
    os.close(go_w)
    os.waitpid(pid, 0)
print("FOUND " + json.dumps({"started": len(children), "alive": len(alive), "held_mb": held, "refused": refused,
                             "reported_mb": [20 * r.count("20") for r in reports.values()]}))
"""


def _run(tmp_path, limits: Limits) -> tuple[dict, object]:
    result = execute([{"cell_type": "code", "source": FORKING}], str(tmp_path), confine(limits, []))
    text = "".join(o.get("text", "") for o in result.outputs[0])
    [line] = [line for line in text.splitlines() if line.startswith("FOUND ")]
    return json.loads(line.removeprefix("FOUND ")), result


def _left_cgroups() -> list[str]:
    """The sandbox cgroups whose sandbox is gone (named by its outer process; other tests' sandboxes may be alive)."""
    found = memory.hierarchy()
    return [n for n in os.listdir(found[0]) if n.startswith(memory.PREFIX)
            and not os.path.exists(f"/proc/{n.removeprefix(memory.PREFIX)}")] if found else []


@pytest.mark.parametrize("mode", ["namespaces", "landlock"])
def test_a_notebooks_processes_together_hold_no_more_than_its_allowance(tmp_path, mode):
    if memory.hierarchy() is None:
        pytest.skip("no memory cgroup the grader may make here (the one-process bound is tested below)")
    before = _left_cgroups()
    found, result = _run(tmp_path, Limits(memory=ALLOWANCE, sandbox=mode))
    assert found["started"] == 4 and found["refused"] is None, found
    # each child held 200 MB or was stopped on its way; together, those left hold less than the allowance
    assert all(0 <= mb <= 200 for mb in found["reported_mb"]) and sum(found["reported_mb"]) > ALLOWANCE // MB, found
    assert found["held_mb"] < ALLOWANCE // MB and found["alive"] < 4, found
    assert found["held_mb"] == 200 * found["alive"], found  # the survivors had all they asked for
    assert result.status == "ran out of memory" and result.cell == 0, result
    assert "processes together used more than the 0.5 GB a notebook may use" in result.detail
    assert not set(_left_cgroups()) - set(before)  # each sandbox's cgroup is removed with it


def test_a_notebook_whose_own_process_the_kernel_stops_ran_out_of_memory_in_that_cell(tmp_path):
    """The notebook's process volunteers to be the one stopped (oom_score_adj 1000, after forking a child that
    then touches 600 MB of a 512 MB allowance): the cell it was running says why, later cells did not run."""
    if memory.hierarchy() is None:
        pytest.skip("no memory cgroup here")
    cells = [{"cell_type": "code", "source": "import os, time\nif os.fork() == 0:\n    time.sleep(0.5)\n"
              "    held = [bytearray(20 * 1024**2) for _ in range(30)]\n    os._exit(0)\n"
              "open('/proc/self/oom_score_adj', 'w').write('1000')\nos.wait()"},
             {"cell_type": "code", "source": "print('after')"}]
    result = execute(cells, str(tmp_path), confine(Limits(memory=ALLOWANCE, sandbox="namespaces"), []))
    assert (result.status, result.cell) == ("ran out of memory", 0), result
    assert [o["ename"] for o in result.outputs[0]] == ["MemoryError"], result.outputs[0]
    assert "used more than the 0.5 GB a notebook may use" in result.outputs[0][0]["evalue"]
    assert result.outputs[1][0]["ename"] == "NotRunError"


def test_a_cgroup_left_by_a_killed_grader_is_removed_by_the_next_run():
    found = memory.hierarchy()
    if found is None:
        pytest.skip("no memory cgroup here")
    with open("/proc/sys/kernel/pid_max") as pid_max:
        gone = os.path.join(found[0], f"{memory.PREFIX}{int(pid_max.read())}")  # a pid no process can have
    os.mkdir(gone)
    confine(Limits(sandbox="namespaces"), [])
    assert not os.path.exists(gone)


@pytest.mark.parametrize("mode", ["namespaces", "landlock"])
def test_without_a_memory_cgroup_a_notebook_starts_no_process(tmp_path, mode):
    found, result = _run(tmp_path, Limits(memory=ALLOWANCE, sandbox=mode, memory_bound=memory.ONE_PROCESS))
    assert found == {"started": 0, "alive": 0, "held_mb": 0, "refused": "PermissionError", "reported_mb": []}
    assert result.status == "graded", result
    threads = execute([{"cell_type": "code", "source": "import threading, subprocess, torch\nout = []\n"
                        "t = threading.Thread(target=lambda: out.append(torch.ones(3, 3).sum().item()))\n"
                        "t.start(); t.join(); print(out)\nsubprocess.run(['true'])"}], str(tmp_path),
                      confine(Limits(memory=ALLOWANCE, sandbox=mode, memory_bound=memory.ONE_PROCESS), []))
    shown = json.dumps(threads.outputs[0])
    assert "[9.0]" in shown and "PermissionError" in shown, shown  # threads run; a subprocess is refused


def test_the_examinee_has_an_allowance_of_its_own(tmp_path):
    """The notebook's process and its examinee (which runs the answer cells again) each hold 300 MB of a 512 MB
    allowance at once: an answer is not charged twice."""
    if memory.hierarchy() is None:
        pytest.skip("no memory cgroup here")
    assignment = "01_first_function"
    source = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    answers = solution_answers(REPO, assignment)
    answers["sqrt"] += "\n\nBALLAST = torch.ones(300 * 1024**2, dtype=torch.uint8)  # 300 MB, touched\n"
    cells = cells_to_run(prepare(filled_release(REPO, assignment, answers), source))
    limits = confine(Limits(memory=ALLOWANCE, sandbox="namespaces"), [])
    result = execute(cells, str(tmp_path), limits, {}, referee.trusted_cells(source))
    assert result.status == "graded", result
    assert all(v.passed and v.decided for v in result.verdicts.values()), result.verdicts


def test_grade_and_check_say_what_bounds_memory_here():
    here = memory.bound(True, ALLOWANCE)
    assert memory.bound(False, ALLOWANCE) == memory.bound(True, None) == memory.PER_PROCESS
    if os.geteuid() == 0 and os.access("/sys/fs/cgroup/memory", os.W_OK):  # this project's machines
        assert here == memory.CGROUP
        assert "for all of a notebook's processes together" in memory.describe(here, ALLOWANCE)
    assert memory.describe(memory.ONE_PROCESS, ALLOWANCE).startswith("0.5 GB for a notebook, whose one process")
