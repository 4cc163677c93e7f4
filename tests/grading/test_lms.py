"""Collecting LMS downloads shaped like Canvas's, Moodle's and Blackboard's, and any layout by regexp.

When each was handed in comes from the LMS's record (Blackboard's file names, Canvas's LATE mark,
Moodle's grading worksheet, a CSV from Canvas's submissions API), never a zip entry's date.
"""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from datetime import datetime, timezone

import pytest
from nbgrader.coursedir import CourseDirectory

from autograder.course import CourseError
from autograder.grading.records.collect import collect
from autograder.grading.records.handed_in import marked_late
from autograder.grading.records.lms import Layout, Roster, RosterStudent, detect, resubmission_key

ASSIGNMENT = "01_first_function"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
ROSTER = Roster([
    RosterStudent("jdoe", "Jane", "Doe", "jane@uni.edu", "12345"),
    RosterStudent("bsmith", "Bob", "Smith", "bob@uni.edu", "22222"),
    RosterStudent("jnunez", "José", "Núñez", "jose@uni.edu", "33333"),
    RosterStudent("llei", "Lei", "Li", "", ""),
])


def _zip(path, entries: dict[str, tuple[bytes, tuple]]):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, (data, date) in entries.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=date), data)
    return path


def _submitted(course, student):
    return course.grading / "submitted" / student / ASSIGNMENT


def _by_student(results):
    return {r.student_id: r for r in results}


def _timestamp(folder) -> datetime:
    return CourseDirectory().get_existing_timestamp(str(folder))


def _local(*date) -> datetime:
    """A zip or file-name date (local time) as nbgrader reads it back from timestamp.txt (naive UTC)."""
    return datetime(*date).astimezone(timezone.utc).replace(tzinfo=None)


MARCH = (2026, 3, 14, 9, 0, 0)
LATER = (2026, 3, 16, 18, 30, 0)


def canvas_name(sortable_name: str, user_id: int, attachment_id: int, file: str, late: bool = False) -> str:
    """A file's name in Canvas's "Download Submissions" zip, as Canvas's ContentZipper makes it: the sortable
    name lower-cased without its punctuation, LATE when Canvas marked the submission late, the user id, then
    the attachment's id and name."""
    who = re.sub(r"[^\w]", "", "_".join([sortable_name.lower(), *(["LATE"] if late else []), str(user_id)]))
    return f"{who}_{attachment_id}_{file}"


def canvas_zip(path, files: dict[str, bytes], zipped_at: tuple):
    """Canvas writes every entry as it zips: each entry's date is when the zip was made, not when it was handed in."""
    return _zip(path, {name: (data, zipped_at) for name, data in files.items()})


def test_canvas_flat_zip_maps_lms_ids_through_the_roster(course_copy, tmp_path):
    source = canvas_zip(tmp_path / "submissions.zip", {
        canvas_name("Doe, Jane", 12345, 67890, NOTEBOOK): b"jane",
        canvas_name("Smith, Bob", 22222, 67891, NOTEBOOK, late=True): b"bob, late",
        # José's submission has two files of one name: Canvas names the second -1; the latest wins.
        canvas_name("Núñez, José", 33333, 67892, NOTEBOOK): b"jose first",
        canvas_name("Núñez, José", 33333, 67999, f"{ASSIGNMENT}-1.ipynb"): b"jose second",
        canvas_name("Stranger, X", 99999, 67893, NOTEBOOK): b"not on the roster",
    }, zipped_at=LATER)
    assert f"smithbob_LATE_22222_67891_{NOTEBOOK}" in zipfile.ZipFile(source).namelist()  # Canvas's own names

    results = collect(course_copy, ASSIGNMENT, source, roster=ROSTER)
    by_student = _by_student(results)

    assert sorted(by_student) == ["bsmith", "jdoe", "jnunez", "strangerx"]
    assert (_submitted(course_copy, "jdoe") / NOTEBOOK).read_bytes() == b"jane"
    assert by_student["jdoe"].complete and not by_student["jdoe"].skipped_something  # (its bytes are no notebook)
    # Canvas's download says who was late, not when: its zip's dates are when the zip was made.
    assert by_student["bsmith"].notes == ["marked late by the LMS, time unknown"]
    assert {s: (r.handed_in, r.marked_late) for s, r in by_student.items()} == {
        "bsmith": (None, True), "jdoe": (None, False), "jnunez": (None, False), "strangerx": (None, False)}
    for student, late in (("bsmith", True), ("jdoe", False)):
        assert _timestamp(_submitted(course_copy, student)) is None
        assert marked_late(_submitted(course_copy, student)) is late
    jose = by_student["jnunez"]
    assert (_submitted(course_copy, "jnunez") / NOTEBOOK).read_bytes() == b"jose second"
    assert len(jose.notes) == 1 and jose.notes[0].startswith(
        f'resubmitted: kept the latest, "{ASSIGNMENT}-1.ipynb"') and f'not "{NOTEBOOK}"' in jose.notes[0]
    assert "resubmitted" in jose.summary()
    stranger = by_student["strangerx"]
    assert (_submitted(course_copy, "strangerx") / NOTEBOOK).read_bytes() == b"not on the roster"
    assert stranger.needs_attention and "is not on the roster" in stranger.warnings[0]
    assert "LMS id 99999" in stranger.summary()


