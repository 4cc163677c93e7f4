"""What a grade depends on, as digests: the submission, and what graded it.

``grade`` writes both into the marker beside each autograded submission and grades again when
either changes: a fixed test in ``solutions/`` regrades that assignment's submissions, an upgraded
grader regrades everything, and nothing changed means nothing is graded again.
"""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

import autograder
from autograder.course import is_dropping

# The code whose behaviour decides a score: the checker the tests call and the grading pipeline.
_PACKAGE = Path(autograder.__file__).resolve().parent
# Every room of running/ counts (the referee's judges, the examinee, the scan and its allow-list, the confinement),
# and the records that turn verdicts into points (scores) and refuse a notebook (submissions): a fixed judge regrades.
GRADER_SOURCES = ("student/**/*.py", "course.py", "grading/grade.py", "grading/contained.py", "grading/grader/*.py",
                  "grading/running/**/*.py", "grading/running/**/*.json", "grading/records/scores.py",
                  "grading/records/submissions.py", "authoring/nbgrader_config.py")


def folder_digest(folder: Path) -> str:
    """Every file under ``folder`` (names and contents), except Jupyter's checkpoints, caches and editors' droppings."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not is_dropping(relative):
            digest.update(str(relative).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def submission_digest(folder: Path) -> str:
    """A submitted folder, every file of it (the notebooks and timestamp.txt)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def grader_version() -> str:
    """The grader: nbgrader's and this package's versions, and a digest of the code that scores."""
    digest = hashlib.sha256()
    for pattern in GRADER_SOURCES:
        for path in sorted(_PACKAGE.glob(pattern)):
            digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes())
    try:
        ours = metadata.version("custom-autograd-course")  # the distribution; the import name is autograder
    except metadata.PackageNotFoundError:
        ours = "unknown"
    return f"autograder {ours}, nbgrader {metadata.version('nbgrader')}, code {digest.hexdigest()[:16]}"


def graded_with(solutions: Path) -> dict[str, str]:
    """What grades an assignment: its source notebooks with their tests (and data files), and the grader."""
    return {"source": folder_digest(solutions), "grader": grader_version()}


def why_regrade(saved: dict, current: dict[str, str]) -> str:
    """Why a marker written with ``saved`` no longer holds ('' if it still does)."""
    before = saved.get("graded_with")
    if not before:
        return "the grader changed"  # a marker from before graders were recorded
    if before.get("source") != current["source"]:
        return "the assignment's tests changed"
    if before.get("grader") != current["grader"]:
        return "the grader changed"
    if before.get("deadline") != current.get("deadline"):
        return "the due date, an extension or the late penalty changed"
    return ""
