"""Every test passes the solution on other seeds than its own: ``python -m autograder.grading.seed_sweep``.

The grader draws each test's inputs from the test's own seed (``autograder.student.seeds``), so a notebook
scores the same every time. That seed is arbitrary: a test must hold on any seed. One whose tolerance float32
cannot meet on some inputs (a row of three numbers that nearly agree has a large 1/std) passes on its own seed
and fails the solution after any edit that moves it. ``sweep`` judges each test cell of an assignment's solution
on a run of seeds, in this process, with the grader's own code: the referee's judges (every check a test cell
calls, visible and hidden; ``Referee``), answered by the solution's answer cells scanned and run as the examinee
runs them (``Answers``). A visible ``assert`` that only the student's process can decide (it reads the student's
values) is not swept; the visible checks are judges, swept with the rest.

    python -m autograder.grading.seed_sweep [ASSIGNMENT ...] [--seeds 1000] [--first 0] [--tests GRADE_ID ...] [--jobs 2]

says, for each test cell, on how many seeds it was judged, which failed and why; exit status 1 if any did.
A test's seeds are its own and the ones after it (``seed_of(grade_id) + k``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Failure:
    grade_id: str
    seed: int
    message: str


class Solved:
    """An assignment's solution as the grader sees it: the instructor's cells the referee runs, and the solution's
    answers in an examinee's namespaces (``examinee.Answers``), answering the referee's requests in this process."""

    LIMIT = 600.0  # seconds an answer cell or a check may run (the cell time limit, generous: nothing here loops)

    def __init__(self, notebook: Path) -> None:
        from autograder.grading.running.judging import examinee, referee, scan, tamper

        signal.signal(signal.SIGALRM, examinee._on_alarm)  # (the examinee times its cells and checks with SIGALRM)
        source = json.loads(Path(notebook).read_text(encoding="utf-8"))
        self.trusted = referee.trusted_cells(source)
        answers = [{"cell_type": "code", "answer_id": cell["metadata"]["nbgrader"]["grade_id"],
                    "source": "".join(cell["source"])} for cell in source["cells"]
                   if cell["cell_type"] == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution")]
        steps = scan.screen(examinee.program(self.trusted, answers))
        refused = [step["why"] for step in steps if step.get("refused")]
        if refused:
            raise ValueError(f"the scan refuses the solution: {refused[0]}")
        self.answers = examinee.Answers(steps, self.LIMIT, tamper.Guard())

    def tests(self) -> list[str]:
        return [cell["grade_id"] for cell in self.trusted["cells"] if cell["kind"] == "test"]

    def judge(self, grade_id: str, seed: int) -> str | None:
        """Test ``grade_id``'s checks judged with its inputs drawn from ``seed``: the failure, or None."""
        from autograder.grading.running.judging.referee import Referee

        cells = self.trusted["cells"]
        at = next(i for i, cell in enumerate(cells) if cell.get("grade_id") == grade_id and cell["kind"] == "test")
        run = [cell for cell in cells[:at] if cell["kind"] == "given"] + [cells[at]]
        judge = Referee(run, self.trusted["student_names"], lambda requests: self.answers.reply(requests, self.LIMIT),
                        seed_of=lambda _: seed)
        return judge.judge_cell(grade_id)[1]


def sweep(notebook: Path, seeds: int, tests: list[str] | None = None, report=None, first: int = 0) -> list[Failure]:
    """Each test cell of ``notebook`` (a solution; ``tests``: those of them only) judged on ``seeds`` seeds, from its own
    plus ``first``: the failures. ``report(grade_id, seeds, failures, cpu_seconds)`` hears of each test when it is done.
    Run it in a process of its own for each notebook (``sweep_apart``): the examinee's namespaces are modules by name,
    and ``torch.compile`` finds a function's module by its name."""
    from autograder.student.seeds import seed_of

    solved, failures = Solved(notebook), []
    for grade_id in [t for t in solved.tests() if not tests or t in tests]:
        started, found = time.process_time(), []
        for k in range(first, first + seeds):
            seed = (seed_of(grade_id) + k) % 2**32
            failure = solved.judge(grade_id, seed)
            if failure is not None:
                found.append(Failure(grade_id, seed, failure))
        failures += found
        if report is not None:
            report(grade_id, seeds, found, time.process_time() - started)
    return failures


def sweep_apart(notebook: Path, seeds: int, tests: list[str] | None = None, first: int = 0) -> list[Failure]:
    """``sweep``, in a new process (spawned, not forked: a process forked after torch's OpenMP threads ran waits
    forever at its first parallel operation, as GNU libgomp is not safe to fork)."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(sweep, (notebook, seeds, tests, None, first))


def _sweep_assignment(job: tuple[str, int, list[str] | None, int]) -> list[Failure]:
    assignment, seeds, tests, first = job
    notebook = REPOSITORY / "solutions" / assignment / f"{assignment}.ipynb"

    def report(grade_id: str, count: int, found: list[Failure], cpu: float) -> None:
        said = f"{len(found)} failed (seeds {', '.join(str(f.seed) for f in found[:10])}): {found[0].message[:300]}" \
            if found else "all passed"
        print(f"{assignment}/{grade_id}: {count} seeds, {cpu:.1f} s of CPU; {said}", flush=True)

    return sweep(notebook, seeds, tests, report=report, first=first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.grading.seed_sweep", description=__doc__.split("\n")[0])
    parser.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: every assignment")
    parser.add_argument("--seeds", type=int, default=1000, help="seeds per test cell (default 1000)")
    parser.add_argument("--first", type=int, default=0, help="start this many seeds after each test's own (default 0)")
    parser.add_argument("--tests", nargs="+", metavar="GRADE_ID", help="these test cells only")
    parser.add_argument("--jobs", type=int, default=1, help="assignments swept at once, each in a process (default 1)")
    args = parser.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "1"  # (as in grading: before anything imports triton)
    assignments = args.assignments or sorted(p.name for p in (REPOSITORY / "solutions").iterdir() if p.is_dir()
                                             and (p / f"{p.name}.ipynb").is_file())
    jobs = [(assignment, args.seeds, args.tests, args.first) for assignment in assignments]
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(args.jobs, maxtasksperchild=1) as pool:  # (a process a notebook)
        failures = [f for found in pool.imap_unordered(_sweep_assignment, jobs) for f in found]
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
