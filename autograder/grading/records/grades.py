"""grades.csv: one row per student and assignment, and a student's status (the worst of their notebooks').

``grade`` writes it; after scores are given by hand in the formgrader, ``refresh_scores`` (run by
``feedback``, ``report`` and ``export``) brings its scores and answers still to grade up to the
gradebook's, so every grades CSV agrees with the gradebook.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course import Course
from autograder.grading.records.spreadsheet import CsvFile

GRADES_CSV = "grades.csv"

# Worst first: a student's status is the worst of their notebooks'.
STATUSES = ["tampering found", "invalid notebook", "kernel died", "over budget", "timed out", "ran out of memory",
            "missing", "graded"]


@dataclass
class Row:
    """One student's line in grades.csv."""

    student_id: str
    assignment: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "graded"
    detail: str = ""
    reused: bool = field(default=False, compare=False)
    regraded: str = field(default="", compare=False)  # why an earlier grade was replaced, if one was
    late: str = ""         # how late after the due date (and extension), e.g. "1 day 2 h"; "" when on time
    penalty: float = 0.0   # points taken for lateness (score is after the penalty)
    # Points of test cells decided in the student's own process, not by the referee (which its code can reach)
    points_in_process: float = field(default=0.0, compare=False)
    # Answers the instructor grades by hand in nbgrader's formgrader (05's derivations): their points,
    # and how many of them still await a score (they count 0 until scored)
    points_by_hand: float = field(default=0.0, compare=False)
    to_grade_by_hand: int = 0


def is_by_hand(grade) -> bool:
    """An nbgrader ``Grade`` of an answer the instructor scores by hand in the formgrader (a manually
    graded markdown cell: 05's derivations), not of a test cell."""
    return grade.cell_type == "markdown"


def hand_graded(submission) -> tuple[float, int]:
    """For an nbgrader submission: the points of its answers graded by hand, and how many of them
    await the instructor (nbgrader's ``needs_manual_grade``: not scored yet, or the submission was
    graded again since). A blank answer is scored 0 by nbgrader itself."""
    by_hand = [g for n in submission.notebooks for g in n.grades if is_by_hand(g)]
    return float(sum(g.max_score for g in by_hand)), sum(bool(g.needs_manual_grade) for g in by_hand)


def worsen(row: Row, status: str, detail: str) -> None:
    if STATUSES.index(status) < STATUSES.index(row.status):
        row.status, row.detail = status, detail
    elif status == row.status and detail and detail not in row.detail:
        row.detail = f"{row.detail}; {detail}" if row.detail else detail


def read_grades_csv(course: Course, assignment: str) -> list[Row]:
    """The rows of ``assignment`` in grades.csv ([] when it has none)."""
    path = course.grading / GRADES_CSV
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as f:
        return [Row(r["student_id"], assignment, float(r.get("score") or 0), float(r.get("max_score") or 0),
                    r.get("status") or "graded", r.get("detail", ""), late=r.get("late", ""),
                    penalty=float(r.get("penalty") or 0), to_grade_by_hand=int(r.get("to_grade_by_hand") or 0))
                for r in csv.DictReader(f) if r.get("assignment") == assignment]


def refresh_scores(course: Course, assignment: str) -> list[Row]:
    """grades.csv's rows of ``assignment`` with the gradebook's scores now (after any given by hand in the
    formgrader since ``grade``), less the late penalty ``grade`` took; written back, and returned."""
    from nbgrader.api import MissingEntry

    rows = read_grades_csv(course, assignment)
    if not rows:
        return rows
    with course.gradebook() as gb:
        for row in rows:
            if row.status == "missing":
                continue
            try:
                submission = gb.find_submission(assignment, row.student_id)
            except MissingEntry:
                continue
            row.score = float(submission.score) - row.penalty
            row.to_grade_by_hand = hand_graded(submission)[1]
    write_grades_csv(course, assignment, rows)
    return rows


def write_grades_csv(course: Course, assignment: str, rows: list[Row]) -> Path:
    """Write (or update) grades.csv: one row per student and assignment."""
    path = course.grading / GRADES_CSV
    kept = []
    if path.exists():
        with open(path, newline="", encoding="utf-8") as f:
            kept = [r for r in csv.DictReader(f) if r.get("assignment") != assignment]
    fields = ["student_id", "assignment", "score", "max_score", "status", "detail", "late", "penalty",
              "to_grade_by_hand"]
    with CsvFile(path, fields) as writer:  # every cell safe to open in a spreadsheet; written whole or not at all
        writer.writerows(kept)
        for r in rows:
            writer.writerow({"student_id": r.student_id, "assignment": r.assignment, "score": f"{r.score:g}",
                             "max_score": f"{r.max_score:g}", "status": r.status, "detail": r.detail,
                             "late": r.late, "penalty": f"{r.penalty:g}" if r.penalty else "",
                             "to_grade_by_hand": r.to_grade_by_hand or ""})
    return path
