"""``make bench-grade``: this course's grader against plain sequential ``nbgrader autograde``, as users run them.

Both grade the same generated submissions in two throwaway copies of the course, in the same run, each
measured as the whole command-line process an instructor types: N of assignment 01 (copies of the demo
class: right, partly right, typical bugs, a syntax error), then a few right notebooks (the release filled in
with the solutions' answers) of each Triton assignment, 10 and 11, whose kernels run in Triton's interpreter:

- ``nbgrader autograde ASSIGNMENT``, on a gradebook that already holds the assignment
  (``nbgrader generate_assignment`` ran before, unmeasured, as it does at release time);
- ``python -m autograder grade ASSIGNMENT`` on a course with no gradebook yet, so its cost
  includes Python's start, imports, the warm process, making the gradebook and recording the
  assignment in it.

For each it prints the wall-clock time and the CPU seconds of every process of the command (a cgroup v1
``cpuacct`` group: ``autograder.grading.measure``; on a shared machine wall-clock time says more about the
neighbours), per notebook, the machine's load, whether every score is identical, and the time of a second
``grade`` with nothing changed; then one table of them all.

    python -m autograder bench --students 40 --kernel-students 3

``bench --check`` (``make bench-check``) measures the student's ``check`` instead (``bench_check``), then one
``check_function`` call in this process (``bench_check_function``: a figure, not a test's bound), and
``bench --cells NOTEBOOK`` what each cell and each check of one notebook costs (``bench_cells``).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

from nbgrader.api import Gradebook

from autograder.course import Course
from autograder.grading.measure import load
from autograder.grading.demo.make_demo import ASSIGNMENT, demo_notebooks, filled_release, solution_answers


KERNELS = ("10_triton_kernels", "11_flash_attention")  # graded beside 01: right notebooks (the solutions' answers)


def _course_with_submissions(source: Course, root: Path, students: int,
                             assignment: str = ASSIGNMENT) -> tuple[Course, list[str]]:
    """A copy of the course with ``students`` submissions of ``assignment``: for 01 the demo class's notebooks in
    turn (right, partly right, typical bugs, a syntax error), for any other the release filled in with the
    solutions' answers (a right notebook)."""
    course = Course(root)
    for folder in ("solutions", "course"):
        shutil.copytree(source.root / folder, root / folder)
    if assignment == ASSIGNMENT:
        variants = {name: text for name, text in demo_notebooks(source).items() if text.rstrip().endswith("}")}
    else:
        variants = {"right": filled_release(course, assignment, solution_answers(course, assignment))}
    names = sorted(variants)
    ids = []
    for i in range(students):
        variant = names[i % len(names)]
        student = f"s{i:03d}-{variant}"
        folder = course.grading / "submitted" / student / assignment
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_text(variants[variant], encoding="utf-8")
        ids.append(student)
    return course, ids


def _scores(course: Course, students: list[str], assignment: str = ASSIGNMENT) -> dict[str, float | None]:
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}") as gb:
        found = {}
        for student in students:
            try:
                found[student] = float(gb.find_submission(assignment, student).score)
            except Exception:
                found[student] = None
        return found


def _timed(course: Course, command: list[str], metered=None):
    """What the command line ``command`` costs on ``course``, from start to exit: seconds, or with ``metered``
    (a ``measure.Metered``) its ``Cost`` (CPU of all its processes, and of each grading process by name)."""
    started = time.monotonic()
    if metered is not None:
        result, cost = metered.run(command, cwd=course.root, env=course.environment(), capture_output=True, text=True)
    else:
        result = subprocess.run(command, cwd=course.root, env=course.environment(), capture_output=True, text=True)
        cost = time.monotonic() - started
    if result.returncode not in (0, 1):  # nbgrader autograde exits 1 when a notebook cannot be read
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise RuntimeError(f"{' '.join(command)} failed (exit {result.returncode}):\n{tail}")
    return cost


