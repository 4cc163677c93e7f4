"""Collect students' notebooks into nbgrader's ``submitted/`` folder.

The source is an LMS download, a zip or a folder: Canvas's flat zip, Moodle's folders, Blackboard's
attempt files, a folder per student (``SOURCE/<student_id>/<notebook>.ipynb``, optionally wrapped
in one top-level folder), or any layout an instructor describes with a regular expression
(``autograder.grading.records.lms``). Submissions are untrusted input: paths that leave the folder (``..``,
absolute paths), symbolic links, special files and oversized notebooks are refused with a message,
and nothing is ever written outside ``<grading>/submitted/``. Notebooks are copied as bytes; a
copied one that cannot be read as a notebook (``records.submissions.read_submission``) is still
collected, so that grading gives its student a row and a page saying why, and is reported as a
problem now. A student who handed in no usable notebook gets a submission without one, so that
grading gives them a row saying so.

When each submission was handed in comes from the LMS's own record (``records.handed_in``): a
time in the file names (Blackboard), nbgrader's ``timestamp.txt`` in a student folder, or a CSV
the instructor gives (``--times``), never a file's date in the download; the LMS's late mark
(Canvas's ``LATE``) is kept beside it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import uuid
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Callable

from autograder.course import Course, CourseError
from autograder.grading.records.handed_in import SubmissionTimes, write_mark
from autograder.grading.records.lms import Layout, Roster, detect, parse_timestamp, resubmission_key, shown
from autograder.grading.records.submissions import MAX_NOTEBOOK_BYTES, InvalidNotebook, megabytes, read_submission

# nbgrader's own format (Exchange.timestamp_format), in UTC; nbgrader.utils.parse_utc reads it.
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"
CHUNK = 1 << 20


class CollectError(CourseError):
    """The source as a whole cannot be collected (missing, not a zip, no students)."""


@dataclass
class CollectResult:
    """What happened to one student's submission; ``student_id`` None: entries outside any student folder."""

    student_id: str | None
    collected: list[str] = field(default_factory=list)     # notebook names written to submitted/
    renamed: dict[str, str] = field(default_factory=dict)  # collected name -> the file it came from
    missing: list[str] = field(default_factory=list)       # expected notebooks not in the submission
    unexpected: list[str] = field(default_factory=list)    # files present but not collected
    problems: list[str] = field(default_factory=list)      # refused entries and invalid ids, with why
    notes: list[str] = field(default_factory=list)         # worth knowing: a resubmission, marked late
    warnings: list[str] = field(default_factory=list)      # collected, but to check: not on the roster
    invalid: dict[str, str] = field(default_factory=dict)  # collected notebook -> why it cannot be graded
    destination: Path | None = None                        # submitted/<student>/<assignment>/, if written
    handed_in: datetime | None = None  # when, from the LMS's record (None: the download carries no time)
    marked_late: bool | None = None    # the LMS's own late mark (None: it gives none)
    layout: str = ""                   # how the download was read: canvas, moodle, blackboard, folders, regexp

    @property
    def complete(self) -> bool:
        return bool(self.collected) and not self.missing and not self.problems

    @property
    def needs_attention(self) -> bool:
        """Something was skipped or is doubtful, or a collected notebook cannot be graded."""
        return self.skipped_something or bool(self.invalid)

    @property
    def skipped_something(self) -> bool:
        """Something was skipped or is doubtful: a notebook not collected, a refusal, an unknown student."""
        ignored_notebooks = [n for n in self.unexpected if n.lower().endswith(".ipynb")]
        return bool(self.missing or self.problems or self.warnings or ignored_notebooks
                    or (self.student_id is not None and not self.collected))

    def summary(self) -> str:
        """One line for the instructor, e.g. ``bob: collected a.ipynb (from "Untitled.ipynb")``."""
        who = shown(self.student_id) if self.student_id is not None else "(outside student folders)"
        parts = []
        if self.collected:
            parts.append("collected " + ", ".join(
                f'{n} (from "{shown(self.renamed[n])}")' if n in self.renamed else n for n in self.collected))
        elif self.student_id is not None:
            parts.append("nothing collected")
        if self.missing:
            parts.append("missing " + ", ".join(self.missing))
        parts += [f"{n} cannot be graded: {shown(why)}" for n, why in self.invalid.items()]
        if self.unexpected:
            parts.append("ignored " + ", ".join(f'"{shown(n)}"' for n in self.unexpected))
        parts += [shown(p) for p in self.problems + self.warnings + self.notes]
        return f"{who}: " + "; ".join(parts)


