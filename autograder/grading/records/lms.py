"""Who handed in which file: the layouts of LMS downloads, the LMSes' class lists, and the roster that maps
LMS ids to students.

Each layout is a regular expression with named groups, nbgrader's own convention for reading LMS
downloads (``FileNameCollectorPlugin.named_regexp``): ``student_id`` and ``file_id``, optionally
``first_name``, ``last_name``, ``email`` and ``timestamp``. The built-in layouts add ``lms_user_id``
(the LMS's own number for the student, mapped through the roster's ``lms_user_id`` column),
``full_name``, ``sortable_name`` (Canvas's "doejane") and ``late`` (Canvas's ``LATE`` marker).
An instructor's own expression for any other layout uses the same group names.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone

from autograder.course import Course, CourseError

# Built-in layouts, most specific first. ``on`` says what the expression reads: the file's name, or its path
# inside the download. Each is read from the start of the name or path, where the LMS writes who handed the
# file in, when, and its own marks; the student names only the file at the end (``file_id``), which is data:
# it can never name another student, an attempt or a time.
LAYOUTS: dict[str, tuple[str, str]] = {
    # Canvas "Download Submissions": doejane_12345_67890_01_first_function.ipynb,
    # doejane_LATE_12345_67890_01_first_function-1.ipynb (user id, then attachment id).
    "canvas": ("name", r"(?P<sortable_name>[^_/]+)_(?:(?P<late>LATE)_)?(?P<lms_user_id>\d+)_\d+_(?P<file_id>[^/]+)"),
    # Moodle "Download all submissions": Jane Doe_12345_assignsubmission_file_/01_first_function.ipynb
    # (older versions: the same without the folder's slash).
    "moodle": ("path", r"(?P<full_name>[^/_]+)_(?P<lms_user_id>\d+)_assignsubmission_[a-z]+_/?(?P<file_id>.+)"),
    # Blackboard "Download Assignment": Assignment 1_jdoe_attempt_2026-03-14-09-26-52_01_first_function.ipynb,
    # beside a receipt Assignment 1_jdoe_attempt_2026-03-14-09-26-52.txt. The assignment's name is read lazily:
    # the first "_<user>_attempt_<time>_" is Blackboard's own, whatever the student's file name after it says.
    "blackboard": ("name", r"(?P<assignment_name>.*?)_(?P<student_id>[^_/]+)_attempt_"
                           r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)(?:_(?P<file_id>.+)|(?P<receipt>\.txt))"),
    # A folder per student: <student_id>/01_first_function.ipynb.
    "folders": ("path", r"(?P<student_id>[^/]+)/(?P<file_id>.+)"),
}


@dataclass(frozen=True)
class ClassList:
    """A class list as a system writes it: the columns that say it is one, and where each roster field comes from.

    Each field names columns in order of preference: a row's value is that of the first column it fills.
    """

    name: str
    marks: tuple[str, ...]               # the file has all of these columns: it is this kind of class list
    ids: tuple[str, ...]                 # the student id (the folder name in a submissions download)
    first_name: tuple[str, ...] = ()
    last_name: tuple[str, ...] = ()
    sortable_name: tuple[str, ...] = ()  # "Last, First" in one column
    email: tuple[str, ...] = ()
    lms_user_id: tuple[str, ...] = ()    # the LMS's own number for the student, which its downloads carry
    not_students: tuple[str, ...] = ()   # names of rows the LMS adds that are not students

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column this kind of class list reads, each once."""
        named = (self.ids + self.marks + self.first_name + self.last_name + self.sortable_name + self.email
                 + self.lms_user_id)
        return tuple(dict.fromkeys(named))


