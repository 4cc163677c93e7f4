"""Due dates, extensions and late penalties: set by the `deadline` command, applied by `grade`."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from datetime import datetime, timedelta, timezone

import pytest

from autograder.course import CourseError
from autograder.cli import main
from autograder.grading.records import deadlines
from autograder.grading.records.deadlines import LatePenalty, describe_lateness, parse_extension, penalty
from autograder.grading.demo.make_demo import ASSIGNMENT, DEADLINE_OPTIONS, DEMO_ROOT
from conftest import REPO
from test_grading import autograder, grades_csv
from test_lms import canvas_name, canvas_zip

NOTEBOOK = f"{ASSIGNMENT}.ipynb"
HOUR = 3600.0


def test_the_penalty_per_period_started_capped_after_grace():
    assert penalty(10, 0, 10, HOUR, 100, 0, False) is None
    assert penalty(10, 1, 10, HOUR, 100, 0, False) == 1.0          # an hour started
    assert penalty(10, 3 * HOUR + 1, 10, HOUR, 100, 0, False) == 4.0
    assert penalty(10, 30 * HOUR, 10, HOUR, 50, 0, False) == 5.0   # capped at 50%
    assert penalty(10, 10 * 60, 10, HOUR, 100, 15 * 60, False) is None  # within the grace
    assert penalty(10, 1, 0, HOUR, 100, 0, False) is None          # marked late, no penalty
    assert penalty(7, 1, 0, HOUR, 100, 0, True) == 7               # nbgrader's 'zero'
    plugin = LatePenalty(percent=25, period_seconds=86400)         # nbgrader's hook, configured
    assert plugin.late_submission_penalty("ada", 8.0, 86400 + 1) == 4.0
    assert describe_lateness(0) == "" and describe_lateness(90) == "2 min"
    assert describe_lateness(26 * HOUR + 60) == "1 day 2 h" and describe_lateness(3 * HOUR + 300) == "3 h 5 min"
    assert parse_extension("ben=2d") == ("ben", 48.0) and parse_extension("eli=90m") == ("eli", 1.5)
    with pytest.raises(CourseError, match="STUDENT=DURATION"):
        parse_extension("ben 2 days")


def test_the_deadline_command_keeps_the_policy(course_copy, monkeypatch, capsys):
    monkeypatch.setenv("AUTOGRADER_COURSE_ROOT", str(course_copy.root))
    assert main(["deadline", ASSIGNMENT, "--extend", "ben=1d"]) == 2  # no due date yet
    assert "has no due date" in capsys.readouterr().err
    assert main(["deadline", ASSIGNMENT, "--due", "2026-03-15T23:59:00+01:00", "--penalty", "10",
                 "--per", "day", "--max", "50", "--extend", "ben=2d", "--extend", "eli=36h"]) == 0
    out = capsys.readouterr().out
    assert ("due 2026-03-15 22:59 UTC; late penalty 10% of the score per day started, at most 50%; "
            "extensions: ben +2 days, eli +1 day 12 h") in out
    assert main(["deadline", ASSIGNMENT, "--extend", "eli=0"]) == 0
    policy = deadlines.load(course_copy, ASSIGNMENT)
    assert policy.extensions == {"ben": 48.0} and policy.percent == 10 and policy.per == "day"
    assert policy.deadline_for("ben") == datetime.fromisoformat("2026-03-17T22:59:00+00:00")
    assert main(["deadline", ASSIGNMENT, "--due", "next blue moon"]) == 2
    assert "cannot read the due date" in capsys.readouterr().err


@pytest.mark.parametrize("typed, penalty", [
    ([], ("10", "day", "30")),  # as the grading guide and the demo
    (["PENALTY=5", "PER=hour", "MAX=50"], ("5", "hour", "50")),
])
def test_make_deadline_passes_the_penalty_its_period_and_cap(course_copy, monkeypatch, typed, penalty):
    # The command `make deadline` runs (make -n: without make's install step), run as it is on a course copy.
    due = "2026-03-16 23:59"
    dry = subprocess.run(["make", "-n", "--no-print-directory", "deadline", f"A={ASSIGNMENT}", f"DUE={due}", *typed],
                         cwd=REPO, capture_output=True, text=True, check=True)
    [command] = [line for line in dry.stdout.splitlines() if "-m autograder deadline" in line]
    assert shlex.split(command)[1:] == ["-m", "autograder", "deadline", ASSIGNMENT, "--due", due, "--penalty",
                                        penalty[0], "--per", penalty[1], "--max", penalty[2]]
    monkeypatch.setenv("AUTOGRADER_COURSE_ROOT", str(course_copy.root))
    assert main(shlex.split(command)[3:]) == 0
    made = deadlines.load(course_copy, ASSIGNMENT)
    assert (made.percent, made.per, made.max_percent) == (float(penalty[0]), penalty[1], float(penalty[2]))
    if not typed:  # the demo's own deadline, its extension aside, is what make sets by default
        assert main(["deadline", ASSIGNMENT, "--clear", *DEADLINE_OPTIONS[:DEADLINE_OPTIONS.index("--extend")]]) == 0
        assert deadlines.load(course_copy, ASSIGNMENT) == made


def _blackboard_download(folder, attempts: dict[str, str]):
    """ada's full-marks notebook handed in by each student at the given time (Blackboard's file names)."""
    folder.mkdir()
    for student, when in attempts.items():
        shutil.copy(DEMO_ROOT / ASSIGNMENT / "ada" / NOTEBOOK, folder / f"A1_{student}_attempt_{when}_{NOTEBOOK}")
    return folder


@pytest.mark.slow
def test_late_work_is_marked_and_penalised_and_an_extension_regrades_only_its_student(course_copy, tmp_path):
    course = course_copy
    local = datetime(2026, 3, 15, 12, 0).astimezone()  # file-name times are this machine's local time
    due = local.isoformat()
    download = _blackboard_download(tmp_path / "bb", {
        "early": "2026-03-15-11-00-00", "late": "2026-03-15-16-30-00", "later": "2026-03-18-12-00-00"})
    autograder(course, "collect", ASSIGNMENT, str(download))
    autograder(course, "deadline", ASSIGNMENT, "--due", due, "--penalty", "10", "--max", "30")

    first = autograder(course, "grade", ASSIGNMENT)

    rows = grades_csv(course)
    assert rows["early"]["late"] == "" and float(rows["early"]["score"]) == 11
    assert rows["late"]["late"] == "4 h 30 min" and float(rows["late"]["penalty"]) == pytest.approx(3.3)
    assert float(rows["late"]["score"]) == pytest.approx(7.7)  # 5 hours started: 50%, capped at 30%
    assert rows["later"]["late"] == "3 days" and float(rows["later"]["score"]) == pytest.approx(7.7)
    assert "late 4 h 30 min, -3.3 points" in first.stdout

    autograder(course, "deadline", ASSIGNMENT, "--extend", "late=5h")
    second = autograder(course, "grade", ASSIGNMENT)

    assert ("regraded 1 submission because the due date, an extension or the late penalty changed: late"
            in second.stderr)
    rows = grades_csv(course)
    assert rows["late"]["late"] == "" and float(rows["late"]["score"]) == 11
    assert float(rows["later"]["score"]) == pytest.approx(7.7)


@pytest.mark.slow
def test_lateness_from_canvas_is_its_late_mark_never_the_zips_dates(course_copy, tmp_path):
    """Canvas zipped the download 1 h 17 min after the due date and marked one student of three late: only
    that one is late, by the least the policy counts, until the instructor gives the real times."""
    course = course_copy
    due = datetime(2026, 3, 15, 12, 0).astimezone()
    zipped = (due + timedelta(hours=1, minutes=17)).timetuple()[:6]  # a zip date: local time
    notebook = (DEMO_ROOT / ASSIGNMENT / "ada" / NOTEBOOK).read_bytes()  # full marks: 11
    download = canvas_zip(tmp_path / "submissions.zip", {
        canvas_name("Early, Ann", 1, 11, NOTEBOOK): notebook,
        canvas_name("Ontime, Ben", 2, 12, NOTEBOOK): notebook,
        canvas_name("Late, Cy", 3, 13, NOTEBOOK, late=True): notebook}, zipped_at=zipped)
    (tmp_path / "class.csv").write_text("id,first_name,last_name,lms_user_id\nann,Ann,Early,1\nben,Ben,Ontime,2\n"
                                        "cy,Cy,Late,3\n", encoding="utf-8")
    autograder(course, "roster", str(tmp_path / "class.csv"))
    collected = autograder(course, "collect", ASSIGNMENT, str(download))
    assert "no submission time for 3 students" in collected.stderr and "cy, marked late" in collected.stderr
    autograder(course, "deadline", ASSIGNMENT, "--due", due.isoformat(), "--penalty", "10")

    first = autograder(course, "grade", ASSIGNMENT)

    rows = grades_csv(course)
    for on_time in ("ann", "ben"):
        assert rows[on_time]["late"] == "" and float(rows[on_time]["score"]) == 11
    assert rows["cy"]["late"] == deadlines.TIME_UNKNOWN == "marked late, time unknown"
    assert float(rows["cy"]["penalty"]) == pytest.approx(1.1)  # one hour started: 10%
    assert float(rows["cy"]["score"]) == pytest.approx(9.9)
    assert "graded; marked late, time unknown, -1.1 points" in first.stdout
    autograder(course, "feedback", ASSIGNMENT)
    page = (course.grading / "feedback" / "cy" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text(encoding="utf-8")
    assert "Marked late by the course&#x27;s LMS, which does not say when" in page

    handed_in = (due + timedelta(hours=4, minutes=30)).astimezone(timezone.utc)
    times = tmp_path / "times.csv"  # as Canvas's submissions API gives it: user_id, submitted_at
    times.write_text(f"user_id,submitted_at\n3,{handed_in:%Y-%m-%dT%H:%M:%SZ}\n", encoding="utf-8")
    autograder(course, "collect", ASSIGNMENT, str(download), "--times", str(times))
    second = autograder(course, "grade", ASSIGNMENT)

    assert "regraded 1 submission because the submission changed: cy" in second.stderr
    rows = grades_csv(course)
    assert rows["cy"]["late"] == "4 h 30 min" and float(rows["cy"]["score"]) == pytest.approx(5.5)
    assert rows["ann"]["late"] == "" and float(rows["ann"]["score"]) == 11
