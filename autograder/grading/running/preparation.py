"""One preparation of a submission, shared by ``grade`` and ``check``: the cells that run, and where.

A submitted notebook is untrusted: its tests may be edited, deleted, duplicated, moved above the
exercise they test, renamed, re-pointed or stripped of their metadata. ``prepare`` makes the
notebook that is run and graded from it and from the *source* notebook (``solutions/``, or the
released ``course/`` in a student distribution, where the tests are the visible ones):

- a cell whose nbgrader metadata is broken, names a grade id the source does not know, or repeats
  one that a later cell has becomes an ordinary cell; the others get their kind (test, answer,
  locked), their points and their cell type from the source, and a test or other locked cell gets
  the source's text (hidden tests included);
- a test that is missing is put back, with a note saying so, just before the graded cell that
  follows it in the source (a deleted answer comes back blank, as released); a test that now comes
  before one of the cells it follows in the source is moved there too;
- the hidden-test markers are defused in every other cell (in a student's cell they would make
  nbgrader's feedback fail), and outputs are cleared.

Written on plain JSON dicts, without nbgrader, so that ``check`` runs without importing it; ``grade``
runs exactly these cells and keeps nbgrader's gradebook bookkeeping (checksums) on top.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from pathlib import Path

from autograder.course import is_dropping

RESTORED_NOTE = "*The test below was missing from the submission; the grader put it back.*"
MARKER_WORDS = "HIDDEN TESTS"  # the words of nbgrader's markers "### BEGIN/END HIDDEN TESTS"
# What nbgrader's release (ClearSolutions) leaves of an answer: the student's starting point.
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"
BEGIN, END = "### BEGIN " "SOLUTION", "### END " "SOLUTION"  # in two parts: no file shipped to students holds a marker
SOLUTION_REGION = re.compile(rf"^([ \t]*){BEGIN}[^\n]*\n.*?^[ \t]*{END}[^\n]*$", re.S | re.M)
# How a notebook's process is started, in grade and in check alike.
NOTEBOOK_ENV = {"NBGRADER_EXECUTION": "autograde", "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
# Where a notebook runs, in grade and in check alike: grading/.running/<random>/<assignment>/.
WORKING_FOLDERS = ".running"


def text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def nbgrader_meta(cell: dict) -> dict:
    """A cell's nbgrader metadata, or {} (also when it is not a dict: broken metadata)."""
    metadata = cell.get("metadata")
    meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return meta if isinstance(meta, dict) else {}


def grade_id(cell: dict) -> str | None:
    name = nbgrader_meta(cell).get("grade_id")
    return name if isinstance(name, str) else None


def is_test(cell: dict) -> bool:
    """A graded cell that is not an answer (nbgrader: grade, not solution)."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def is_locked(cell: dict) -> bool:
    """Whether nbgrader puts the cell's text back from the source (tests, and cells marked locked)."""
    meta = nbgrader_meta(cell)
    return not meta.get("solution") and bool(meta.get("grade") or meta.get("locked"))


def source_cells(source: dict) -> dict[str, dict]:
    """The source notebook's cells that nbgrader records (tests, answers, locked cells), by grade id, in order."""
    found = {}
    for cell in source["cells"]:
        meta = nbgrader_meta(cell)
        name = grade_id(cell)
        if name and (meta.get("grade") or meta.get("solution") or meta.get("locked") or meta.get("task")):
            found.setdefault(name, cell)
    return found


def points(cell: dict) -> float:
    return float(nbgrader_meta(cell).get("points") or 0)


def blank_answer(cell: dict) -> str:
    """An answer cell as released: each solution region (or the whole cell) replaced by nbgrader's stub."""
    stub = CODE_STUB if cell.get("cell_type") == "code" else TEXT_STUB
    source = text(cell)
    if not SOLUTION_REGION.search(source):
        return stub
    return SOLUTION_REGION.sub(lambda m: "\n".join(m.group(1) + line for line in stub.splitlines()), source)


def prepare(submitted: dict, source: dict) -> dict:
    """The notebook that runs and is graded: ``submitted`` (nbformat v4 as a dict, left unchanged) with the
    tests, kinds and points of ``source`` (the notebook holding the tests), as the module's docstring says."""
    nb = json.loads(json.dumps(submitted))  # plain dicts, a copy (nbformat's nodes copy what is put into them)
    cells = nb["cells"] = [c for c in nb.get("cells", []) if isinstance(c, dict)]
    known = source_cells(source)
    order = list(known)
    seen: set[str] = set()
    for cell in reversed(cells):  # of duplicates, the last one keeps its metadata (as nbgrader's DeduplicateIds)
        name = grade_id(cell)
        if not isinstance(cell.get("metadata"), dict):
            cell["metadata"] = {}
        if name in known and name not in seen:
            seen.add(name)
            _make_like(cell, known[name])
        else:
            cell["metadata"].pop("nbgrader", None)
    graded = [name for name in order if nbgrader_meta(known[name]).get("grade")]
    for position, name in enumerate(order):
        if name not in graded:
            continue
        index, anchor = _index(cells, name), _last(cells, order[:position])
        if index is not None and (anchor is None or index > anchor):
            continue  # in place
        if index is None:
            new = [{"cell_type": "markdown", "metadata": {}, "source": RESTORED_NOTE},
                   _make_like({"metadata": {"editable": False, "deletable": False}}, known[name])]
            if nbgrader_meta(known[name]).get("solution"):
                new[1]["source"] = blank_answer(known[name])
        else:  # above the exercise it tests: move it below
            new = [cells.pop(index)]
            anchor = _last(cells, order[:position])
        # As late as it can go: before the next graded cell after the earlier ones (else at the end),
        # so it follows its exercise even when that exercise's cell was renamed.
        later = [i for i in (_index(cells, n) for n in order[position + 1:])
                 if i is not None and (anchor is None or i > anchor)]
        at = min(later, default=len(cells))
        cells[at:at] = new
    for cell in cells:
        cell["source"] = text(cell)
        if not nbgrader_meta(cell).get("grade") and MARKER_WORDS in text(cell):
            cell["source"] = text(cell).replace(MARKER_WORDS, MARKER_WORDS.replace(" ", "_"))
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    _ids(nb)
    return nb


