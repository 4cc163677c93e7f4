"""A fixed test regrades what it affects; nothing changed regrades nothing."""

from __future__ import annotations

import json
import shutil

import pytest

from autograder.grading.demo.make_demo import ASSIGNMENT, DEMO_ROOT
from autograder.grading.records.fingerprint import why_regrade
from conftest import nbgrader_meta
from test_grading import EXPECTED, autograder, grades_csv

STUDENTS = ("ada", "chen")


def _markers(course) -> dict[str, int]:
    return {s: (course.grading / "autograded" / s / ASSIGNMENT / ".autograder.json").stat().st_mtime_ns
            for s in STUDENTS}


def _make_hidden_test_stricter(course, grade_id: str) -> None:
    """What an instructor does in solutions/: a hidden test gains a check that no one passes."""
    path = course.solutions / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if nbgrader_meta(c).get("grade_id") == grade_id)
    text = "".join(cell["source"])
    assert "### END HIDDEN TESTS" in text
    cell["source"] = text.replace("### END HIDDEN TESTS",
                                  'assert False, "a stricter hidden test"\n### END HIDDEN TESTS')
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


@pytest.mark.slow
def test_a_changed_hidden_test_regrades_and_changes_the_scores(course_copy, tmp_path):
    course = course_copy
    download = tmp_path / "download"
    for student in STUDENTS:
        shutil.copytree(DEMO_ROOT / ASSIGNMENT / student, download / student)
    autograder(course, "collect", ASSIGNMENT, str(download))
    autograder(course, "grade", ASSIGNMENT)
    before = {s: float(r["score"]) for s, r in grades_csv(course).items()}
    assert before == {s: EXPECTED["scores"][s] for s in STUDENTS}
    stamps = _markers(course)

    again = autograder(course, "grade", ASSIGNMENT)
    assert "regraded" not in again.stderr and "2 already graded and unchanged" in again.stderr
    assert _markers(course) == stamps, "nothing changed: nothing is graded again"

    _make_hidden_test_stricter(course, "test_cube_forward")
    changed = autograder(course, "grade", ASSIGNMENT)

    assert "regraded 2 submissions because the assignment's tests changed: ada, chen" in changed.stderr
    after = {s: float(r["score"]) for s, r in grades_csv(course).items()}
    assert after == {s: before[s] - 1 for s in STUDENTS}  # test_cube_forward is worth 1 point
    assert all(_markers(course)[s] != stamps[s] for s in STUDENTS)
    marker = json.loads((course.grading / "autograded" / "ada" / ASSIGNMENT / ".autograder.json").read_text())
    assert set(marker["graded_with"]) == {"source", "grader", "deadline"} and "nbgrader 0.9.6" in marker["graded_with"]["grader"]

    settled = autograder(course, "grade", ASSIGNMENT)
    assert "regraded" not in settled.stderr and "2 already graded and unchanged" in settled.stderr
    assert {s: float(r["score"]) for s, r in grades_csv(course).items()} == after


def test_why_a_marker_no_longer_holds():
    now = {"source": "s2", "grader": "g1"}
    assert why_regrade({"graded_with": {"source": "s2", "grader": "g1"}}, now) == ""
    assert why_regrade({"graded_with": {"source": "s1", "grader": "g1"}}, now) == "the assignment's tests changed"
    assert why_regrade({"graded_with": {"source": "s2", "grader": "g0"}}, now) == "the grader changed"
    assert why_regrade({"fingerprint": "x"}, now) == "the grader changed"



def test_the_grader_fingerprint_covers_every_file_that_decides_a_verdict(monkeypatch):
    """A fixed judge, examinee, scan (its allow-list too) or scoring regrades: each file of grading/running, in every
    room, and the records that score or refuse a notebook, changed in turn, changes the grader's fingerprint."""
    from autograder.grading.records import fingerprint

    package = fingerprint._PACKAGE
    deciding = sorted((package / "grading" / "running").rglob("*.py")) + [
        package / "grading/running/judging/allowed.json", package / "grading/records/scores.py",
        package / "grading/records/submissions.py", package / "grading/contained.py",
        package / "student/checker/core.py"]
    before, read = fingerprint.grader_version(), type(package).read_bytes
    for changed in deciding:
        monkeypatch.setattr(type(package), "read_bytes", lambda self, _changed=changed: read(self) + (
            b"# changed" if self == _changed else b""))
        assert fingerprint.grader_version() != before, changed.relative_to(package)
    monkeypatch.setattr(type(package), "read_bytes", read)
    assert fingerprint.grader_version() == before
