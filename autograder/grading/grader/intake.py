"""A submission made ready to run: registered in the gradebook, and each notebook read safely, prepared as
``check`` prepares it (``autograder.grading.running.preparation``: the tests put back from the source) and
recorded as nbgrader records it (checksums, kernel spec, checked cell metadata)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, OverwriteCells, OverwriteKernelspec

from autograder.grading.grader.assignment import Assignment
from autograder.grading.records import deadlines
from autograder.grading.records.submissions import InvalidNotebook, graded_ids, read_submission, wrong_assignment
from autograder.grading.running.judging import referee
from autograder.grading.running.preparation import cells_to_run, copy_course_files, prepare


class Intake:
    """Registers one assignment's submissions and prepares their notebooks; reads each source notebook once."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.sources: dict[str, dict] = {}  # notebook -> the source notebook (JSON): tests, kinds, points
        self.trusted_cells: dict[str, dict] = {}  # notebook -> the instructor's cells the referee runs
        self.graded_cells: dict[str, dict[str, set[str]]] = {}  # notebook -> grade_ids by assignment

    def register(self, student: str) -> Path:
        """Record the student and their submission (its time, their extension) in the gradebook; return their
        staging folder, emptied, with the course's files the notebooks read."""
        assignment = self.assignment
        source = assignment.submission(student)
        timestamp = deadlines.submission_time(source, assignment.deadline, student,
                                              assignment.coursedir.get_existing_timestamp(str(source)))
        with assignment.gradebook() as gb:
            gb.update_or_create_student(student)
            # None when the LMS gave no time: a time from an earlier collect must not linger
            gb.update_or_create_submission(assignment.name, student, timestamp=timestamp)
            if assignment.deadline_managed:
                deadlines.record_extension(gb, assignment.name, student, assignment.deadline)
        staging = assignment.fresh_staging(student)
        copy_course_files(assignment.solutions, staging)
        return staging

    def notebook(self, student: str, notebook_id: str) -> tuple[dict, object]:
        """The student's notebook prepared (what runs: ``cells_to_run``) and as nbgrader records it.
        Raises ``InvalidNotebook`` saying, in one line that names the notebook, why it cannot be graded."""
        path = self.assignment.submission(student) / f"{notebook_id}.ipynb"
        if not path.exists():
            raise InvalidNotebook(f"{notebook_id}.ipynb is missing from the submission")
        try:
            submitted = read_submission(path)
            why = wrong_assignment(submitted, self.assignment.name, self._graded_cells(notebook_id))
            if why:
                raise InvalidNotebook(why)
            prepared = prepare(submitted, self.source(notebook_id))
            return prepared, self.bookkeeping(prepared, student, notebook_id)
        except InvalidNotebook as error:
            raise InvalidNotebook(f"{notebook_id}.ipynb: {error}") from error

    def source(self, notebook_id: str) -> dict:
        """The source notebook (solutions/, as the gradebook has it), read once: its tests, kinds and points."""
        if notebook_id not in self.sources:
            with open(self.assignment.solutions / f"{notebook_id}.ipynb", encoding="utf-8") as file:
                self.sources[notebook_id] = json.load(file)
        return self.sources[notebook_id]

    def trusted(self, notebook_id: str) -> dict:
        """The instructor's cells the referee runs, read once per notebook from the source."""
        if notebook_id not in self.trusted_cells:
            self.trusted_cells[notebook_id] = referee.trusted_cells(self.source(notebook_id))
        return self.trusted_cells[notebook_id]

    def bookkeeping(self, prepared: dict, student: str, notebook_id: str):
        """The prepared notebook as nbgrader records it (checksums, kernel spec, checked metadata). It changes
        no cell: what runs is exactly ``cells_to_run(prepared)``, and the graded notebook shows those cells."""
        resources = self.assignment.nbgrader_resources(student, notebook_id)
        nb = nbformat.from_dict(prepared)
        try:
            for kind in (ClearOutput, OverwriteKernelspec, OverwriteCells, CheckCellMetadata):
                nb, resources = kind(config=self.assignment.config)(nb, resources)
        except Exception as error:  # nbgrader says what is wrong with the cells
            raise InvalidNotebook(f"its cells cannot be graded ({error})") from error
        if [(c.cell_type, c.source) for c in nb.cells] != [(c["cell_type"], c["source"]) for c in cells_to_run(prepared)]:
            raise InvalidNotebook("its cells cannot be graded (nbgrader's records disagree with the tests)")
        return nb

    def _graded_cells(self, notebook_id: str) -> dict[str, set[str]]:
        """The graded cells' ids of this notebook's source, and of every other assignment: which notebook is which."""
        if notebook_id not in self.graded_cells:
            course, name = self.assignment.course, self.assignment.name
            cells = {a: set().union(*[graded_ids(nbformat.read(nb, as_version=4)) for nb in course.notebooks(a)])
                     for a in course.assignments() if a != name}
            cells[name] = graded_ids(nbformat.read(self.assignment.solutions / f"{notebook_id}.ipynb", as_version=4))
            self.graded_cells[notebook_id] = cells
        return self.graded_cells[notebook_id]
