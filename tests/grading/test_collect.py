"""Collecting submissions from a folder or an LMS zip into nbgrader's submitted/ folder."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from nbgrader.coursedir import CourseDirectory

from autograder.grading.records.collect import CollectError, collect
from autograder.course import CourseError
from autograder.grading.demo.make_demo import DEMO_ROOT

ASSIGNMENT = "01_first_function"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"


def _notebook_bytes(course, tag: str) -> bytes:
    """The released notebook with a marker, so each student's copy can be told apart."""
    return (course.release / ASSIGNMENT / NOTEBOOK).read_bytes().replace(b'"cells"', f'"x-{tag}": 1, "cells"'.encode(), 1)


def _submitted(course, student: str) -> Path:
    return course.grading / "submitted" / student / ASSIGNMENT


def _by_student(results) -> dict:
    return {r.student_id: r for r in results}


def _files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def _zip(path: Path, entries: dict[str, bytes], date=(2026, 3, 14, 9, 26, 52)) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=date), data)
    return path


def _nbgrader_timestamp(folder: Path) -> datetime:
    """The submission time as nbgrader itself reads it from timestamp.txt (naive UTC)."""
    return CourseDirectory().get_existing_timestamp(str(folder))


def test_folder_of_students_right_and_wrong_names(course_copy, tmp_path):
    course = course_copy
    source = tmp_path / "download"
    files = {
        "alice/" + NOTEBOOK: _notebook_bytes(course, "alice"),
        "bob/01_first_function (1).ipynb": _notebook_bytes(course, "bob"),
        "carol/Untitled.ipynb": b"{}",
        "carol/" + NOTEBOOK: _notebook_bytes(course, "carol"),
        "dave/Untitled.ipynb": b"{}",
        "dave/Untitled1.ipynb": b"{}",
        "erin/notes.txt": b"I could not do it",
        "frank/01_first_function/" + NOTEBOOK: _notebook_bytes(course, "frank"),
    }
    for name, data in files.items():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_bytes(data)
    mtime = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc).timestamp()
    os.utime(source / "alice" / NOTEBOOK, (mtime, mtime))  # a file's date says nothing of when it was handed in

    results = _by_student(collect(course, ASSIGNMENT, source))

    assert sorted(results) == ["alice", "bob", "carol", "dave", "erin", "frank"]
    alice = results["alice"]
    assert alice.collected == [NOTEBOOK] and alice.complete
    assert alice.summary() == f"alice: collected {NOTEBOOK}"
    assert (_submitted(course, "alice") / NOTEBOOK).read_bytes() == files["alice/" + NOTEBOOK]
    assert _nbgrader_timestamp(_submitted(course, "alice")) is None and alice.handed_in is None

    bob = results["bob"]
    assert bob.collected == [NOTEBOOK] and bob.renamed == {NOTEBOOK: "01_first_function (1).ipynb"}
    assert bob.summary() == f'bob: collected {NOTEBOOK} (from "01_first_function (1).ipynb")'
    assert (_submitted(course, "bob") / NOTEBOOK).read_bytes() == files["bob/01_first_function (1).ipynb"]

    carol = results["carol"]  # the right name is taken, the extra notebook is reported, not copied
    assert carol.collected == [NOTEBOOK] and carol.unexpected == ["Untitled.ipynb"] and not carol.renamed
    assert sorted(p.name for p in _submitted(course, "carol").iterdir()) == [NOTEBOOK]

    dave = results["dave"]  # two wrongly named notebooks: no guess
    assert dave.collected == [] and dave.missing == [NOTEBOOK]
    assert dave.unexpected == ["Untitled.ipynb", "Untitled1.ipynb"]
    assert dave.summary() == (f'dave: nothing collected; missing {NOTEBOOK}; ignored "Untitled.ipynb", '
                              f'"Untitled1.ipynb"; no usable notebook: it will be graded \'invalid notebook\'')
    # dave handed something in: a submission without the notebook, so that grading gives him a row.
    assert _submitted(course, "dave").is_dir() and list(_submitted(course, "dave").iterdir()) == []

    erin = results["erin"]
    assert erin.missing == [NOTEBOOK] and erin.unexpected == ["notes.txt"] and not erin.complete

    frank = results["frank"]  # handed in the whole assignment folder
    assert frank.renamed == {NOTEBOOK: f"01_first_function/{NOTEBOOK}"}
    assert (_submitted(course, "frank") / NOTEBOOK).read_bytes() == files[f"frank/01_first_function/{NOTEBOOK}"]


