"""A submitted notebook read as untrusted input: what is wrong with it is said for the student.

Its size is bounded before anything else reads it (``MAX_*``: the file, then, once parsed, its number of cells
and each cell's size), so that no notebook holds the class: what the grader does with a notebook (prepare it,
scan and run its answers, render its feedback page) takes time in proportion to these. The course's own
notebooks are far below them (solutions/: 109 cells at most, 6,132 characters and 105 lines in the largest
cell, 138,388 characters of source in the largest notebook). Reading the largest notebook they allow takes
about a second (42 MB of saved output: 0.34 s to read, 0.17 s to prepare, at load 7, 2026-12-02).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
from nbformat.corpus.words import generate_corpus_id

from autograder.grading.running.messages import untrusted_json

MAX_NOTEBOOK_BYTES = 50 * 1024**2  # "50 MB" in every message: sizes are counted in MiB, as megabytes() writes them
MAX_CELLS = 1_000                  # cells of any kind
MAX_CODE_CHARACTERS = 50_000       # one code cell's source (an answer cell)
MAX_CODE_LINES = 1_000             # one code cell's source
MAX_SOURCE_CHARACTERS = 1_000_000  # all cells' sources together (markdown included)
MAX_STORED_OUTPUTS = 10_000        # outputs and attachments saved in the notebook (grading clears outputs)
CELL_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # nbformat 4.5's cell id


def megabytes(n: int) -> str:
    """A size as every message about a notebook's size writes it: MB of 1024**2 bytes, or bytes below one."""
    return f"{n / 1024**2:,.0f} MB" if n >= 1024**2 else f"{n:,} bytes"


class InvalidNotebook(Exception):
    """A submitted file that cannot be graded as a notebook; the message says why."""


def read_submission(path: Path):
    """Read a submitted notebook, or raise InvalidNotebook saying, for the student, what is wrong."""
    size = path.stat().st_size
    if size == 0:
        raise InvalidNotebook("the file is empty")
    if size > MAX_NOTEBOOK_BYTES:
        raise InvalidNotebook(f"the file is {megabytes(size)}; notebooks over "
                              f"{megabytes(MAX_NOTEBOOK_BYTES)} are not graded (clear large outputs and resubmit)")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidNotebook(f"the file is not UTF-8 text (byte {error.start}): it is not a notebook") from error
    try:
        data = untrusted_json.loads(text)
    except ValueError as error:  # not JSON, nested too deep, a number too long
        raise InvalidNotebook(f"the file is not valid JSON ({_short(error)}): was it saved by Jupyter?") from None
    if not isinstance(data, dict) or "cells" not in data and "worksheets" not in data:
        raise InvalidNotebook("the file is JSON but not a notebook")
    why = misshapen(data) if "cells" in data else None  # (an nbformat 3 notebook is checked once converted)
    if why is None and "cells" in data and oversized(data["cells"]):
        raise InvalidNotebook(oversized(data["cells"]))
    try:
        notebook = None if why else nbformat.reads(json.dumps(data), as_version=4)  # the checked data
    except Exception as error:
        why = _short(error)
    why = why or misshapen(notebook)
    if why:
        raise InvalidNotebook(f"the notebook cannot be read ({why})")
    if oversized(notebook.cells):
        raise InvalidNotebook(oversized(notebook.cells))
    for cell in notebook.cells:  # a cell id nbformat refuses would make every page of it fail to render
        if "id" in cell and not (isinstance(cell.id, str) and CELL_ID.fullmatch(cell.id)):
            cell.id = generate_corpus_id()
    return notebook


