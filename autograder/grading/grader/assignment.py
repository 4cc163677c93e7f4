"""The assignment being graded, as every job of grading sees it: settings, gradebook, folders, notebooks, points."""

from __future__ import annotations

import shutil
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory

from autograder.course import Course
from autograder.grading.records import deadlines
from autograder.grading.records.grades import Row
from autograder.grading.running.confinement.limits import Limits


class Assignment:
    """One assignment of a course, graded with ``limits``; reading it records a managed due date in the gradebook."""

    def __init__(self, course: Course, name: str, limits: Limits) -> None:
        self.course, self.name, self.limits = course, name, limits
        self.config = course.config()
        self.coursedir = CourseDirectory(config=self.config)
        self.db_url = self.coursedir.db_url
        self.submitted = course.grading / "submitted"
        self.autograded = course.grading / "autograded"
        self.staging = course.grading / ".staging"
        self.solutions = course.solutions / name
        self.deadline = deadlines.load(course, name)
        # A due date set with nbgrader's own tools is left alone until `deadline` is used for the assignment.
        self.deadline_managed = deadlines.is_managed(course, name)
        self.config.merge(deadlines.nbgrader_config(self.deadline))
        with self.gradebook() as gb:
            if self.deadline_managed:
                deadlines.record_due_date(gb, name, self.deadline)
            notebooks = gb.find_assignment(name).notebooks
            self.notebook_ids = [nb.name for nb in notebooks]
            self.max_score = float(sum(nb.max_score for nb in notebooks))

    def gradebook(self) -> Gradebook:
        return Gradebook(self.db_url, self.coursedir.course_id)

    def row(self, student: str, **fields) -> Row:
        """A student's row of this assignment, at 0 points so far."""
        return Row(student, self.name, 0.0, self.max_score, **fields)

    # -- which students

    def submitted_students(self) -> list[str]:
        if not self.submitted.is_dir():
            return []
        return sorted(p.name for p in self.submitted.iterdir() if (p / self.name).is_dir() and not p.name.startswith("."))

    def missing_students(self, submitted: set[str]) -> list[str]:
        with self.gradebook() as gb:
            return sorted(s.id for s in gb.students if s.id not in submitted)

    # -- a student's folders: submitted, staged while graded, autograded once finished

    def submission(self, student: str) -> Path:
        return self.submitted / student / self.name

    def staged(self, student: str) -> Path:
        """Where the student's graded notebooks are written, until ``move_into_place``."""
        return self.staging / student / self.name

    def fresh_staging(self, student: str) -> Path:
        """The student's staging folder, emptied."""
        staging = self.staged(student)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def move_into_place(self, student: str) -> None:
        """The staging folder becomes the student's autograded folder (an earlier one is replaced)."""
        final = self.autograded / student / self.name
        final.parent.mkdir(parents=True, exist_ok=True)
        old = final.with_name(f".{self.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        self.staged(student).rename(final)
        shutil.rmtree(old, ignore_errors=True)
        shutil.rmtree(self.staging / student, ignore_errors=True)

    # -- the gradebook's records of one notebook

    def nbgrader_resources(self, student: str, notebook_id: str) -> dict:
        """What nbgrader's preprocessors need to know of the notebook they process."""
        return {"unique_key": notebook_id, "nbgrader": {
            "student": student, "assignment": self.name, "notebook": notebook_id,
            "db_url": self.db_url, "course_id": self.coursedir.course_id}}

    def zero(self, student: str, notebook_id: str) -> None:
        """Every grade of the student's notebook at 0, none waiting for a hand."""
        with self.gradebook() as gb:
            notebook = gb.find_submission_notebook(notebook_id, self.name, student)
            for grade in notebook.grades:
                grade.auto_score = 0
                grade.needs_manual_grade = False
            gb.db.commit()