@pytest.mark.parametrize("prefix", ["", "Assignment 01 download/"])
def test_zip_flat_or_wrapped_in_one_folder(course_copy, tmp_path, prefix):
    course = course_copy
    entries = {prefix + "alice/" + NOTEBOOK: _notebook_bytes(course, "alice"),
               prefix + "bob/Untitled.ipynb": _notebook_bytes(course, "bob"),
               "__MACOSX/._alice": b"junk", prefix + "alice/.ipynb_checkpoints/x-checkpoint.ipynb": b"{}"}
    source = _zip(tmp_path / "download.zip", entries)

    results = _by_student(collect(course, ASSIGNMENT, source))

    assert sorted(results) == ["alice", "bob"]
    assert all(r.complete for r in results.values())
    assert (_submitted(course, "alice") / NOTEBOOK).read_bytes() == entries[prefix + "alice/" + NOTEBOOK]
    assert (_submitted(course, "bob") / NOTEBOOK).read_bytes() == entries[prefix + "bob/Untitled.ipynb"]
    # A zip entry's date is when the zip was made, not when the student handed in: no time is recorded.
    assert _nbgrader_timestamp(_submitted(course, "alice")) is None
    assert all(r.handed_in is None for r in results.values())


def test_unsafe_zip_entries_are_refused_and_nothing_is_written_outside_submitted(course_copy, tmp_path):
    course = course_copy
    good = _notebook_bytes(course, "alice")
    source = tmp_path / "evil.zip"
    with zipfile.ZipFile(source, "w") as archive:
        archive.writestr("alice/" + NOTEBOOK, good)
        archive.writestr("../evil.ipynb", b"escaped")
        archive.writestr("alice/../../evil2.ipynb", b"escaped")
        archive.writestr("bob\\..\\..\\evil3.ipynb", b"escaped")
        archive.writestr(zipfile.ZipInfo("/tmp/evil4.ipynb"), b"escaped")
        archive.writestr("C:/evil5.ipynb", b"escaped")
        link = zipfile.ZipInfo("mallory/" + NOTEBOOK)
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    before = _files_under(tmp_path)

    results = collect(course, ASSIGNMENT, source)
    by_student = _by_student(results)

    assert by_student["alice"].complete
    mallory = by_student["mallory"]
    assert mallory.collected == [] and mallory.missing == [NOTEBOOK]
    assert mallory.problems == [f'refused "{NOTEBOOK}": a symbolic link']
    outside = by_student[None]
    assert outside is results[-1]
    assert len(outside.problems) == 5, outside.problems
    assert outside.problems[0] == 'refused "../evil.ipynb": the path leaves the folder (..)'
    assert any("an absolute path" in p and "/tmp/evil4.ipynb" in p for p in outside.problems)
    assert outside.summary().startswith("(outside student folders): refused")
    # (reading the course's nbgrader settings makes grading/exchange, an empty folder nbgrader wants)
    written = _files_under(tmp_path) - before - {course.grading / "exchange"}
    submitted = course.grading / "submitted"
    assert written and all(p.is_relative_to(submitted) for p in written), written
    assert not list(tmp_path.rglob("evil*.ipynb")) and not Path("/tmp/evil4.ipynb").exists()
    assert (_submitted(course, "alice") / NOTEBOOK).read_bytes() == good


def test_links_and_special_files_in_a_folder_are_refused(course_copy, tmp_path):
    course = course_copy
    secret = tmp_path / "secret.txt"
    secret.write_text("not a notebook")
    source = tmp_path / "download"
    (source / "alice").mkdir(parents=True)
    (source / "alice" / NOTEBOOK).symlink_to(secret)
    (source / "bob").mkdir()
    os.mkfifo(source / "bob" / NOTEBOOK)  # opening it would block: it must not be opened
    (source / "carol").symlink_to(source / "alice", target_is_directory=True)

    results = _by_student(collect(course, ASSIGNMENT, source))

    assert results["alice"].problems == [f'refused "{NOTEBOOK}": a symbolic link']
    assert results["bob"].problems == [f'refused "{NOTEBOOK}": not a regular file']
    assert results[None].problems == ['refused "carol": a symbolic link']
    # alice and bob handed in no usable notebook: a submission without one (grading says so).
    for student in ("alice", "bob"):
        assert _submitted(course, student).is_dir() and list(_submitted(course, student).iterdir()) == []


