"""A class report for one assignment: total scores and per-exercise pass rates from the gradebook.

Writes ``scores.png`` (histogram of total scores), ``pass_rates.png`` (share of students who
passed each exercise), ``summary.md`` (the numbers, exercises worst first, so the instructor
sees what the class struggled with) and ``summary.html``: the same Markdown rendered and cleaned
(``markup.markdown_to_html``), its two figures embedded, so the one file opens offline, mailed or
uploaded to an LMS. An exercise is a graded cell (grade_id): a test cell, or an answer graded by
hand in the formgrader (05's derivations); a student passes it with full marks. Answers not yet
scored by hand are counted apart, not as failures: an exercise with answers still to grade has no
final pass rate, so it comes after the others, labelled "not graded yet", never as a 0% at the top. If ``<grading>/grades.csv`` has a ``status``
column, the summary also counts the grading statuses (graded, timed out, ...); its scores are
brought up to the gradebook's first (``records.grades.refresh_scores``), so the two agree.
"""

from __future__ import annotations

import base64
import csv
import html
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from nbgrader.api import Gradebook, MissingEntry

from autograder.course import Course, CourseError
from autograder.grading.records.deadlines import TIME_NOT_RECORDED
from autograder.grading.records.grades import is_by_hand, refresh_scores
from autograder.grading.results.markup import markdown_to_html


@dataclass
class Exercise:
    name: str          # grade_id (prefixed with the notebook when an assignment has several)
    max_score: float
    passed: int        # students with full marks
    graded: int        # students graded
    by_hand: bool = False  # an answer the instructor scores in the formgrader (a derivation), not a test
    to_grade: int = 0      # by hand, and not scored yet

    @property
    def pass_rate(self) -> float:
        return self.passed / self.graded if self.graded else 0.0

    @property
    def waiting(self) -> bool:
        """Graded by hand, with answers not scored yet: its pass rate is not final."""
        return self.to_grade > 0

    def label(self) -> str:
        """Its full marks, e.g. '3/4', or '1/2, 2 not graded yet'."""
        waiting = f"{self.to_grade} not graded yet"
        return waiting if not self.graded else f"{self.passed}/{self.graded}" + (f", {waiting}" if self.waiting else "")


@dataclass
class Report:
    assignment: str
    max_score: float
    scores: dict[str, float]               # student_id -> total score, graded students only
    exercises: list[Exercise]              # worst pass rate first
    not_graded: list[str] = field(default_factory=list)  # in the gradebook, but no test was scored
    statuses: dict[str, int] = field(default_factory=dict)  # from grades.csv, if it has a status column
    late: dict[str, tuple[str, str]] = field(default_factory=dict)  # student -> (how late, penalty), grades.csv
    histogram: Path | None = None
    pass_rates: Path | None = None
    summary: Path | None = None
    page: Path | None = None  # summary.html

    @property
    def mean(self) -> float:
        return statistics.mean(self.scores.values())

    @property
    def median(self) -> float:
        return statistics.median(self.scores.values())


def report(course: Course, assignment: str, out_dir: Path) -> Report:
    """Read the gradebook for ``assignment`` and write the figures and summary.md into ``out_dir``.

    Raises CourseError when there is no gradebook, the assignment is not in it, or no
    submission of it has been graded.
    """
    result = _read_gradebook(course, assignment)
    refresh_scores(course, assignment)
    result.statuses = _read_statuses(course.grading / "grades.csv", assignment)
    result.late = _read_late(course.grading / "grades.csv", assignment)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result.histogram = _plot_scores(result, out_dir / "scores.png")
    result.pass_rates = _plot_pass_rates(result, out_dir / "pass_rates.png")
    result.summary = out_dir / "summary.md"
    result.summary.write_text(_summary_text(result), encoding="utf-8")
    result.page = out_dir / "summary.html"
    result.page.write_text(_summary_page(result), encoding="utf-8")
    return result


def _read_gradebook(course: Course, assignment: str) -> Report:
    db_url = course.config().CourseDirectory.db_url
    if db_url.startswith("sqlite:///") and not Path(db_url.removeprefix("sqlite:///")).exists():
        raise CourseError(f"no gradebook at {db_url.removeprefix('sqlite:///')}: grade the assignment first")
    with Gradebook(db_url) as gradebook:
        try:
            submissions = gradebook.find_assignment(assignment).submissions
        except MissingEntry:
            raise CourseError(f"assignment '{assignment}' is not in the gradebook: grade it first") from None
        several_notebooks = len({n.name for s in submissions for n in s.notebooks}) > 1
        scores, not_graded, max_score = {}, [], 0.0
        exercises: dict[str, Exercise] = {}
        for submission in submissions:
            grades = [g for n in submission.notebooks for g in n.grades]
            if all(g.auto_score is None and g.manual_score is None for g in grades):
                not_graded.append(submission.student.id)
                continue
            scores[submission.student.id] = submission.score - (submission.late_submission_penalty or 0.0)
            max_score = submission.max_score
            for grade in grades:
                name = f"{grade.notebook.name}: {grade.name}" if several_notebooks else grade.name
                exercise = exercises.setdefault(name, Exercise(name, grade.max_score, 0, 0, is_by_hand(grade)))
                if exercise.by_hand and grade.needs_manual_grade:
                    exercise.to_grade += 1  # not scored by hand yet: neither passed nor failed
                    continue
                exercise.graded += 1
                if grade.score >= grade.max_score:
                    exercise.passed += 1
    if not scores:
        raise CourseError(f"no graded submission of '{assignment}' in the gradebook: grade it first")
    return Report(assignment, max_score, dict(sorted(scores.items())), worst_first(exercises.values()),
                  sorted(not_graded))


