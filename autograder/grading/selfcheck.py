"""Grade one notebook locally: against the full tests where solutions/ is present, else the visible ones.

For students before they hand in, and for self-study readers: the notebook is autograded by
this course's grader (nbgrader's own steps, see ``autograder.grading.grade``) in a private copy of
the assignment's solutions (``grading/.check/``, kept between checks), and the result of every graded test is
reported with the message that explains a failure (never the hidden tests' source).

Where the course has ``solutions/`` (the instructor's repository, a self-study edition) the tests
come from there, hidden ones included. A student distribution has only ``course/``: the tests
are then the released notebook's visible ones (same cells, same points, same messages), and the
grader runs more.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from autograder.course import Course, CourseError
from autograder.grading.running.confinement import Limits
from autograder.grading.grade import grade

STUDENT = "me"


@dataclass
class TestResult:
    grade_id: str
    description: str
    score: float
    max_score: float
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


def check_notebook(notebook: Path, course: Course) -> list[TestResult]:
    """Autograde ``notebook`` (a student's copy of an assignment) and return one result per test."""
    notebook = Path(notebook)
    if not notebook.is_file():
        raise CourseError(f"no notebook at {notebook}")
    assignment = _assignment_of(notebook, course)
    scratch = _scratch_course(course, assignment)
    submitted = scratch.grading / "submitted" / STUDENT / assignment
    shutil.rmtree(submitted, ignore_errors=True)
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
        return [TestResult(name, messages.get(name, ("", ""))[0], grades[name].score,
                           grades[name].max_score, messages.get(name, ("", ""))[1])
                for name in order if name in grades]


def _scratch_course(course: Course, assignment: str) -> Course:
    """A private copy of the course in ``grading/.check/`` holding only ``assignment``'s tests.

    It is kept between checks, so its gradebook is made once: grading syncs it again only when
    the solutions have changed (``autograder.grading.grade._sync_gradebook``), and a check
    needs no nbgrader process. Only the one student ``me`` is ever graded in it.
    """
    scratch = Course(course.grading / ".check")
    target = scratch.solutions / assignment
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(tests_source(course) / assignment, target,
                    ignore=shutil.ignore_patterns(".*", "__pycache__"))
    return scratch


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
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        message = f"{errors[0]['ename']}: {errors[0]['evalue']}" if errors else ""
        if message == "NotImplementedError: ":
            message = "NotImplementedError: not done yet (replace `raise NotImplementedError()` with your code)"
        found[meta["grade_id"]] = (description, message)
    return found