def test_invalid_student_ids_are_reported_and_not_collected(course_copy, tmp_path):
    course = course_copy
    notebook = _notebook_bytes(course, "x")
    source = _zip(tmp_path / "ids.zip", {
        "ok.name-1_@uni/" + NOTEBOOK: notebook,
        "bad id!/" + NOTEBOOK: notebook,
        "jos\u00e9/" + NOTEBOOK: notebook,
        "line\nbreak/" + NOTEBOOK: notebook,
        "...": notebook,
    })

    results = collect(course, ASSIGNMENT, source)
    by_student = _by_student(results)

    assert by_student["ok.name-1_@uni"].complete
    for bad in ("bad id!", "jos\u00e9", "line\nbreak"):
        assert by_student[bad].collected == []
        assert "invalid student id" in by_student[bad].problems[0]
    assert by_student["line\nbreak"].summary().startswith("line\\nbreak: nothing collected; invalid student id")
    assert all("\n" not in r.summary() for r in results)
    assert sorted(p.name for p in (course.grading / "submitted").iterdir()) == ["ok.name-1_@uni"]


def test_notebooks_are_copied_as_bytes_and_the_ones_that_cannot_be_graded_reported(course_copy, tmp_path):
    course = course_copy
    blobs = {"alice": b'{"cells": [', "bob": b"\xff\xfe not utf-8 \x00",
             "carol": b'{"nbformat": 3, "nbformat_minor": 0, "worksheets": []}', "dan": b'{"a": 1}',
             "erin": (course.release / ASSIGNMENT / NOTEBOOK).read_bytes()}
    source = tmp_path / "download"
    for student, data in blobs.items():
        (source / student).mkdir(parents=True)
        (source / student / NOTEBOOK).write_bytes(data)

    results = _by_student(collect(course, ASSIGNMENT, source))

    for student, data in blobs.items():
        assert results[student].complete
        assert (_submitted(course, student) / NOTEBOOK).read_bytes() == data
    # Collected all the same (grading gives each a row and a page saying why), but each counted and named.
    why = {student: r.invalid.get(NOTEBOOK) for student, r in results.items()}
    assert "not valid JSON" in why["alice"] and "not UTF-8" in why["bob"] and "not a notebook" in why["dan"]
    assert "cannot be read" in why["carol"] and why["erin"] is None  # carol's v3 notebook lacks its metadata
    assert [s for s, r in results.items() if r.needs_attention] == ["alice", "bob", "carol", "dan"]
    assert results["alice"].summary() == f"alice: collected {NOTEBOOK}; {NOTEBOOK} cannot be graded: {why['alice']}"


def test_a_200_MB_notebook_in_a_folder_is_refused(course_copy, tmp_path):
    course = course_copy
    source = tmp_path / "download"
    (source / "alice").mkdir(parents=True)
    with open(source / "alice" / NOTEBOOK, "wb") as sparse:
        sparse.truncate(200 * 1024**2)  # a sparse file: no disk or memory used
    (source / "bob").mkdir()
    (source / "bob" / NOTEBOOK).write_bytes(_notebook_bytes(course, "bob"))

    results = _by_student(collect(course, ASSIGNMENT, source))

    assert results["alice"].collected == []
    assert results["alice"].problems == [f"refused {NOTEBOOK}: 200 MB is over the 50 MB limit for a notebook"]
    assert results["alice"].summary() == (f"alice: nothing collected; {results['alice'].problems[0]}; "
                                          "no usable notebook: it will be graded 'invalid notebook'")
    assert _submitted(course, "alice").is_dir() and list(_submitted(course, "alice").iterdir()) == []
    assert results["bob"].complete


