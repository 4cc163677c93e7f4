"""Collect students' notebooks into nbgrader's ``submitted/`` folder.

The source is a folder with one sub-folder per student (``SOURCE/<student_id>/<notebook>.ipynb``)
or a zip of such folders, as an LMS download gives them, optionally wrapped in one top-level
folder. Submissions are untrusted input: paths that leave the folder (``..``, absolute paths),
symbolic links, special files and oversized notebooks are refused with a message, and nothing is
ever written outside ``<grading>/submitted/``. Notebooks are copied as bytes, not parsed: an
invalid notebook is the grader's to report.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import uuid
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO, Callable

from autograder.authoring.course import Course, CourseError

MAX_NOTEBOOK_BYTES = 50_000_000
# nbgrader's own format (Exchange.timestamp_format), in UTC; nbgrader.utils.parse_utc reads it.
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"
STUDENT_ID = re.compile(r"[A-Za-z0-9._@-]{1,100}")
CHUNK = 1 << 20


def is_valid_student_id(name: str) -> bool:
    """A student id that is safe as a folder name: letters, digits and . _ - @, not only dots."""
    return bool(STUDENT_ID.fullmatch(name)) and bool(name.strip("."))


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
    destination: Path | None = None                        # submitted/<student>/<assignment>/, if written

    @property
    def complete(self) -> bool:
        return bool(self.collected) and not self.missing and not self.problems

    def summary(self) -> str:
        """One line for the instructor, e.g. ``bob: collected a.ipynb (from "Untitled.ipynb")``."""
        who = _shown(self.student_id) if self.student_id is not None else "(outside student folders)"
        parts = []
        if self.collected:
            parts.append("collected " + ", ".join(
                f'{n} (from "{_shown(self.renamed[n])}")' if n in self.renamed else n for n in self.collected))
        elif self.student_id is not None:
            parts.append("nothing collected")
        if self.missing:
            parts.append("missing " + ", ".join(self.missing))
        if self.unexpected:
            parts.append("ignored " + ", ".join(f'"{_shown(n)}"' for n in self.unexpected))
        parts += self.problems
        return f"{who}: " + "; ".join(parts)


@dataclass
class _Entry:
    """One file of the source: its path split into parts, and how to read it."""

    parts: tuple[str, ...]
    size: int
    modified: datetime  # UTC
    open: Callable[[], BinaryIO]
    refused: str = ""  # why it may not be collected (a link, not a regular file, encrypted)


def collect(course: Course, assignment: str, source: Path, *,
            max_notebook_bytes: int = MAX_NOTEBOOK_BYTES) -> list[CollectResult]:
    """Put each student's notebooks of ``assignment`` from ``source`` (folder or zip) into submitted/.

    Raises CollectError when the source as a whole is unusable; everything about one student or
    one entry is reported in that student's CollectResult (the last result, with student_id None,
    holds entries that belong to no student, if any). Re-collecting a student replaces their
    previous submission of this assignment in one rename.
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
    if source.is_dir():
        entries = _folder_entries(source)
        return _collect_entries(entries, outside, f"folder {source}", expected, assignment, submitted,
                                max_notebook_bytes)
    if not source.exists():
        raise CollectError(f"no folder or zip file at {source}")
    if not zipfile.is_zipfile(source):
        raise CollectError(f"{source} is not a zip file (give a zip of student folders, or a folder)")
    try:
        with zipfile.ZipFile(source) as archive:
            entries = _zip_entries(archive, outside)
            return _collect_entries(entries, outside, f"zip file {source}", expected, assignment, submitted,
                                    max_notebook_bytes)
    except zipfile.BadZipFile as error:
        raise CollectError(f"{source} is not a readable zip file: {error}") from None