@dataclass
class _Entry:
    """One file of the source: its path split into parts, and how to read it."""

    parts: tuple[str, ...]
    size: int
    modified: datetime  # UTC
    open: Callable[[], BinaryIO]
    refused: str = ""  # why it may not be collected (a link, not a regular file, encrypted)
    empty_folder: bool = False  # not a file: a folder with nothing in it (a student who handed in nothing)
    handed_in: datetime | None = None  # the submission time its name carries (Blackboard, a regexp's timestamp)
    claimed_by: str = ""  # who the LMS says handed it in, as the download names them (its own id, or a name)
    original: str = ""    # its path in the download


def collect(course: Course, assignment: str, source: Path, *, layout: str | None = None,
            regexp: str | None = None, roster: Roster | None = None, times: Path | None = None,
            max_notebook_bytes: int = MAX_NOTEBOOK_BYTES) -> list[CollectResult]:
    """Put each student's notebooks of ``assignment`` from ``source`` (folder or zip) into submitted/.

    ``layout`` names a built-in layout (canvas, moodle, blackboard, folders; default: the one that
    reads most notebooks), ``regexp`` is nbgrader's named_regexp for any other layout, and
    ``roster`` maps LMS ids and names to student ids (default: the gradebook's students), and
    ``times`` is a CSV of submission times (``records.handed_in.SubmissionTimes``), which wins over
    any time the download carries.
    Raises CollectError when the source as a whole is unusable; everything about one student or
    one entry is reported in that student's CollectResult (the last result, with student_id None,
    holds entries that belong to no student, if any). Re-collecting a student replaces their
    previous submission of this assignment in one rename; of several attempts at one notebook, the
    latest is collected.
    """
    course.check_assignment(assignment)
    expected = [p.name for p in course.notebooks(assignment, released=True)]
    if not expected:
        raise CollectError(f"no released notebooks in {course.release / assignment}: release the assignment first")
    source = Path(source)
    submitted = course.grading / "submitted"
    if source.is_dir() and source.resolve().is_relative_to(submitted.resolve()):
        raise CollectError(f"{source} is inside nbgrader's submitted folder; collect from a download folder")
    outside = CollectResult(None)
    reader = Layout.from_regexp(regexp) if regexp else Layout.named(layout) if layout else None
    roster = roster if roster is not None else Roster.load(course)
    submission_times = SubmissionTimes.read(times, roster) if times else None
    how = _How(expected, assignment, submitted, max_notebook_bytes, reader, roster, submission_times)
    if source.is_dir():
        entries = _folder_entries(source)
        return _collect_entries(entries, outside, f"folder {source}", how)
    if not source.exists():
        raise CollectError(f"no folder or zip file at {source}")
    if not zipfile.is_zipfile(source):
        raise CollectError(f"{source} is not a zip file (give a zip of student folders, or a folder)")
    try:
        with zipfile.ZipFile(source) as archive:
            entries = _zip_entries(archive, outside)
            return _collect_entries(entries, outside, f"zip file {source}", how)
    except zipfile.BadZipFile as error:
        raise CollectError(f"{source} is not a readable zip file: {error}") from None


@dataclass
class _How:
    """What collecting this source needs to know, besides the entries."""

    expected: list[str]
    assignment: str
    submitted: Path
    limit: int
    layout: Layout | None
    roster: Roster
    times: SubmissionTimes | None


