"""The notebooks: committed clean, released faithfully, solutions full marks, release none."""

from __future__ import annotations

import re
import shutil

import pytest
from nbgrader.validator import Validator

from autograder.authoring.publish import publish
from autograder.authoring.release import release
from autograder.course import Course, is_dropping
from autograder.authoring.validation import validate_solution
from conftest import CLASS_REPOSITORY, REPO, nbgrader_meta, read_notebook, source

ASSIGNMENTS = Course(REPO).assignments()
SOLUTION_BLOCK = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
HIDDEN_BLOCK = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)


def _all_notebooks():
    return sorted((REPO / "solutions").glob("*/*.ipynb")) + sorted((REPO / "course").glob("*/*.ipynb"))


def _significant_lines(code: str) -> list[str]:
    """Lines that would give away an answer: not blank, not comments, not a bare keyword."""
    return [line.strip() for line in code.splitlines()
            if line.strip() and not line.strip().startswith("#") and line.strip() not in ("pass", "else:", "return")]


def test_course_has_assignments():
    assert "01_first_function" in ASSIGNMENTS
    assert [p.name for p in sorted((REPO / "course").iterdir()) if p.is_dir()] == ASSIGNMENTS, \
        "course/ and solutions/ must hold the same assignments (run `make release`)"


@pytest.mark.parametrize("path", _all_notebooks(), ids=lambda p: str(p.relative_to(REPO)))
def test_notebook_is_committed_without_outputs(path):
    dirty = [i for i, cell in enumerate(read_notebook(path)["cells"])
             if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))]
    assert not dirty, f"{path.name}: cells {dirty} have outputs; clear them before committing"


def _course_files(folder) -> dict:
    """relative path -> bytes of every file under ``folder``, but Jupyter's checkpoints and editors' droppings."""
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*")
            if p.is_file() and not is_dropping(p.relative_to(folder))}


def test_release_is_what_make_release_generates(course_copy):
    """course/ is exactly nbgrader's release of solutions/ (regenerated here and compared)."""
    committed = _course_files(course_copy.release)
    release(course_copy)
    generated = _course_files(course_copy.release)
    assert sorted(generated) == sorted(committed), "course/ has missing or extra files: run `make release`"
    stale = [str(p) for p in generated if generated[p] != committed[p]]
    assert not stale, f"course/ is out of date with solutions/ for {stale}: run `make release` and commit"


def test_checkpoints_and_editor_droppings_are_never_course_files(course_copy, tmp_path):
    """After `make lab` (Jupyter's .ipynb_checkpoints) and an editor's backups: the release does not carry
    them, the release check does not see them, the edition does not ship them."""
    assignment = ASSIGNMENTS[0]
    droppings = [".ipynb_checkpoints/{a}-checkpoint.ipynb", "table.json~", ".DS_Store", "__pycache__/x.cpython-311.pyc"]

    def drop(folder):
        for name in droppings:
            (folder / name.format(a=assignment)).parent.mkdir(parents=True, exist_ok=True)
            (folder / name.format(a=assignment)).write_text("{}")

    drop(course_copy.solutions / assignment)
    drop(course_copy.release / assignment)
    committed = _course_files(course_copy.release)
    assert (course_copy.release / assignment / ".ipynb_checkpoints").is_dir() and len(committed) > 1
    release(course_copy, [assignment])
    assert _course_files(course_copy.release) == committed
    assert not [p for p in (course_copy.release / assignment).rglob("*") if is_dropping(p.relative_to(course_copy.release))]
    drop(course_copy.release / assignment)
    for name in ("pyproject.toml", "constraints.txt", "environment.yml"):  # what the edition is made with
        shutil.copy(REPO / name, course_copy.root / name)
    edition = publish(course_copy, tmp_path / "edition", archive=False, repository=CLASS_REPOSITORY)
    shipped = edition / "course" / assignment
    assert not [p for p in shipped.rglob("*") if is_dropping(p.relative_to(shipped))], "droppings in the edition"
    assert sorted(p.name for p in shipped.iterdir()) == sorted(p.name for p in (course_copy.release / assignment).iterdir()
                                                               if not is_dropping(p.name))


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_holds_no_solution_and_no_hidden_test(assignment):
    solution = read_notebook(REPO / "solutions" / assignment / f"{assignment}.ipynb")
    released = read_notebook(REPO / "course" / assignment / f"{assignment}.ipynb")
    released_text = "\n".join(source(c) for c in released["cells"])
    assert "BEGIN SOLUTION" not in released_text and "HIDDEN TESTS" not in released_text
    secrets = []
    for cell in solution["cells"]:
        for block in SOLUTION_BLOCK.findall(source(cell)) + HIDDEN_BLOCK.findall(source(cell)):
            secrets += _significant_lines(block)
    assert secrets, "the solution notebook should contain solutions and hidden tests"
    released_lines = {line.strip() for line in released_text.splitlines()}
    leaked = [line for line in secrets if line in released_lines and not _is_also_visible(line, solution)]
    assert not leaked, f"solution or hidden-test lines appear in the release: {leaked}"


