"""What grading costs, in CPU seconds and in programs Triton's interpreter runs: for ``bench`` (``make bench-grade``,
``make bench-check``, ``python -m autograder bench --cells NOTEBOOK``).

On a shared machine wall-clock time says more about the neighbours than about the grader. These count what
does not depend on them:

- ``Metered``: the CPU time of every process a command starts, detached ones included (``check``'s warm
  process), from a cgroup v1 ``cpuacct`` group of its own (Linux, root), and of each grading process by name
  (``ag-notebook``, ``ag-examinee``, ``ag-referee``: ``messages.protocol.start`` names them), sampled from
  ``/proc`` while it runs. Where no such group can be made, it says so and counts the command's own children.
- ``cell_costs``: one notebook's cells run here, one after another, as the notebook's process runs them
  (the visible part of the test cells), then its test cells judged by the real referee, their questions
  answered by the real examinee code in this process: for each cell and each check, the CPU time it took and
  the programs and launches Triton's interpreter ran for it.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
NAMED = ("ag-notebook", "ag-examinee", "ag-referee")  # the grading processes, by their /proc/<pid>/comm
SAMPLE_SECONDS = 0.02


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


@dataclass
class Cost:
    """One command's cost: wall-clock seconds, CPU seconds of all its processes, and of the named ones."""

    wall: float
    cpu: float
    by_process: dict[str, float] = field(default_factory=dict)  # "ag-notebook" -> CPU seconds (all of them)
    exact: bool = True  # False: no cgroup here, ``cpu`` counts only the children the command waited for

    def line(self) -> str:
        named = ", ".join(f"{name.removeprefix('ag-')} {seconds:.2f}" for name, seconds in self.by_process.items())
        rest = self.cpu - sum(self.by_process.values())
        return (f"CPU {self.cpu:6.2f} s" + (f" (notebooks' processes: {named}; the command and warm processes "
                                             f"{rest:.2f})" if named else "")
                + ("" if self.exact else " [no cgroup: the command's waited-for children only]")
                + f", wall {self.wall:.2f} s")


class Metered:
    """Runs commands in a cpuacct cgroup of its own (removed by ``close``), measuring each (``run``)."""

    def __init__(self) -> None:
        self.group: Path | None = CPUACCT / f"autograder-bench-{os.getpid()}"
        try:
            self.group.mkdir(exist_ok=True)
            (self.group / "cpuacct.usage").read_text()
        except OSError:
            self.group = None

    def run(self, command: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, Cost]:
        """``subprocess.run(command, **kwargs)`` inside the group; its result and what it cost."""
        group = self.group
        before = self._usage()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        seen: dict[tuple[int, str], tuple[str, float]] = {}
        if group:
            self._sample(seen, None)
        already = dict(seen)  # processes that ran before (the referee serves notebook after notebook): their CPU so far
        stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(seen, stop), daemon=True) if group else None
        if sampler:
            sampler.start()
        started = time.monotonic()
        try:
            result = subprocess.run(command, preexec_fn=(lambda: (group / "tasks").write_text(str(os.getpid())))
                                    if group else None, **kwargs)
        finally:
            wall = time.monotonic() - started
            stop.set()
            if sampler:
                sampler.join()
        by_process: dict[str, float] = {}
        for key, (name, seconds) in seen.items():
            by_process[name] = by_process.get(name, 0.0) + seconds - already.get(key, (name, 0.0))[1]
        if group:
            return result, Cost(wall, (self._usage() - before) / 1e9, dict(sorted(by_process.items())))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
        return result, Cost(wall, cpu, {}, exact=False)

    def _usage(self) -> int:
        return int((self.group / "cpuacct.usage").read_text()) if self.group else 0

    def _sample(self, seen: dict, stop: threading.Event | None) -> None:
        """Every ``SAMPLE_SECONDS`` until ``stop`` (once, without), each named process's CPU so far (a process that
        ends between two samples loses at most that long of its time)."""
        while True:
            with contextlib.suppress(OSError):
                for pid in (self.group / "tasks").read_text().split():
                    found = _named_cpu(pid)
                    if found:
                        seen[(int(pid), found[0])] = found[1:]
            if stop is None or stop.wait(SAMPLE_SECONDS):
                return

    def close(self) -> None:
        """Remove the group (once every process in it has ended: a warm process of check must be stopped first)."""
        if self.group is not None:
            for _ in range(50):
                with contextlib.suppress(OSError):
                    self.group.rmdir()
                    return
                time.sleep(0.1)