def bench(source: Course, students: int = 40, jobs: int | None = None, out=sys.stdout,
          kernel_students: int = 0, assignments: tuple[str, ...] = (ASSIGNMENT, *KERNELS)) -> dict:
    """Grade the same submissions with both command lines, assignment by assignment (01's demo class, ``students``
    notebooks; ``kernel_students`` right notebooks of 10 and of 11, none unless asked: ``make bench-grade`` asks
    for 3); print for each the wall-clock time and the CPU seconds of all processes of each command, per notebook
    (``measure.Metered``), and a table of them at the end; return 01's figures (times, ratio, score differences)
    with every assignment's under ``"assignments"``."""
    assignments = tuple(a for a in assignments if a == ASSIGNMENT or kernel_students > 0)
    from autograder.grading.measure import Metered

    metered = Metered()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; CPU: " + ("every process of each command (a cpuacct cgroup)"
                                                          if metered.group else "the commands' children only"),
          file=out)
    figures = {}
    try:
        for assignment in assignments:
            figures[assignment] = _bench_one(source, assignment, students if assignment == ASSIGNMENT
                                             else kernel_students, jobs, metered, out)
    finally:
        metered.close()
    print(f"\nper notebook, whole commands ({load()}):", file=out)
    print(f"  {'assignment':<22} {'notebooks':>9} {'nbgrader CPU':>13} {'grade CPU':>10} {'ratio':>6} "
          f"{'nbgrader wall':>14} {'grade wall':>11}", file=out)
    for assignment, f in figures.items():
        n = f["students"]
        print(f"  {assignment:<22} {n:>9} {f['nbgrader'].cpu / n:>11.2f} s {f['ours'].cpu / n:>8.2f} s "
              f"{f['nbgrader'].cpu / max(f['ours'].cpu, 1e-9):>5.1f}x {f['nbgrader'].wall / n:>12.2f} s "
              f"{f['ours'].wall / n:>9.2f} s", file=out)
    differing = {a: f["differences"] for a, f in figures.items() if f["differences"]}
    if differing:
        print(f"SCORES DIFFER (ours, nbgrader): {differing}", file=out)
    else:
        print("scores identical for every notebook", file=out)
    first = figures.get(ASSIGNMENT) or next(iter(figures.values()))
    return {"nbgrader_seconds": first["nbgrader"].wall, "ours_seconds": first["ours"].wall,
            "ratio": first["nbgrader"].wall / first["ours"].wall, "again_seconds": first["again"].wall,
            "differences": {s: d for f in figures.values() for s, d in f["differences"].items()},
            "scores": first["scores"], "assignments": figures}


