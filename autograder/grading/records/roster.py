"""Put the class list into the gradebook, so students have names and those who hand in nothing show up.

The class list is a file with a header row, read as it comes from where it was made (``lms.CLASS_LISTS``):
nbgrader's roster (``nbgrader db student import``: an ``id`` column, the student id and folder name in a
submissions download, and optionally ``first_name``, ``last_name``, ``email`` and ``lms_user_id``), Canvas's
gradebook export (and ``export``'s ``canvas.csv``), Blackboard's Grade Center download, Moodle's participants
or grades export, or ``export``'s ``grades.csv``. Comma, semicolon or tab separated; UTF-8 or UTF-16 (as
Blackboard writes its tab-separated download). Other columns are ignored. Importing again updates what the file
has a column for (Canvas's export has no email: an email a roster gave is kept) and never removes a
student, so no grade is ever lost.
"""

from __future__ import annotations

import codecs
import csv
import difflib
import io
from dataclasses import dataclass
from pathlib import Path

from autograder.course import Course, CourseError
from autograder.grading.records.lms import CLASS_LISTS, ClassList, invalid_student_id, is_valid_student_id

FIELDS = ("first_name", "last_name", "email", "lms_user_id")
SEPARATORS = (",", ";", "\t")


@dataclass
class RosterResult:
    added: list[str]     # new to the gradebook
    updated: list[str]   # already there; their details are now the roster's
    ignored_columns: list[str]
    read_as: str = "a roster"  # which kind of class list the file is (lms.ClassList.name)


def import_roster(course: Course, path: Path) -> RosterResult:
    """Add or update every student of the class list at ``path`` in the course's gradebook.

    The whole file is checked before anything is written: one bad row (no id, an id that could
    not be a folder name or starts like a spreadsheet formula, a duplicate, a name with markup)
    raises CourseError naming its line, and the gradebook is left as it was.
    """
    students, kind, ignored = _read(Path(path))
    added, updated = [], []
    with course.gradebook() as gb:
        known = {s.id for s in gb.students}
        for student_id, details in students.items():
            gb.update_or_create_student(student_id, **details)
            (updated if student_id in known else added).append(student_id)
    return RosterResult(added, updated, ignored, kind.name)


def _read(path: Path) -> tuple[dict[str, dict[str, str | None]], ClassList, list[str]]:
    text = _text(path)
    separator = max(SEPARATORS, key=lambda s: len(next(csv.reader(io.StringIO(text, newline=""), delimiter=s), [])))
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=separator)  # (ties above: a comma)
    columns = [(c or "").strip() for c in reader.fieldnames or []]
    kind = _kind(path, columns)
    given = _given(kind, columns)
    students: dict[str, dict[str, str | None]] = {}
    for raw in reader:  # (csv skips empty lines; reader.line_num is the line just read)
        line = reader.line_num
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if isinstance(v, str)}
        details = _details(kind, row)
        student_id = _first(kind.ids, row)
        name = details["last_name"] or details["first_name"]
        if not any(row.values()) or (kind is not CLASS_LISTS[0] and not (student_id or name)):
            continue  # a line of empty cells, as spreadsheets write them (or a row of an LMS's settings)
        if _first(kind.sortable_name, row) in kind.not_students or _full_name(details) in kind.not_students:
            continue  # Canvas's "Points Possible" row and Student View's test student
        if not is_valid_student_id(student_id):
            where = f" (in {', '.join(kind.ids)})" if kind.ids != ("id",) else ""
            raise CourseError(f"{path}, line {line}: {invalid_student_id(student_id)}{where}")
        if student_id in students:
            raise CourseError(f"{path}, line {line}: student {student_id} is listed twice")
        marked_up = next((f for f in FIELDS if any(c in (details[f] or "") for c in "<>")), None)
        if marked_up:  # nbgrader's formgrader writes names into its pages as HTML, unescaped
            raise CourseError(f"{path}, line {line}: {marked_up} {details[marked_up][:60]!r} has < or >: names, "
                              "emails and LMS ids may not hold markup (the formgrader would run it)")
        students[student_id] = {f: v for f, v in details.items() if f in given}  # (a field it lacks is kept)
    if not students:
        raise CourseError(f"{path} lists no students")
    return students, kind, [c for c in columns if c and c not in kind.columns] if kind is CLASS_LISTS[0] else []


