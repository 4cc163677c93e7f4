"""One preparation of a submission for grade and check: the tests as the source has them, whatever the student did.

The rules (guarantees.md: "test cells edited, deleted, duplicated, moved ...") on plain JSON, without
nbgrader; then, on every crafted notebook of the robustness class and on 05's answers graded by hand,
that nbgrader's own bookkeeping in `grade` (checksums, cell metadata) changes no cell of it: grade runs
exactly the cells this function gives, and records exactly those.
"""

from __future__ import annotations

import copy
import json
import warnings

import nbformat
import pytest

from autograder.grading.running.preparation import RESTORED_NOTE, TEXT_STUB, cells_to_run, prepare
from conftest import REPO, filled_release, nbgrader_meta, solution_answers, source

ASSIGNMENT = "01_first_function"
SOURCE = json.loads((REPO / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
TESTS = [nbgrader_meta(c)["grade_id"] for c in SOURCE["cells"]
         if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")]


def _right() -> dict:
    return filled_release(REPO, ASSIGNMENT, solution_answers(REPO, ASSIGNMENT))


def _index(nb: dict, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if nbgrader_meta(c).get("grade_id") == grade_id)


def _tests_of(nb: dict) -> list[tuple[str, str]]:
    return [(nbgrader_meta(c)["grade_id"], source(c)) for c in nb["cells"]
            if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")]


SOURCE_TESTS = _tests_of(SOURCE)


def test_a_right_notebook_runs_the_source_tests_hidden_ones_included_and_the_student_answers():
    right = _right()
    prepared = prepare(right, SOURCE)
    assert _tests_of(prepared) == SOURCE_TESTS and "### BEGIN HIDDEN TESTS" in SOURCE_TESTS[0][1]
    assert [source(c) for c in prepared["cells"] if nbgrader_meta(c).get("solution")] == \
        [source(c) for c in right["cells"] if nbgrader_meta(c).get("solution")]
    run = cells_to_run(prepared)
    assert [c.get("grade_id") for c in run if c.get("grade_id")] == TESTS
    assert len(run) == len(prepared["cells"]) and all(c.get("outputs") == [] for c in prepared["cells"]
                                                      if c["cell_type"] == "code")


def test_edited_tests_and_changed_points_are_the_sources():
    nb = _right()
    nb["cells"][_index(nb, "test_sqrt")]["source"] = "print('Sqrt passes')"
    nb["cells"][_index(nb, "test_cube_forward")]["metadata"]["nbgrader"]["points"] = 100
    prepared = prepare(nb, SOURCE)
    assert _tests_of(prepared) == SOURCE_TESTS
    assert nbgrader_meta(prepared["cells"][_index(prepared, "test_cube_forward")])["points"] == 1


def test_a_deleted_test_is_put_back_after_its_exercise_with_a_note():
    nb = _right()
    del nb["cells"][_index(nb, "test_sqrt")]
    prepared = prepare(nb, SOURCE)
    at = _index(prepared, "test_sqrt")
    assert source(prepared["cells"][at - 1]) == RESTORED_NOTE and _index(prepared, "sqrt") < at
    assert _tests_of(prepared) == SOURCE_TESTS
    everything = prepare({**nb, "cells": [c for c in nb["cells"] if not nbgrader_meta(c).get("grade")]}, SOURCE)
    assert _tests_of(everything) == SOURCE_TESTS


def test_a_duplicated_test_keeps_one_copy_and_a_moved_one_goes_back_below_its_exercise():
    nb = _right()
    copied = copy.deepcopy(nb["cells"][_index(nb, "test_sqrt")])
    copied["id"] = "a-copy"
    nb["cells"].insert(_index(nb, "sqrt"), copied)  # above its exercise, and a second one below
    prepared = prepare(nb, SOURCE)
    assert _tests_of(prepared) == SOURCE_TESTS  # the earlier copy is an ordinary cell now
    assert _index(prepared, "sqrt") < _index(prepared, "test_sqrt")
    moved = _right()
    moved["cells"].insert(_index(moved, "sqrt"), moved["cells"].pop(_index(moved, "test_sqrt")))
    prepared = prepare(moved, SOURCE)
    assert _index(prepared, "sqrt") < _index(prepared, "test_sqrt") < _index(prepared, "poly_function")


def test_renamed_ids_broken_metadata_and_missing_ids_change_no_test():
    nb = _right()
    nb["cells"][_index(nb, "test_sqrt")]["metadata"]["nbgrader"]["grade_id"] = "my_test"
    nb["cells"][_index(nb, "test_cube_forward")]["metadata"]["nbgrader"] = "broken"
    prepared = prepare(nb, SOURCE)
    assert _tests_of(prepared) == SOURCE_TESTS
    assert not [c for c in prepared["cells"] if nbgrader_meta(c).get("grade_id") == "my_test"]
    old = {**_right(), "nbformat_minor": 4}
    for cell in old["cells"]:
        cell.pop("id")
    assert all("id" not in c for c in prepare(old, SOURCE)["cells"])
    ids = [c["id"] for c in prepare(nb, SOURCE)["cells"]]
    assert len(ids) == len(set(ids))


def test_hidden_test_markers_in_a_students_cell_are_defused_and_the_submission_is_left_unchanged():
    answers = solution_answers(REPO, ASSIGNMENT)
    nb = filled_release(REPO, ASSIGNMENT, {**answers, "sqrt": "# ### BEGIN HIDDEN TESTS\n" + answers["sqrt"]})
    before = copy.deepcopy(nb)
    prepared = prepare(nb, SOURCE)
    assert "HIDDEN TESTS" not in source(prepared["cells"][_index(prepared, "sqrt")])
    assert nb == before


def test_a_deleted_written_answer_comes_back_blank_and_a_locked_cell_as_the_source_has_it():
    assignment = "05_deriving_backward"
    solutions = json.loads((REPO / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    nb = json.loads((REPO / "course" / assignment / f"{assignment}.ipynb").read_text())
    del nb["cells"][_index(nb, "derive_softmax")]
    nb["cells"][_index(nb, "helpers_for_tests")]["source"] = "x = 1"
    prepared = prepare(nb, solutions)
    assert source(prepared["cells"][_index(prepared, "derive_softmax")]) == TEXT_STUB
    assert source(prepared["cells"][_index(prepared, "helpers_for_tests")]) == \
        source(solutions["cells"][_index(solutions, "helpers_for_tests")])


@pytest.mark.slow
def test_nbgrader_records_every_crafted_notebook_exactly_as_prepared(course_copy, tmp_path):
    """grade's bookkeeping (nbgrader's OverwriteCells, CheckCellMetadata ... on a real gradebook) raises
    when it would change a cell of the prepared notebook: it must never."""
    from test_robustness import Notebooks, submissions

    from autograder.grading import grade as grading
    from autograder.grading.records.submissions import InvalidNotebook, read_submission

    course = course_copy
    crafted = {(ASSIGNMENT, name): nb for name, nb in submissions(Notebooks(course.root)).items()
               if isinstance(nb, dict) and "cells" in nb}
    released05 = json.loads((REPO / "course" / "05_deriving_backward" / "05_deriving_backward.ipynb").read_text())
    deleted = copy.deepcopy(released05)
    del deleted["cells"][_index(deleted, "derive_softmax")]
    crafted["05_deriving_backward", "blank"], crafted["05_deriving_backward", "deleted_answer"] = released05, deleted
    assert len(crafted) > 25
    with warnings.catch_warnings(), grading.nbgrader_speedups():
        warnings.simplefilter("ignore")
        for assignment in {a for a, _ in crafted}:
            grading._sync_gradebook(course, assignment)
        for (assignment, student), nb in crafted.items():
            grader = grading._Grader(course, assignment, grading.Limits())
            path = tmp_path / f"{student}.ipynb"
            path.write_text(json.dumps(nb))
            try:
                submitted = read_submission(path)
            except InvalidNotebook:
                continue
            with course.gradebook() as gb:
                gb.update_or_create_student(student)
                gb.update_or_create_submission(assignment, student)
            prepared = prepare(submitted, grader.intake.source(assignment))
            recorded = grader.intake.bookkeeping(prepared, student, assignment)  # raises if nbgrader changed a cell
            assert [c.source for c in recorded.cells] == [c["source"] for c in cells_to_run(prepared)]
            nbformat.validate(recorded)