def _collect_entries(entries: list[_Entry], outside: CollectResult, described: str, expected: list[str],
                     assignment: str, submitted: Path, limit: int) -> list[CollectResult]:
    entries = _without_wrapper_folder(entries)
    students: dict[str, list[_Entry]] = {}
    for entry in entries:
        if len(entry.parts) == 1 and entry.refused:
            outside.problems.append(f'refused "{_shown(entry.parts[0])}": {entry.refused}')
        elif len(entry.parts) == 1:
            outside.unexpected.append(entry.parts[0])
        else:
            students.setdefault(entry.parts[0], []).append(entry)
    if not students:
        found = f" (found only: {', '.join(_shown(n) for n in outside.unexpected + outside.problems)})" \
            if outside.unexpected or outside.problems else ""
        raise CollectError(f"no student folders in {described}{found}; expected "
                           f"<student_id>/{expected[0]} for each student")
    results = [_collect_student(student, files, expected, submitted / student / assignment, limit)
               if is_valid_student_id(student)
               else CollectResult(student, problems=[
                   "invalid student id: use only letters, digits and . _ - @ (nothing collected)"])
               for student, files in sorted(students.items())]
    return results + ([outside] if outside.unexpected or outside.problems else [])


def _collect_student(student: str, entries: list[_Entry], expected: list[str], destination: Path,
                     limit: int) -> CollectResult:
    """Match one student's files with the expected notebooks and write what can be collected."""
    result = CollectResult(student)
    files = {}
    for entry in entries:
        name = "/".join(entry.parts[1:])
        if entry.refused:
            result.problems.append(f'refused "{_shown(name)}": {entry.refused}')
        else:
            files[name] = entry
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
            result.problems.append(f"refused {name}: {_size(entry.size)} is over the "
                                   f"{_size(limit)} limit for a notebook")
            del chosen[name]
            result.renamed.pop(name, None)
    if chosen:
        _write_submission(destination, chosen, limit, result)
    if not result.collected and destination.exists():
        result.problems.append("the previous submission was kept")
    return result


def _write_submission(destination: Path, chosen: dict[str, _Entry], limit: int, result: CollectResult) -> None:
    """Copy the chosen notebooks and timestamp.txt beside ``destination``, then swap it in by rename."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    scratch = destination.parent / f".collecting-{destination.name}-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    try:
        times = []
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
            times.append(entry.modified)
        if not result.collected:
            return
        (scratch / "timestamp.txt").write_text(max(times).strftime(TIMESTAMP_FORMAT))
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
            raise _TooLarge(f"more than the {_size(limit)} limit for a notebook")
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
            outside.problems.append(f'refused "{_shown(info.filename)}": an absolute path')
            continue
        if ".." in parts:
            outside.problems.append(f'refused "{_shown(info.filename)}": the path leaves the folder (..)')
            continue
        if info.is_dir() or not parts or _is_junk(parts):
            continue
        mode = info.external_attr >> 16
        refused = ("a symbolic link" if stat.S_ISLNK(mode)
                   else "encrypted" if info.flag_bits & 0x1
                   else "not a regular file" if stat.S_IFMT(mode) not in (0, stat.S_IFREG) else "")
        # Zip dates have no time zone; like unzip, read them as this machine's local time.
        modified = datetime(*info.date_time).astimezone(timezone.utc)
        entries.append(_Entry(parts, info.file_size, modified, lambda info=info: archive.open(info), refused))
    return entries


def _without_wrapper_folder(entries: list[_Entry]) -> list[_Entry]:
    """Strip one top-level folder that wraps the student folders (``download/<student>/<nb>``)."""
    tops = {entry.parts[0] for entry in entries}
    wrapped = (len(tops) == 1 and all(len(e.parts) > 1 for e in entries)
               and any(len(e.parts) > 2 for e in entries)
               and not any(len(e.parts) == 2 and e.parts[1].lower().endswith(".ipynb") for e in entries))
    return [_Entry(e.parts[1:], e.size, e.modified, e.open, e.refused) for e in entries] if wrapped else entries


def _is_junk(parts: tuple[str, ...]) -> bool:
    """Hidden files and folders (.ipynb_checkpoints, .DS_Store) and macOS's __MACOSX/ are skipped."""
    return any(part.startswith(".") or part == "__MACOSX" for part in parts)


def _size(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n:,} bytes"


def _shown(name: str) -> str:
    """An untrusted name, safe to print on one line."""
    return name if name.isprintable() else repr(name)[1:-1]