def _named_cpu(pid: str) -> tuple[str, str, float] | None:
    """(start time, name, CPU seconds) of a grading process ``pid`` (``NAMED``), or None for any other."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        if name not in NAMED:
            return None
        stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        schedstat = Path(f"/proc/{pid}/schedstat").read_text().split()
    except OSError:
        return None
    return stat[19], name, int(schedstat[0]) / 1e9  # (ns on the CPU, user and system)


# --------------------------------------------------------------------------------------------
# One notebook, cell by cell and check by check, in this process


class ProgramCount:
    """Launches and programs Triton's interpreter runs while it is installed (``GridExecutor.__call__``)."""

    def __init__(self) -> None:
        self.launches = self.programs = 0

    def __enter__(self) -> "ProgramCount":
        from triton.runtime import interpreter

        self._interpreter, self._call = interpreter, interpreter.GridExecutor.__call__
        count, call = self, self._call

        def counted(executor, *args, **kwargs):
            count.launches += 1
            grid = executor.grid
            if callable(grid):
                import inspect

                named = inspect.getcallargs(executor.fn, *args, **{k: v for k, v in kwargs.items()
                                                                    if k in inspect.getfullargspec(executor.fn).args})
                grid = grid(named)
            programs = 1
            for size in grid:
                programs *= int(size)
            count.programs += programs
            return call(executor, *args, **kwargs)

        interpreter.GridExecutor.__call__ = counted
        return self

    def __exit__(self, *exc) -> None:
        self._interpreter.GridExecutor.__call__ = self._call

    def since(self, mark: tuple[int, int]) -> tuple[int, int]:
        return self.launches - mark[0], self.programs - mark[1]

    def mark(self) -> tuple[int, int]:
        return self.launches, self.programs


@dataclass
class CellCost:
    """What one cell cost: CPU seconds here, interpreter launches and programs; for a test cell, its checks."""

    index: int
    name: str
    cpu: float
    launches: int
    programs: int
    failed: str = ""
    checks: list[dict] = field(default_factory=list)  # {"kind", "target", "cpu", "launches", "programs"}


