"""Judge one notebook exactly as ``grade`` judges it, without nbgrader and without a gradebook (``check``).

For students before they hand in, and for self-study readers. The notebook is prepared as grade
prepares a submission (``autograder.grading.running.preparation``: the tests put back from the
source), run in the same sandbox, with the same limits, environment and working-folder layout
(``grading/.running/<random>/<assignment>/`` with the assignment's data files), and judged by the
same referee (``autograder.grading.running.executor``): each test's points come from its verdict.
Its message is what the feedback page shows of the cell's errors (each error's last line).

Where the course has ``solutions/`` (the instructor's repository, a self-study edition) the tests
come from there, and hidden tests run in the referee only, never in the notebook's process. A
student distribution has only ``course/``: the tests are the released notebook's visible ones.

This runs in the check's warm process (``autograder.grading.check_server``), which imports it once.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from autograder.course import Course, CourseError
from autograder.grading.records.submissions import InvalidNotebook, graded_ids, read_submission, wrong_assignment
from autograder.grading.running.judging import referee
from autograder.grading.running.confinement import memory
from autograder.grading.running.confinement.limits import Limits, SandboxRefused, confine
from autograder.grading.running.executor import execute
from autograder.grading.running.preparation import (NOTEBOOK_ENV, blank_answer, cells_to_run, grade_id, nbgrader_meta,
                                                    points, prepare, remove_working_folder, source_cells, text,
                                                    working_folder)

BY_HAND = "your written answer: your instructor grades it by hand, no test does"
BLANK = "not written yet (left as released, it scores 0): your instructor grades it by hand"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


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


@dataclass
class Checked:
    """What ``check`` reports of one notebook."""

    assignment: str
    named: str = ""        # how the assignment was told, when the file's name does not say it
    sandbox: str = "off"   # namespaces | landlock | off (this machine allows none)
    memory: str = ""       # what bounds the notebook's memory here, in words (memory.describe)
    hidden_tests_ran: bool = False
    results: list[TestResult] = field(default_factory=list)

    def to_json(self) -> dict:
        """As plain data (what the warm process sends the command), each result with whether it passed."""
        return {**asdict(self), "results": [{**asdict(r), "passed": r.passed} for r in self.results]}


def check_notebook(notebook: Path, course: Course, limits: Limits = Limits()) -> list[TestResult]:
    """Judge ``notebook`` (a student's copy of an assignment) as grade would: one result per graded cell."""
    return judge(notebook, course, limits).results


def judge(notebook: Path, course: Course, limits: Limits = Limits()) -> Checked:
    """Judge ``notebook`` as grade would, in this process's warm process; CourseError says what is wrong with it."""
    notebook = Path(notebook)
    if not notebook.is_file():
        raise CourseError(f"no notebook at {notebook}")
    try:
        submitted = read_submission(notebook)
    except InvalidNotebook as error:
        raise CourseError(f"{notebook} could not be graded: {error}") from None
    assignment, named = assignment_of(notebook, submitted, course)
    source = _read(tests_source(course) / assignment / f"{assignment}.ipynb")
    prepared = prepare(submitted, source)
    limits, mode = sandboxed(course, limits)
    folder = working_folder(course.grading, assignment, tests_source(course) / assignment)
    try:
        execution = execute(cells_to_run(prepared), str(folder), limits, dict(NOTEBOOK_ENV),
                            referee.trusted_cells(source))
    finally:
        remove_working_folder(folder)
    released = source_cells(source)
    results = []
    for index, cell in enumerate(prepared["cells"]):
        meta, name = nbgrader_meta(cell), grade_id(cell)
        if not meta.get("grade"):
            continue
        if meta.get("solution"):  # an answer graded by hand (05's derivations)
            blank = text(cell).strip() == blank_answer(released[name]).strip()
            results.append(TestResult(name, BLANK if blank else BY_HAND, 0.0, points(cell), by_hand=True))
            continue
        verdict = execution.verdicts.get(index)
        results.append(TestResult(name, description(cell), points(cell) if verdict and verdict.passed else 0.0,
                                  points(cell), failure_message(execution.outputs.get(index, []))))
    return Checked(assignment, named, mode, memory.describe(limits.memory_bound, limits.memory), course.has_solutions,
                   results)


def description(cell: dict) -> str:
    """A test's first line, without its "# Test:"."""
    lines = text(cell).strip().splitlines()
    return lines[0].removeprefix("# Test:").strip() if lines else ""


def failure_message(outputs: list[dict]) -> str:
    """What the feedback page shows of a cell's errors, each by its last line: its own, then the referee's."""
    messages = []
    for error in (o for o in outputs if o.get("output_type") == "error"):
        lines = [ANSI.sub("", line) for line in error.get("traceback") or []]
        message = lines[-1].strip() if lines and lines[-1].strip() else f"{error.get('ename')}: {error.get('evalue')}"
        if message not in messages:
            messages.append(message)
    return "\n".join(messages)


def tests_source(course: Course) -> Path:
    """Where the tests come from: solutions/ (every test) if present, else course/ (the visible tests)."""
    return course.solutions if course.has_solutions else course.release


def assignment_of(notebook: Path, submitted, course: Course) -> tuple[str, str]:
    """The assignment ``notebook`` is, and how that was told when its name does not say it.

    Named like an assignment (``01_first_function.ipynb``): that one, unless its graded cells are another's.
    Otherwise the assignment whose graded cells it holds (said); none: refused, naming the file expected.
    """
    assignments = course.assignments()
    cells = {a: set().union(*[graded_ids(_read(p)) for p in (tests_source(course) / a).glob(f"{a}.ipynb")])
             for a in assignments}
    if notebook.stem in assignments:
        why = wrong_assignment(submitted, notebook.stem, cells)
        if why:
            raise CourseError(f"{notebook.name}: {why}")
        return notebook.stem, ""
    mine = graded_ids(submitted)
    best = max(assignments, key=lambda a: len(mine & cells[a]), default=None)
    if best is None or not mine & cells[best]:
        folder = notebook.parent.name
        expected = (f"{notebook.parent / folder}.ipynb" if folder in assignments else
                    f"an assignment's notebook ({', '.join(f'{a}.ipynb' for a in assignments)})")
        raise CourseError(f"{notebook.name} holds no graded cell of any assignment: check {expected}")
    return best, f"{notebook.name} is checked as {best} (its graded cells are that assignment's)"


def _read(path: Path) -> dict:
    with open(path, encoding="utf-8") as file:
        return json.load(file)


def sandboxed(course: Course, limits: Limits) -> tuple[Limits, str]:
    """``limits`` in grade's sandbox for this course (its folders hidden); where the machine allows none, none."""
    try:
        limits = confine(limits, course.hidden_from_notebooks)
    except SandboxRefused:
        limits = confine(replace(limits, sandbox="off"), course.hidden_from_notebooks)
    return limits, limits.sandbox