def misshapen(notebook) -> str | None:
    """What in ``notebook`` is not shaped as the grader and nbgrader read it (nbformat only logs such errors)."""
    if not isinstance(notebook.get("metadata", {}), dict) or not isinstance(notebook.get("cells"), list):
        return "its metadata or cells are not what a notebook has"
    for number, cell in enumerate(notebook["cells"], 1):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            return f"cell {number} is not a code, markdown or raw cell"
        source, outputs, attachments = cell.get("source", ""), cell.get("outputs", []), cell.get("attachments", {})
        if not (isinstance(source, str) or isinstance(source, list) and all(isinstance(s, str) for s in source)):
            return f"cell {number}'s source is not text"
        if not isinstance(cell.get("metadata", {}), dict):
            return f"cell {number}'s metadata is not a JSON object"
        if not (isinstance(outputs, list) and all(isinstance(o, dict) for o in outputs)):
            return f"cell {number}'s outputs are not a list of outputs"
        if not (isinstance(attachments, dict) and all(isinstance(a, dict) for a in attachments.values())):
            return f"cell {number}'s attachments are not what a notebook has"
    return None


def oversized(cells: list) -> str | None:
    """Why a notebook of these ``cells`` (well shaped: ``misshapen`` found nothing) is too large to grade, in one
    line for the student, or None. Each limit is far above what the course's notebooks hold."""
    if len(cells) > MAX_CELLS:
        return f"it has {len(cells):,} cells; a notebook may have at most {MAX_CELLS:,} (remove the cells you added)"
    stored = sum(len(cell.get("outputs", [])) + len(cell.get("attachments", {})) for cell in cells)
    if stored > MAX_STORED_OUTPUTS:
        return (f"it holds {stored:,} saved outputs and attachments; a notebook may hold at most "
                f"{MAX_STORED_OUTPUTS:,} (clear its outputs: Edit > Clear Outputs of All Cells, then save)")
    total = 0
    for number, cell in enumerate(cells, 1):
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        characters, lines = len(text), text.count("\n") + 1 if text else 0
        if cell.get("cell_type") == "code" and (characters > MAX_CODE_CHARACTERS or lines > MAX_CODE_LINES):
            return (f"code cell {number} has {characters:,} characters in {lines:,} lines; a code cell may have at "
                    f"most {MAX_CODE_CHARACTERS:,} characters and {MAX_CODE_LINES:,} lines (shorten it)")
        total += characters
    if total > MAX_SOURCE_CHARACTERS:
        return (f"its cells hold {total:,} characters; a notebook may hold at most {MAX_SOURCE_CHARACTERS:,} "
                "(remove what you added)")
    return None


def _short(error: Exception) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:300] + " ..."


def write_problem_notebook(path: Path, problem: str) -> None:
    """A one-cell notebook in the autograded folder, so the feedback says what went wrong."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"## This submission could not be graded\n\n{problem}\n\nEvery test in it scores 0. "
        "Open the notebook in JupyterLab, check that it runs, save it, and hand it in again."))
    nbformat.write(nb, path)


def graded_ids(notebook) -> set[str]:
    """The grade_ids of a notebook's nbgrader cells (answers and tests): what says which assignment it is."""
    found = set()
    for cell in notebook["cells"] if isinstance(notebook, dict) else notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if isinstance(meta, dict) and (meta.get("grade") or meta.get("solution")) and meta.get("grade_id"):
            found.add(str(meta["grade_id"]))
    return found


def wrong_assignment(notebook, assignment: str, others: dict[str, set[str]]) -> str | None:
    """Why ``notebook`` is not ``assignment``'s, or None: it holds more graded cells of another assignment
    than of this one (``others``: each assignment's grade_ids, this one's included). A notebook whose test
    cells were deleted is still this assignment's: its tests are put back when it is graded."""
    mine, expected = graded_ids(notebook), others.get(assignment, set())
    best = max((a for a in others if a != assignment), key=lambda a: len(mine & others[a]), default=None)
    if best is None or len(mine & others[best]) <= len(mine & expected):
        return None
    return (f"this looks like assignment {best}'s notebook, not {assignment}'s (its graded cells are "
            f"{best}'s): hand in your {assignment}.ipynb")
