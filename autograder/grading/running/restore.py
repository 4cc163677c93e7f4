"""Put a submission's tests back where the gradebook has them, whatever the student did to them.

nbgrader restores the source and points of a test cell that is still there (``OverwriteCells``),
but a notebook whose cells were renamed, duplicated, deleted or moved either cannot be graded at
all or loses the test's points: a renamed or duplicated grade id or broken metadata makes the
whole notebook invalid, a deleted test scores 0, and a test moved above the exercise it tests
fails. Run before nbgrader's other preprocessors, ``RestoreTests`` makes such a notebook gradable:

- a cell whose nbgrader metadata is broken, names a grade id the gradebook does not know, or
  repeats one that a later cell has becomes an ordinary code cell; the others get their kind
  (test or exercise) and points from the gradebook;
- a test that is missing is inserted again, from the gradebook, with a note saying so, just
  before the graded cell that follows it in the assignment; a test that now comes before one of
  the cells it follows in the assignment is moved there too;
- the hidden-test markers are defused in every other cell: in a student's cell they would make
  nbgrader's feedback fail (a hidden-test region outside a test cell is an error).

``OverwriteCells`` then restores each test's source (hidden tests included) and points.
"""

from __future__ import annotations

import nbformat
from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.grading.running.protocol import defuse_markers

RESTORED_NOTE = "*The test below was missing from the submission; the grader put it back.*"


def _grade_id(cell) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta.get("grade_id") if isinstance(meta, dict) else None


def _index(nb, grade_id: str) -> int | None:
    return next((i for i, cell in enumerate(nb.cells) if _grade_id(cell) == grade_id), None)


def _last(nb, grade_ids: list[str]) -> int | None:
    """The position of the last of ``grade_ids``' cells in the notebook (None: none is there)."""
    return max((i for i in map(lambda g: _index(nb, g), grade_ids) if i is not None), default=None)


class RestoreTests(NbGraderPreprocessor):
    """Forget nbgrader metadata the gradebook does not know; put missing or misplaced tests back."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        with Gradebook(info["db_url"], info.get("course_id", "")) as gb:
            notebook = gb.find_notebook(info["notebook"], info["assignment"])
            order = [cell.name for cell in notebook.source_cells]
            points = {cell.name: cell.max_score for cell in notebook.grade_cells}
            solutions = {cell.name for cell in notebook.solution_cells}
            sources = {cell.name: (cell.source, cell.cell_type, cell.locked, cell.checksum)
                       for cell in notebook.source_cells if cell.name in points}
        seen = set()
        for cell in reversed(nb.cells):  # of duplicates, the last one keeps its metadata (as in DeduplicateIds)
            name = _grade_id(cell)
            if name in order and name not in seen:  # what kind of cell it is comes from the gradebook
                seen.add(name)
                cell.metadata.nbgrader.update(grade=name in points, solution=name in solutions, task=False,
                                              schema_version=3, **({"points": points[name]} if name in points else {}))
            elif "nbgrader" in cell.get("metadata", {}):
                del cell.metadata["nbgrader"]
        for position, name in enumerate(order):
            if name not in points:
                continue
            index, anchor = _index(nb, name), _last(nb, order[:position])
            if index is not None and (anchor is None or index > anchor):
                continue  # in place
            if index is None:
                new = [nbformat.v4.new_markdown_cell(RESTORED_NOTE),
                       self._cell_from_gradebook(nb, name, sources[name], points[name], name in solutions)]
            else:  # above the exercise it tests: move it below
                new = [nb.cells.pop(index)]
                anchor = _last(nb, order[:position])
            # As late as it can go: before the next graded cell after the earlier ones (else at the end),
            # so it follows its exercise even when that exercise's cell was renamed.
            later = [i for i in (_index(nb, name) for name in order[position + 1:])
                     if i is not None and (anchor is None or i > anchor)]
            at = min(later, default=len(nb.cells))
            nb.cells[at:at] = new
        for cell in nb.cells:
            if not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
                cell.source = defuse_markers(cell.source)
        if nb.nbformat_minor < 5:
            for cell in nb.cells:
                cell.pop("id", None)
        return nb, resources

    @staticmethod
    def _cell_from_gradebook(nb, name, source, points, is_solution):
        text, cell_type, locked, checksum = source
        used = {cell.get("id") for cell in nb.cells}
        cell = (nbformat.v4.new_code_cell if cell_type == "code" else nbformat.v4.new_markdown_cell)(text)
        cell.id = next(f"{name}-restored-{n}" if n else name for n in range(len(used) + 1)
                       if (f"{name}-restored-{n}" if n else name) not in used)
        cell.metadata = nbformat.from_dict({"editable": False, "deletable": False, "nbgrader": {
            "grade": True, "solution": is_solution, "locked": locked, "task": False, "grade_id": name,
            "points": points, "checksum": checksum, "schema_version": 3}})
        return cell