def _make_like(cell: dict, theirs: dict) -> dict:
    """Give ``cell`` the source cell ``theirs``'s kind, points and type, and its text if that is locked."""
    meta = nbgrader_meta(theirs)
    mine = cell["metadata"]["nbgrader"] = dict(nbgrader_meta(cell))
    mine.update(grade=bool(meta.get("grade")), solution=bool(meta.get("solution")), locked=is_locked(theirs),
                task=False, grade_id=grade_id(theirs), schema_version=3)
    if meta.get("grade"):
        mine["points"] = points(theirs)
    else:
        mine.pop("points", None)
    if is_locked(theirs) or "source" not in cell:
        cell["source"] = text(theirs)
    cell["cell_type"] = theirs["cell_type"]
    if cell["cell_type"] == "code":
        cell.setdefault("outputs", [])
        cell.setdefault("execution_count", None)
    else:
        cell.pop("outputs", None)
        cell.pop("execution_count", None)
    return cell


def _ids(nb: dict) -> None:
    """Cell ids as nbformat wants them: none before 4.5, else unique (a restored cell gets a new one)."""
    if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) < (4, 5):
        for cell in nb["cells"]:
            cell.pop("id", None)
        return
    used = {c.get("id") for c in nb["cells"] if isinstance(c.get("id"), str)}
    for number, cell in enumerate(nb["cells"]):
        if not isinstance(cell.get("id"), str):
            base = grade_id(cell) or f"cell-{number}"
            cell["id"] = next(f"{base}-restored-{n}" if n else base for n in range(len(used) + 1)
                              if (f"{base}-restored-{n}" if n else base) not in used)
            used.add(cell["id"])


def _index(cells: list[dict], name: str) -> int | None:
    return next((i for i, cell in enumerate(cells) if grade_id(cell) == name), None)


def _last(cells: list[dict], names: list[str]) -> int | None:
    """The position of the last of ``names``' cells (None: none is there)."""
    return max((i for i in (_index(cells, n) for n in names) if i is not None), default=None)


def cells_to_run(prepared: dict) -> list[dict]:
    """What the executor runs, one plain dict per cell (code and markdown, so indexes match the notebook's;
    a Dask worker need not import nbformat): type and text; the grade id of each code test cell (the referee
    judges those) as ``grade_id``, and of each code answer cell (the examinee runs those) as ``answer_id``;
    the cell's id as ``cell_id``."""
    run = []
    for cell in prepared["cells"]:
        entry = {"cell_type": str(cell["cell_type"]), "source": text(cell)}
        if cell.get("id"):
            entry["cell_id"] = str(cell["id"])
        if cell["cell_type"] == "code" and is_test(cell) and grade_id(cell):
            entry["grade_id"] = grade_id(cell)
        elif cell["cell_type"] == "code" and nbgrader_meta(cell).get("solution") and grade_id(cell):
            entry["answer_id"] = grade_id(cell)
        run.append(entry)
    return run


def copy_course_files(source_folder: Path, staging: Path) -> None:
    """The data files beside the source notebook, into the notebook's working folder (as nbgrader's autograde)."""
    for path in Path(source_folder).rglob("*"):
        relative = path.relative_to(source_folder)
        if path.is_file() and path.suffix != ".ipynb" and not is_dropping(relative):
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, staging / relative)


def working_folder(grading: Path, assignment: str, source_folder: Path) -> Path:
    """A new working folder for one run of a notebook, ``grading/.running/<random>/<assignment>/``, with the data
    files beside ``source_folder``'s notebook: made alike by grade and check, its path names neither the student
    nor the command, and no other notebook runs in it (``remove_working_folder`` when the run is over)."""
    folder = Path(grading) / WORKING_FOLDERS / secrets.token_hex(8) / assignment
    folder.mkdir(parents=True)
    copy_course_files(source_folder, folder)
    return folder


def remove_working_folder(folder) -> None:
    """Remove a ``working_folder`` and whatever the notebook left in it."""
    shutil.rmtree(Path(folder).parent, ignore_errors=True)