def cell_costs(submitted: dict, source: dict) -> tuple[list[CellCost], list[CellCost], dict[str, float]]:
    """``submitted``'s cells as the notebook's process runs them (each test cell's visible part where ``source``
    has hidden tests), then its test cells judged as the referee judges them, the examinee's answers made here:
    (the notebook's cells, the referee's test cells with their checks, {"examinee's start": CPU, "referee's
    plan": CPU}). Needs TRITON_INTERPRET=1 before triton is imported, as in grading."""
    from IPython.core.interactiveshell import InteractiveShell

    from autograder.grading.running.judging.examinee import Answers, program
    from autograder.grading.running.judging.referee import Referee, trusted_cells, visible_source
    from autograder.grading.running.preparation import cells_to_run, prepare

    prepared = prepare(submitted, source)
    cells = cells_to_run(prepared)
    trusted = trusted_cells(source)
    notebook: list[CellCost] = []
    with ProgramCount() as count:
        shell = InteractiveShell.instance()
        for index, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            text = visible_source(cell["source"]) if cell.get("grade_id") else cell["source"]
            mark, started = count.mark(), time.process_time()
            with contextlib.redirect_stdout(io.StringIO()):
                outcome = shell.run_cell(text, silent=True)
            error = outcome.error_in_exec or outcome.error_before_exec
            notebook.append(CellCost(index, cell.get("grade_id") or cell.get("answer_id") or "",
                                     time.process_time() - started, *count.since(mark),
                                     failed=f"{type(error).__name__}: {error}"[:200] if error else ""))
        started = time.process_time()
        answers = Answers(program(trusted, cells), 600.0, _NoGuard())
        setup = {"examinee's start": time.process_time() - started}
        checks: list[dict] = []

        def ask(requests: list) -> list:
            replies = []
            for request in requests:
                mark, began = count.mark(), time.process_time()
                replies += answers.reply([request], 600.0)
                launches, programs = count.since(mark)
                checks.append({"kind": request.get("what") or request.get("kind"), "target": request.get("target"),
                               "cpu": time.process_time() - began, "launches": launches, "programs": programs,
                               "error": str(replies[-1].get("error") or "")[:200]})
            return replies

        referee = Referee(trusted["cells"], trusted["student_names"], ask)
        started = time.process_time()
        referee.plan()
        setup["referee's plan"] = time.process_time() - started
        judged: list[CellCost] = []
        for index, cell in enumerate(cells):
            if not cell.get("grade_id"):
                continue
            checks.clear()
            mark, started = count.mark(), time.process_time()
            _, failure = referee.judge_cell(cell["grade_id"])
            judged.append(CellCost(index, cell["grade_id"], time.process_time() - started, *count.since(mark),
                                   failed=str(failure or "")[:200], checks=list(checks)))
    return notebook, judged, setup


class _NoGuard:
    """The examinee's tamper guard, left out here (it watches for student code; this process runs the course's)."""

    user_ns = None

    def watch(self, what) -> None:
        pass

    def check(self, functions: bool = False) -> list:
        return []


def print_cell_costs(notebook: list[CellCost], judged: list[CellCost], setup: dict[str, float], out) -> None:
    """``cell_costs``'s answer as two tables: the notebook's process by cell, the referee's and examinee's by check."""
    print(f"the notebook's process, cell by cell  [{load()}]", file=out)
    for cell in notebook:
        if cell.cpu >= 0.005 or cell.programs:
            print(f"  cell {cell.index:3d} {cell.name[:32]:<32} CPU {cell.cpu:6.2f} s  launches {cell.launches:4d}  "
                  f"programs {cell.programs:5d}" + (f"  FAILED {cell.failed}" if cell.failed else ""), file=out)
    print(f"  {'all cells':<41} CPU {sum(c.cpu for c in notebook):6.2f} s  launches "
          f"{sum(c.launches for c in notebook):4d}  programs {sum(c.programs for c in notebook):5d}", file=out)
    start, plan = setup["examinee's start"], setup["referee's plan"]
    print(f"the referee and the examinee, test by test (the examinee's start {start:.2f} s, the referee's plan "
          f"{plan:.2f} s)", file=out)
    for cell in judged:
        answering = sum(c["cpu"] for c in cell.checks)
        print(f"  cell {cell.index:3d} {cell.name[:32]:<32} CPU {cell.cpu:6.2f} s (examinee {answering:.2f})  "
              f"launches {cell.launches:4d}  programs {cell.programs:5d}" + (f"  FAILED {cell.failed}" if cell.failed
                                                                             else ""), file=out)
        for check in cell.checks:
            print(f"      {check['kind']:<10} {str(check['target'])[:28]:<28} CPU {check['cpu']:5.2f} s  launches "
                  f"{check['launches']:4d}  programs {check['programs']:5d}"
                  + (f"  {check['error']}" if check["error"] else ""), file=out)
    print(f"  {'all tests':<41} CPU {sum(c.cpu for c in judged):6.2f} s  launches "
          f"{sum(c.launches for c in judged):4d}  programs {sum(c.programs for c in judged):5d}", file=out)