def _collect_entries(entries: list[_Entry], outside: CollectResult, described: str, how: _How) -> list[CollectResult]:
    entries = _without_wrapper_folder(entries)
    layout = how.layout or detect([e.parts for e in entries])
    students: dict[str, list[_Entry]] = {}
    results: dict[str, CollectResult] = {}
    named: dict[str, dict[str, str]] = {}  # student -> how the download names them (for --times)
    unknown: dict[str, CollectResult] = {}
    for entry in entries:
        if entry.empty_folder:  # read as if it held a file, so the layout says whose folder it is
            groups = layout.match(entry.parts + ("_",)) if layout.on == "path" else None
            student, _ = how.roster.resolve(groups) if groups and groups.get("file_id") else (None, "")
            if student is not None:
                results.setdefault(student, CollectResult(student, layout=layout.name))
                students.setdefault(student, [])
                named.setdefault(student, groups)
            continue
        groups = layout.match(entry.parts)
        if groups is not None and "receipt" in groups:
            continue  # Blackboard's submission receipt: nothing to collect
        if groups is None or not groups.get("file_id"):
            if entry.refused:
                outside.problems.append(f'refused "{shown("/".join(entry.parts))}": {entry.refused}')
            else:
                outside.unexpected.append("/".join(entry.parts))
            continue
        student, note = how.roster.resolve(groups)
        if student is None:
            who = groups.get("student_id") or groups.get("full_name") or groups.get("sortable_name") \
                or groups.get("lms_user_id") or "/".join(entry.parts)
            result = unknown.setdefault(who, CollectResult(who))
            if note not in result.problems:
                result.problems.append(note)
            continue
        result = results.setdefault(student, CollectResult(student, layout=layout.name))
        named.setdefault(student, groups)
        if note and note not in result.warnings:
            result.warnings.append(note)
        if "late" in layout.pattern.groupindex:  # Canvas marks late files; the others are on time by its word
            result.marked_late = bool(result.marked_late) or bool(groups.get("late"))
        handed_in = None
        if groups.get("timestamp"):
            try:
                handed_in = parse_timestamp(groups["timestamp"])
            except ValueError as error:
                result.problems.append(f"{error}: its time is unknown")
        parts = (student, *groups["file_id"].split("/"))
        students.setdefault(student, []).append(_Entry(parts, entry.size, handed_in or entry.modified, entry.open,
                                                       entry.refused, handed_in=handed_in,
                                                       claimed_by=_claimed_by(groups),
                                                       original="/".join(entry.parts)))
    if not students and not unknown:
        found = f" (found only: {', '.join(shown(n) for n in outside.unexpected + outside.problems)})" \
            if outside.unexpected or outside.problems else ""
        raise CollectError(f"no student folders in {described}{found}; expected "
                           f"<student_id>/{how.expected[0]} for each student, a download from Canvas, Moodle "
                           "or Blackboard, or a layout given with --regexp")
    for student in sorted(students):
        files = _latest_attempts(students[student], results[student])
        _collect_student(results[student], files, how, named[student])
    ordered = [results[s] for s in sorted(results)] + [unknown[w] for w in sorted(unknown)]
    return ordered + ([outside] if outside.unexpected or outside.problems else [])


def _claimed_by(groups: dict[str, str]) -> str:
    """Who the download says handed a file in: the LMS's parts of its name (never the student's file name)."""
    return "/".join(f"{key}={groups[key]}" for key in ("lms_user_id", "student_id", "email", "full_name",
                                                        "sortable_name", "first_name", "last_name") if groups.get(key))


def _latest_attempts(entries: list[_Entry], result: CollectResult) -> list[_Entry]:
    """Of several attempts at one file (resubmissions: ``nb.ipynb``, ``nb-1.ipynb``, two dated attempts), the latest.

    Files that claim one student's file as two people (two LMS ids, or an id and a name, mapped to one student), or
    as one attempt twice, are all left out and said, so that neither overwrites the other: an instructor looks."""
    attempts: dict[str, list[tuple[datetime, int, _Entry]]] = {}
    for entry in entries:
        name, number = resubmission_key("/".join(entry.parts[1:]))
        attempts.setdefault(name, []).append((entry.modified, number, entry))
    kept = []
    for name, found in attempts.items():
        found.sort(key=lambda a: (a[0], a[1]))
        clash = _clash(found)
        if clash:
            listed = ", ".join(f'"{shown(e.original)}"' for _, _, e in found)
            result.problems.append(f"needs a look: {clash} ({listed}); none of them collected")
            continue
        latest = found[-1][2]
        kept.append(latest)
        if len(found) > 1:
            older = ", ".join(f'"{shown("/".join(e.parts[1:]))}"{_when(e)}' for _, _, e in found[:-1])
            result.notes.append(f'resubmitted: kept the latest, "{shown("/".join(latest.parts[1:]))}"'
                                f"{_when(latest)}, not {older}")
    return kept


def _clash(found: list[tuple[datetime, int, _Entry]]) -> str:
    """Why files that claim to be one student's attempts at one notebook cannot be told apart ('' if they can)."""
    claimants = sorted({e.claimed_by for _, _, e in found})
    if len(claimants) > 1:
        return "files of " + " and ".join(shown(c) for c in claimants) + " claim the same student's notebook"
    keys = [(time, number) for time, number, _ in found]
    if len(set(keys)) < len(keys):
        return "two files claim the same attempt"
    return ""


def _when(entry: _Entry) -> str:
    """' (2026-03-14 09:26 UTC)' when the download says when this file was handed in, else ''."""
    return f" ({entry.handed_in:%Y-%m-%d %H:%M} UTC)" if entry.handed_in else ""


