"""``make bench-grade``: this course's grader against plain sequential ``nbgrader autograde``, as users run them.

Both grade the same N generated submissions of assignment 01 (copies of the demo class: right,
partly right, typical bugs, a syntax error) in two throwaway copies of the course, in the same
run, each timed as the whole command-line process an instructor types:

- ``nbgrader autograde 01_first_function``, on a gradebook that already holds the assignment
  (``nbgrader generate_assignment`` ran before, untimed, as it does at release time);
- ``python -m autograder grade 01_first_function`` on a course with no gradebook yet, so its time
  includes Python's start, imports, the warm process, making the gradebook and recording the
  assignment in it.

It prints both times, the ratio, seconds per notebook, the machine's load (other work on the
machine slows both), and whether every score is identical; then the time of a second ``grade``
with nothing changed.

    python -m autograder bench --students 40

``bench --check`` (``make bench-check``) times the student's ``check`` instead (``bench_check``).
"""

from __future__ import annotations

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
from autograder.grading.demo.make_demo import ASSIGNMENT, demo_notebooks, filled_release, solution_answers


def _course_with_submissions(source: Course, root: Path, students: int) -> tuple[Course, list[str]]:
    course = Course(root)
    for folder in ("solutions", "course"):
        shutil.copytree(source.root / folder, root / folder)
    variants = {name: text for name, text in demo_notebooks(source).items() if text.rstrip().endswith("}")}
    names = sorted(variants)
    ids = []
    for i in range(students):
        variant = names[i % len(names)]
        student = f"s{i:03d}-{variant}"
        folder = course.grading / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(variants[variant], encoding="utf-8")
        ids.append(student)
    return course, ids


def _scores(course: Course, students: list[str]) -> dict[str, float | None]:
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}") as gb:
        found = {}
        for student in students:
            try:
                found[student] = float(gb.find_submission(ASSIGNMENT, student).score)
            except Exception:
                found[student] = None
        return found


def _timed(course: Course, command: list[str]) -> float:
    """Seconds the command line ``command`` takes on ``course``, from start to exit."""
    started = time.monotonic()
    result = subprocess.run(command, cwd=course.root, env=course.environment(), capture_output=True, text=True)
    seconds = time.monotonic() - started
    if result.returncode not in (0, 1):  # nbgrader autograde exits 1 when a notebook cannot be read
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise RuntimeError(f"{' '.join(command)} failed (exit {result.returncode}):\n{tail}")
    return seconds


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


def bench(source: Course, students: int = 40, jobs: int | None = None, out=sys.stdout) -> dict:
    """Time both command lines on the same submissions; return the times, the ratio and any score differences."""
    with tempfile.TemporaryDirectory(prefix="bench-ours-") as ours_dir, \
            tempfile.TemporaryDirectory(prefix="bench-nbgrader-") as theirs_dir:
        ours, ids = _course_with_submissions(source, Path(ours_dir), students)
        theirs, _ = _course_with_submissions(source, Path(theirs_dir), students)
        theirs.nbgrader("generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR")
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"{students} submissions of {ASSIGNMENT}", file=out)

        print(f"[{_load()}]\n  nbgrader autograde {ASSIGNMENT}  (sequential) ...", file=out, flush=True)
        nbgrader_seconds = _timed(theirs, [sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT,
                                           "--log-level=ERROR"])
        ours_command = [sys.executable, "-m", "autograder", "grade", ASSIGNMENT] + (["--jobs", str(jobs)] if jobs else [])
        print(f"[{_load()}]\n  python -m autograder grade {ASSIGNMENT}  (no gradebook yet) ...", file=out, flush=True)
        ours_seconds = _timed(ours, ours_command)
        print(f"[{_load()}]\n  python -m autograder grade {ASSIGNMENT}  again, nothing changed ...", file=out, flush=True)
        again_seconds = _timed(ours, ours_command)
        print(f"[{_load()}]", file=out)

        ours_scores, theirs_scores = _scores(ours, ids), _scores(theirs, ids)
        differences = {s: (ours_scores[s], theirs_scores[s]) for s in ids if ours_scores[s] != theirs_scores[s]}
    ratio = nbgrader_seconds / ours_seconds
    print(f"nbgrader autograde:      {nbgrader_seconds:7.1f} s  ({nbgrader_seconds / students:.2f} s per notebook)", file=out)
    print(f"autograder grade:        {ours_seconds:7.1f} s  ({ours_seconds / students:.2f} s per notebook, "
          f"whole process, gradebook made and synced)", file=out)
    print(f"speed-up:                {ratio:7.1f}x", file=out)
    print(f"grade again, unchanged:  {again_seconds:7.1f} s", file=out)
    if differences:
        print(f"SCORES DIFFER for {len(differences)} students (ours, nbgrader): {differences}", file=out)
    else:
        print(f"scores identical for all {students} students", file=out)
    return {"nbgrader_seconds": nbgrader_seconds, "ours_seconds": ours_seconds, "ratio": ratio,
            "again_seconds": again_seconds, "differences": differences, "scores": theirs_scores}


CHECKED = ("01_first_function", "05_deriving_backward", "09_production_pytorch")


def bench_check(source: Course, runs: int = 5, assignments: tuple[str, ...] = CHECKED, out=sys.stdout) -> dict:
    """Time ``python -m autograder check`` end to end (the whole command, as a student types it) on the blank
    and the filled-in (the solutions' answers) notebook of each assignment, in a throwaway copy of the course
    with a warm process of its own: the first check (which starts it) once, then ``runs`` checks of each."""
    import resource

    from autograder.grading import check_server

    times: dict[str, list[float]] = {}
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

        def check(notebook: Path) -> tuple[float, float]:
            before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
            result = subprocess.run([sys.executable, "-m", "autograder", "check", str(notebook)], cwd=course.root,
                                    env=env, capture_output=True, text=True)
            seconds, after = time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
            if result.returncode not in (0, 1):
                raise RuntimeError(f"check {notebook} failed:\n{result.stdout}{result.stderr}")
            return seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
              f"`python -m autograder check NOTEBOOK`, the whole command, {runs} runs each", file=out)
        print(f"[{_load()}]", file=out, flush=True)
        first, _ = check(notebooks[f"{assignments[0]} blank"])
        print(f"  first check (starts the warm process): {first:.2f} s", file=out, flush=True)
        for name, notebook in notebooks.items():
            runs_here = [check(notebook) for _ in range(runs)]
            times[name] = sorted(seconds for seconds, _ in runs_here)
            command_cpu = max(cpu for _, cpu in runs_here)
            print(f"  {name:<34} median {times[name][len(times[name]) // 2]:5.2f} s  (all: "
                  f"{', '.join(f'{t:.2f}' for t in times[name])}; the command's own CPU at most "
                  f"{command_cpu:.2f} s)  [{_load()}]", file=out, flush=True)
        check_server.stop_at(next(Path(sockets).glob("*.sock")))
    return {"first": first, "times": times}


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
    print(f"[{_load()}] {students} notebooks of {ASSIGNMENT}, one at a time; mean per notebook:", file=out)
    print(f"  once per run: command start (Python, imports, parsing the command line) {start_seconds:.2f} s, "
          f"gradebook sync (new gradebook) {sync_seconds:.2f} s", file=out)
    for name, seconds in means.items():
        print(f"  {name:<22} {seconds:6.3f} s", file=out)
    print(f"  {'total':<22} {sum(means.values()):6.3f} s", file=out)
    return {"start": start_seconds, "sync": sync_seconds, **means}
