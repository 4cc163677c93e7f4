"""Grade one notebook locally against the full tests, hidden ones included.

For students before they hand in, and for self-study readers: the notebook is autograded by
this course's grader (nbgrader's own steps, see ``autograder.grading.grade``) in a throwaway copy of
the course, and the result of every graded test is
reported with the message that explains a failure (never the hidden tests' source).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook

from autograder.authoring.course import Course, CourseError
from autograder.grading.executor import Limits
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


def check_notebook(notebook: Path, course: Course = Course()) -> list[TestResult]:
    """Autograde ``notebook`` (a student's copy of an assignment) and return one result per test."""
    notebook = Path(notebook)
    if not notebook.is_file():
        raise CourseError(f"no notebook at {notebook}")
    assignment = _assignment_of(notebook, course)
    with tempfile.TemporaryDirectory(prefix="autograder-check-") as tmp:
        scratch = Course(Path(tmp))
        shutil.copytree(course.solutions / assignment, scratch.solutions / assignment)
        submitted = scratch.grading / "submitted" / STUDENT / assignment
        submitted.mkdir(parents=True)
        shutil.copy(notebook, submitted / f"{assignment}.ipynb")
        # The student's own notebook on their own machine: nothing to protect from it, so no sandbox.
        limits = Limits(threads=os.cpu_count() or 1, sandbox="off")
        [row] = grade(scratch, assignment, jobs=1, limits=limits, progress=open(os.devnull, "w"))
        if row.status == "invalid notebook":
            raise CourseError(f"{notebook} could not be graded: {row.detail}")
        graded = scratch.grading / "autograded" / STUDENT / assignment / f"{assignment}.ipynb"
        messages = _failure_messages(graded)
        with Gradebook(f"sqlite:///{scratch.grading / 'gradebook.db'}") as gb:
            grades = {g.name: g for g in gb.find_submission_notebook(assignment, assignment, STUDENT).grades}
            order = list(messages) + sorted(set(grades) - set(messages))  # deleted cells come last
            return [TestResult(name, messages.get(name, ("", ""))[0], grades[name].score,
                               grades[name].max_score, messages.get(name, ("", ""))[1])
                    for name in order if name in grades]


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
