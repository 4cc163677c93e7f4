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
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import warnings
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.api import Gradebook, MissingEntry
from sqlalchemy.exc import SAWarning
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, IgnorePattern, LimitOutput,
                                    OverwriteCells, OverwriteKernelspec)

from autograder.course import Course, CourseError
from autograder.grading.contained import Contained, outcome
from autograder.grading.records import deadlines
from autograder.grading.records.grades import Row, hand_graded, worsen, write_grades_csv
from autograder.grading.records.scores import SaveVerdicts
from autograder.grading.records.submissions import (
    InvalidNotebook, graded_ids, read_submission, write_problem_notebook, wrong_assignment,
)
from autograder.grading.running.judging import referee
from autograder.grading.running.confinement import memory, one_thread, sandbox
from autograder.grading.running.confinement.limits import Limits, SandboxRefused, confine
from autograder.grading.running.executor import Execution, execute, warm_up
from autograder.grading.records.fingerprint import graded_with, submission_digest, why_regrade
from autograder.grading.results.terminal import GradingProgress
from autograder.grading.running.preparation import (NOTEBOOK_ENV, cells_to_run, copy_course_files, prepare,
                                                    working_folder)
from autograder.grading.records.speed import nbgrader_speedups, sync_assignment

MARKER = ".autograder.json"



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
    limits = limits or Limits(threads=max(1, (os.cpu_count() or 1) // jobs))
    try:  # the sandbox each notebook runs in (autograder.grading.running.confinement.sandbox); Dask workers decide their own
        limits = confine(limits, course.hidden_from_notebooks, here=not scheduler)
    except SandboxRefused as error:
        raise CourseError(str(error)) from None
    if limits.sandbox in sandbox.MODES:  # (Dask workers decide for their own machines)
        for line in (f"{sandbox.describe(limits.sandbox)}; memory: {memory.describe(limits.memory_bound, limits.memory)}",
                     one_thread.describe()):
            print(line, file=progress if progress is not None else sys.stderr)
    with _grading_lock(course), warnings.catch_warnings(), nbgrader_speedups():
        # nbgrader's own gradebook code trips SQLAlchemy's autoflush warnings; they are not ours to fix.
        warnings.simplefilter("ignore", category=SAWarning)
        _sync_gradebook(course, assignment)
        grader = _Grader(course, assignment, limits)
        students = grader.submitted_students()
        rows: dict[str, Row] = {}
        bar = GradingProgress(len(students), progress, _what_grading_takes(course, assignment, len(students), jobs))
        tasks = _prepared_tasks(grader, students, force, rows, bar, warm=not scheduler)
        for task, execution in _run(tasks, jobs, scheduler):
            row = grader.finish_task_or_say_why(task, execution)
            if row is not None:
                rows[task.student_id] = row
                bar.advance(1, task.student_id)
        for student in grader.missing_students(set(students)):
            rows[student] = Row(student, assignment, 0.0, grader.max_score, "missing", "no submission collected")
        result = [rows[s] for s in sorted(rows)]
        write_grades_csv(course, assignment, result)
        bar.close()
        return result


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
        reused = None if force else grader.finished_row(student)
        if reused:
            rows[student] = reused
            bar.advance(1)
            continue
        if warm:
            warm_up()  # at once when already running
        row, student_tasks = grader.prepare_or_say_why(student)
        row.regraded = "" if force else grader.regrade_reasons.get(student, "")
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
    """The gradebook side of grading one assignment (runs only in the coordinating process)."""

    def __init__(self, course: Course, assignment: str, limits: Limits) -> None:
        self.course, self.assignment, self.limits = course, assignment, limits
        self.config = course.config()
        self.coursedir = CourseDirectory(config=self.config)
        self.db_url = self.coursedir.db_url
        self.submitted = course.grading / "submitted"
        self.autograded = course.grading / "autograded"
        self.staging = course.grading / ".staging"
        self.pending: dict[str, tuple[Row, int]] = {}
        self.graded_with = graded_with(course.solutions / assignment)
        self.deadline = deadlines.load(course, assignment)
        # A due date set with nbgrader's own tools is left alone until `deadline` is used for the assignment.
        self.deadline_managed = deadlines.is_managed(course, assignment)
        self.config.merge(deadlines.nbgrader_config(self.deadline))
        self.regrade_reasons: dict[str, str] = {}  # student -> why their earlier grade no longer holds
        self.results: dict[str, list[Execution]] = {}
        # The sanitized notebooks, kept here: student code runs in the staging folder and may overwrite them.
        self.sanitized: dict[tuple[str, str], object] = {}
        self.sources: dict[str, dict] = {}  # notebook -> the source notebook (JSON): tests, kinds, points
        self.trusted: dict[str, dict] = {}  # notebook -> the instructor's cells the referee runs
        self.graded_cells: dict[str, dict[str, set[str]]] = {}  # notebook -> grade_ids by assignment
        with Gradebook(self.db_url, self.coursedir.course_id) as gb:
            if self.deadline_managed:
                deadlines.record_due_date(gb, assignment, self.deadline)
            notebooks = gb.find_assignment(assignment).notebooks
            self.notebook_ids = [nb.name for nb in notebooks]
            self.max_score = float(sum(nb.max_score for nb in notebooks))

    # -- which students

    def submitted_students(self) -> list[str]:
        if not self.submitted.is_dir():
            return []
        return sorted(p.name for p in self.submitted.iterdir()
                      if (p / self.assignment).is_dir() and not p.name.startswith("."))

    def missing_students(self, submitted: set[str]) -> list[str]:
        with Gradebook(self.db_url, self.coursedir.course_id) as gb:
            return sorted(s.id for s in gb.students if s.id not in submitted)

    # -- resume

    def _fingerprint(self, student: str) -> str:
        return submission_digest(self.submitted / student / self.assignment)

    def finished_row(self, student: str) -> Row | None:
        """The row of an earlier run, if this exact submission was already graded by these tests and grader."""
        marker = self.autograded / student / self.assignment / MARKER
        try:
            saved = json.loads(marker.read_text())
        except (OSError, ValueError):
            return None
        if saved.get("fingerprint") != self._fingerprint(student):
            self.regrade_reasons[student] = "the submission changed"
            return None
        reason = why_regrade(saved, self._graded_with(student))
        if reason:
            self.regrade_reasons[student] = reason
            return None
        row = Row(student, self.assignment, 0.0, self.max_score, saved["status"], saved.get("detail", ""),
                  reused=True, points_in_process=float(saved.get("points_in_process", 0.0)))
        return row if self._read_score(row) else None

    def _graded_with(self, student: str) -> dict[str, str]:
        return dict(self.graded_with, deadline=self.deadline.key(student))

    def _read_score(self, row: Row) -> bool:
        """Fill in the row's score (after any late penalty), penalty and lateness; False if not in the gradebook."""
        with Gradebook(self.db_url, self.coursedir.course_id) as gb:
            try:
                submission = gb.find_submission(self.assignment, row.student_id)
            except MissingEntry:
                return False
            row.penalty = float(submission.late_submission_penalty or 0.0)
            row.score = float(submission.score) - row.penalty
            row.late = deadlines.lateness(self.submitted / row.student_id / self.assignment,
                                          submission.total_seconds_late,
                                          self.deadline.deadline_for(row.student_id) is not None)
            row.points_by_hand, row.to_grade_by_hand = hand_graded(submission)
            return True

    # -- before execution

    def prepare(self, student: str) -> tuple[Row, list[Task]]:
        """Register the submission and sanitize its notebooks; return its row so far and its tasks."""
        row = Row(student, self.assignment, 0.0, self.max_score)
        source = self.submitted / student / self.assignment
        timestamp = deadlines.submission_time(source, self.deadline, student,
                                              self.coursedir.get_existing_timestamp(str(source)))
        with Gradebook(self.db_url, self.coursedir.course_id) as gb:
            gb.update_or_create_student(student)
            # None when the LMS gave no time: a time from an earlier collect must not linger
            gb.update_or_create_submission(self.assignment, student, timestamp=timestamp)
            if self.deadline_managed:
                deadlines.record_extension(gb, self.assignment, student, self.deadline)
        staging = self.staging / student / self.assignment
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        copy_course_files(self.course.solutions / self.assignment, staging)
        tasks = []
        self.results[student] = []
        for notebook_id in self.notebook_ids:
            path = source / f"{notebook_id}.ipynb"
            problem = None
            if not path.exists():
                problem = f"{notebook_id}.ipynb is missing from the submission"
            else:
                try:
                    submitted = read_submission(path)
                    why = wrong_assignment(submitted, self.assignment, self._graded_cells(notebook_id))
                    if why:
                        raise InvalidNotebook(why)
                    prepared = prepare(submitted, self._source(notebook_id))
                    nb = self._bookkeeping(prepared, student, notebook_id)
                except InvalidNotebook as error:
                    problem = f"{notebook_id}.ipynb: {error}"
            if problem:
                self._zero(student, notebook_id)
                worsen(row, "invalid notebook", problem)
                write_problem_notebook(staging / f"{notebook_id}.ipynb", problem)
                continue
            # Kept here until graded (it holds the hidden tests); the notebook runs in a working folder of its own.
            self.sanitized[student, notebook_id] = nb
            # Plain dicts of what the worker needs: unpickling nbformat's classes would import nbformat there.
            cwd = working_folder(self.course.grading, self.assignment, self.course.solutions / self.assignment)
            tasks.append(Task(student, notebook_id, cells_to_run(prepared), str(cwd), self.limits,
                              dict(NOTEBOOK_ENV), self._trusted(notebook_id), str(staging)))
        return row, tasks

    def _graded_cells(self, notebook_id: str) -> dict[str, set[str]]:
        """The graded cells' ids of this notebook's source, and of every other assignment: which notebook is which."""
        if notebook_id not in self.graded_cells:
            cells = {a: set().union(*[graded_ids(nbformat.read(nb, as_version=4)) for nb in self.course.notebooks(a)])
                     for a in self.course.assignments() if a != self.assignment}
            source = self.course.solutions / self.assignment / f"{notebook_id}.ipynb"
            cells[self.assignment] = graded_ids(nbformat.read(source, as_version=4))
            self.graded_cells[notebook_id] = cells
        return self.graded_cells[notebook_id]

    def _source(self, notebook_id: str) -> dict:
        """The source notebook (solutions/, as the gradebook has it), read once: its tests, kinds and points."""
        if notebook_id not in self.sources:
            with open(self.course.solutions / self.assignment / f"{notebook_id}.ipynb", encoding="utf-8") as file:
                self.sources[notebook_id] = json.load(file)
        return self.sources[notebook_id]

    def _trusted(self, notebook_id: str) -> dict:
        """The instructor's cells the referee runs, read once per notebook from the source."""
        if notebook_id not in self.trusted:
            self.trusted[notebook_id] = referee.trusted_cells(self._source(notebook_id))
        return self.trusted[notebook_id]

    def _resources(self, student: str, notebook_id: str) -> dict:
        return {"unique_key": notebook_id, "nbgrader": {
            "student": student, "assignment": self.assignment, "notebook": notebook_id,
            "db_url": self.db_url, "course_id": self.coursedir.course_id}}

    def _bookkeeping(self, prepared: dict, student: str, notebook_id: str):
        """The prepared notebook as nbgrader records it (checksums, kernel spec, checked metadata). It changes
        no cell: what runs is exactly ``cells_to_run(prepared)``, and the graded notebook shows those cells."""
        resources = self._resources(student, notebook_id)
        nb = nbformat.from_dict(prepared)
        try:
            for kind in (ClearOutput, OverwriteKernelspec, OverwriteCells, CheckCellMetadata):
                nb, resources = kind(config=self.config)(nb, resources)
        except Exception as error:  # nbgrader says what is wrong with the cells
            raise InvalidNotebook(f"its cells cannot be graded ({error})") from error
        if [(c.cell_type, c.source) for c in nb.cells] != [(c["cell_type"], c["source"]) for c in cells_to_run(prepared)]:
            raise InvalidNotebook("its cells cannot be graded (nbgrader's records disagree with the tests)")
        return nb

    def _zero(self, student: str, notebook_id: str) -> None:
        with Gradebook(self.db_url, self.coursedir.course_id) as gb:
            notebook = gb.find_submission_notebook(notebook_id, self.assignment, student)
            for grade in notebook.grades:
                grade.auto_score = 0
                grade.needs_manual_grade = False
            gb.db.commit()

    # -- after execution

    def finish_task(self, task: Task, execution: Execution) -> Row | None:
        """Score one executed notebook; when the student's last one is in, finish the student."""
        path = Path(task.graded) / f"{task.notebook_id}.ipynb"
        nb = self.sanitized.pop((task.student_id, task.notebook_id))
        for index, outputs in execution.outputs.items():
            cell = nb.cells[index]
            cell.outputs = [nbformat.from_dict(o) for o in outputs]
            cell.execution_count = execution.execution_counts.get(index)
        resources = self._resources(task.student_id, task.notebook_id)
        resources["verdicts"] = {task.cells[i]["grade_id"]: v.passed for i, v in execution.verdicts.items()}
        for kind in (IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveVerdicts,
                     AssignLatePenalties, CheckCellMetadata):
            nb, resources = kind(config=self.config)(nb, resources)
        nbformat.write(nb, path)
        row, _ = self.pending[task.student_id]
        row.points_in_process += points_in_process(nb, execution.decided)
        if execution.status != "graded":
            where = _cell_name(nb, execution.cell)
            worsen(row, execution.status, f"{task.notebook_id}, {where}"
                                           f"{': ' + execution.detail if execution.detail else ''}")
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
        staging = self.staging / student / self.assignment
        (staging / MARKER).write_text(json.dumps({
            "fingerprint": self._fingerprint(student), "graded_with": self._graded_with(student),
            "status": row.status, "detail": row.detail, "points_in_process": row.points_in_process}))
        final = self.autograded / student / self.assignment
        final.parent.mkdir(parents=True, exist_ok=True)
        old = final.with_name(f".{self.assignment}.old")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        staging.rename(final)
        shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(self.staging / student, ignore_errors=True)
        self._read_score(row)
        return row


def points_in_process(nb, decided: set[int]) -> float:
    """Points of the notebook's test cells the referee did not decide: their verdict came from the student's
    own process alone (where its code can reach the grader's objects), guarded only by the tamper guard."""
    return sum(float(c.metadata["nbgrader"].get("points") or 0) for i, c in enumerate(nb.cells)
               if c.cell_type == "code" and referee.test_cell_id(c) and i not in decided)


def _cell_name(nb, index: int | None) -> str:
    """How a person finds a cell: the graded test's id, else the exercise it follows, else its number."""
    if index is None:
        return "unknown cell"
    grade_id = nb.cells[index].metadata.get("nbgrader", {}).get("grade_id")
    if grade_id:
        return f"cell '{grade_id}'"
    before = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells[:index]]
    named = [g for g in before if g]
    return f"cell {index + 1}" + (f" (after '{named[-1]}')" if named else "")


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