# The class lists `roster` reads, each as its system writes it: the first whose marks and one of whose id columns a
# file has is used.
CLASS_LISTS = (
    # nbgrader's roster (`nbgrader db student import`), also what `collect` and the demo use.
    ClassList("a roster", marks=("id",), ids=("id",), first_name=("first_name",), last_name=("last_name",),
              email=("email",), lms_user_id=("lms_user_id",)),
    # `export`'s grades.csv.
    ClassList("this course's grades.csv", marks=("student_id", "lms_user_id", "score"), ids=("student_id",),
              first_name=("first_name",), last_name=("last_name",), email=("email",), lms_user_id=("lms_user_id",)),
    # Canvas's gradebook export (Grades > Export; canvas-lms lib/gradebook_exporter.rb), also `export`'s canvas.csv:
    # Student ("Last, First"; or LastName, FirstName), ID (Canvas's user id), SIS User ID (the institution's
    # student id, when the exporter may see it), SIS Login ID, [Integration ID], [Root Account], Section, then one
    # column per assignment; its second row is "Points Possible" (a row of posting policies may come before it),
    # and Student View's "Test Student" comes last.
    ClassList("Canvas's gradebook export", marks=("ID", "SIS Login ID", "Section"),
              ids=("SIS User ID", "SIS Login ID", "ID"), first_name=("FirstName",), last_name=("LastName",),
              sortable_name=("Student",), lms_user_id=("ID",),
              not_students=("Points Possible", "Student, Test", "Test Student")),
    # Blackboard Learn's Grade Center download (Work Offline > Download; comma-separated, or tab-separated UTF-16):
    # Last Name, First Name, Username (Blackboard's key for a student, in its submission downloads), Student ID,
    # Last Access, Availability, then one column per item ("Assignment 1 [Total Pts: 10 Score] |1234").
    ClassList("Blackboard's Grade Center download", marks=("Last Name", "First Name", "Username"),
              ids=("Username",), first_name=("First Name",), last_name=("Last Name",)),
    # Moodle's participants download (Participants > With selected users... > Download: First name, Last name and
    # the site's identity fields, by default Email address) and its grade export (Grades > Export > Plain text file:
    # First name, Last name, ID number, Institution, Department, Email address, then the grade items). Older Moodles
    # write "Surname". Moodle's downloads name students by full name, which the roster's names match.
    ClassList("Moodle's participants or grades export", marks=("First name",),
              ids=("ID number", "Username", "Email address"), first_name=("First name",),
              last_name=("Last name", "Surname"), email=("Email address",)),
)
TIMESTAMP_FORMATS = ("%Y-%m-%d-%H-%M-%S", "%Y%m%d%H%M%S")
# A student id is a folder name, a gradebook key and a cell of every CSV the course writes: it must not
# start with a dot (a hidden folder) or with - + = @ (a spreadsheet formula, a command-line option).
STUDENT_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@-]{0,99}")
STUDENT_ID_RULE = ("a student id is 1 to 100 letters, digits and . _ - @, and starts with a letter, a digit or _ "
                   "(e.g. 12345, jdoe, jane.doe@uni.edu)")


def is_valid_student_id(name: str) -> bool:
    """A student id that is safe as a folder name and as a spreadsheet cell (``STUDENT_ID_RULE``)."""
    return bool(STUDENT_ID.fullmatch(name))


def invalid_student_id(name: str) -> str:
    """The one-line message for an id that is not valid."""
    return f"invalid student id '{shown(name)[:120]}': {STUDENT_ID_RULE}"


def shown(name: str) -> str:
    """An untrusted name, safe to print on one line."""
    return name if name.isprintable() else repr(name)[1:-1]


@dataclass(frozen=True)
class Layout:
    """How to read who handed in a file, and which file it is, from its path in the download."""

    name: str
    pattern: re.Pattern
    on: str  # "name" (the file's name) or "path" (its path inside the download)

    @classmethod
    def named(cls, name: str) -> "Layout":
        if name not in LAYOUTS:
            raise CourseError(f"unknown layout '{name}' (known: {', '.join(LAYOUTS)})")
        on, pattern = LAYOUTS[name]
        return cls(name, re.compile(pattern), on)

    @classmethod
    def from_regexp(cls, regexp: str) -> "Layout":
        """An instructor's expression (nbgrader's named_regexp): read on the path if it has a slash."""
        try:
            pattern = re.compile(regexp)
        except re.error as error:
            raise CourseError(f"the regular expression {regexp!r} is not valid: {error}") from None
        groups = set(pattern.groupindex)
        if "file_id" not in groups or not groups & {"student_id", "lms_user_id", "email"}:
            raise CourseError(f"the regular expression {regexp!r} needs the named groups (?P<student_id>...) "
                              "(or lms_user_id, or email) and (?P<file_id>...), as in nbgrader's named_regexp")
        return cls("regexp", pattern, "path" if "/" in regexp else "name")

    def match(self, parts: tuple[str, ...]) -> dict[str, str] | None:
        """The named groups for a file at ``parts``, or None if this layout does not read it."""
        if self.on == "name" and self.name in LAYOUTS and len(parts) != 1:
            return None  # a flat download (Canvas, Blackboard): a file in a folder was named by a student
        text = "/".join(parts) if self.on == "path" else parts[-1]
        found = self.pattern.match(text)
        if not found:
            return None
        return {k: v for k, v in found.groupdict().items() if v is not None}


def detect(paths: list[tuple[str, ...]]) -> Layout:
    """The built-in layout that reads the most notebooks of the download (ties: the more specific)."""
    notebooks = [p for p in paths if p[-1].lower().endswith(".ipynb")] or paths
    layouts = [Layout.named(name) for name in LAYOUTS]
    counts = [sum(_reads(layout, p) for p in notebooks) for layout in layouts]
    return layouts[counts.index(max(counts))]


def _reads(layout: Layout, parts: tuple[str, ...]) -> bool:
    groups = layout.match(parts)
    return bool(groups) and bool(groups.get("file_id"))