def _is_also_visible(line: str, solution: dict) -> bool:
    """True when the same line also stands outside every solution and hidden block (e.g. a demo)."""
    for cell in solution["cells"]:
        text = HIDDEN_BLOCK.sub("", SOLUTION_BLOCK.sub("", source(cell)))
        if line in {l.strip() for l in text.splitlines()}:
            return True
    return False


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_exercise_is_stated_tested_visibly_and_hidden(assignment):
    cells = read_notebook(REPO / "solutions" / assignment / f"{assignment}.ipynb")["cells"]
    ids = [nbgrader_meta(c)["grade_id"] for c in cells if nbgrader_meta(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade ids: {ids}"
    exercises: list[list[dict]] = []
    for index, cell in enumerate(cells):
        meta = nbgrader_meta(cell)
        if meta.get("solution") and cell["cell_type"] == "markdown":  # a written answer, graded by hand
            assert meta.get("grade") and meta.get("points", 0) > 0 and exercises and exercises[-1], \
                f"{meta['grade_id']}: a written answer has points and follows a tested exercise"
            assert "graded by hand" in source(cells[index - 1]), f"{meta['grade_id']}: the cell above says how it is graded"
        elif meta.get("solution"):
            exercises.append([])
        elif meta.get("grade"):
            assert exercises, f"test cell {meta['grade_id']} comes before any solution cell"
            exercises[-1].append(cell)
            first = source(cell).strip().splitlines()[0]
            assert first.startswith("# Test: "), f"{meta['grade_id']}: first line should say what it checks, got {first!r}"
            visible = HIDDEN_BLOCK.sub("", source(cell)).strip().splitlines()[1:]
            assert any(l.strip() and not l.strip().startswith("#") for l in visible), \
                f"{meta['grade_id']}: has no visible test a student can run"
            assert meta.get("locked") and meta.get("points", 0) > 0
    assert len(exercises) >= 3, "each assignment has at least three graded exercises"
    for n, tests in enumerate(exercises, 1):
        assert tests, f"exercise {n} has no test cell"
        assert any(HIDDEN_BLOCK.search(source(t)) for t in tests), f"exercise {n} has no hidden tests"
    graded = [source(t) for tests in exercises for t in tests]
    assert any("check_function" in HIDDEN_BLOCK.sub("", t) for t in graded), "no visible test calls check_function"
    assert any("check_function" in "".join(HIDDEN_BLOCK.findall(t)) for t in graded), "no hidden test calls check_function"


# Every solution and every blank release is run more than once elsewhere, so here (nbgrader's Validator, what
# `make validate` and JupyterLab's Validate button run) only the assignments whose Validate output has a story of
# its own: 01 (the first a student validates), 09 and 10 (torch.library.opcheck wraps a blank's NotImplementedError
# in its own error; 10's kernels run under the interpreter, as 11's do). The others are covered where they cost
# nothing extra:
# every solution runs top to bottom in a plain Jupyter kernel with no error in the book's first build
# (test_book.py, nb_execution_raise_on_error), and gets full marks, every blank none, under `grade`, every test
# cell decided by the referee, `check` agreeing on a sample that covers every assignment (test_check_agrees.py).
VALIDATED = ("01_first_function", "09_production_pytorch", "10_triton_kernels")


@pytest.mark.slow
@pytest.mark.parametrize("assignment", VALIDATED[:1])
def test_solution_runs_top_to_bottom_with_full_marks(course, assignment):
    for notebook in course.notebooks(assignment):
        verdict = validate_solution(course, notebook)
        assert verdict.ok, "\n".join(verdict.problems)


@pytest.mark.slow
@pytest.mark.parametrize("assignment", VALIDATED)
def test_blank_release_fails_every_graded_test(course, assignment):
    """Stronger than `validate --invert`: not one graded cell passes, each one fails."""
    for notebook in course.notebooks(assignment, released=True):
        graded = [nbgrader_meta(c)["grade_id"] for c in read_notebook(notebook)["cells"] if nbgrader_meta(c).get("grade")]
        failed = Validator(config=course.config()).validate(str(notebook)).get("failed", [])
        assert len(failed) == len(graded), (
            f"{notebook.name}: {len(graded) - len(failed)} of {len(graded)} graded tests pass without student code")
        # JupyterLab's Validate button shows these: an exercise not done yet is one plain line, not a traceback.
        plain = "NotImplementedError: not done yet (replace `raise NotImplementedError()` with your code)"
        assert any(f["error"].strip() == plain for f in failed), f"{notebook.name}: {failed[0]['error'][:500]}"


@pytest.mark.parametrize("assignment", [a for a in Course(REPO).assignments() if a != "01_first_function"])
def test_how_you_are_graded_is_one_line_and_a_link_to_01(assignment):
    for folder in ("solutions", "course"):
        cells = read_notebook(REPO / folder / assignment / f"{assignment}.ipynb")["cells"]
        text = "\n".join(source(c) for c in cells if c["cell_type"] == "markdown")
        assert text.count("How you are graded") == 1 and "**How you are graded:**" in text
        assert "[how grading works](../01_first_function/01_first_function.ipynb)" in text
    assert (REPO / "course" / "01_first_function" / "01_first_function.ipynb").is_file()  # the link's target
