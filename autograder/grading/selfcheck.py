"""Grade one notebook locally: against the full tests where solutions/ is present, else the visible ones.

For students before they hand in, and for self-study readers: the notebook is autograded by
this course's grader (nbgrader's own steps, see ``autograder.grading.grade``) in a private copy of
the assignment's tests made for this check alone (a temporary folder, removed afterwards: two checks
at once, or a check after one that failed, never meet), and the result of every graded test is
reported with the message that explains a failure (never the hidden tests' source). Only the
assignment's own notebook and data are copied: other notebooks beside it (JupyterLab's
``Untitled.ipynb``) are not part of it. The gradebook nbgrader makes for a version of the tests is
kept in ``grading/.check-cache/`` and copied into later checks, so a check starts no nbgrader step.

Where the course has ``solutions/`` (the instructor's repository, a self-study edition) the tests
come from there, hidden ones included. A student distribution has only ``course/``: the tests
are then the released notebook's visible ones (same cells, same points, same messages), and the
grader runs more.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from autograder.course import DROPPINGS, Course, CourseError, is_dropping
from autograder.grading.running.confinement import Limits
from autograder.grading.grade import grade, mark_synced, sync_gradebook
from autograder.grading.records.grades import is_by_hand

STUDENT = "me"
BY_HAND = "your written answer: your instructor grades it by hand, no test does"
BLANK = "not written yet (left as released, it scores 0): your instructor grades it by hand"


@dataclass
class TestResult:
    grade_id: str
    description: str
    score: float
    max_score: float
    message: str = ""
    by_hand: bool = False  # an answer your instructor grades by hand (a derivation): no test scores it

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


def check_notebook(notebook: Path, course: Course) -> list[TestResult]:
    """Autograde ``notebook`` (a student's copy of an assignment) and return one result per test."""
    notebook = Path(notebook)
    if not notebook.is_file():
        raise CourseError(f"no notebook at {notebook}")
    assignment = _assignment_of(notebook, course)
    _same_assignment(notebook, course, assignment)
    shutil.rmtree(course.grading / ".check", ignore_errors=True)  # the shared scratch folder of earlier versions
    with tempfile.TemporaryDirectory(prefix="autograder-check-") as folder:
        scratch = _scratch_course(course, assignment, Path(folder))
        submitted = scratch.grading / "submitted" / STUDENT / assignment
        submitted.mkdir(parents=True)
        shutil.copy(notebook, submitted / f"{assignment}.ipynb")
        # The student's own notebook on their own machine: nothing to protect from it, so no sandbox.
        limits = Limits(threads=os.cpu_count() or 1, sandbox="off")
        [row] = grade(scratch, assignment, jobs=1, limits=limits, force=True, progress=open(os.devnull, "w"))
        if row.status == "invalid notebook":
            raise CourseError(f"{notebook} could not be graded: {row.detail}")
        graded = scratch.grading / "autograded" / STUDENT / assignment / f"{assignment}.ipynb"
        messages = _failure_messages(graded)
        with scratch.gradebook() as gb:
            grades = {g.name: g for g in gb.find_submission_notebook(assignment, assignment, STUDENT).grades}
            order = list(messages) + sorted(set(grades) - set(messages))  # deleted cells come last
            return [TestResult(name, BY_HAND if grades[name].auto_score is None else BLANK, 0.0,
                               grades[name].max_score, by_hand=True)
                    if is_by_hand(grades[name]) else
                    TestResult(name, messages.get(name, ("", ""))[0], grades[name].score,
                               grades[name].max_score, messages.get(name, ("", ""))[1])
                    for name in order if name in grades]


def _scratch_course(course: Course, assignment: str, folder: Path) -> Course:
    """A private course in ``folder`` holding only ``assignment``'s notebook (of the tests) and its data.

    Its gradebook is a copy of the one made for this version of the tests (``grading/.check-cache/``),
    so grading finds it in sync and starts no nbgrader step; the first check of a version makes it.
    """
    scratch = Course(folder)
    source, target = tests_source(course) / assignment, scratch.solutions / assignment
    target.mkdir(parents=True)
    for path in source.iterdir():
        if is_dropping(path.name):
            continue
        if path.is_dir():
            shutil.copytree(path, target / path.name, ignore=shutil.ignore_patterns(*DROPPINGS))
        elif path.suffix != ".ipynb" or path.name == f"{assignment}.ipynb":  # not Untitled.ipynb and friends
            shutil.copy2(path, target / path.name)
    digest = hashlib.sha256()
    for path in sorted(target.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(target)).encode() + hashlib.sha256(path.read_bytes()).digest())
    cache = course.grading / ".check-cache" / f"{assignment}-{digest.hexdigest()[:16]}.db"
    scratch.grading.mkdir(parents=True)
    if cache.is_file():
        shutil.copy(cache, scratch.grading / "gradebook.db")
        mark_synced(scratch, assignment)
    else:
        sync_gradebook(scratch, assignment)  # nbgrader's generate_assignment, once per version of the tests
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f"{cache.name}.{os.getpid()}.partial")
        shutil.copy(scratch.grading / "gradebook.db", partial)
        os.replace(partial, cache)  # whole or not at all, whoever else is checking
    return scratch


def _same_assignment(notebook: Path, course: Course, assignment: str) -> None:
    """A clear error if ``notebook`` is another assignment's (renamed), before it is graded with NameErrors."""
    from autograder.grading.records.submissions import InvalidNotebook, graded_ids, read_submission, wrong_assignment

    try:
        mine = read_submission(notebook)
    except InvalidNotebook as error:
        raise CourseError(f"{notebook} could not be graded: {error}") from None
    source = tests_source(course)
    cells = {a: set().union(*[graded_ids(json.loads(p.read_text(encoding="utf-8"))) for p in (source / a).glob(f"{a}.ipynb")])
             for a in course.assignments()}
    why = wrong_assignment(mine, assignment, cells)
    if why:
        raise CourseError(f"{notebook.name}: {why}")


def tests_source(course: Course) -> Path:
    """Where the tests come from: solutions/ (every test) if present, else course/ (the visible tests)."""
    return course.solutions if course.has_solutions else course.release


def _assignment_of(notebook: Path, course: Course) -> str:
    for candidate in (notebook.stem, notebook.parent.name):
        if candidate in course.assignments():
            return candidate
    raise CourseError(f"cannot tell which assignment {notebook.name} is: name it like the released "
                      f"notebook ({', '.join(course.assignments())})")


def _failure_messages(graded: Path) -> dict[str, tuple[str, str]]:
    """grade_id -> (the test's first line, the error it raised), from the autograded notebook."""
    found = {}
    for cell in json.loads(graded.read_text())["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade"):
            continue
        source = "".join(cell["source"]).strip()
        description = source.splitlines()[0].removeprefix("# Test:").strip() if source else ""
        messages = []  # every error of the cell: its own, then what the grader's referee found
        for error in (o for o in cell.get("outputs", []) if o.get("output_type") == "error"):
            message = f"{error['ename']}: {error['evalue']}"  # as the feedback page shows it
            if message not in messages:
                messages.append(message)
        found[meta["grade_id"]] = (description, "\n".join(messages))
    return found
