"""The class list goes into the gradebook: names for the formgrader, 'missing' for who handed in nothing.

Read as it comes: nbgrader's roster, and each LMS's own class list in the exact shape the LMS writes it
(each file below says which documentation or source it follows), and what `export` writes.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from nbgrader.api import Gradebook

from autograder.course import Course, CourseError
from autograder.grading.records.roster import import_roster
from autograder.grading.results.export import write_canvas


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
    ("name,email\nada,a@x\n", "the first row must name the columns of a class list: a roster (id, first_name"),
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


# --------------------------------------------------------------------------------------------
# Each LMS's class list, shaped exactly as the LMS writes it

# Canvas, Grades > Export, as canvas-lms writes it (lib/gradebook_exporter.rb): Student ("Last, First"), ID
# (Canvas's user id), SIS User ID, SIS Login ID, Section, one column per assignment ("title (id)") and the
# totals; a row of posting policies ("Manual Posting") when an assignment's grades are not posted yet, then
# "    Points Possible" with "(read only)" under the totals; Student View's "Student, Test" last, without SIS ids.
CANVAS = (
    'Student,ID,SIS User ID,SIS Login ID,Section,01_first_function (4567),Current Score,Unposted Current Score,'
    'Final Score,Unposted Final Score\r\n'
    ',,,,,Manual Posting,,,,\r\n'
    '    Points Possible,,,,,11.00,(read only),(read only),(read only),(read only)\r\n'
    '"Lovelace, Ada",100001,s1001,ada@uni.edu,Section A,11.00,100.00,100.00,100.00,100.00\r\n'
    '"Okafor, Ben",100002,,bokafor,Section A,5.40,49.09,49.09,49.09,49.09\r\n'
    '"Núñez, José",100003,s1003,jnunez,"Section A and Section B",,,,0.00,0.00\r\n'
    '"Student, Test",100099,,,Section A,,,,0.00,0.00\r\n'
)
CANVAS_STUDENTS = {"s1001": ("Ada", "Lovelace", None, "100001"), "bokafor": ("Ben", "Okafor", None, "100002"),
                   "s1003": ("José", "Núñez", None, "100003")}
# Canvas, the same export where the account writes names as LastName, FirstName (gradebook_exporter.rb's
# show_student_first_last_name), with a byte-order mark and semicolons (the user's "semicolon" CSV setting,
# CSVWithI18n), and SIS User ID, SIS Login ID, Integration ID and Root Account.
CANVAS_SEMICOLONS = (
    '\ufeffLastName;FirstName;ID;SIS User ID;SIS Login ID;Integration ID;Root Account;Section;01_first_function (4567)\r\n'
    '    Points Possible;;;;;;;;11,00\r\n'
    'Lovelace;Ada;100001;s1001;ada@uni.edu;;canvas.uni.edu;Section A;11,00\r\n'
    'Student;Test;100099;;;;;Section A;\r\n'
)
# Moodle, Participants > With selected users... > Download table data as Comma separated values (user/action_redir.php:
# First name, Last name and the site's identity fields, by default Email address; the CSV dataformat writes a
# byte-order mark).
MOODLE_PARTICIPANTS = (
    '\ufeffFirst name,Last name,Email address\n'
    'Ada,Lovelace,ada@uni.edu\n'
    'José,Núñez,jose@uni.edu\n'
)
# Moodle, Grades > Export > Plain text file (grade/export/txt/grade_export_txt.php, the site's default profile
# fields firstname, lastname, idnumber, institution, department, email), tab-separated (the export's "Tab"
# separator), as older Moodles name the last name: Surname.
MOODLE_GRADES = (
    'First name\tSurname\tID number\tInstitution\tDepartment\tEmail address\t'
    'Assignment: 01_first_function (Real)\tLast downloaded from this course\n'
    'Ada\tLovelace\ts1001\tUni\tCS\tada@uni.edu\t11.00\t1773500000\n'
    'Ben\tOkafor\t\tUni\tCS\tben@uni.edu\t-\t1773500000\n'
)
MOODLE_STUDENTS = {"s1001": ("Ada", "Lovelace", "ada@uni.edu", None), "ben@uni.edu": ("Ben", "Okafor", "ben@uni.edu", None)}
# Blackboard Learn, Grade Center > Work Offline > Download (help: "Uploading or Downloading Grade Center Items for
# Working Offline"; the student's key is the Username): "Last Name","First Name","Username","Student ID",
# "Last Access","Availability", one column per item "Name [Total Pts: N Score] |column id"; every field quoted.
BLACKBOARD = (
    '"Last Name","First Name","Username","Student ID","Last Access","Availability",'
    '"01_first_function [Total Pts: 11 Score] |123456","Total [Total Pts: up to 11 Score] |123457"\r\n'
    '"Lovelace","Ada","alovelace","s1001","2026-03-14 09:26:52","Yes","11.00","11.00"\r\n'
    '"Okafor","Ben","bokafor","s1002","","Yes","",""\r\n'
)
BLACKBOARD_STUDENTS = {"alovelace": ("Ada", "Lovelace", None, None), "bokafor": ("Ben", "Okafor", None, None)}


def lms_students(course: Course) -> dict[str, tuple]:
    with Gradebook(course.config().CourseDirectory.db_url) as gb:
        return {s.id: (s.first_name, s.last_name, s.email, s.lms_user_id) for s in gb.students}


@pytest.mark.parametrize("text, encoding, read_as, expected", [
    pytest.param(CANVAS, "utf-8", "Canvas's gradebook export", CANVAS_STUDENTS, id="canvas"),
    pytest.param(CANVAS_SEMICOLONS, "utf-8", "Canvas's gradebook export", {"s1001": ("Ada", "Lovelace", None, "100001")},
                 id="canvas-lastname-firstname-semicolons"),
    pytest.param(MOODLE_PARTICIPANTS, "utf-8", "Moodle's participants or grades export",
                 {"ada@uni.edu": ("Ada", "Lovelace", "ada@uni.edu", None),
                  "jose@uni.edu": ("José", "Núñez", "jose@uni.edu", None)}, id="moodle-participants"),
    pytest.param(MOODLE_GRADES, "utf-8", "Moodle's participants or grades export", MOODLE_STUDENTS,
                 id="moodle-grades-tabs-surname"),
    pytest.param(BLACKBOARD, "utf-8", "Blackboard's Grade Center download", BLACKBOARD_STUDENTS, id="blackboard"),
    # Blackboard's tab-delimited download (.xls) is UTF-16 with a byte-order mark.
    pytest.param(BLACKBOARD.replace('","', '"\t"'), "utf-16", "Blackboard's Grade Center download",
                 BLACKBOARD_STUDENTS, id="blackboard-tabs-utf16"),
])
def test_an_lms_class_list_is_read_as_the_lms_writes_it(course_copy, tmp_path, text, encoding, read_as, expected):
    path = tmp_path / "from-the-lms.csv"
    path.write_bytes(text.encode(encoding))
    result = import_roster(course_copy, path)
    assert (result.read_as, sorted(result.added), result.ignored_columns) == (read_as, sorted(expected), [])
    assert lms_students(course_copy) == expected


def test_canvas_csv_written_by_export_is_read_back_keeping_what_it_has_no_column_for(course_copy, tmp_path):
    (tmp_path / "roster.csv").write_text("id,email\ns1001,ada@uni.edu\n", encoding="utf-8")
    import_roster(course_copy, tmp_path / "roster.csv")
    people = {"s1001": {"first_name": "Ada", "last_name": "Lovelace", "email": "", "lms_user_id": "100001"},
              "jdoe": {"first_name": "", "last_name": "", "email": "", "lms_user_id": ""}}
    write_canvas(tmp_path / "canvas.csv", "01_first_function (4567)", "11", {sid: (person, "5.5") for sid, person
                                                                             in people.items()})
    result = import_roster(course_copy, tmp_path / "canvas.csv")
    assert (result.read_as, result.added, result.updated) == ("Canvas's gradebook export", ["jdoe"], ["s1001"])
    assert lms_students(course_copy) == {"s1001": ("Ada", "Lovelace", "ada@uni.edu", "100001"),  # (Canvas: no email)
                                         "jdoe": (None, None, None, None)}


@pytest.mark.parametrize("header, nearest", [
    ("Name,Matriculation\n", ""),
    ("Student,ID,SIS User ID,SIS Login Id,Sektion\n",
     "; nearest: Canvas's gradebook export, lacking SIS Login ID (found 'SIS Login Id'), Section (found 'Sektion')"),
    ("first name,last name,e-mail\n", "; nearest: Blackboard's Grade Center download, lacking Last Name "
                                       "(found 'last name'), First Name (found 'first name'), Username"),
])
def test_a_class_list_of_unknown_columns_gets_one_line_naming_the_expected_and_the_nearest(course_copy, tmp_path,
                                                                                           header, nearest):
    path = tmp_path / "class.csv"
    path.write_text(header + "x,y,z,w,v\n", encoding="utf-8")
    with pytest.raises(CourseError) as caught:
        import_roster(course_copy, path)
    message = str(caught.value)
    assert "\n" not in message and message.endswith(f"found: {header.strip().replace(',', ', ')}{nearest}")
    assert "Canvas's gradebook export (SIS User ID, SIS Login ID, ID, Section, " in message
    assert "Blackboard's Grade Center download (Username, Last Name, First Name)" in message


def test_an_lms_row_with_a_name_and_no_id_is_named_by_its_line(course_copy, tmp_path):
    path = tmp_path / "gradebook.csv"
    path.write_text(CANVAS.replace("100002,,bokafor,", ",,,"), encoding="utf-8")
    with pytest.raises(CourseError, match=re.escape("line 5: invalid student id '': a student id is")):
        import_roster(course_copy, path)
    assert not (course_copy.grading / "gradebook.db").exists() or students(course_copy) == {}
