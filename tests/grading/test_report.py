"""The class report, from a gradebook built by real nbgrader runs on students with known answers."""

from __future__ import annotations

import base64
import json
import statistics
from html.parser import HTMLParser

import pytest
from matplotlib.image import imread

from autograder.course import CourseError
from autograder.grading.results import report as report_module
from autograder.grading.results.report import Exercise, Report, report

from conftest import filled_release, nbgrader_meta, read_notebook, solution_answers

ASSIGNMENT = "01_first_function"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _submit(course, student: str, text: str) -> None:
    folder = course.grading / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / f"{ASSIGNMENT}.ipynb").write_text(text)


def _points(course) -> dict[str, float]:
    return {nbgrader_meta(c)["grade_id"]: nbgrader_meta(c)["points"]
            for c in read_notebook(course.solutions / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")["cells"]
            if nbgrader_meta(c).get("grade")}


def _assert_png(path) -> None:
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    height, width, _ = imread(path).shape
    assert height > 100 and width > 100


@pytest.mark.slow
def test_report_from_a_real_gradebook(course_copy, tmp_path):
    course = course_copy
    course.nbgrader("generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR")
    right = solution_answers(course.root, ASSIGNMENT)
    wrong_poly = right["poly_function"].replace("grad_output * 2 * x2", "grad_output * x2")
    assert wrong_poly != right["poly_function"]
    _submit(course, "alice", json.dumps(filled_release(course.root, ASSIGNMENT, right)))
    _submit(course, "bob", json.dumps(filled_release(course.root, ASSIGNMENT, {**right, "poly_function": wrong_poly})))
    _submit(course, "carol", json.dumps(filled_release(course.root, ASSIGNMENT, {"cube": right["cube"]})))
    _submit(course, "dave", '{"cells": [')  # nbgrader cannot read it: in the gradebook, never graded
    course.nbgrader("autograde", ASSIGNMENT, "--log-level=ERROR", check=False)

    result = report(course, ASSIGNMENT, tmp_path / "report")

    points = _points(course)
    total = sum(points.values())
    expected = {"alice": total,
                "bob": total - points["test_poly_function"] - points["test_net"],
                "carol": points["test_cube_forward"] + points["test_cube_backward"]}
    assert result.scores == expected
    assert result.max_score == total
    assert result.not_graded == ["dave"]
    # Full marks: alice everywhere, bob all but PolyFunction and Net, carol only Cube.
    rates = [(e.name, e.passed, e.graded) for e in result.exercises]
    assert rates == [("test_net", 1, 3), ("test_poly_function", 1, 3), ("test_sqrt", 2, 3),
                     ("test_cube_backward", 3, 3), ("test_cube_forward", 3, 3)]
    assert result.statuses == {}

    summary = result.summary.read_text()
    mean, median = statistics.mean(expected.values()), statistics.median(expected.values())
    assert "- students graded: 3" in summary
    assert (f"- total score (out of {total:g}): mean {mean:.2f}, median {median:g}, "
            f"lowest {min(expected.values()):g}, highest {total:g}") in summary
    assert "- in the gradebook but not graded: 1 (dave)" in summary
    table = [line for line in summary.splitlines() if line.startswith("| test_")]
    assert table[0] == f"| test_net | {points['test_net']:g} | 1/3 | 33% |"
    assert table[-1] == f"| test_cube_forward | {points['test_cube_forward']:g} | 3/3 | 100% |"
    assert [line.split(" | ")[0] for line in table] == [f"| {name}" for name, _, _ in rates]
    assert "grading status" not in summary
    for figure in (result.histogram, result.pass_rates):
        assert figure.parent == tmp_path / "report"
        _assert_png(figure)
        assert f"]({figure.name})" in summary
    _assert_page_says_what_the_summary_says(result)

    # The grader's grades.csv adds how each student's grading went; other assignments' rows are ignored.
    (course.grading / "grades.csv").write_text(
        "student_id,assignment,score,max_score,status\n"
        f"alice,{ASSIGNMENT},11,11,graded\nbob,{ASSIGNMENT},6,11,graded\ncarol,{ASSIGNMENT},3,11,graded\n"
        f"dave,{ASSIGNMENT},,11,invalid notebook\nerin,{ASSIGNMENT},,11,missing\n"
        "alice,02_saving_for_backward,0,10,timed out\n")
    again = report(course, ASSIGNMENT, tmp_path / "again")
    assert again.statuses == {"graded": 3, "invalid notebook": 1, "missing": 1}
    assert "- grading status (grades.csv): graded 3, invalid notebook 1, missing 1" in again.summary.read_text()


def test_report_without_a_gradebook_is_a_clear_error(course_copy, tmp_path):
    with pytest.raises(CourseError, match="no gradebook at"):
        report(course_copy, ASSIGNMENT, tmp_path / "report")
    assert not (course_copy.grading / "gradebook.db").exists()
    assert not (tmp_path / "report").exists()


def test_report_before_grading_is_a_clear_error(course_copy, tmp_path):
    course_copy.nbgrader("generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR")
    with pytest.raises(CourseError, match="no graded submission of '01_first_function'"):
        report(course_copy, ASSIGNMENT, tmp_path / "report")
    with pytest.raises(CourseError, match="assignment 'nope' is not in the gradebook"):
        report(course_copy, "nope", tmp_path / "report")


class _Page(HTMLParser):
    """A page's visible text, its images' sources and whatever would load or run."""

    def __init__(self):
        super().__init__()
        self.text, self.images, self.active = [], [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs)
        if tag in ("script", "iframe", "link", "object") or any(a.startswith("on") for a in attrs):
            self.active.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _read_page(path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _assert_page_says_what_the_summary_says(result: Report) -> None:
    """summary.html: every line of summary.md's text, each figure embedded byte for byte, nothing to load or run."""
    page = _read_page(result.page)
    assert result.page == result.summary.with_name("summary.html")
    text = " ".join("".join(page.text).split())
    for line in result.summary.read_text().splitlines():
        words = line.lstrip("#- ").strip()
        if words and not words.startswith(("!", "|---")):
            assert " ".join(w.strip() for w in words.strip("|").split("|")) in text, words
    assert [i["alt"] for i in page.images] == ["Total scores", "Pass rate per exercise"]
    for image, figure in zip(page.images, (result.histogram, result.pass_rates)):
        assert image["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(image["src"].split(",", 1)[1]) == figure.read_bytes()
    assert page.active == []


def test_answers_not_graded_yet_come_after_the_others_labelled_never_as_0_percent(tmp_path):
    """05's derivations before the formgrader: no pass rate yet, so not at the top of "worst first"."""
    exercises = report_module.worst_first([
        Exercise("test_softmax", 3, 2, 4), Exercise("derive_softmax", 2, 0, 0, by_hand=True, to_grade=4),
        Exercise("derive_attention", 2, 0, 1, by_hand=True, to_grade=3),  # one blank answer: 0 at once
        Exercise("test_attention", 3, 4, 4), Exercise("derive_layer_norm", 2, 1, 4, by_hand=True)])
    assert [e.name for e in exercises] == ["derive_layer_norm", "test_softmax", "test_attention",
                                           "derive_attention", "derive_softmax"]
    result = Report("05_deriving_backward", 12, {"ada": 7, "bo": 9}, exercises)
    result.histogram, result.pass_rates = tmp_path / "scores.png", tmp_path / "pass_rates.png"
    table = [line for line in report_module._summary_text(result).splitlines() if line.startswith("| ")][1:]
    assert table == ["| derive_layer_norm (by hand) | 2 | 1/4 | 25% |",
                     "| test_softmax | 3 | 2/4 | 50% |",
                     "| test_attention | 3 | 4/4 | 100% |",
                     "| derive_attention (by hand) | 2 | 0/1, 3 not graded yet | not graded yet |",
                     "| derive_softmax (by hand) | 2 | 4 not graded yet | not graded yet |"]
    _assert_png(report_module._plot_pass_rates(result, tmp_path / "pass_rates.png"))


def test_the_html_report_shows_hostile_ids_as_text(tmp_path):
    hostile = '<script>alert("x-id")</script><img src=x onerror=alert(1)>'
    result = Report("01_first_function", 4.0, {hostile: 3.0, "bob": 4.0}, [Exercise("test_cube", 4.0, 1, 2)],
                    not_graded=["[x](javascript:alert(1))"], late={hostile: ("2 h", "0.3")})
    result.histogram = report_module._plot_scores(result, tmp_path / "scores.png")
    result.pass_rates = report_module._plot_pass_rates(result, tmp_path / "pass_rates.png")
    result.summary = tmp_path / "summary.md"
    result.summary.write_text(report_module._summary_text(result))
    result.page = tmp_path / "summary.html"
    result.page.write_text(report_module._summary_page(result))
    page = _read_page(result.page)
    assert page.active == [] and len(page.images) == 2
    assert "javascript:" not in result.page.read_text()
    assert 'alert("x-id")' in "".join(page.text)  # shown, as text
