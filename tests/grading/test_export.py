"""Grades out: Canvas's gradebook CSV, a plain CSV with lms_user_id, and points per test."""

from __future__ import annotations

import csv

import pytest

from autograder.course import CourseError
from autograder.grading.results.export import export
from autograder.grading.records.grades import Row, write_grades_csv
from autograder.grading.records.spreadsheet import neutral

ASSIGNMENT = "01_first_function"
TESTS = [("test_a", 1.0), ("test_b", 2.0), ("test_c", 3.0)]


def _read(path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as stream:
        return list(csv.reader(stream))


@pytest.fixture
def graded(course_copy):
    """A gradebook filled through nbgrader's API as grading leaves it (no notebook is run), and grades.csv."""
    course = course_copy
    with course.gradebook() as gb:
        gb.add_assignment(ASSIGNMENT)
        gb.add_notebook(ASSIGNMENT, ASSIGNMENT)
        for name, points in TESTS:
            gb.add_grade_cell(name, ASSIGNMENT, ASSIGNMENT, max_score=points, cell_type="code")
        gb.add_student("jdoe", first_name="Jane", last_name="Doe", email="jane@uni.edu", lms_user_id="12345")
        gb.add_student("jnunez", first_name="José", last_name="Núñez", lms_user_id="33333")
        gb.add_student("zoe")  # no lms_user_id: Canvas cannot match her
        gb.add_student("hal", first_name="Hal", last_name="Moreau", lms_user_id="44444")  # handed in nothing
        for student, scores in {"jdoe": [1, 2, 3], "jnunez": [1, 0, 1.5], "zoe": [0, 2, 0]}.items():
            gb.add_submission(ASSIGNMENT, student)
            notebook = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, student)
            for grade in notebook.grades:
                grade.auto_score = scores[[n for n, _ in TESTS].index(grade.name)]
        gb.db.commit()
    write_grades_csv(course, ASSIGNMENT, [
        Row("hal", ASSIGNMENT, 0, 6, "missing", "no submission collected"),
        Row("jdoe", ASSIGNMENT, 6, 6),
        Row("jnunez", ASSIGNMENT, 1.25, 6, late="1 day 2 h", penalty=1.25),
        Row("zoe", ASSIGNMENT, 2, 6),
    ])
    return course


@pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's own add_submission
def test_canvas_plain_and_per_test_csv(graded, tmp_path):
    result = export(graded, ASSIGNMENT, tmp_path / "out", canvas_column="Assignment 1 (4567)")

    assert result.students == 4 and result.without_lms_id == ["zoe"]
    assert _read(result.canvas) == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Assignment 1 (4567)"],
        ["    Points Possible", "", "", "", "", "6"],
        # the course's student id is the institution's id: SIS User ID, as Canvas's own export fills it
        ["Moreau, Hal", "44444", "hal", "", "", "0"],
        ["Doe, Jane", "12345", "jdoe", "", "", "6"],
        ["Núñez, José", "33333", "jnunez", "", "", "1.25"],  # after the late penalty
        ["", "", "zoe", "", "", "2"],  # no name in the roster: none made up (roster reads this file back)
    ]
    plain = _read(result.plain)
    assert plain[0] == ["student_id", "lms_user_id", "first_name", "last_name", "email", "assignment", "score",
                        "max_score", "status", "late", "penalty", "to_grade_by_hand"]
    assert plain[2] == ["jdoe", "12345", "Jane", "Doe", "jane@uni.edu", ASSIGNMENT, "6", "6", "graded", "", "", ""]
    assert plain[3][:2] == ["jnunez", "33333"] and plain[3][-4:] == ["graded", "1 day 2 h", "1.25", ""]
    assert _read(result.per_test) == [
        ["student_id", "test_a", "test_b", "test_c", "total (before late penalty)"],
        ["max points", "1", "2", "3", "6"],
        ["hal", "0", "0", "0", "0"],
        ["jdoe", "1", "2", "3", "6"],
        ["jnunez", "1", "0", "1.5", "2.5"],
        ["zoe", "0", "2", "0", "2"],
    ]


def test_export_before_grading_is_one_clear_error(course_copy, tmp_path):
    with pytest.raises(CourseError, match="run `python -m autograder grade 01_first_function` first"):
        export(course_copy, ASSIGNMENT, tmp_path / "out")


@pytest.mark.parametrize("cell, written", [
    ("=HYPERLINK(\"https://evil.example\",\"x\")", "'=HYPERLINK(\"https://evil.example\",\"x\")"),
    ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"), ("@SUM(1+1)", "'@SUM(1+1)"), ("-2-3", "'-2-3"),
    ("\t=1", "'\t'=1"), ("  =1", "  '=1"), ("Doe, =1+1", "Doe, '=1+1"), ("a;@A1", "a;'@A1"),
    ("-1.5", "-1.5"), ("+3", "+3"), ("2e3", "2e3"), ("11", "11"), ("", ""), (None, ""), (2.5, "2.5"),
    ("Núñez, José", "Núñez, José"), ("jane.doe@uni.edu", "jane.doe@uni.edu"), ("1 day 2 h", "1 day 2 h"),
])
def test_a_cell_a_spreadsheet_would_run_is_written_as_text_once(cell, written):
    assert neutral(cell) == written and neutral(written) == written  # (grades.csv is read back and rewritten)
