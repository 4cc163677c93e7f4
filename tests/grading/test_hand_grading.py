"""Answers graded by hand (05's derivations): scored in nbgrader's real formgrader, then counted by
`grade`, the class report, the exports and the feedback page; unscored ones are reported, not hidden."""

from __future__ import annotations

import json
import urllib.request

import pytest

from autograder.grading.results.export import export
from autograder.grading.results.report import report
from conftest import REPO, filled_release, jupyter_server, solution_answers
from test_grading import autograder, grades_csv

ASSIGNMENT = "05_deriving_backward"


def _formgrader(base: str, token: str, method: str, path: str, body: dict | None = None):
    """One call to the formgrader's own API (what its grading page sends when a score is typed)."""
    request = urllib.request.Request(f"{base}/formgrader/api/{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.mark.slow
def test_derivations_scored_in_the_formgrader_count_in_grades_report_export_and_feedback(course_copy, tmp_path):
    course = course_copy
    answers = solution_answers(REPO, ASSIGNMENT)
    derivations = sorted(g for g in answers if g.startswith("derive_"))
    assert len(derivations) == 5
    download = tmp_path / "download"
    # ada writes her code and every derivation; bo writes the code and leaves the derivations as released
    for student, given in {"ada": answers, "bo": {g: a for g, a in answers.items() if g not in derivations}}.items():
        (download / student).mkdir(parents=True)
        (download / student / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(filled_release(REPO, ASSIGNMENT, given)))
    autograder(course, "collect", ASSIGNMENT, str(download))
    graded = autograder(course, "grade", ASSIGNMENT)

    rows = grades_csv(course)
    assert {s: (float(r["score"]), float(r["max_score"]), r["to_grade_by_hand"]) for s, r in rows.items()} == {
        "ada": (19, 29, "5"), "bo": (19, 29, "")}  # bo's blank answers score 0 at once: nothing to grade
    assert "10 points are answers graded by hand: 5 answers of 1 student await you in the formgrader" in graded.stdout
    waiting = report(course, ASSIGNMENT, tmp_path / "report-before")
    assert "answers still to grade by hand" in waiting.summary.read_text()
    # Not graded yet: after every exercise with a final pass rate, labelled, never a 0% at the top.
    table = [line for line in waiting.summary.read_text().splitlines() if line.startswith("| ")][1:]
    assert [line.startswith("| derive_") for line in table] == [False] * (len(table) - 5) + [True] * 5
    assert all(line.endswith("| 0/1, 1 not graded yet | not graded yet |") for line in table[-5:]), table

    with course.gradebook() as gb:
        submission = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, "ada").id
    given = {"derive_softmax": 2, "derive_log_softmax_nll": 2, "derive_layer_norm": 1, "derive_attention": 2,
             "derive_batch_norm_train": 2}
    with jupyter_server(course) as (base, token):
        grades = _formgrader(base, token, "GET", f"grades?submission_id={submission}")
        for grade in (g for g in grades if g["name"] in given):
            assert grade["needs_manual_grade"] and grade["auto_score"] is None
            scored = _formgrader(base, token, "PUT", f"grade/{grade['id']}", {"manual_score": given[grade["name"]]})
            assert scored["manual_score"] == given[grade["name"]] and not scored["needs_manual_grade"]
        comment = next(c for c in _formgrader(base, token, "GET", f"comments?submission_id={submission}")
                       if c["name"] == "derive_layer_norm")
        _formgrader(base, token, "PUT", f"comment/{comment['id']}",
                    {"manual_comment": "The centring adds a second path: where is mean(g_c)?"})

    # Whichever the instructor runs next brings grading/grades.csv up to the gradebook: one truth.
    stale = (course.grading / "grades.csv").read_text(encoding="utf-8")
    for command in ("feedback", "report", "export"):
        (course.grading / "grades.csv").write_text(stale, encoding="utf-8")
        autograder(course, command, ASSIGNMENT)
        assert {s: (r["score"], r["to_grade_by_hand"]) for s, r in grades_csv(course).items()} == {
            "ada": ("28", ""), "bo": ("19", "")}, command

    exported = export(course, ASSIGNMENT, tmp_path / "export")
    plain = {r["student_id"]: r for r in _csv_rows(exported.plain)}
    assert (plain["ada"]["score"], plain["bo"]["score"], exported.to_grade_by_hand) == ("28", "19", {})
    assert {s: (r["score"], r["to_grade_by_hand"]) for s, r in plain.items()} == \
        {s: (r["score"], r["to_grade_by_hand"]) for s, r in grades_csv(course).items()}
    per_test = {r["student_id"]: r for r in _csv_rows(exported.per_test)}
    assert per_test["ada"]["derive_layer_norm"] == "1" and per_test["bo"]["derive_layer_norm"] == "0"

    scored = report(course, ASSIGNMENT, tmp_path / "report-after")
    by_name = {e.name: e for e in scored.exercises}
    assert (by_name["derive_softmax"].passed, by_name["derive_softmax"].graded) == (1, 2)  # bo's blank one failed
    assert (by_name["derive_layer_norm"].passed, by_name["derive_layer_norm"].to_grade) == (0, 0)
    assert scored.scores == {"ada": 28, "bo": 19}
    assert "answers still to grade by hand" not in scored.summary.read_text()
    assert "| derive_layer_norm (by hand) | 2 | 0/2 | 0% |" in scored.summary.read_text()

    autograder(course, "feedback", ASSIGNMENT)
    page = (course.grading / "feedback" / "ada" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "where is mean(g_c)?" in page and "Score: 28.0 / 29.0" in page, page[:3000]

    again = autograder(course, "grade", ASSIGNMENT)  # unchanged: reused, with the scores given by hand
    assert {s: (float(r["score"]), r["to_grade_by_hand"]) for s, r in grades_csv(course).items()} == {
        "ada": (28, ""), "bo": (19, "")}
    assert "10 points are answers graded by hand, all scored" in again.stdout


def _csv_rows(path) -> list[dict]:
    import csv

    with path.open(newline="", encoding="utf-8") as stream:
        return list(csv.DictReader(stream))
