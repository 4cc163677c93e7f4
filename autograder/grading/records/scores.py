"""A test cell's points in nbgrader's gradebook: from its verdict alone (``grade`` scores with ``SaveVerdicts``).

The gradebook is what grades.csv, ``export``, the report and nbgrader's own feedback pages and
formgrader read, so a score written here is the score everywhere.
"""

from __future__ import annotations

from nbgrader.preprocessors import SaveAutoGrades


class SaveVerdicts(SaveAutoGrades):
    """nbgrader's ``SaveAutoGrades``, except that a code test cell scores its points iff its verdict passed
    (``resources["verdicts"]``: grade id -> passed), else 0: never nbgrader's partial credit, which takes
    the first number a test cell's outputs show (a student's code can emit one from anywhere). Answers
    (05's written derivations) keep nbgrader's rule: 0 when left blank, else graded by hand."""

    def _add_score(self, cell, resources) -> None:
        if cell.cell_type != "code" or cell.metadata["nbgrader"].get("solution"):
            return super()._add_score(cell, resources)
        grade = self.gradebook.find_grade(cell.metadata["nbgrader"]["grade_id"], self.notebook_id,
                                          self.assignment_id, self.student_id)
        passed = resources["verdicts"].get(grade.name, False)
        grade.auto_score = float(grade.max_score) if passed else 0.0
        grade.needs_manual_grade = grade.manual_score is not None  # an instructor's score is kept, to review
        self.gradebook.db.commit()