def _text(path: Path) -> str:
    """The file's text: UTF-8 (with or without a byte-order mark) or UTF-16 (Blackboard's tab-separated download)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CourseError(f"no roster file at {path}") from None
    except OSError as error:
        raise CourseError(f"cannot read the roster {path}: {error.strerror or error}") from None
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    elif b"\x00" in data[:2] and not data.startswith(codecs.BOM_UTF8):
        encoding = "utf-16-le" if data[1:2] == b"\x00" else "utf-16-be"
    else:
        encoding = "utf-8-sig"  # spreadsheets often write a byte-order mark
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as error:
        raise CourseError(f"{path} is not a UTF-8 or UTF-16 text file: {error}") from None


def _kind(path: Path, columns: list[str]) -> ClassList:
    """The kind of class list whose columns the header has; or a one-line error naming what was expected."""
    found = set(columns)
    for kind in CLASS_LISTS:
        if found.issuperset(kind.marks) and found.intersection(kind.ids):
            return kind
    expected = "; ".join(f"{kind.name} ({', '.join(kind.columns)})" for kind in CLASS_LISTS)
    raise CourseError(f"{path}: the first row must name the columns of a class list: {expected}; found: "
                      f"{', '.join(columns) or 'nothing'}{_nearest(columns)}")


def _nearest(columns: list[str]) -> str:
    """The kind of class list the found columns come closest to, and what it lacks (nothing when nothing is close)."""
    folded = {c.casefold().replace(" ", "").replace("_", ""): c for c in columns if c}

    def close(expected: str) -> str | None:
        key = expected.casefold().replace(" ", "").replace("_", "")
        match = difflib.get_close_matches(key, list(folded), n=1, cutoff=0.8)
        return folded[match[0]] if match else None

    def score(kind: ClassList) -> int:
        return sum(close(c) is not None for c in kind.marks + kind.ids)

    kind = max(CLASS_LISTS, key=score)
    if not score(kind):
        return ""
    wanted = list(dict.fromkeys(kind.marks + kind.ids[:1]))
    lacking = [f"{c} (found {close(c)!r})" if close(c) else c for c in wanted if c not in columns]
    return f"; nearest: {kind.name}, lacking {', '.join(lacking)}"


def _given(kind: ClassList, columns: list[str]) -> set[str]:
    """The roster's fields that the file has a column for (names: "Last, First" in one column too)."""
    sources = {"first_name": kind.first_name + kind.sortable_name, "last_name": kind.last_name + kind.sortable_name,
               "email": kind.email, "lms_user_id": kind.lms_user_id}
    return {field for field, names in sources.items() if set(names) & set(columns)}


def _details(kind: ClassList, row: dict[str, str]) -> dict[str, str | None]:
    """The roster's fields of one row, from the columns of its kind of class list."""
    first, last = _first(kind.first_name, row), _first(kind.last_name, row)
    sortable = _first(kind.sortable_name, row)
    if sortable and not (first or last):  # "Doe, Jane"; a name without a comma is kept whole
        last, _, first = (part.strip() for part in sortable.partition(","))
    values = {"first_name": first, "last_name": last, "email": _first(kind.email, row),
              "lms_user_id": _first(kind.lms_user_id, row)}
    return {field: value or None for field, value in values.items()}


def _first(columns: tuple[str, ...], row: dict[str, str]) -> str:
    """The value of the first of ``columns`` that the row fills, or ''."""
    return next((row[c] for c in columns if row.get(c)), "")


def _full_name(details: dict[str, str | None]) -> str:
    return " ".join(x for x in (details["first_name"], details["last_name"]) if x)
