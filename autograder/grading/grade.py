"""Grade every collected submission of an assignment: in parallel, resumable, into nbgrader's gradebook.

The steps are nbgrader's own ``autograde``, rearranged so that the slow one runs in parallel:

1. (here, one at a time) register the student and submission in the gradebook, read the
   notebook, and prepare it as ``check`` does (``autograder.grading.running.preparation``: the
   tests put back from the source), with nbgrader's bookkeeping (checksums, cell metadata);
2. (in parallel) run its cells in a fresh process forked from a warm one
   (``autograder.grading.running.executor``), locally or on a Dask cluster;
3. (here, one at a time) score it: each test cell's points come from its verdict (``SaveVerdicts``:
   the referee's, never a number the cell's outputs show), answers graded by hand stay nbgrader's;
   then move the autograded folder into place with a marker saying what was graded.

Only this process writes to the gradebook, so parallel grading never meets a lock error; a
lock file keeps two grading runs from interleaving. A submission whose marker matches its
files and what grades them (the assignment's source and tests, the grader's version:
``autograder.grading.records.fingerprint``) is not graded again, so an interrupted run resumes where it
stopped, a second run changes nothing, and a fixed test regrades that assignment's submissions.
``grades.csv`` gets one row per student with a status saying what happened, how late and the penalty.

Here: ``grade`` (the steps in order), ``_run`` (the parallel step), ``_Grader`` (the steps done here, each by a
part of its own in ``autograder.grading.grader``) and ``Task``/``run_task`` (what a worker gets and runs).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import warnings
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import MissingEntry
from nbgrader.coursedir import CourseDirectory
from sqlalchemy.exc import SAWarning

from autograder.course import Course, CourseError
from autograder.grading.contained import Contained, outcome
from autograder.grading.grader.assignment import Assignment
from autograder.grading.grader.intake import Intake
from autograder.grading.grader.resume import Resume
from autograder.grading.grader.scoring import Scoring
from autograder.grading.records.grades import Row, worsen, write_grades_csv
from autograder.grading.records.speed import nbgrader_speedups, sync_assignment
from autograder.grading.records.submissions import InvalidNotebook, write_problem_notebook
from autograder.grading.results.terminal import GradingProgress
from autograder.grading.running.confinement import memory, one_thread, sandbox
from autograder.grading.running.confinement.limits import Limits, SandboxRefused, confine
from autograder.grading.running.executor import Execution, execute, warm_up
from autograder.grading.running.preparation import NOTEBOOK_ENV, cells_to_run, working_folder


@dataclass
class Task:
    """One notebook to execute: everything a worker (local or on a Dask cluster) needs."""

    student_id: str
    notebook_id: str
    cells: list[dict]
    cwd: str                      # the notebook's working folder (preparation.working_folder), removed once scored
    limits: Limits
    env: dict[str, str]
    trusted: dict | None = None   # the instructor's cells, for the referee (autograder.grading.running.judging.referee)
    graded: str = ""              # the student's folder of graded notebooks (moved to autograded/ when done)


def run_task(task: Task) -> Execution:
    """Execute one task's cells (what a worker runs; importable by Dask workers)."""
    import multiprocessing

    if multiprocessing.current_process().daemon:
        raise CourseError("this Dask worker may not start processes: start workers with "
                          "DASK_DISTRIBUTED__WORKER__DAEMON=False (see README, 'Grading on a cluster')")
    return execute(task.cells, task.cwd, task.limits, task.env, task.trusted)