def worst_first(exercises) -> list[Exercise]:
    """Lowest pass rate first; those with answers still to grade by hand after all the others."""
    return sorted(exercises, key=lambda e: (e.waiting, e.pass_rate, e.name))


def _read_statuses(grades_csv: Path, assignment: str) -> dict[str, int]:
    """status -> number of students, from the grader's grades.csv ({} when absent or without statuses)."""
    if not grades_csv.exists():
        return {}
    with grades_csv.open(newline="", encoding="utf-8") as stream:
        rows = [r for r in csv.DictReader(stream) if r.get("assignment", assignment) == assignment]
    counts = Counter(r["status"] for r in rows if r.get("status"))
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _read_late(grades_csv: Path, assignment: str) -> dict[str, tuple[str, str]]:
    """student -> (how late, penalty points) for late submissions, from grades.csv."""
    if not grades_csv.exists():
        return {}
    with grades_csv.open(newline="", encoding="utf-8") as stream:
        return {r["student_id"]: (r["late"], r.get("penalty") or "0") for r in csv.DictReader(stream)
                if r.get("assignment", assignment) == assignment and r.get("late")}


def _plot_scores(result: Report, path: Path) -> Path:
    figure = Figure(figsize=(6, 4), layout="constrained")
    axes = figure.subplots()
    top = int(-(-result.max_score // 1))  # one bar per point, 0 .. max
    axes.hist(list(result.scores.values()), bins=[i - 0.5 for i in range(top + 2)], color="tab:blue", edgecolor="white")
    axes.set_xlim(-0.5, top + 0.5)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel(f"total score (out of {result.max_score:g})")
    axes.set_ylabel("students")
    axes.set_title(f"{result.assignment}: students graded {len(result.scores)}, mean {result.mean:.1f}")
    figure.savefig(path, dpi=100)
    return path


def _plot_pass_rates(result: Report, path: Path) -> Path:
    exercises = result.exercises[::-1]  # barh draws bottom up: the worst ends on top
    figure = Figure(figsize=(7, 1 + 0.4 * len(exercises)), layout="constrained")
    axes = figure.subplots()
    bars = axes.barh([e.name for e in exercises], [100 * e.pass_rate for e in exercises], color="tab:green")
    axes.bar_label(bars, labels=[e.label() for e in exercises], padding=3)
    axes.set_xlim(0, 110)
    axes.set_xlabel("students with full marks (%)")
    axes.set_title(f"{result.assignment}: pass rate per exercise")
    figure.savefig(path, dpi=100)
    return path


def _summary_text(result: Report) -> str:
    scores = list(result.scores.values())
    lines = [
        f"# {result.assignment}: class report",
        "",
        f"- students graded: {len(scores)}",
        f"- total score (out of {result.max_score:g}): mean {result.mean:.2f}, median {result.median:g}, "
        f"lowest {min(scores):g}, highest {max(scores):g}",
    ]
    if result.not_graded:
        lines.append(f"- in the gradebook but not graded: {len(result.not_graded)} ({', '.join(result.not_graded)})")
    if result.statuses:
        lines.append("- grading status (grades.csv): "
                     + ", ".join(f"{status} {count}" for status, count in result.statuses.items()))
    late = {s: (when, p) for s, (when, p) in result.late.items() if when != TIME_NOT_RECORDED}
    if late:
        lines.append(f"- handed in late: {len(late)} ("
                     + ", ".join(f"{s} {when}, penalty {p}" for s, (when, p) in late.items()) + ")")
    unrecorded = sorted(set(result.late) - set(late))
    if unrecorded:
        lines.append(f"- no time recorded by the LMS (not counted late; `collect --times` gives times): "
                     f"{len(unrecorded)} ({', '.join(unrecorded)})")
    waiting = {e.name: e.to_grade for e in result.exercises if e.to_grade}
    if waiting:
        lines.append("- answers still to grade by hand (formgrader; they count 0 in the scores above): "
                     + ", ".join(f"{name} {count}" for name, count in waiting.items()))
    lines += ["", "## Exercises, worst first", "",
              "| exercise | points | full marks | pass rate |", "|---|---|---|---|"]
    lines += [f"| {e.name}{' (by hand)' if e.by_hand else ''} | {e.max_score:g} | {e.label()} | "
              f"{'not graded yet' if e.waiting else f'{100 * e.pass_rate:.0f}%'} |" for e in result.exercises]
    lines += ["", f"![Total scores]({result.histogram.name})", "",
              f"![Pass rate per exercise]({result.pass_rates.name})", ""]
    return "\n".join(lines)


PAGE_STYLE = ("body {font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;} "
              "table {border-collapse: collapse;} th, td {border: 1px solid #ccc; padding: .25rem .6rem;} "
              "td:nth-child(n+2) {text-align: right;} img {max-width: 100%; height: auto;} "
              "a.anchor-link {display: none;}")


def _summary_page(result: Report) -> str:
    """summary.md as one HTML file, its figures embedded as PNG data URIs.

    The summary has no HTML of its own, so any it holds came with a student id or file name: it is
    escaped before rendering and shows as text. Its Markdown images are the course's own (its figures).
    """
    body = markdown_to_html(html.escape(result.summary.read_text(encoding="utf-8"), quote=False), course_markup=True)
    for figure in (result.histogram, result.pass_rates):
        embedded = "data:image/png;base64," + base64.b64encode(figure.read_bytes()).decode("ascii")
        body = body.replace(f'src="{figure.name}"', f'src="{embedded}"')
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{html.escape(result.assignment)}: class report</title>\n<style>{PAGE_STYLE}</style>\n"
            f"</head>\n<body>\n{body}\n</body>\n</html>\n")