def test_a_200_MB_notebook_in_a_zip_is_refused_without_reading_it(course_copy, tmp_path):
    course = course_copy
    source = tmp_path / "download.zip"
    with zipfile.ZipFile(source, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("alice/" + NOTEBOOK, "w", force_zip64=True) as entry:
            zeros = bytes(1 << 20)
            for _ in range(200):
                entry.write(zeros)
        archive.writestr("bob/" + NOTEBOOK, _notebook_bytes(course, "bob"))
    assert source.stat().st_size < 2_000_000

    results = _by_student(collect(course, ASSIGNMENT, source))

    assert results["alice"].problems == [f"refused {NOTEBOOK}: 200 MB is over the 50 MB limit for a notebook"]
    assert not (_submitted(course, "alice") / NOTEBOOK).exists()
    assert results["bob"].complete


def test_the_size_limit_is_configurable(course_copy, tmp_path):
    course = course_copy
    source = _zip(tmp_path / "download.zip", {"alice/" + NOTEBOOK: b"x" * 2_000, "bob/" + NOTEBOOK: b"x" * 999})

    results = _by_student(collect(course, ASSIGNMENT, source, max_notebook_bytes=1_000))

    assert results["alice"].problems == [f"refused {NOTEBOOK}: 2,000 bytes is over the 1,000 bytes limit for a notebook"]
    assert results["bob"].complete


def test_recollecting_replaces_the_previous_submission(course_copy, tmp_path):
    course = course_copy
    first = _zip(tmp_path / "first.zip", {"alice/" + NOTEBOOK: b"first", "bob/" + NOTEBOOK: b"bob's"})
    collect(course, ASSIGNMENT, first)
    (_submitted(course, "alice") / "left-over.txt").write_text("from an earlier run")
    (_submitted(course, "alice") / "timestamp.txt").write_text("2026-03-01 10:00:00.000000 UTC")

    second = _zip(tmp_path / "second.zip", {"alice/Untitled.ipynb": b"second",
                                            "bob/notes.txt": b"no notebook this time"},
                  date=(2026, 4, 1, 12, 0, 0))
    results = _by_student(collect(course, ASSIGNMENT, second))

    # The earlier submission's time went with it: this download says none.
    assert sorted(p.name for p in _submitted(course, "alice").iterdir()) == [NOTEBOOK]
    assert (_submitted(course, "alice") / NOTEBOOK).read_bytes() == b"second"
    # Nothing to collect for bob this time: his previous submission stays, and he is told so.
    assert (_submitted(course, "bob") / NOTEBOOK).read_bytes() == b"bob's"
    assert "the previous submission was kept" in results["bob"].summary()
    # No scratch folders are left beside the submissions.
    assert sorted(p.name for p in (course.grading / "submitted" / "alice").iterdir()) == [ASSIGNMENT]


def test_unusable_sources_are_one_clear_error(course_copy, tmp_path):
    course = course_copy
    empty_zip = tmp_path / "empty.zip"
    zipfile.ZipFile(empty_zip, "w").close()
    with pytest.raises(CollectError, match="no student folders in zip file"):
        collect(course, ASSIGNMENT, empty_zip)

    junk_only = tmp_path / "junk-only.zip"
    with zipfile.ZipFile(junk_only, "w") as archive:
        archive.writestr("__MACOSX/", b"")
        archive.writestr(".DS_Store", b"")
    with pytest.raises(CollectError, match="no student folders"):
        collect(course, ASSIGNMENT, junk_only)

    (tmp_path / "empty-folder").mkdir()
    with pytest.raises(CollectError, match="no student folders in folder"):
        collect(course, ASSIGNMENT, tmp_path / "empty-folder")

    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / NOTEBOOK).write_bytes(b"{}")
    with pytest.raises(CollectError, match=f"found only: {NOTEBOOK}"):
        collect(course, ASSIGNMENT, flat)

    not_a_zip = tmp_path / "submissions.zip"
    not_a_zip.write_bytes(b"%PDF-1.7 this is a pdf")
    with pytest.raises(CollectError, match="is not a zip file"):
        collect(course, ASSIGNMENT, not_a_zip)

    with pytest.raises(CollectError, match="no folder or zip file at"):
        collect(course, ASSIGNMENT, tmp_path / "nowhere")

    with pytest.raises(CourseError, match="no assignment 'nope'"):
        collect(course, "nope", flat)
    assert not (course.grading / "submitted").exists()

    (course.grading / "submitted" / "alice").mkdir(parents=True)
    with pytest.raises(CollectError, match="inside nbgrader's submitted folder"):
        collect(course, ASSIGNMENT, course.grading / "submitted")


