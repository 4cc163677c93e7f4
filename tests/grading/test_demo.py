"""The demo class: regenerated without drift, and graded by nbgrader with the scores it documents."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
from nbgrader.api import Gradebook

from autograder.grading.demo.make_demo import ASSIGNMENT, DEMO_ROOT, make_demo

DEMO = DEMO_ROOT / ASSIGNMENT
EXPECTED = json.loads((DEMO_ROOT / "expected_scores.json").read_text())


def _files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_regenerating_the_demo_gives_the_committed_files(course, tmp_path):
    make_demo(course, tmp_path)
    regenerated, committed = _files(tmp_path / ASSIGNMENT), _files(DEMO)
    assert sorted(regenerated) == sorted(committed)
    drifted = [name for name in committed if committed[name] != regenerated[name]]
    assert not drifted, f"run `.venv/bin/python -m autograder.grading.demo.make_demo` and commit: {drifted} differ"


def test_every_demo_student_has_an_expected_score_and_a_readme_line():
    students = sorted(p.name for p in DEMO.iterdir())
    assert students == sorted(EXPECTED["scores"])
    with open(DEMO_ROOT / "roster.csv", newline="") as roster:
        on_roster = {row["id"] for row in csv.DictReader(roster)}
    absent = on_roster - set(students)
    assert absent and set(students) <= on_roster, "the roster lists every student, and one who handed in nothing"
    rows = {line.split("|")[1].strip(" `"): line.split("|")[-2].strip()
            for line in (DEMO_ROOT / "README.md").read_text().splitlines() if line.startswith("| `")}
    assert rows == {student: "not graded" if score is None else str(score)
                    for student, score in EXPECTED["scores"].items()} | {student: "missing" for student in absent}


def test_demo_notebooks_are_committed_without_outputs():
    for path in DEMO.glob(f"*/{ASSIGNMENT}.ipynb"):
        try:
            cells = json.loads(path.read_text())["cells"]
        except json.JSONDecodeError:
            continue  # gus's notebook is cut off on purpose
        assert not [c for c in cells if c.get("outputs") or c.get("execution_count")], path


@pytest.mark.slow
def test_nbgrader_autograde_grades_no_notebook_that_is_not_one(course_copy):
    """The demo's ungraded student under plain `nbgrader autograde` (expected_scores.json's note): an error, exit 1,
    the submission in the gradebook with no scores. The others' scores under `grade` are test_grading.py's demo tests;
    under nbgrader, its bench test's (ada, ben and chen) and `make bench-grade`'s (all)."""
    course = course_copy
    course.nbgrader("generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR")
    ungradable = [s for s, score in EXPECTED["scores"].items() if score is None]
    assert ungradable
    for student in ungradable:
        folder = course.grading / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        shutil.copy(DEMO / student / f"{ASSIGNMENT}.ipynb", folder)

    result = course.nbgrader("autograde", ASSIGNMENT, "--log-level=ERROR", check=False)

    assert result.returncode == 1, result.stdout + result.stderr
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}") as gb:
        submissions = {s.student.id: s for s in gb.find_assignment(ASSIGNMENT).submissions}
        assert sorted(submissions) == sorted(ungradable)
        for student in ungradable:
            submission = submissions[student]
            assert submission.max_score == EXPECTED["max_score"]
            auto_scores = [g.auto_score for n in submission.notebooks for g in n.grades]
            assert auto_scores == [None] * len(auto_scores), student
            assert not (course.grading / "autograded" / student).exists()
