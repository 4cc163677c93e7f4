"""The instructor's workflow end to end on the demo class: collect, grade, feedback, report; resume; bench."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course import Course
from autograder.grading.demo.workspace import WORKSPACE
from autograder.grading.demo.make_demo import ASSIGNMENT, DEMO_ROOT
from conftest import REPO, read_notebook, source

EXPECTED = json.loads((DEMO_ROOT / "expected_scores.json").read_text())
COMMANDS = ["release", "validate", "check", "roster", "collect", "deadline", "grade", "feedback", "report",
            "similarity", "export", "demo", "bench", "publish"]


def autograder(course: Course, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python -m autograder ARGS`` on ``course`` as an instructor would."""
    result = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root,
                            env=course.environment(), capture_output=True, text=True, timeout=600)
    if check:
        assert result.returncode == 0, f"autograder {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def grades_csv(course: Course) -> dict[str, dict]:
    with open(course.grading / "grades.csv", newline="") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def hidden_test_lines(course: Course, assignment: str) -> list[str]:
    """Every substantial line between the hidden-test markers of the solution notebook."""
    lines, inside = [], False
    for cell in read_notebook(course.solutions / assignment / f"{assignment}.ipynb")["cells"]:
        for line in source(cell).splitlines():
            if "### BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "### END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) > 12:
                lines.append(line.strip())
    return lines


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_run) -> tuple[Course, subprocess.CompletedProcess]:
    """The demo's own workspace after `python -m autograder demo` has run once in a course copy (this file's copy of
    the run's course: the tests here grade it again)."""
    root = tmp_path_factory.mktemp("demo-course") / "course"
    shutil.copytree(demo_run.root, root)
    return Course(root / WORKSPACE), demo_run.run


@pytest.mark.slow
def test_the_demo_never_meets_the_class(demo):
    """The demo grades in build/demo/: the course's grading/, where a real class is graded, holds no demo student,
    deadline or penalty, and the demo's output says where it is and how to remove it (issue 40)."""
    workspace, run = demo
    course = Course(workspace.root.parent.parent)
    assert workspace.assignments() == [ASSIGNMENT] and (workspace.grading / "grades.csv").is_file()
    assert not any((course.grading / name).exists() for name in ("grades.csv", "deadlines.json", "submitted",
                                                                  "gradebook.db", "feedback"))
    assert "graded in its own workspace, build/demo/" in run.stdout and "rm -rf build/demo" in run.stdout


@pytest.mark.slow
def test_demo_grades_are_the_documented_scores_less_the_late_penalty(demo):
    """`grade` in the demo gives each student the score the demo documents (expected_scores.json: plain nbgrader's,
    measured; test_plain_nbgrader_gives_the_demo_scores_grade_gives runs nbgrader itself), less ben's late penalty."""
    course, run = demo
    rows = grades_csv(course)
    # hal is on the roster but handed in nothing.
    assert set(rows) == set(EXPECTED["scores"]) | {"hal"}
    assert (float(rows["hal"]["score"]), rows["hal"]["status"]) == (0, "missing")
    for student, expected in EXPECTED["scores"].items():
        row = rows[student]
        assert row["assignment"] == ASSIGNMENT and float(row["max_score"]) == EXPECTED["max_score"]
        if expected is None:  # nbgrader cannot read it; we grade it 0 and say why
            assert row["status"] == "invalid notebook" and float(row["score"]) == 0
            assert "not valid JSON" in row["detail"]
        else:
            late = EXPECTED["late"].get(student, {"late": "", "penalty": 0})
            assert (row["late"], float(row["penalty"] or 0)) == (late["late"], late["penalty"]), student
            assert float(row["score"]) == pytest.approx(expected - late["penalty"]), student
            assert row["status"] == "graded", student
    assert all(rows[s]["late"] == "" for s in EXPECTED["extended"])  # late, but within the extension
    assert "8 graded, 1 invalid notebook, 1 missing" in run.stdout
    assert "1 late penalty taken" in run.stdout and "formgrader shows scores and averages before them" in run.stdout
    assert f"every test cell's points ({EXPECTED['max_score']:g}) decided by the referee" in run.stdout
    assert "10 students added" in run.stdout
    assert "due 2026-03-16 23:59 UTC" in run.stdout and "dana +2 days" in run.stdout


