"""When a submission was handed in, and whether the LMS marked it late: from the LMS's own record,
never from a file's date in a download.

What each LMS's download carries:

- Canvas's "Download Submissions" zip: no time. Each file name carries Canvas's own late mark
  (``doejane_LATE_12345_67890_01_first_function.ipynb``); the zip's entry dates are when Canvas
  made the zip. Canvas's gradebook export has no submission times either; its submissions API
  (``submitted_at``, ``late``) does.
- Moodle's "Download all submissions": no time and no late mark. Its grading worksheet (Grading
  action > Download grading worksheet, a CSV) has both who (``Identifier``: ``Participant 12345``,
  the number in the download's folder names) and when (``Last modified (submission)``).
- Blackboard: each attempt's time is in its file names (``..._attempt_2026-03-14-09-26-52_...``).
- A folder per student: nbgrader's own ``timestamp.txt``, if a student folder has one.
- An instructor's regular expression: its ``timestamp`` group, if it has one.

Where a download carries no time, ``collect --times FILE.csv`` takes the times from a CSV
(``SubmissionTimes``): Moodle's grading worksheet as it is, a CSV made from Canvas's submissions
API, or any CSV with a column saying who and one saying when. A submission with no time at all is
on time, unless the LMS marked it late: then ``grade`` counts it late by the least the late policy
counts (``deadlines.time_if_marked_late``) and says "marked late, time unknown".

``collect`` writes the time into nbgrader's ``timestamp.txt`` and the LMS's late mark into
``handed_in.json`` beside it (``write_mark``, ``marked_late``).
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from autograder.course import CourseError
from autograder.grading.records.lms import Roster, parse_timestamp

MARK_FILE = "handed_in.json"

# What each built-in layout's download says of when it was handed in, for collect's output.
WHAT_DOWNLOADS_CARRY = {
    "canvas": "Canvas's download carries no submission times (only its LATE mark; its submissions API has "
              "submitted_at)",
    "moodle": "Moodle's download carries no submission times (its grading worksheet does: Download grading "
              "worksheet)",
    "folders": "these student folders have no timestamp.txt",
    "regexp": "the regular expression has no timestamp group",
    "blackboard": "these Blackboard file names carry no time",
}

# Column names (compared case-insensitively) of a CSV of submission times, and what they give.
WHO_COLUMNS = {"student_id": "student_id", "lms_user_id": "lms_user_id", "user_id": "lms_user_id",
               "identifier": "lms_user_id", "email": "email", "email address": "email", "full name": "full_name"}
TIME_COLUMNS = ("submitted_at", "last modified (submission)", "timestamp")
LATE_COLUMNS = ("late",)
NO_TIME = {"", "-", "null", "none"}  # Moodle's worksheet writes "-" for a student who handed in nothing


@dataclass(frozen=True)
class HandedIn:
    """What the LMS says of one submission."""

    time: datetime | None  # UTC; None: unknown
    late: bool | None      # the LMS's own mark; None: it says nothing


class SubmissionTimes:
    """A CSV of submission times, looked up by the LMS's id for the student (or the student id)."""

    def __init__(self, name: str, by_lms: dict[str, HandedIn], by_student: dict[str, HandedIn]) -> None:
        self.name, self.by_lms, self.by_student = name, by_lms, by_student

    @classmethod
    def read(cls, path: Path, roster: Roster) -> "SubmissionTimes":
        """Read ``path``; a CourseError names the line of anything it cannot read (nothing is collected then)."""
        path = Path(path)
        try:
            with path.open(newline="", encoding="utf-8-sig") as stream:
                lines = list(csv.reader(stream))
        except (OSError, UnicodeDecodeError, csv.Error) as error:
            raise CourseError(f"cannot read the submission times in {path}: {error}") from None
        if not lines:
            raise CourseError(f"{path} is empty: it needs a header row and a row per student")
        header = [h.strip().casefold() for h in lines[0]]
        who = {i: WHO_COLUMNS[h] for i, h in enumerate(header) if h in WHO_COLUMNS}
        when = next((header.index(h) for h in TIME_COLUMNS if h in header), None)
        late = next((header.index(h) for h in LATE_COLUMNS if h in header), None)
        if not who or (when is None and late is None):
            raise CourseError(
                f"{path} needs a column saying who ({', '.join(WHO_COLUMNS)}) and one saying when "
                f"({', '.join(TIME_COLUMNS)}) or whether late ({', '.join(LATE_COLUMNS)}), as Moodle's grading "
                "worksheet and Canvas's submissions API name them")
        by_lms, by_student = {}, {}
        for number, row in enumerate(lines[1:], start=2):
            cell = dict(enumerate(c.strip() for c in row))
            groups = {key: _who(header[i], cell.get(i, "")) for i, key in who.items() if cell.get(i)}
            if not groups:
                continue
            handed = HandedIn(_time(cell.get(when, ""), path, number) if when is not None else None,
                              _late(cell.get(late, ""), path, number) if late is not None else None)
            if groups.get("lms_user_id"):
                by_lms[groups["lms_user_id"]] = handed
            student, _ = roster.resolve(groups)
            if student:
                by_student[student] = handed
        return cls(path.name, by_lms, by_student)

    def find(self, student: str, groups: dict[str, str]) -> HandedIn | None:
        """What the CSV says of ``student``, whose file in the download was read as ``groups``."""
        lms_id = groups.get("lms_user_id")
        if lms_id and lms_id in self.by_lms:
            return self.by_lms[lms_id]
        return self.by_student.get(student)


def _who(column: str, text: str) -> str:
    """A cell naming the student; Moodle's Identifier "Participant 12345" gives the number in its folder names."""
    return "".join(re.findall(r"\d+", text)) if column == "identifier" else text


def _time(text: str, path: Path, number: int) -> datetime | None:
    if text.casefold() in NO_TIME:
        return None
    try:
        return parse_timestamp(text)
    except ValueError:
        raise CourseError(f"{path} line {number}: cannot read the time {text!r}; write it like "
                          "2026-03-14 09:26 (this machine's local time) or 2026-03-14T09:26:00Z") from None


def _late(text: str, path: Path, number: int) -> bool | None:
    answer = text.casefold()
    if answer in NO_TIME:
        return None
    if answer in ("true", "yes", "1", "late"):
        return True
    if answer in ("false", "no", "0"):
        return False
    raise CourseError(f"{path} line {number}: the late column says {text!r}; write true or false")


def write_mark(folder: Path, late: bool) -> None:
    """Record the LMS's late mark of the submission in ``folder``."""
    (folder / MARK_FILE).write_text(json.dumps({"marked_late_by_lms": late}) + "\n", encoding="utf-8")


def marked_late(folder: Path) -> bool | None:
    """The LMS's late mark recorded by ``collect`` in a submitted folder (None: none recorded or unreadable)."""
    try:
        value = json.loads((folder / MARK_FILE).read_text(encoding="utf-8")).get("marked_late_by_lms")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, bool) else None