def test_moodle_folders_with_spaces_and_accents(course_copy, tmp_path):
    source = _zip(tmp_path / "moodle.zip", {
        f"Jane Doe_12345_assignsubmission_file_/{NOTEBOOK}": (b"jane", MARCH),
        # Matched by name: José's roster row has his LMS id under another number; names still match.
        "José Núñez_777_assignsubmission_file_/Untitled.ipynb": (b"jose", MARCH),
        "Li Lei_444_assignsubmission_onlinetext_/onlinetext.html": (b"<p>I had no time</p>", MARCH),
        f"Zoë Q_555_assignsubmission_file_/{NOTEBOOK}": (b"zoe", MARCH),
    })

    by_student = _by_student(collect(course_copy, ASSIGNMENT, source, roster=ROSTER))

    assert (_submitted(course_copy, "jdoe") / NOTEBOOK).read_bytes() == b"jane"
    jose = by_student["jnunez"]
    assert jose.renamed == {NOTEBOOK: "Untitled.ipynb"}
    assert (_submitted(course_copy, "jnunez") / NOTEBOOK).read_bytes() == b"jose"
    # Li Lei handed in only online text: no notebook, graded 'invalid notebook'.
    lei = by_student["llei"]
    assert lei.collected == [] and lei.missing == [NOTEBOOK] and lei.needs_attention
    assert _submitted(course_copy, "llei").is_dir() and list(_submitted(course_copy, "llei").iterdir()) == []
    # Not on the roster: collected under an id made from the name, and reported.
    assert (_submitted(course_copy, "Zoe_Q") / NOTEBOOK).read_bytes() == b"zoe"
    assert '"Zoë Q" (LMS id 555) is not on the roster: collected as Zoe_Q' in by_student["Zoe_Q"].warnings[0]
    # Moodle's download says neither when nor whether late.
    assert all(r.handed_in is None and r.marked_late is None for r in by_student.values())
    assert _timestamp(_submitted(course_copy, "jdoe")) is None


MOODLE_WORKSHEET_HEADER = ('"Identifier","Full name","Email address","Status","Grade","Maximum Grade",'
                           '"Grade can be changed","Last modified (submission)","Last modified (grade)",'
                           '"Feedback comments"')


def test_moodle_times_come_from_its_grading_worksheet(course_copy, tmp_path):
    """Moodle's "Download grading worksheet" CSV, as it is: Identifier "Participant N" is the number in the
    download's folder names, and "Last modified (submission)" the time (the instructor's time zone, here local)."""
    source = _zip(tmp_path / "moodle.zip", {
        f"Jane Doe_12345_assignsubmission_file_/{NOTEBOOK}": (b"jane", LATER),
        f"Zoë Q_555_assignsubmission_file_/{NOTEBOOK}": (b"zoe", LATER),
        f"Bob Smith_22222_assignsubmission_file_/{NOTEBOOK}": (b"bob", LATER),
    })
    worksheet = tmp_path / "Grades-Assignment 1.csv"
    worksheet.write_text("\ufeff" + "\n".join([
        MOODLE_WORKSHEET_HEADER,
        '"Participant 12345","Jane Doe",jane@uni.edu,"Submitted for grading",,100.00,Yes,'
        '"Saturday, 14 March 2026, 9:26 AM",-,',
        '"Participant 555","Zoë Q",zoe@uni.edu,"Submitted for grading - 1 day 2 hours late",,100.00,Yes,'
        '"Monday, 16 March 2026, 6:30 PM",-,',
        '"Participant 22222","Bob Smith",bob@uni.edu,"No submission",,100.00,Yes,-,-,',
        '"Participant 999","Not In The Download",x@uni.edu,"No submission",,100.00,Yes,-,-,',
    ]) + "\n", encoding="utf-8")

    by_student = _by_student(collect(course_copy, ASSIGNMENT, source, roster=ROSTER, times=worksheet))

    assert _timestamp(_submitted(course_copy, "jdoe")) == _local(2026, 3, 14, 9, 26)
    assert _timestamp(_submitted(course_copy, "Zoe_Q")) == _local(2026, 3, 16, 18, 30)  # matched by its number
    assert by_student["bsmith"].handed_in is None and _timestamp(_submitted(course_copy, "bsmith")) is None