@pytest.mark.slow
def test_plain_nbgrader_gives_the_demo_scores_grade_gives(demo, tmp_path):
    """Real `nbgrader autograde` (its own kernels, none of this grader's processes; the course's config, as the
    bench's) on the demo notebooks of dana (a wrong sign), eli (a wrong coefficient that fails a later exercise too)
    and fay (a syntax error): the scores `grade` gave them in the demo, and the ones the demo documents. (ada, ben and
    chen: the bench test below; `make bench-grade`: every demo notebook.)"""
    course, _ = demo
    students = ["dana", "eli", "fay"]
    plain = Course(tmp_path / "plain")
    for folder in ("solutions", "course"):
        shutil.copytree(REPO / folder, plain.root / folder)
    for student in students:
        (plain.grading / "submitted" / student / ASSIGNMENT).mkdir(parents=True)
        shutil.copy(DEMO_ROOT / ASSIGNMENT / student / f"{ASSIGNMENT}.ipynb",
                    plain.grading / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    plain.nbgrader("generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR")
    plain.nbgrader("autograde", ASSIGNMENT, "--log-level=ERROR")
    with plain.gradebook() as gradebook:
        nbgrader_scores = {s: gradebook.find_submission(ASSIGNMENT, s).score for s in students}
    rows = grades_csv(course)
    assert nbgrader_scores == {s: float(rows[s]["score"]) + float(rows[s]["penalty"] or 0) for s in students}
    assert nbgrader_scores == {s: EXPECTED["scores"][s] for s in students}


@pytest.mark.slow
def test_demo_feedback_explains_failures_without_hidden_tests(demo):
    course, _ = demo
    pages = {p.parts[-3]: p.read_text(encoding="utf-8")
             for p in (course.grading / "feedback").glob(f"*/{ASSIGNMENT}/{ASSIGNMENT}.html")}
    assert set(pages) == set(EXPECTED["scores"])
    # chen's Cube backward forgets grad_output: the checker's message says so, in the feedback.
    assert "grad_output" in pages["chen"] and "cube" in pages["chen"].lower()
    assert "could not be graded" in pages["gus"] and "not valid JSON" in pages["gus"]
    for student, late in EXPECTED["late"].items():  # the late student's page says how late, and the cost
        assert f"Handed in {late['late']} late (due 2026-03-16 23:59 UTC)" in pages[student]
        assert "late-notice" not in pages["ada"] and "late-notice" not in pages["dana"]
    # Every page opens offline and where scripts are stripped: no script, hints as <details>, maths as MathML.
    released = read_notebook(course.release / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")["cells"]
    hints = sum(source(c).count("<details>") for c in released if c["cell_type"] == "markdown")
    for student, page in pages.items():
        assert "<script" not in page, student
        if student != "gus":  # gus's page is the one cell saying why his file could not be graded
            assert page.count("<details>") == hints and "&lt;details&gt;" not in page and "<math" in page, student
    hidden = hidden_test_lines(course, ASSIGNMENT)
    assert hidden, "assignment 01 has hidden tests"
    for student, page in pages.items():
        leaked = [line for line in hidden if line in page]
        assert not leaked, f"{student}'s feedback shows hidden test lines: {leaked[:3]}"


@pytest.mark.slow
def test_demo_report_has_figures_and_worst_exercise_first(demo):
    course, _ = demo
    folder = course.grading / "reports" / ASSIGNMENT
    for name in ("scores.png", "pass_rates.png"):
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = (folder / "summary.md").read_text()
    assert "students graded: 9" in summary and "invalid notebook 1" in summary and "missing 1" in summary
    assert "handed in late: 1 (ben 4 h 31 min, penalty 0.6)" in summary


@pytest.mark.slow
def test_demo_flags_the_copied_pair_and_exports_for_canvas(demo):
    course, run = demo
    page = (course.grading / "reports" / ASSIGNMENT / "similarity.html").read_text(encoding="utf-8")
    flagged = re.findall(r"^\s*\d+\s+(\S+) & (\S+)\s+\d+% / \d+%\s+\d+\s*$", run.stdout, re.MULTILINE)  # rank, pair, %, tokens
    assert flagged == [tuple(pair) for pair in EXPECTED["similar_pairs"]], run.stdout
    assert "<mark>" in page and "no grade was changed" in page
    with open(course.grading / "exports" / ASSIGNMENT / "canvas.csv", newline="") as f:
        canvas = list(csv.reader(f))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", ASSIGNMENT]
    assert canvas[1][-1] == "11"
    by_sis_id = {row[2]: row for row in canvas[2:]}  # the course's student id is Canvas's SIS User ID
    assert by_sis_id["ben"][:4] == ["Okafor, Ben", "100002", "ben", ""] and float(by_sis_id["ben"][-1]) == pytest.approx(5.4)
    assert by_sis_id["hal"][-1] == "0" and len(by_sis_id) == 10
    # What export writes for Canvas, roster reads back: the same ten students, names and Canvas ids.
    again = autograder(course, "roster", str(course.grading / "exports" / ASSIGNMENT / "canvas.csv"))
    assert again.stdout.splitlines()[0] == "read as Canvas's gradebook export: 0 students added, 10 updated in the gradebook"
    with open(course.grading / "exports" / ASSIGNMENT / "per_test.csv", newline="") as f:
        per_test = {row[0]: row for row in csv.reader(f)}
    assert per_test["chen"][1:] != per_test["ada"][1:] and per_test["ada"][-1] == "11"


@pytest.mark.slow
def test_grading_again_changes_nothing_and_resumes_only_what_is_unfinished(demo):
    course, _ = demo
    before = grades_csv(course)
    markers = {s: course.grading / "autograded" / s / ASSIGNMENT / ".autograder.json"
               for s, row in before.items() if row["status"] != "missing"}
    stamps = {s: m.stat().st_mtime_ns for s, m in markers.items()}

    autograder(course, "grade", ASSIGNMENT)
    assert grades_csv(course) == before
    assert {s: m.stat().st_mtime_ns for s, m in markers.items()} == stamps, "nothing is regraded"

    # As if a run had been killed before it finished ben: only ben is graded again.
    shutil.rmtree(course.grading / "autograded" / "ben")
    autograder(course, "grade", ASSIGNMENT)
    assert grades_csv(course) == before
    regraded = {s for s, m in markers.items() if m.stat().st_mtime_ns != stamps[s]}
    assert regraded == {"ben"}

    # --force grades everything again, with the same result.
    autograder(course, "grade", ASSIGNMENT, "--force", "--jobs", "1")
    assert grades_csv(course) == before


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = subprocess.run([sys.executable, "-m", "autograder", command, "--help"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "usage: python -m autograder " + command in result.stdout


def test_errors_are_one_clear_line(course_copy):
    result = autograder(course_copy, "grade", "no_such_assignment", check=False)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "no assignment 'no_such_assignment'" in result.stderr
    result = autograder(course_copy, "feedback", ASSIGNMENT, check=False)
    assert result.returncode == 2 and "nothing graded yet" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_bench_grades_the_demo_class_as_nbgrader_does_and_prints_both_times(tmp_path):
    """A small bench (make bench-grade runs 40, every demo notebook five times): one submission of each of the first
    three demo notebooks (ada: all right; ben: two exercises not done; chen: a hidden test fails), graded by plain
    `nbgrader autograde` with the scores the demo documents and the same scores from `grade`, and the figures
    printed. Which is faster is measured by `make bench-grade`, not asserted here."""
    from autograder.grading.bench import bench

    readable = {s: score for s, score in EXPECTED["scores"].items() if score is not None}  # (gus's is no notebook)
    first = dict(sorted(readable.items())[:3])
    printed = io.StringIO()
    result = bench(Course(REPO), students=len(first), out=printed)
    assert result["differences"] == {}
    assert {student.split("-", 1)[1]: score for student, score in result["scores"].items()} == first
    assert result["ours_seconds"] > 0 and result["nbgrader_seconds"] > 0
    for label in ("nbgrader autograde:", "autograder grade:", "speed-up:",
                  f"scores identical for all {len(first)} students"):
        assert label in printed.getvalue(), printed.getvalue()


def test_grading_recreates_a_deleted_gradebook_without_the_venv_on_path(course_copy):
    """A gradebook deleted after a run is made again; that runs alembic, found beside this Python."""
    first = autograder(course_copy, "grade", ASSIGNMENT, check=False)
    assert first.returncode == 2 and "no submissions" in first.stderr, first.stderr
    (course_copy.grading / "gradebook.db").unlink()
    env = course_copy.environment() | {"PATH": "/usr/bin:/bin"}
    again = subprocess.run([sys.executable, "-m", "autograder", "grade", ASSIGNMENT], cwd=course_copy.root,
                           env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "no submissions" in again.stderr, again.stderr
    assert (course_copy.grading / "gradebook.db").exists()


@pytest.mark.slow
def test_grade_report_and_check_print_one_json_document_for_scripts(demo):
    course, _ = demo
    graded = json.loads(autograder(course, "grade", ASSIGNMENT, "--json").stdout)  # nothing else on stdout
    rows = grades_csv(course)
    assert {s["student_id"]: (s["score"], s["status"]) for s in graded["students"]} == {
        student: (float(row["score"]), row["status"]) for student, row in rows.items()}
    assert graded["counts"] == {"graded": 8, "invalid notebook": 1, "missing": 1} and graded["points_in_process"] == 0
    reported = json.loads(autograder(course, "report", ASSIGNMENT, "--json").stdout)
    assert reported["max_score"] == EXPECTED["max_score"] and Path(reported["files"]["page"]).is_file()
    assert set(reported["scores"]) <= set(rows) and all(0 <= e["pass_rate"] <= 1 for e in reported["exercises"])
    notebook = course.solutions / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    checked = json.loads(autograder(course, "check", str(notebook), "--json").stdout)
    assert checked["failed"] == 0 and checked["score"] == checked["max_score"] == EXPECTED["max_score"]
    assert checked["hidden_tests_ran"] and all(t["passed"] for t in checked["tests"])