def _collect_student(result: CollectResult, entries: list[_Entry], how: _How, groups: dict[str, str]) -> None:
    """Match one student's files with the expected notebooks and write what can be collected.

    A student with no usable notebook and no earlier submission gets a submission without one, so
    that ``grade`` gives them a row saying the notebook is missing.
    """
    expected, limit = how.expected, how.limit
    destination = how.submitted / result.student_id / how.assignment
    files = {}
    for entry in entries:
        name = "/".join(entry.parts[1:])
        if entry.refused:
            result.problems.append(f'refused "{shown(name)}": {entry.refused}')
        else:
            files[name] = entry
    # nbgrader's own record of when a student folder was handed in; in an LMS's download a file of that name
    # is one a student uploaded: data, never a record.
    own_time = _own_timestamp(files.pop("timestamp.txt", None), result) if result.layout == "folders" else None
    chosen = {name: files.pop(name) for name in expected if name in files}
    missing = [name for name in expected if name not in chosen]
    notebooks = [name for name in files if name.lower().endswith(".ipynb")]
    if len(missing) == 1 and len(notebooks) == 1:  # e.g. "01_first_function (1).ipynb" or "Untitled.ipynb"
        chosen[missing[0]] = files.pop(notebooks[0])
        result.renamed[missing[0]] = notebooks[0]
        missing = []
    result.missing, result.unexpected = missing, sorted(files)
    for name, entry in list(chosen.items()):
        if entry.size > limit:
            result.problems.append(f"refused {name}: {megabytes(entry.size)} is over the "
                                   f"{megabytes(limit)} limit for a notebook")
            del chosen[name]
            result.renamed.pop(name, None)
    _when_handed_in(result, own_time, list(chosen.values()) or entries, how.times, groups)
    if chosen:
        _write_submission(destination, chosen, limit, result)
    if not result.collected and destination.exists():
        result.problems.append("the previous submission was kept")
    elif not result.collected:
        _write_submission(destination, {}, limit, result, empty=True)
        result.notes.append("no usable notebook: it will be graded 'invalid notebook'")


def _when_handed_in(result: CollectResult, own_time: datetime | None, entries: list[_Entry],
                    times: SubmissionTimes | None, groups: dict[str, str]) -> None:
    """The submission's time and late mark: the instructor's CSV, else nbgrader's timestamp.txt, else
    the time the file names carry (the latest, if all carry one); never a file's date in the download."""
    named = [e.handed_in for e in entries]
    result.handed_in = own_time or (max(named) if named and None not in named else None)
    given = times.find(result.student_id, groups) if times else None
    if given is not None:
        result.handed_in = given.time or result.handed_in
        result.marked_late = given.late if given.late is not None else result.marked_late
    if result.marked_late:
        result.notes.append("marked late by the LMS" + ("" if result.handed_in else ", time unknown"))


def _own_timestamp(entry: _Entry | None, result: CollectResult) -> datetime | None:
    """The time in a student folder's ``timestamp.txt`` (nbgrader's own record of when it was handed in)."""
    if entry is None or entry.refused or entry.size > 200:
        return None
    from nbgrader.utils import parse_utc

    try:
        with entry.open() as stream:
            return parse_utc(stream.read(200).decode("utf-8").strip()).replace(tzinfo=timezone.utc)
    except Exception as error:  # any unreadable time: the time is unknown, and the instructor told
        result.problems.append(f"timestamp.txt is not a time nbgrader reads ({error}): the time handed in is "
                               "unknown")
        return None