def grade(course: Course, assignment: str, jobs: int | None = None, limits: Limits | None = None,
          scheduler: str | None = None, force: bool = False, progress=None) -> list[Row]:
    """Autograde every submission of ``assignment``; return (and write to grades.csv) one row per student."""
    course.check_assignment(assignment)
    jobs = jobs or os.cpu_count() or 1
    limits = _confined(course, limits or Limits(threads=max(1, (os.cpu_count() or 1) // jobs)), scheduler, progress)
    with _grading_lock(course), warnings.catch_warnings(), nbgrader_speedups():
        # nbgrader's own gradebook code trips SQLAlchemy's autoflush warnings; they are not ours to fix.
        warnings.simplefilter("ignore", category=SAWarning)
        _sync_gradebook(course, assignment)
        grader = _Grader(course, assignment, limits)
        students = grader.assignment.submitted_students()
        rows: dict[str, Row] = {}
        bar = GradingProgress(len(students), progress, _what_grading_takes(course, assignment, len(students), jobs))
        tasks = _prepared_tasks(grader, students, force, rows, bar, warm=not scheduler)
        for task, execution in _run(tasks, jobs, scheduler):
            row = grader.finish_task_or_say_why(task, execution)
            if row is not None:
                rows[task.student_id] = row
                bar.advance(1, task.student_id)
        for student in grader.assignment.missing_students(set(students)):
            rows[student] = grader.assignment.row(student, status="missing", detail="no submission collected")
        result = [rows[s] for s in sorted(rows)]
        write_grades_csv(course, assignment, result)
        bar.close()
        return result


def _confined(course: Course, limits: Limits, scheduler: str | None, progress) -> Limits:
    """``limits`` with the sandbox each notebook runs in (``autograder.grading.running.confinement.sandbox``),
    said in a line; Dask workers decide their own."""
    try:
        limits = confine(limits, course.hidden_from_notebooks, here=not scheduler)
    except SandboxRefused as error:
        raise CourseError(str(error)) from None
    if limits.sandbox in sandbox.MODES:  # (Dask workers decide for their own machines)
        for line in (f"{sandbox.describe(limits.sandbox)}; memory: {memory.describe(limits.memory_bound, limits.memory)}",
                     one_thread.describe()):
            print(line, file=progress if progress is not None else sys.stderr)
    return limits


def _what_grading_takes(course: Course, assignment: str, count: int, jobs: int) -> str:
    """The line above the progress: how many submissions, how many at a time, and a word when each is a slow one."""
    line = (f"{count} submissions of {assignment}: those graded before and unchanged are kept, the others "
            f"graded {min(jobs, count)} at a time")
    if any("import triton" in path.read_text(encoding="utf-8") for path in course.notebooks(assignment)):
        line += ("\nits notebooks run their Triton kernels in Triton's interpreter on the CPU, which takes longer "
                 "than most assignments' notebooks (the grading guide's 'Times by assignment')")
    return line


def _prepared_tasks(grader: "_Grader", students: list[str], force: bool, rows: dict[str, Row], bar: "GradingProgress",
                    warm: bool = True):
    """Yield each student's tasks, preparing a student only when asked for the next task.

    Done lazily so that preparing (in this process) overlaps with notebooks executing (in
    others, see ``_run``), instead of every notebook being prepared before the first one runs. The warm
    process is started (``warm``) only once there is something to run.
    """
    for student in students:
        reused = None if force else grader.resume.finished_row(student)
        if reused:
            rows[student] = reused
            bar.advance(1)
            continue
        if warm:
            warm_up()  # at once when already running
        row, student_tasks = grader.prepare_or_say_why(student)
        row.regraded = "" if force else grader.resume.regrade_reasons.get(student, "")
        if student_tasks:
            grader.pending[student] = (row, len(student_tasks))
            yield from student_tasks
        else:
            rows[student] = grader.finish_student(student, row)
            bar.advance(1, student)


def _run(tasks, jobs: int, scheduler: str | None, ahead: int = 32):
    """Yield (task, execution) as they finish, ``jobs`` at a time here or on a Dask cluster.

    ``tasks`` is an iterator that prepares each task when it is asked for. While the workers
    run (or wait for the warm process to import torch, at the start), this process prepares up
    to ``ahead`` further tasks, one at a time, looking after each one whether a notebook has
    finished: a finished one is handed back to be scored and its worker gets a prepared task at once.
    """
    if scheduler:
        tasks = list(tasks)
        if not tasks:
            return
        from distributed import Client, as_completed

        with Client(scheduler) as client:
            futures = {client.submit(run_task, task, pure=False): task for task in tasks}
            for future in as_completed(futures):
                yield futures[future], outcome(future)
        return
    tasks, ready = iter(tasks), deque()

    def prepare_one() -> bool:
        task = next(tasks, None)
        if task is not None:
            ready.append(task)
        return task is not None

    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grade") as pool:
        running, finished, more = {}, [], True
        while True:
            while len(running) < jobs:
                if not ready and more:
                    more = prepare_one()
                if not ready:
                    break
                task = ready.popleft()
                running[pool.submit(run_task, task)] = task
            yield from finished  # scored while the refilled workers run
            if not running:
                return
            done = set()
            while not done and more and len(ready) < ahead:
                done, _ = wait(running, timeout=0, return_when=FIRST_COMPLETED)
                if not done:
                    more = prepare_one()
            if not done:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
            finished = [(running.pop(future), outcome(future)) for future in done]


class _Grader(Contained):
    """The gradebook side of grading one assignment, in the coordinating process only (the one process that
    writes to the gradebook). Each job is a part of its own (``autograder.grading.grader``): the assignment's
    facts and folders, resuming an earlier run, taking in a submission, scoring a notebook; here they meet."""

    def __init__(self, course: Course, assignment: str, limits: Limits) -> None:
        self.assignment = Assignment(course, assignment, limits)
        self.resume = Resume(self.assignment)
        self.intake = Intake(self.assignment)
        self.scoring = Scoring(self.assignment)
        self.pending: dict[str, tuple[Row, int]] = {}  # student -> their row so far, and their notebooks not scored
        # The sanitized notebooks, kept here: student code runs in the staging folder and may overwrite them.
        self.sanitized: dict[tuple[str, str], object] = {}

    def prepare(self, student: str) -> tuple[Row, list[Task]]:
        """Register the submission and sanitize its notebooks; return its row so far and its tasks."""
        row = self.assignment.row(student)
        staging = self.intake.register(student)
        tasks = []
        for notebook_id in self.assignment.notebook_ids:
            try:
                prepared, nb = self.intake.notebook(student, notebook_id)
            except InvalidNotebook as error:
                self.score_zero(row, notebook_id, staging, str(error))
                continue
            # Kept here until graded (it holds the hidden tests); the notebook runs in a working folder of its own.
            self.sanitized[student, notebook_id] = nb
            tasks.append(self._task(student, notebook_id, prepared, staging))
        return row, tasks

    def _task(self, student: str, notebook_id: str, prepared: dict, staging: Path) -> Task:
        """What a worker needs to run the notebook, as plain dicts: unpickling nbformat's classes would import
        nbformat there."""
        assignment = self.assignment
        cwd = working_folder(assignment.course.grading, assignment.name, assignment.solutions)
        return Task(student, notebook_id, cells_to_run(prepared), str(cwd), assignment.limits, dict(NOTEBOOK_ENV),
                    self.intake.trusted(notebook_id), str(staging))

    def score_zero(self, row: Row, notebook_id: str, graded: Path, problem: str) -> None:
        """A notebook that cannot be graded: 0 in the gradebook, its row says why, and so does the page written in
        its place in the student's ``graded`` folder."""
        self.assignment.zero(row.student_id, notebook_id)
        worsen(row, "invalid notebook", problem)
        write_problem_notebook(graded / f"{notebook_id}.ipynb", problem)

    def finish_task(self, task: Task, execution: Execution) -> Row | None:
        """Score one executed notebook; when the student's last one is in, finish the student."""
        nb = self.scoring.graded_notebook(self.sanitized.pop((task.student_id, task.notebook_id)), task, execution)
        row, _ = self.pending[task.student_id]
        self.scoring.add_to_row(row, nb, task.notebook_id, execution)
        return self.notebook_done(task.student_id)

    def notebook_done(self, student: str) -> Row | None:
        """Count one of the student's notebooks as scored; after their last one, finish the student."""
        row, left = self.pending[student]
        self.pending[student] = (row, left - 1)
        if left - 1:
            return None
        del self.pending[student]
        return self.finish_student(student, row)

    def finish_student(self, student: str, row: Row) -> Row:
        """Move the graded folder into place, marked with what was graded; read the score."""
        self.resume.mark(self.assignment.staged(student), student, row)
        self.assignment.move_into_place(student)
        self.resume.read_score(row)
        return row


def _sync_gradebook(course: Course, assignment: str) -> None:
    """Record the assignment's notebooks and tests in the gradebook (nbgrader generate_assignment).

    Skipped when the solutions are unchanged since the last sync into this gradebook. The
    student version goes to a scratch folder: ``course/`` is left exactly as committed.
    """
    stamp = course.grading / f".synced-{assignment}"
    if stamp.exists() and stamp.read_text() == _synced_digest(course, assignment) and _in_gradebook(course, assignment):
        return
    sync_assignment(course, assignment)
    stamp.write_text(_synced_digest(course, assignment))


def _synced_digest(course: Course, assignment: str) -> str:
    """What the gradebook's record of ``assignment`` depends on: where the gradebook is, and the solutions."""
    db_url = CourseDirectory(config=course.config()).db_url
    digest = hashlib.sha256(db_url.encode())
    for path in sorted((course.solutions / assignment).rglob("*")):
        if path.is_file():
            digest.update(str(path).encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _in_gradebook(course: Course, assignment: str) -> bool:
    with course.gradebook() as gb:  # makes a new gradebook if it was deleted since the last sync
        try:
            return bool(gb.find_assignment(assignment).notebooks)
        except MissingEntry:
            return False


@contextmanager
def _grading_lock(course: Course):
    """One grading run at a time per course; a second one waits for the first."""
    course.grading.mkdir(parents=True, exist_ok=True)
    with open(course.grading / ".grading.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("another grading run is in progress; waiting for it to finish ...", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
