"""An executed notebook scored: its outputs put back into the sanitized notebook, each test cell's points from its
verdict (``SaveVerdicts``: the referee's, never a number the cell's outputs show; answers graded by hand stay
nbgrader's), the late penalty, and the graded notebook written where the student's folder is being made."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput

from autograder.grading.grader.assignment import Assignment
from autograder.grading.records.grades import Row, worsen
from autograder.grading.records.scores import SaveVerdicts
from autograder.grading.running.executor import Execution
from autograder.grading.running.judging import referee


class Scoring:
    """Scores one assignment's executed notebooks into the gradebook and their students' rows."""

    def __init__(self, assignment: Assignment) -> None:
        self.assignment = assignment

    def graded_notebook(self, nb, task, execution: Execution):
        """Score the sanitized notebook ``nb`` of ``task`` (``grade.Task``) with what its run gave; write it into
        the student's graded folder and return it."""
        path = Path(task.graded) / f"{task.notebook_id}.ipynb"
        for index, outputs in execution.outputs.items():
            cell = nb.cells[index]
            cell.outputs = [nbformat.from_dict(o) for o in outputs]
            cell.execution_count = execution.execution_counts.get(index)
        resources = self.assignment.nbgrader_resources(task.student_id, task.notebook_id)
        resources["verdicts"] = {task.cells[i]["grade_id"]: v.passed for i, v in execution.verdicts.items()}
        for kind in (IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveVerdicts,
                     AssignLatePenalties, CheckCellMetadata):
            nb, resources = kind(config=self.assignment.config)(nb, resources)
        nbformat.write(nb, path)
        return nb

    @staticmethod
    def add_to_row(row: Row, nb, notebook_id: str, execution: Execution) -> None:
        """What the scored notebook ``nb`` adds to its student's row: the points only the student's own process
        decided, and how its run ended when that was not as graded (where, and why)."""
        row.points_in_process += points_in_process(nb, execution.decided)
        if execution.status != "graded":
            where = cell_name(nb, execution.cell)
            worsen(row, execution.status, f"{notebook_id}, {where}"
                                          f"{': ' + execution.detail if execution.detail else ''}")


def points_in_process(nb, decided: set[int]) -> float:
    """Points of the notebook's test cells the referee did not decide: their verdict came from the student's
    own process alone (where its code can reach the grader's objects), guarded only by the tamper guard."""
    return sum(float(c.metadata["nbgrader"].get("points") or 0) for i, c in enumerate(nb.cells)
               if c.cell_type == "code" and referee.test_cell_id(c) and i not in decided)


def cell_name(nb, index: int | None) -> str:
    """How a person finds a cell: the graded test's id, else the exercise it follows, else its number."""
    if index is None:
        return "unknown cell"
    grade_id = nb.cells[index].metadata.get("nbgrader", {}).get("grade_id")
    if grade_id:
        return f"cell '{grade_id}'"
    before = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells[:index]]
    named = [g for g in before if g]
    return f"cell {index + 1}" + (f" (after '{named[-1]}')" if named else "")