def _bench_one(source: Course, assignment: str, students: int, jobs: int | None, metered, out) -> dict:
    """One assignment's submissions graded by both commands, in two throwaway course copies (see ``bench``)."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as ours_dir, \
            tempfile.TemporaryDirectory(prefix="bench-nbgrader-") as theirs_dir:
        ours, ids = _course_with_submissions(source, Path(ours_dir), students, assignment)
        theirs, _ = _course_with_submissions(source, Path(theirs_dir), students, assignment)
        theirs.nbgrader("generate_assignment", assignment, "--force", "--log-level=ERROR")
        print(f"\n{students} submissions of {assignment}", file=out)
        print(f"[{load()}]\n  nbgrader autograde {assignment}  (sequential) ...", file=out, flush=True)
        nbgrader = _timed(theirs, [sys.executable, "-m", "nbgrader", "autograde", assignment, "--log-level=ERROR"],
                          metered)
        print(f"    {nbgrader.line()}", file=out)
        ours_command = [sys.executable, "-m", "autograder", "grade", assignment] + (
            ["--jobs", str(jobs)] if jobs else [])
        print(f"[{load()}]\n  python -m autograder grade {assignment}  (no gradebook yet) ...", file=out, flush=True)
        first = _timed(ours, ours_command, metered)
        print(f"    {first.line()}", file=out)
        print(f"[{load()}]\n  python -m autograder grade {assignment}  again, nothing changed ...", file=out,
              flush=True)
        again = _timed(ours, ours_command, metered)
        print(f"    {again.line()}\n[{load()}]", file=out)
        ours_scores, theirs_scores = _scores(ours, ids, assignment), _scores(theirs, ids, assignment)
        differences = {s: (ours_scores[s], theirs_scores[s]) for s in ids if ours_scores[s] != theirs_scores[s]}
    print(f"  nbgrader autograde: {nbgrader.wall:7.1f} s, CPU {nbgrader.cpu / students:.2f} s per notebook", file=out)
    print(f"  autograder grade:   {first.wall:7.1f} s, CPU {first.cpu / students:.2f} s per notebook (whole process, "
          f"gradebook made and synced)", file=out)
    print(f"  speed-up: {nbgrader.wall / first.wall:.1f}x wall, {nbgrader.cpu / max(first.cpu, 1e-9):.1f}x CPU; grade "
          f"again, unchanged: {again.wall:.1f} s", file=out)
    print(f"  SCORES DIFFER for {len(differences)} students (ours, nbgrader): {differences}" if differences else
          f"  scores identical for all {students} students", file=out)
    return {"students": students, "nbgrader": nbgrader, "ours": first, "again": again, "differences": differences,
            "scores": theirs_scores}


CHECKED = ("01_first_function", "05_deriving_backward", "09_production_pytorch", *KERNELS)


def bench_check(source: Course, runs: int = 5, assignments: tuple[str, ...] = CHECKED, out=sys.stdout) -> dict:
    """Time ``python -m autograder check`` end to end (the whole command, as a student types it) on the blank
    and the filled-in (the solutions' answers) notebook of each assignment, in a throwaway copy of the course
    with a warm process of its own: the first check (which starts it) once, then ``runs`` checks of each. Each
    check's CPU counts every process it uses, the warm process's included (``measure.Metered``)."""
    from autograder.grading import check_server
    from autograder.grading.measure import Metered

    times: dict[str, list[float]] = {}
    metered = Metered()
    with tempfile.TemporaryDirectory(prefix="bench-check-") as root, \
            tempfile.TemporaryDirectory(prefix="ag-") as sockets:
        course = Course(Path(root) / "course")
        for folder in ("solutions", "course"):
            shutil.copytree(source.root / folder, course.root / folder)
        mine = Path(root) / "mine"
        notebooks = {}
        for assignment in assignments:
            notebooks[f"{assignment} blank"] = course.release / assignment / f"{assignment}.ipynb"
            filled = mine / "filled" / f"{assignment}.ipynb"
            filled.parent.mkdir(parents=True, exist_ok=True)
            filled.write_text(filled_release(course, assignment, solution_answers(course, assignment)), encoding="utf-8")
            notebooks[f"{assignment} filled in"] = filled
        env = {**course.environment(), check_server.FOLDER_VARIABLE: sockets}

        def check(notebook: Path):
            result, cost = metered.run([sys.executable, "-m", "autograder", "check", str(notebook)], cwd=course.root,
                                       env=env, capture_output=True, text=True)
            if result.returncode not in (0, 1):
                raise RuntimeError(f"check {notebook} failed:\n{result.stdout}{result.stderr}")
            return cost

        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"{time.strftime('%Y-%m-%d %H:%M')}; `python -m autograder check NOTEBOOK`, the whole command, "
              f"{runs} runs each", file=out)
        print(f"[{load()}]", file=out, flush=True)
        try:
            first = check(notebooks[f"{assignments[0]} blank"])
            print(f"  first check (starts the warm process): {first.wall:.2f} s, CPU {first.cpu:.2f} s", file=out,
                  flush=True)
            for name, notebook in notebooks.items():
                costs = sorted((check(notebook) for _ in range(runs)), key=lambda c: c.wall)
                times[name] = [c.wall for c in costs]
                middle = costs[len(costs) // 2]
                print(f"  {name:<34} median {middle.wall:5.2f} s  (all: {', '.join(f'{t:.2f}' for t in times[name])}); "
                      f"the median run's {middle.line()}  [{load()}]", file=out, flush=True)
        finally:
            with contextlib.suppress(StopIteration, OSError):
                check_server.stop_at(next(Path(sockets).glob("*.sock")))
            metered.close()
    return {"first": first.wall, "times": times, "check_function": bench_check_function(runs, out)}


def bench_check_function(runs: int = 5, out=sys.stdout) -> dict[str, tuple[float, float]]:
    """Time one ``check_function`` call on a two-input Function of 32x32 inputs, right and wrong, after a warm-up
    call (torch's first calls cost more): the median wall-clock and CPU seconds of ``runs`` calls of each."""
    import torch

    from autograder import check_function

    def poly(x1, x2):
        return x1 ** 3 + x2 ** 2

    def function(sign: int):
        class Poly(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x1, x2):
                ctx.save_for_backward(x1, x2)
                return poly(x1, x2)

            @staticmethod
            def backward(ctx, grad_output):
                x1, x2 = ctx.saved_tensors
                return sign * 3 * x1 ** 2 * grad_output, 2 * x2 * grad_output
        return Poly

    def once(kind) -> tuple[float, float]:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            check_function(kind, poly, torch.randn(32, 32), torch.randn(32, 32))
        except AssertionError:
            pass  # the wrong one fails, as it should: its message is part of what is timed
        return time.perf_counter() - started, time.process_time() - cpu

    figures = {}
    for name, kind in (("right", function(1)), ("wrong", function(-1))):
        once(kind)
        runs_here = [once(kind) for _ in range(runs)]
        figures[name] = tuple(sorted(r[i] for r in runs_here)[runs // 2] for i in (0, 1))
        print(f"  check_function, a {name} Function of 32x32 inputs: median {figures[name][0] * 1e3:.0f} ms "
              f"({figures[name][1] * 1e3:.0f} ms of CPU)  [{load()}]", file=out, flush=True)
    return figures


def bench_cells(source: Course, which: str, out=sys.stdout) -> None:
    """``bench --cells``: what each cell and check of one notebook costs (``measure.cell_costs``), judged against
    the instructor's solutions (an assignment's name: its solution notebook itself)."""
    import json

    from autograder.grading.measure import cell_costs, print_cell_costs
    from autograder.grading.records.submissions import read_submission
    from autograder.grading.selfcheck import assignment_of

    os.environ["TRITON_INTERPRET"] = "1"  # as in grading (before anything imports triton)
    path = Path(which)
    if not path.is_file():
        path = source.solutions / which / f"{which}.ipynb"
    submitted = read_submission(path)
    assignment, _ = assignment_of(path, submitted, source)
    solution = json.loads((source.solutions / assignment / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    print(f"{path}: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}", file=out)
    print_cell_costs(*cell_costs(submitted, solution), out)


def profile(source: Course, students: int = 12, out=sys.stdout) -> dict[str, float]:
    """Where one notebook's time goes in ``grade``: each step's mean, run one notebook at a time.

    Steps: the command's start (Python, imports; the warm process importing torch runs beside
    it), preparing (gradebook entries, nbgrader's sanitizing), the child's start (fork, shell)
    and its cells, putting the outputs back and scoring them (nbgrader's preprocessors,
    ``SaveAutoGrades``), and the gradebook and folders at the end.
    """
    from autograder.grading import grade as grading
    from autograder.grading.running.executor import execute, warm_up

    steps = {name: 0.0 for name in ("prepare", "child start", "cells", "outputs and scoring", "gradebook at the end")}
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "import autograder.cli, autograder.grading.grade; "
                    "autograder.cli.build_parser()"], check=True)
    start_seconds = time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as root, grading.nbgrader_speedups(), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", category=grading.SAWarning)  # nbgrader's own, as in grade()
        course, ids = _course_with_submissions(source, Path(root), students)
        warm_up()
        execute([], root)  # wait for the warm process
        started = time.monotonic()
        grading._sync_gradebook(course, ASSIGNMENT)
        sync_seconds = time.monotonic() - started
        grader = grading._Grader(course, ASSIGNMENT, grading.Limits())
        real_finish_student = grader.finish_student

        def finish_student(student, row):
            began = time.monotonic()
            try:
                return real_finish_student(student, row)
            finally:
                steps["gradebook at the end"] += time.monotonic() - began

        grader.finish_student = finish_student
        for student in ids:
            began = time.monotonic()
            row, [task] = grader.prepare(student)
            grader.pending[student] = (row, 1)
            steps["prepare"] += time.monotonic() - began
            began = time.monotonic()
            execute([], task.cwd, task.limits, task.env)
            steps["child start"] += time.monotonic() - began
            began = time.monotonic()
            execution = execute(task.cells, task.cwd, task.limits, task.env)
            steps["cells"] += time.monotonic() - began
            began = time.monotonic()
            grader.finish_task(task, execution)
            steps["outputs and scoring"] += time.monotonic() - began
        steps["outputs and scoring"] -= steps["gradebook at the end"]
        steps["cells"] -= steps["child start"]  # the second run paid the start again
    means = {name: seconds / students for name, seconds in steps.items()}
    print(f"[{load()}] {students} notebooks of {ASSIGNMENT}, one at a time; mean per notebook:", file=out)
    print(f"  once per run: command start (Python, imports, parsing the command line) {start_seconds:.2f} s, "
          f"gradebook sync (new gradebook) {sync_seconds:.2f} s", file=out)
    for name, seconds in means.items():
        print(f"  {name:<22} {seconds:6.3f} s", file=out)
    print(f"  {'total':<22} {sum(means.values()):6.3f} s", file=out)
    return {"start": start_seconds, "sync": sync_seconds, **means}