def _write_submission(destination: Path, chosen: dict[str, _Entry], limit: int, result: CollectResult,
                      empty: bool = False) -> None:
    """Copy the chosen notebooks, the time handed in (``timestamp.txt``, when known) and the LMS's late
    mark (``handed_in.json``, when it gives one) beside ``destination``, then swap it in by rename.

    With ``empty``, a submission of no notebook at all is written (when no chosen notebook can be copied).
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    scratch = destination.parent / f".collecting-{destination.name}-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    try:
        for name, entry in chosen.items():
            try:
                with entry.open() as stream, open(scratch / name, "wb") as out:
                    _copy_at_most(stream, out, limit)
            except (_TooLarge, OSError, zipfile.BadZipFile, RuntimeError, NotImplementedError,
                    zlib.error, EOFError) as error:
                result.problems.append(f"refused {name}: {error or type(error).__name__}")
                result.renamed.pop(name, None)
                (scratch / name).unlink(missing_ok=True)
                continue
            os.utime(scratch / name, (entry.modified.timestamp(),) * 2)
            result.collected.append(name)
            try:
                read_submission(scratch / name)
            except InvalidNotebook as error:
                result.invalid[name] = str(error)
        if not result.collected and not empty:
            return
        if result.handed_in:
            (scratch / "timestamp.txt").write_text(result.handed_in.strftime(TIMESTAMP_FORMAT))
        if result.marked_late is not None:
            write_mark(scratch, result.marked_late)
        previous = destination.with_name(f".replaced-{destination.name}-{uuid.uuid4().hex[:8]}")
        if destination.exists():
            destination.rename(previous)
        scratch.rename(destination)
        result.destination = destination
        shutil.rmtree(previous, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _TooLarge(Exception):
    pass


def _copy_at_most(stream: BinaryIO, out: BinaryIO, limit: int) -> None:
    copied = 0
    while chunk := stream.read(CHUNK):
        copied += len(chunk)
        if copied > limit:
            raise _TooLarge(f"more than the {megabytes(limit)} limit for a notebook")
        out.write(chunk)


def _folder_entries(folder: Path) -> list[_Entry]:
    """Every file under ``folder``, without following links; links and special files are marked refused."""
    entries = []
    for directory, subfolders, files in os.walk(folder):
        for name in sorted(subfolders + files):
            path = Path(directory, name)
            parts = path.relative_to(folder).parts
            if _is_junk(parts):
                continue
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode):
                if not any(not _is_junk(Path(d, f).relative_to(folder).parts)
                           for d, _, fs in os.walk(path) for f in fs):
                    entries.append(_Entry(parts, 0, datetime.fromtimestamp(info.st_mtime, timezone.utc),
                                          lambda: None, empty_folder=True))
                continue
            refused = ("a symbolic link" if stat.S_ISLNK(info.st_mode)
                       else "" if stat.S_ISREG(info.st_mode) else "not a regular file")
            entries.append(_Entry(parts, info.st_size, datetime.fromtimestamp(info.st_mtime, timezone.utc),
                                  lambda path=path: open(path, "rb"), refused))
    return entries


def _zip_entries(archive: zipfile.ZipFile, outside: CollectResult) -> list[_Entry]:
    """Every file entry of the zip; unsafe paths go to ``outside``, links and encrypted files are marked."""
    entries = []
    for info in archive.infolist():
        name = info.filename.replace("\\", "/")
        parts = tuple(p for p in name.split("/") if p not in ("", "."))
        if name.startswith("/") or re.match(r"[A-Za-z]:", name):
            outside.problems.append(f'refused "{shown(info.filename)}": an absolute path')
            continue
        if ".." in parts:
            outside.problems.append(f'refused "{shown(info.filename)}": the path leaves the folder (..)')
            continue
        modified, bad_date = _zip_time(info)
        if info.is_dir() and parts and not _is_junk(parts):
            entries.append(_Entry(parts, 0, modified, lambda: None, empty_folder=True))  # dropped if anything is in it
        if info.is_dir() or not parts or _is_junk(parts):
            continue
        mode = info.external_attr >> 16
        refused = ("a symbolic link" if stat.S_ISLNK(mode)
                   else "encrypted" if info.flag_bits & 0x1
                   else "not a regular file" if stat.S_IFMT(mode) not in (0, stat.S_IFREG)
                   else "its date in the zip is not a date" if bad_date else "")
        entries.append(_Entry(parts, info.file_size, modified, lambda info=info: archive.open(info), refused))
    files = [e.parts for e in entries if not e.empty_folder]
    return [e for e in entries if not e.empty_folder
            or not any(len(f) > len(e.parts) and f[:len(e.parts)] == e.parts for f in files)]


def _zip_time(info: zipfile.ZipInfo) -> tuple[datetime, bool]:
    """When a zip entry was written, in UTC, and whether its date was impossible (month 0: then 1980).

    Zip dates have no time zone; like unzip, they are read as this machine's local time."""
    try:
        return datetime(*info.date_time).astimezone(timezone.utc), False
    except (ValueError, OverflowError):
        return datetime(1980, 1, 1, tzinfo=timezone.utc), True


def _without_wrapper_folder(entries: list[_Entry]) -> list[_Entry]:
    """Strip one top-level folder that wraps the student folders (``download/<student>/<nb>``)."""
    tops = {entry.parts[0] for entry in entries}
    wrapped = (len(tops) == 1 and all(len(e.parts) > 1 for e in entries)
               and any(len(e.parts) > 2 for e in entries)
               and not any(len(e.parts) == 2 and e.parts[1].lower().endswith(".ipynb") for e in entries))
    return [replace(e, parts=e.parts[1:]) for e in entries if len(e.parts) > 1] if wrapped else entries


def _is_junk(parts: tuple[str, ...]) -> bool:
    """Hidden files and folders (.ipynb_checkpoints, .DS_Store) and macOS's __MACOSX/ are skipped."""
    return any(part.startswith(".") or part == "__MACOSX" for part in parts)