def test_canvas_times_from_its_submissions_api_win_over_the_late_mark(course_copy, tmp_path):
    """Canvas's submissions API (submitted_at, late), written as a CSV by the instructor, gives the times its
    download lacks; a student the CSV does not list keeps Canvas's mark and no time."""
    source = canvas_zip(tmp_path / "submissions.zip", {
        canvas_name("Doe, Jane", 12345, 1, NOTEBOOK): b"jane",
        canvas_name("Smith, Bob", 22222, 2, NOTEBOOK, late=True): b"bob",
        canvas_name("Li, Lei", 44444, 3, NOTEBOOK, late=True): b"lei",
    }, zipped_at=LATER)
    times = tmp_path / "times.csv"
    times.write_text("user_id,submitted_at,late\n12345,2026-03-14T08:00:00Z,false\n"
                     "22222,2026-03-15T23:17:00Z,true\n", encoding="utf-8")

    by_student = _by_student(collect(course_copy, ASSIGNMENT, source, roster=ROSTER, times=times))

    assert _timestamp(_submitted(course_copy, "jdoe")) == datetime(2026, 3, 14, 8, 0)
    assert _timestamp(_submitted(course_copy, "bsmith")) == datetime(2026, 3, 15, 23, 17)
    assert by_student["bsmith"].notes == ["marked late by the LMS"]
    lei = by_student["llei"]  # on the roster by name
    assert lei.handed_in is None and lei.marked_late and lei.notes == ["marked late by the LMS, time unknown"]
    assert marked_late(_submitted(course_copy, "llei")) is True


def test_a_times_file_that_cannot_be_read_stops_collect_before_anything_is_written(course_copy, tmp_path):
    source = canvas_zip(tmp_path / "submissions.zip", {canvas_name("Doe, Jane", 12345, 1, NOTEBOOK): b"jane"},
                        zipped_at=LATER)
    no_time_column = tmp_path / "names.csv"
    no_time_column.write_text("user_id,name\n12345,Jane\n", encoding="utf-8")
    bad_time = tmp_path / "bad.csv"
    bad_time.write_text("user_id,submitted_at\n12345,2026-03-14T08:00:00Z\n22222,last tuesday-ish\n",
                        encoding="utf-8")

    with pytest.raises(CourseError, match="needs a column saying who .* and one saying when"):
        collect(course_copy, ASSIGNMENT, source, roster=ROSTER, times=no_time_column)
    with pytest.raises(CourseError, match="bad.csv line 3: cannot read the time 'last tuesday-ish'"):
        collect(course_copy, ASSIGNMENT, source, roster=ROSTER, times=bad_time)
    assert not (course_copy.grading / "submitted").exists()


