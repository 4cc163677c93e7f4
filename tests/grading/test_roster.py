"""The class list goes into the gradebook: names for the formgrader, 'missing' for who handed in nothing."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from autograder.course import Course, CourseError
from autograder.grading.records.roster import import_roster


def students(course: Course) -> dict[str, tuple]:
    with Gradebook(course.config().CourseDirectory.db_url) as gb:
        return {s.id: (s.first_name, s.last_name, s.email) for s in gb.students}


def test_roster_adds_students_with_names_and_updates_them_again(course_copy, tmp_path):
    roster = tmp_path / "roster.csv"
    # A spreadsheet's export: byte-order mark, an extra column, a blank line, a line of empty cells.
    roster.write_text("\ufeffid,first_name,last_name,email,section\n"
                      "ada,Ada,Lovelace,ada@example.edu,A\n\n,,,,\n"
                      "bob,Bob,,,B\n", encoding="utf-8")
    result = import_roster(course_copy, roster)
    assert (result.added, result.updated, result.ignored_columns) == (["ada", "bob"], [], ["section"])
    assert students(course_copy) == {"ada": ("Ada", "Lovelace", "ada@example.edu"), "bob": ("Bob", None, None)}

    roster.write_text("id,first_name,last_name\nbob,Robert,Smith\n", encoding="utf-8")
    result = import_roster(course_copy, roster)
    assert (result.added, result.updated) == ([], ["bob"])
    assert students(course_copy) == {"ada": ("Ada", "Lovelace", "ada@example.edu"),
                                     "bob": ("Robert", "Smith", None)}, "nobody is removed"


@pytest.mark.parametrize("text, message", [
    ("name,email\nada,a@x\n", "must name the columns, one of them `id`"),
    ("id,first_name\nada,Ada\nada,Ada again\n", "line 3: student ada is listed twice"),
    ("id\nada\n\n../etc\n", "line 4: invalid student id '../etc'"),  # the line in the file, blank ones counted
    ("id\nada\n-2-3\n", "line 3: invalid student id '-2-3': a student id is 1 to 100 letters"),  # a formula
    ("id\n@A1\n", "line 2: invalid student id '@A1'"),
    ('id,first_name\nada,"<img src=x onerror=alert(1)>"\n', "line 2: first_name '<img src=x onerror=alert(1)>' has"),
    ("id\n", "lists no students"),
])
def test_a_bad_roster_names_its_line_and_writes_nothing(course_copy, tmp_path, text, message):
    roster = tmp_path / "roster.csv"
    roster.write_text(text, encoding="utf-8")
    with pytest.raises(CourseError, match=re.escape(message)):
        import_roster(course_copy, roster)
    assert not (course_copy.grading / "gradebook.db").exists() or students(course_copy) == {}


def test_roster_command_prints_one_line_errors(course_copy, tmp_path):
    run = subprocess.run([sys.executable, "-m", "autograder", "roster", str(tmp_path / "absent.csv")],
                         cwd=course_copy.root, env=course_copy.environment(), capture_output=True, text=True)
    assert run.returncode == 2 and run.stderr.strip() == f"error: no roster file at {tmp_path / 'absent.csv'}"
