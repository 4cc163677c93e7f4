"""What an earlier run graded: a marker beside each autograded submission says what, so a run resumes.

A submission whose marker matches its files and what grades them (the assignment's source and tests,
the grader's version, the student's deadline: ``autograder.grading.records.fingerprint``) keeps its grade;
any other is graded again, and its row says why.
"""

from __future__ import annotations

import json
from pathlib import Path

from nbgrader.api import MissingEntry

from autograder.grading.grader.assignment import Assignment
from autograder.grading.records import deadlines
from autograder.grading.records.fingerprint import graded_with, submission_digest, why_regrade
from autograder.grading.records.grades import Row, hand_graded

MARKER = ".autograder.json"


class Resume:
    """The markers of one assignment's submissions, and the scores the gradebook holds for them."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment
        self.graded_with = graded_with(assignment.solutions)
        self.regrade_reasons: dict[str, str] = {}  # student -> why their earlier grade no longer holds

    def finished_row(self, student: str) -> Row | None:
        """The row of an earlier run, if this exact submission was already graded by these tests and grader."""
        marker = self.assignment.autograded / student / self.assignment.name / MARKER
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
        row = self.assignment.row(student, status=saved["status"], detail=saved.get("detail", ""), reused=True,
                                  points_in_process=float(saved.get("points_in_process", 0.0)))
        return row if self.read_score(row) else None

    def mark(self, folder: Path, student: str, row: Row) -> None:
        """Write the marker into the student's graded ``folder``: what was graded, by what, and how it ended."""
        (folder / MARKER).write_text(json.dumps({
            "fingerprint": self._fingerprint(student), "graded_with": self._graded_with(student),
            "status": row.status, "detail": row.detail, "points_in_process": row.points_in_process}))

    def read_score(self, row: Row) -> bool:
        """Fill in the row's score (after any late penalty), penalty and lateness; False if not in the gradebook."""
        assignment = self.assignment
        with assignment.gradebook() as gb:
            try:
                submission = gb.find_submission(assignment.name, row.student_id)
            except MissingEntry:
                return False
            row.penalty = float(submission.late_submission_penalty or 0.0)
            row.score = float(submission.score) - row.penalty
            row.late = deadlines.lateness(assignment.submission(row.student_id), submission.total_seconds_late,
                                          assignment.deadline.deadline_for(row.student_id) is not None)
            row.points_by_hand, row.to_grade_by_hand = hand_graded(submission)
            return True

    def _fingerprint(self, student: str) -> str:
        return submission_digest(self.assignment.submission(student))

    def _graded_with(self, student: str) -> dict[str, str]:
        return dict(self.graded_with, deadline=self.assignment.deadline.key(student))