def test_blackboard_attempts_latest_wins_with_its_time(course_copy, tmp_path):
    source = tmp_path / "gradebook_download"
    source.mkdir()
    for name, data in {
        f"Assignment 1_jdoe_attempt_2026-03-14-09-26-52_{NOTEBOOK}": b"first attempt",
        "Assignment 1_jdoe_attempt_2026-03-14-09-26-52.txt": b"receipt",
        f"Assignment 1_jdoe_attempt_2026-03-15-10-00-00_{NOTEBOOK}": b"second attempt",
        "Assignment 1_jdoe_attempt_2026-03-15-10-00-00.txt": b"receipt",
        f"Assignment 1_bsmith_attempt_2026-03-13-08-00-00_{NOTEBOOK}": b"bob",
    }.items():
        (source / name).write_bytes(data)

    results = collect(course_copy, ASSIGNMENT, source, roster=ROSTER)
    by_student = _by_student(results)

    assert sorted(by_student) == ["bsmith", "jdoe"]  # receipts are not reported
    assert (_submitted(course_copy, "jdoe") / NOTEBOOK).read_bytes() == b"second attempt"
    assert _timestamp(_submitted(course_copy, "jdoe")) == _local(2026, 3, 15, 10, 0, 0)
    assert "resubmitted: kept the latest" in by_student["jdoe"].notes[0]
    assert "2026-03-14" in by_student["jdoe"].notes[0]
    assert not any(r.skipped_something for r in results)  # (the bytes are no notebooks)


def test_an_instructors_regexp_with_nbgraders_named_groups(course_copy, tmp_path):
    source = _zip(tmp_path / "other-lms.zip", {
        f"ps1/jdoe--2026-03-14T09:00:00+00:00--{NOTEBOOK}": (b"jane", MARCH),
        f"ps1/bsmith--2026-03-14T10:00:00+00:00--{NOTEBOOK}": (b"bob", MARCH),
        "ps1/README.txt": (b"nothing", MARCH),
    })
    regexp = r"ps1/(?P<student_id>\w+)--(?P<timestamp>[0-9T:+-]+)--(?P<file_id>.+\.ipynb)"

    results = collect(course_copy, ASSIGNMENT, source, regexp=regexp, roster=ROSTER)
    by_student = _by_student(results)

    assert (_submitted(course_copy, "bsmith") / NOTEBOOK).read_bytes() == b"bob"
    assert _timestamp(_submitted(course_copy, "jdoe")) == datetime(2026, 3, 14, 9, 0, 0)
    assert by_student[None].unexpected == ["ps1/README.txt"]
    with pytest.raises(CourseError, match="needs the named groups"):
        collect(course_copy, ASSIGNMENT, source, regexp=r"(?P<who>\w+)")
    with pytest.raises(CourseError, match="is not valid"):
        collect(course_copy, ASSIGNMENT, source, regexp=r"(?P<student_id")


def test_layouts_are_detected_from_the_files():
    def detected(*paths):
        return detect([tuple(p.split("/")) for p in paths]).name

    assert detected(f"doejane_12345_67890_{NOTEBOOK}") == "canvas"
    assert detected(f"Jane Doe_12345_assignsubmission_file_/{NOTEBOOK}") == "moodle"
    assert detected(f"A 1_jdoe_attempt_2026-03-14-09-26-52_{NOTEBOOK}") == "blackboard"
    assert detected(f"jdoe/{NOTEBOOK}", f"bsmith/{NOTEBOOK}") == "folders"
    assert Layout.named("canvas").match((f"doejane_LATE_1_2_{NOTEBOOK}",))["late"] == "LATE"
    assert resubmission_key(f"{ASSIGNMENT}-2.ipynb") == (NOTEBOOK, 2)
    assert resubmission_key(f"{ASSIGNMENT} (3).ipynb") == (NOTEBOOK, 3)
    assert resubmission_key(NOTEBOOK) == (NOTEBOOK, 0)