def test_a_corrupt_zip_entry_is_refused_for_that_student_only(course_copy, tmp_path):
    course = course_copy
    source = tmp_path / "download.zip"
    with zipfile.ZipFile(source, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("alice/" + NOTEBOOK, b'{"marker": "ALICE-DATA"}')
        archive.writestr("bob/" + NOTEBOOK, b'{"marker": "BOB-DATA"}')
    data = source.read_bytes()
    source.write_bytes(data.replace(b"ALICE-DATA", b"ALICE-DATB"))  # the stored CRC no longer matches

    results = _by_student(collect(course, ASSIGNMENT, source))

    assert results["alice"].collected == []
    assert results["alice"].problems[0].startswith(f"refused {NOTEBOOK}: Bad CRC-32")
    assert not (_submitted(course, "alice") / NOTEBOOK).exists()
    assert (_submitted(course, "bob") / NOTEBOOK).read_bytes() == b'{"marker": "BOB-DATA"}'


def test_a_zip_entry_with_an_impossible_date_is_refused_for_that_student_only(course_copy, tmp_path):
    course = course_copy
    source = tmp_path / "download.zip"
    with zipfile.ZipFile(source, "w") as archive:
        archive.writestr(zipfile.ZipInfo("alice/" + NOTEBOOK, date_time=(1980, 0, 0, 0, 0, 0)), b"{}")  # month 0
        archive.writestr(zipfile.ZipInfo("bob/" + NOTEBOOK, date_time=(2026, 3, 14, 9, 0, 0)), b"{}")

    results = _by_student(collect(course, ASSIGNMENT, source))

    assert results["alice"].collected == [] and results["bob"].collected == [NOTEBOOK]
    assert f'refused "{NOTEBOOK}": its date in the zip is not a date' in results["alice"].problems


def test_the_demo_class_collects_cleanly(course_copy):
    results = collect(course_copy, ASSIGNMENT, DEMO_ROOT / ASSIGNMENT)

    assert [r.student_id for r in results] == sorted(p.name for p in (DEMO_ROOT / ASSIGNMENT).iterdir())
    for r in results:
        assert r.complete and r.summary().startswith(f"{r.student_id}: collected {NOTEBOOK}")
        assert (_submitted(course_copy, r.student_id) / NOTEBOOK).read_bytes() == \
            (DEMO_ROOT / ASSIGNMENT / r.student_id / NOTEBOOK).read_bytes()
    # gus's notebook is cut off on purpose: collected (graded 'invalid notebook'), and said so now.
    assert [r.student_id for r in results if r.needs_attention] == ["gus"]


def test_collect_counts_and_names_a_notebook_that_is_not_valid_json(course_copy):
    """`collect` on the demo class: gus's cut-off notebook is one problem, named; nothing was skipped (exit 0)."""
    result = subprocess.run([sys.executable, "-m", "autograder", "collect", ASSIGNMENT, str(DEMO_ROOT / ASSIGNMENT)],
                            cwd=course_copy.root, env=course_copy.environment(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "9 students collected, 1 with problems" in result.stdout
    assert f"gus: collected {NOTEBOOK}; {NOTEBOOK} cannot be graded: the file is not valid JSON" in result.stdout
    assert f"gus ({NOTEBOOK})" in result.stderr and "invalid notebook" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_student_folders_timestamp_txt_is_the_time_handed_in(course_copy, tmp_path):
    """nbgrader's own submitted folders carry timestamp.txt: it is the submission time, not a stray file."""
    course = course_copy
    source = tmp_path / "download"
    for student, stamp in {"alice": "2026-03-16 20:00:00.000000 UTC", "bob": "yesterday-ish"}.items():
        (source / student).mkdir(parents=True)
        (source / student / NOTEBOOK).write_bytes(_notebook_bytes(course, student))
        (source / student / "timestamp.txt").write_text(stamp)

    results = _by_student(collect(course, ASSIGNMENT, source))

    assert results["alice"].summary() == f"alice: collected {NOTEBOOK}"
    assert _nbgrader_timestamp(_submitted(course, "alice")) == datetime(2026, 3, 16, 20, 0, 0)
    assert results["bob"].collected == [NOTEBOOK]
    assert "timestamp.txt is not a time nbgrader reads" in results["bob"].problems[0]
    assert _nbgrader_timestamp(_submitted(course, "bob")) is None  # unknown, not the file's date


def test_an_empty_student_folder_is_a_submission_without_a_notebook(course_copy, tmp_path):
    """In a folder or a zip: the student gets a row ('invalid notebook') when graded, not silence."""
    course = course_copy
    source = tmp_path / "download"
    (source / "alice").mkdir(parents=True)
    (source / "alice" / NOTEBOOK).write_bytes(_notebook_bytes(course, "alice"))
    (source / "erin" / ".ipynb_checkpoints").mkdir(parents=True)  # only junk in it: empty
    zipped = tmp_path / "download.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.writestr("bob/", b"")
        archive.writestr("carol/", b"")
        archive.writestr("carol/" + NOTEBOOK, _notebook_bytes(course, "carol"))

    from_folder = _by_student(collect(course, ASSIGNMENT, source))
    from_zip = _by_student(collect(course, ASSIGNMENT, zipped))

    assert from_folder["alice"].complete and from_zip["carol"].complete
    for empty in (from_folder["erin"], from_zip["bob"]):
        assert empty.collected == [] and empty.missing == [NOTEBOOK] and empty.needs_attention
        assert _submitted(course, empty.student_id).is_dir()
        assert list(_submitted(course, empty.student_id).iterdir()) == []