@dataclass(frozen=True)
class RosterStudent:
    id: str
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms_user_id: str = ""


class Roster:
    """The class list in the gradebook, looked up by id, LMS id, email and name."""

    def __init__(self, students: list[RosterStudent]) -> None:
        self.students = students
        self.ids = {s.id for s in students}
        self.by_lms = {s.lms_user_id: s.id for s in students if s.lms_user_id}
        self.by_email = {s.email.casefold(): s.id for s in students if s.email}
        self.by_name: dict[str, str] = {}
        for s in students:
            if s.first_name or s.last_name:
                self.by_name.setdefault(_name_key(f"{s.first_name} {s.last_name}"), s.id)
                self.by_name.setdefault(_name_key(f"{s.last_name}{s.first_name}"), s.id)  # Canvas: doejane

    @classmethod
    def load(cls, course: Course) -> "Roster":
        """The gradebook's students; empty when there is no gradebook yet (nothing is created)."""
        from nbgrader.coursedir import CourseDirectory

        db_url = CourseDirectory(config=course.config()).db_url
        if db_url.startswith("sqlite:///") and not _sqlite_file(db_url).exists():
            return cls([])
        with course.gradebook() as gb:
            return cls([RosterStudent(s.id, s.first_name or "", s.last_name or "", s.email or "",
                                      s.lms_user_id or "") for s in gb.students])

    def resolve(self, groups: dict[str, str]) -> tuple[str | None, str]:
        """The student id for a file's named groups, and a note when it is not plainly on the roster.

        Returns (None, why) when no usable id can be made from the file name.
        """
        lms_id, student_id = groups.get("lms_user_id", ""), groups.get("student_id", "")
        email = groups.get("email", "")
        full_name = groups.get("full_name") or " ".join(
            x for x in (groups.get("first_name"), groups.get("last_name")) if x)
        for key, table in ((lms_id, self.by_lms), (student_id, {i: i for i in self.ids}),
                           (student_id, self.by_lms), (email.casefold(), self.by_email),
                           (_name_key(full_name), self.by_name),
                           (_name_key(groups.get("sortable_name", "")), self.by_name)):
            if key and key in table:
                found = table[key]  # a gradebook may hold ids made before ids were checked
                return (found, "") if is_valid_student_id(found) else (
                    None, f"{invalid_student_id(found)} (in the gradebook; nothing collected)")
        who = full_name or groups.get("sortable_name") or student_id or email
        lms = f" (LMS id {lms_id})" if lms_id else ""
        if student_id:  # the download names the student by id: it must be a usable one as it is
            if not is_valid_student_id(student_id):
                return None, f"{invalid_student_id(student_id)} (nothing collected)"
            guess = student_id
        else:  # made from a name or the LMS's number; the roster is the better source
            guess = next((c for c in (_as_id(groups.get("sortable_name", "")), _as_id(full_name.replace(" ", "_")),
                                      _as_id(email.split("@")[0]), _as_id(lms_id)) if c), None)
        if guess is None:
            return None, (f'no student id can be made from "{who}"{lms}: add the student to the roster '
                          "with an lms_user_id")
        if not self.ids:
            return guess, ""
        return guess, (f'"{who}"{lms} is not on the roster: collected as {guess}; add them to the roster '
                       "(with their lms_user_id) or fix the roster and collect again")


def parse_timestamp(text: str) -> datetime:
    """A time from a file name, in UTC; a time without a zone is this machine's local time, like zip dates."""
    for form in TIMESTAMP_FORMATS:
        try:
            return datetime.strptime(text, form).astimezone(timezone.utc)
        except ValueError:
            pass
    from dateutil.parser import parse

    try:
        moment = parse(text)
    except (ValueError, OverflowError) as error:
        raise ValueError(f"cannot read the time {text!r} ({error})") from None
    return moment.astimezone(timezone.utc)


def resubmission_key(file_id: str) -> tuple[str, int]:
    """``01_first_function-2.ipynb`` and ``01_first_function (2).ipynb`` are attempt 2 of ``01_first_function.ipynb``."""
    found = re.fullmatch(r"(.*?)(?:-(\d{1,3})| \((\d{1,3})\))?(\.[^./]+)?", file_id)
    stem, dash, paren, suffix = found.groups()
    return stem + (suffix or ""), int(dash or paren or 0)


def _name_key(name: str) -> str:
    """A name compared loosely: composed Unicode, case-folded, without spaces or punctuation."""
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFC", name).casefold())


def _as_id(text: str) -> str:
    """``text`` made into a valid student id (accents dropped), or '' if nothing is left."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    candidate = re.sub(r"[^A-Za-z0-9._@-]+", "_", ascii_text).strip("_").lstrip(".@-")
    return candidate if is_valid_student_id(candidate) else ""


def _sqlite_file(db_url: str):
    from pathlib import Path

    return Path(db_url[len("sqlite:///"):])