def test_the_roster_in_the_gradebook_maps_canvas_ids_and_the_cli_exit_says_what_to_do(course_copy, tmp_path):
    """Through the command line, with the roster imported into the real gradebook."""
    course = course_copy
    (tmp_path / "class.csv").write_text("id,first_name,last_name,lms_user_id\njdoe,Jane,Doe,12345\n"
                                        "bsmith,Bob,Smith,22222\n", encoding="utf-8")
    released = (course.release / ASSIGNMENT / NOTEBOOK).read_bytes()
    messy = _zip(tmp_path / "messy.zip", {f"doejane_12345_1_{NOTEBOOK}": (released, MARCH),
                                          f"smithbob_22222_2_{NOTEBOOK}": (released, MARCH),
                                          f"whoisthis_424242_3_{NOTEBOOK}": (released, MARCH)})
    nothing = _zip(tmp_path / "nothing.zip", {"jdoe/notes.txt": (b"no notebook", MARCH)})

    def run(*args):
        return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root,
                              env=course.environment(), capture_output=True, text=True, timeout=300)

    assert run("roster", str(tmp_path / "class.csv")).returncode == 0
    skipped = run("collect", ASSIGNMENT, str(messy))
    assert skipped.returncode == 1
    assert f"bsmith: collected {NOTEBOOK}\njdoe: collected {NOTEBOOK}\n" in skipped.stdout
    assert "whoisthis" in skipped.stdout and "not on the roster" in skipped.stdout
    assert "3 students collected, 1 with problems" in skipped.stdout
    assert ("no submission time for 3 students (Canvas's download carries no submission times (only its LATE "
            "mark") in skipped.stderr and "they count as on time" in skipped.stderr
    assert "collect again" in skipped.stderr and "Traceback" not in skipped.stderr
    assert (_submitted(course, "jdoe") / NOTEBOOK).read_bytes() == released

    empty = run("collect", ASSIGNMENT, str(nothing))
    assert empty.returncode == 1 and "0 students collected" in empty.stdout
    assert "no notebook of 01_first_function was collected" in empty.stderr

    one = _zip(tmp_path / "one.zip", {f"smithbob_LATE_22222_2_{NOTEBOOK}": (released, LATER)})
    alone = run("collect", ASSIGNMENT, str(one))
    assert alone.returncode == 0 and "1 student collected, 0 with problems" in alone.stdout
    assert "bsmith, marked late by the LMS, counts as late by the least the late policy counts" in alone.stderr


# -- A student's file is data, never a record (issue 39) ------------------------------------------------

def test_a_timestamp_txt_uploaded_to_canvas_is_a_file_not_the_time_handed_in(course_copy, tmp_path):
    """Canvas marked Bob LATE; his upload named timestamp.txt claims an early time. The LMS's mark stands, the
    file is ignored like any other upload, and the submitted folder gets no time from it."""
    source = canvas_zip(tmp_path / "submissions.zip", {
        canvas_name("Smith, Bob", 22222, 1, NOTEBOOK, late=True): b"bob",
        canvas_name("Smith, Bob", 22222, 2, "timestamp.txt", late=True): b"2026-03-01 10:00:00.000000 UTC",
    }, zipped_at=LATER)

    bob = _by_student(collect(course_copy, ASSIGNMENT, source, roster=ROSTER))["bsmith"]

    assert bob.marked_late is True and bob.handed_in is None
    assert bob.unexpected == ["timestamp.txt"] and bob.notes == ["marked late by the LMS, time unknown"]
    assert not (_submitted(course_copy, "bsmith") / "timestamp.txt").exists()
    assert marked_late(_submitted(course_copy, "bsmith")) is True


def test_a_blackboard_file_name_cannot_name_another_student_or_another_time(course_copy, tmp_path):
    """Bob uploads files whose names look like Blackboard's own: one claiming to be Jane's later attempt, one
    claiming an earlier hand-in for himself. Blackboard's own prefix decides who and when; Jane's notebook and
    both times are the LMS's."""
    source = tmp_path / "gradebook_download"
    source.mkdir()
    for name, data in {
        f"Assignment 1_jdoe_attempt_2026-03-14-09-26-52_{NOTEBOOK}": b"jane's right answer",
        f"Assignment 1_bsmith_attempt_2026-03-16-18-30-00_x_jdoe_attempt_2026-03-20-00-00-00_{NOTEBOOK}": b"bob's",
        f"Assignment 1_bsmith_attempt_2026-03-16-18-30-00_x_bsmith_attempt_2026-03-01-00-00-00_notes.txt": b"x",
    }.items():
        (source / name).write_bytes(data)

    by_student = _by_student(collect(course_copy, ASSIGNMENT, source, roster=ROSTER))

    assert sorted(by_student) == ["bsmith", "jdoe"]
    assert (_submitted(course_copy, "jdoe") / NOTEBOOK).read_bytes() == b"jane's right answer"
    assert _timestamp(_submitted(course_copy, "jdoe")) == _local(2026, 3, 14, 9, 26, 52)
    assert (_submitted(course_copy, "bsmith") / NOTEBOOK).read_bytes() == b"bob's"  # his own, under his name
    assert by_student["bsmith"].renamed == {NOTEBOOK: f"x_jdoe_attempt_2026-03-20-00-00-00_{NOTEBOOK}"}
    assert _timestamp(_submitted(course_copy, "bsmith")) == _local(2026, 3, 16, 18, 30, 0)


