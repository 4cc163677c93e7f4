"""Put the class list into the gradebook, so students have names and those who hand in nothing show up.

The roster is a CSV file with a header row, as nbgrader's ``nbgrader db student import`` reads it:
an ``id`` column (the student id, the folder name in a submissions download) and, optionally,
``first_name``, ``last_name``, ``email`` and ``lms_user_id``. Other columns are ignored. Importing
again updates names and never removes a student, so no grade is ever lost.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from autograder.grading.records.lms import invalid_student_id, is_valid_student_id
from autograder.course import Course, CourseError

FIELDS = ("first_name", "last_name", "email", "lms_user_id")


@dataclass
class RosterResult:
    added: list[str]     # new to the gradebook
    updated: list[str]   # already there; their details are now the roster's
    ignored_columns: list[str]


def import_roster(course: Course, path: Path) -> RosterResult:
    """Add or update every student of the CSV roster at ``path`` in the course's gradebook.

    The whole file is checked before anything is written: one bad row (no id, an id that could
    not be a folder name or starts like a spreadsheet formula, a duplicate, a name with markup)
    raises CourseError naming its line, and the gradebook is left as it was.
    """
    students, ignored = _read(Path(path))
    added, updated = [], []
    with course.gradebook() as gb:
        known = {s.id for s in gb.students}
        for student_id, details in students.items():
            gb.update_or_create_student(student_id, **details)
            (updated if student_id in known else added).append(student_id)
    return RosterResult(added, updated, ignored)


def _read(path: Path) -> tuple[dict[str, dict[str, str | None]], list[str]]:
    try:
        text = path.read_text(encoding="utf-8-sig")  # spreadsheets often write a byte-order mark
    except FileNotFoundError:
        raise CourseError(f"no roster file at {path}") from None
    except (UnicodeDecodeError, IsADirectoryError) as error:
        raise CourseError(f"{path} is not a UTF-8 CSV file: {error}") from None
    reader = csv.DictReader(text.splitlines())
    columns = [c.strip() for c in reader.fieldnames or []]
    if "id" not in columns:
        raise CourseError(f"{path}: the first row must name the columns, one of them `id` "
                          f"(found: {', '.join(columns) or 'nothing'})")
    students: dict[str, dict[str, str | None]] = {}
    for raw in reader:  # (csv skips empty lines; reader.line_num is the line just read)
        line = reader.line_num
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if isinstance(v, str)}
        student_id = row.get("id", "")
        if not any(row.values()):
            continue  # a line of empty cells, as spreadsheets write them
        if not is_valid_student_id(student_id):
            raise CourseError(f"{path}, line {line}: {invalid_student_id(student_id)}")
        if student_id in students:
            raise CourseError(f"{path}, line {line}: student {student_id} is listed twice")
        marked_up = next((f for f in FIELDS if any(c in (row.get(f) or "") for c in "<>")), None)
        if marked_up:  # nbgrader's formgrader writes names into its pages as HTML, unescaped
            raise CourseError(f"{path}, line {line}: {marked_up} {row[marked_up][:60]!r} has < or >: names, emails "
                              "and LMS ids may not hold markup (the formgrader would run it)")
        students[student_id] = {f: row.get(f) or None for f in FIELDS}
    if not students:
        raise CourseError(f"{path} lists no students")
    return students, [c for c in columns if c and c != "id" and c not in FIELDS]
