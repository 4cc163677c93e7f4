"""Grades out, in forms an LMS or a spreadsheet reads: Canvas's gradebook CSV, a plain CSV, per test.

Scores are grades.csv's, brought up to the gradebook's first (``records.grades.refresh_scores``: scores
given by hand in the formgrader since ``grade``), after any late penalty, 0 for a student who handed in
nothing; names and LMS ids come from the roster in the gradebook, and per-test points from its grades.

- ``canvas.csv``: Canvas's gradebook import (Grades > Import), in the columns of its gradebook export:
  ``Student`` ("Last, First"), ``ID`` (Canvas's user id: the roster's ``lms_user_id``), ``SIS User ID``
  (the institution's student id: the course's student id), ``SIS Login ID`` (a login, which the course
  does not know: empty), ``Section`` and one column for the assignment, with the "Points Possible" row.
  Canvas matches a row by ``ID``, then by ``SIS User ID``, then by name. Name the column as Canvas's
  export does (``Assignment 1 (4567)``) to fill an existing assignment; another name makes a new one.
  ``roster`` reads it back.
- ``grades.csv``: one row per student with ``lms_user_id``, names, email, score, status, lateness.
- ``per_test.csv``: one row per student, one column per test (its points), for analysing exercises.

Every cell is written so that no spreadsheet runs it as a formula (``records.spreadsheet``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import MissingEntry

from autograder.course import Course, CourseError
from autograder.grading.records.grades import GRADES_CSV, refresh_scores
from autograder.grading.records.spreadsheet import CsvFile

CANVAS_FIXED = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]


@dataclass
class Export:
    canvas: Path
    plain: Path
    per_test: Path
    students: int
    without_lms_id: list[str]  # students Canvas cannot match (no lms_user_id in the roster)
    to_grade_by_hand: dict[str, int]  # student -> answers not yet scored in the formgrader (they count 0)


def export(course: Course, assignment: str, out_dir: Path, canvas_column: str | None = None) -> Export:
    """Write the three CSV files for ``assignment`` into ``out_dir``; grade first."""
    course.check_assignment(assignment)
    rows = _graded_rows(course, assignment)
    to_grade = {sid: int(row.get("to_grade_by_hand") or 0) for sid, row in rows.items()}
    with course.gradebook() as gb:
        people = {s.id: s for s in gb.students}
        try:
            submissions = {s.student.id: s for s in gb.find_assignment(assignment).submissions}
        except MissingEntry:
            raise CourseError(f"{assignment} is not in the gradebook: run `python -m autograder grade {assignment}`") \
                from None
        tests = _tests(submissions.values(), _source_order(course, assignment))
        per_test = {student: _points(submission, tests) for student, submission in submissions.items()}
        details = {sid: _person(people.get(sid)) for sid in rows}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    max_score = next(iter(rows.values()))["max_score"]
    column = canvas_column or assignment

    canvas = out_dir / "canvas.csv"
    write_canvas(canvas, column, max_score, {sid: (details[sid], row["score"]) for sid, row in rows.items()})

    plain = out_dir / "grades.csv"
    with CsvFile(plain) as writer:
        writer.writerow(["student_id", "lms_user_id", "first_name", "last_name", "email", "assignment", "score",
                         "max_score", "status", "late", "penalty", "to_grade_by_hand"])
        for sid, row in rows.items():
            person = details[sid]
            writer.writerow([sid, person["lms_user_id"], person["first_name"], person["last_name"], person["email"],
                             assignment, row["score"], row["max_score"], row["status"], row.get("late", ""),
                             row.get("penalty", ""), row.get("to_grade_by_hand", "")])

    by_test = out_dir / "per_test.csv"
    with CsvFile(by_test) as writer:
        writer.writerow(["student_id"] + [name for name, _ in tests] + ["total (before late penalty)"])
        writer.writerow(["max points"] + [f"{points:g}" for _, points in tests] + [f"{sum(p for _, p in tests):g}"])
        for sid in rows:
            points = per_test.get(sid) or [0.0] * len(tests)
            writer.writerow([sid] + [f"{p:g}" for p in points] + [f"{sum(points):g}"])

    missing_ids = [sid for sid in rows if not details[sid]["lms_user_id"]]
    return Export(canvas, plain, by_test, len(rows), missing_ids, {s: n for s, n in to_grade.items() if n})


def write_canvas(path: Path, column: str, max_score, scores: dict[str, tuple[dict[str, str], object]]) -> None:
    """Canvas's gradebook CSV at ``path``: one row per student id -> (their roster details, their score)."""
    with CsvFile(path) as writer:
        writer.writerow(CANVAS_FIXED + [column])
        writer.writerow(["    Points Possible", "", "", "", "", max_score])
        for sid, (person, score) in scores.items():
            name = ", ".join(x for x in (person["last_name"], person["first_name"]) if x)
            writer.writerow([name, person["lms_user_id"], sid, "", "", score])


def _graded_rows(course: Course, assignment: str) -> dict[str, dict]:
    """grades.csv's rows of ``assignment`` (student -> row), its scores brought up to the gradebook's first."""
    path = course.grading / GRADES_CSV
    refresh_scores(course, assignment)
    rows = {}
    if path.exists():
        with path.open(newline="", encoding="utf-8") as stream:
            rows = {r["student_id"]: r for r in csv.DictReader(stream) if r.get("assignment") == assignment}
    if not rows:
        raise CourseError(f"no grades for {assignment} in {path}: run `python -m autograder grade {assignment}` first")
    return dict(sorted(rows.items()))


def _source_order(course: Course, assignment: str) -> dict[tuple[str, str], int]:
    """(notebook, grade_id) -> position in the source notebooks, so tests are listed as students meet them."""
    import nbformat

    order = {}
    for path in course.notebooks(assignment):
        for cell in nbformat.read(path, as_version=4).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id:
                order[path.stem, grade_id] = len(order)
    return order


def _tests(submissions, order: dict[tuple[str, str], int]) -> list[tuple[str, float]]:
    """(name, points) of every graded test, in notebook order; the notebook is named when there are several."""
    for submission in submissions:
        notebooks = sorted(submission.notebooks, key=lambda n: n.name)
        several = len(notebooks) > 1
        grades = [(n.name, g) for n in notebooks for g in n.grades]
        grades.sort(key=lambda item: (order.get((item[0], item[1].name), len(order)), item[0], item[1].name))
        return [(f"{nb}: {g.name}" if several else g.name, float(g.max_score)) for nb, g in grades]
    return []


def _points(submission, tests: list[tuple[str, float]]) -> list[float]:
    several = len(submission.notebooks) > 1
    scores = {(f"{n.name}: {g.name}" if several else g.name): float(g.score or 0.0)
              for n in submission.notebooks for g in n.grades}
    return [scores.get(name, 0.0) for name, _ in tests]


def _person(student) -> dict[str, str]:
    fields = ("first_name", "last_name", "email", "lms_user_id")
    return {f: (getattr(student, f, None) or "") for f in fields}