def test_a_file_named_like_another_layout_inside_a_moodle_folder_stays_its_uploaders(course_copy, tmp_path):
    """Canvas's and Blackboard's layouts read only the files at the top of a flat download: a Moodle student's
    upload named like a Canvas file with Jane's LMS id is that student's, and the download is still Moodle's."""
    source = _zip(tmp_path / "moodle.zip", {
        f"Bob Smith_22222_assignsubmission_file_/bob_12345_1_{NOTEBOOK}": (b"bob's", MARCH),
    })

    assert detect([(f"Bob Smith_22222_assignsubmission_file_", f"bob_12345_1_{NOTEBOOK}")]).name == "moodle"
    by_student = _by_student(collect(course_copy, ASSIGNMENT, source, roster=ROSTER))

    assert sorted(by_student) == ["bsmith"] and not _submitted(course_copy, "jdoe").exists()
    assert (_submitted(course_copy, "bsmith") / NOTEBOOK).read_bytes() == b"bob's"


def test_two_files_that_claim_one_students_notebook_are_both_flagged_and_neither_collected(course_copy, tmp_path):
    """Two Canvas users resolve to Jane (her LMS id, and an unknown id with her name); two Blackboard files claim
    Bob's one attempt. Neither overwrites the other: none of them is collected, and the instructor is told."""
    earlier = canvas_zip(tmp_path / "first.zip", {canvas_name("Doe, Jane", 12345, 1, NOTEBOOK): b"jane, first"},
                         zipped_at=MARCH)
    collect(course_copy, ASSIGNMENT, earlier, roster=ROSTER)
    source = canvas_zip(tmp_path / "submissions.zip", {
        canvas_name("Doe, Jane", 12345, 2, NOTEBOOK): b"jane",
        canvas_name("Doe, Jane", 99999, 3, NOTEBOOK): b"someone else named Jane Doe",
    }, zipped_at=LATER)

    jane = _by_student(collect(course_copy, ASSIGNMENT, source, roster=ROSTER))["jdoe"]

    assert jane.needs_attention and not jane.collected
    assert any(p.startswith("needs a look: files of lms_user_id=12345") and "lms_user_id=99999" in p
               for p in jane.problems), jane.problems
    assert "the previous submission was kept" in jane.problems
    assert (_submitted(course_copy, "jdoe") / NOTEBOOK).read_bytes() == b"jane, first"

    blackboard = tmp_path / "bb"
    blackboard.mkdir()
    for name in (f"A 1_bsmith_attempt_2026-03-14-09-00-00_{NOTEBOOK}", f"A 1_bsmith_attempt_2026-03-14-09-00-00_{NOTEBOOK.replace('.ipynb', '-1.ipynb')}"):
        (blackboard / name).write_bytes(b"bob")
    (blackboard / f"A 1_bsmith_attempt_2026-03-14-09-00-00_{ASSIGNMENT} (1).ipynb").write_bytes(b"bob again")
    bob = _by_student(collect(course_copy, ASSIGNMENT, blackboard, roster=ROSTER))["bsmith"]
    assert not bob.collected and any("two files claim the same attempt" in p for p in bob.problems), bob.problems


def test_lateness_is_the_lms_record_or_said_unknown(tmp_path):
    """With a deadline: a time recorded (timestamp.txt) gives how late; the LMS's mark without a time, "marked late,
    time unknown"; neither (Moodle's download without its worksheet), TIME_NOT_RECORDED, never "on time"."""
    from autograder.grading.records import deadlines
    from autograder.grading.records.handed_in import write_mark

    nothing, marked, on_time, stamped = (tmp_path / n for n in ("nothing", "marked", "on_time", "stamped"))
    for folder in (nothing, marked, on_time, stamped):
        folder.mkdir()
    write_mark(marked, True)
    write_mark(on_time, False)
    (stamped / "timestamp.txt").write_text("2026-03-14 10:00:00.000000 UTC")

    assert deadlines.lateness(nothing, 0.0) == deadlines.TIME_NOT_RECORDED
    assert deadlines.lateness(nothing, 0.0, due=False) == ""
    assert deadlines.lateness(marked, 1.0) == deadlines.TIME_UNKNOWN
    assert deadlines.lateness(on_time, 0.0) == ""  # Canvas's download without LATE: on time by its record
    assert deadlines.lateness(stamped, 3 * 3600.0) == "3 h"
