"""No notebook holds the class (issue 45, item 7): oversized notebooks through the real `grade` and `feedback`.

One class of 01_first_function, each notebook the release with the solution's answers and then made large one
way: many lines in one answer cell, many cells, a huge markdown cell, huge outputs saved in the notebook, many
saved outputs, an expression nested past Python's parser, a name bound more ways than the scan follows, and one
at the limits. Graded in ONE `grade` run, then `feedback` (and `feedback --page-timeout` with a limit no page
meets). A notebook over a limit is refused before anything else reads it, with a one-line reason in grades.csv
and on its page; the others are graded as usual, and the gradebook has every student.

The scan's work is linear in its input: counted in lines of the scan's code run (a trace), never in seconds.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from autograder.grading.records import submissions
from autograder.grading.running.judging import allowed, bindings, scan
from test_robustness import (ASSIGNMENT, MAX_SCORE, Notebooks, _course, autograded, autograder, code_cell,
                             gradebook_scores, grades_csv, write_submissions)

pytestmark = pytest.mark.slow

DEEP = "DEEP = " + "1 + " * 10_000 + "1\n"  # 40,008 characters on one line: past the parser's 3,000 levels
MEANINGS = "".join(f"from torch import {name} as f\n" for name in ("exp", "sin", "cos", "tan", "abs", "neg", "sqrt",
                                                                   "log", "relu"))  # 9 > bindings.MAX_MEANINGS


def markdown_cell(cell_id: str, text: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": text}


def oversized(nb: Notebooks) -> dict[str, dict]:
    """student -> their notebook."""
    many_cells = nb.answers()
    many_cells["cells"] += [code_cell(f"c{i}", "pass") for i in range(20_000)]
    huge_markdown = nb.answers()
    huge_markdown["cells"].append(markdown_cell("notes", "my notes " * 150_000))  # 1,350,000 characters
    stored_outputs = nb.answers()  # 40 MB of output saved in the file: under 50 MB, and cleared when graded
    stored_outputs["cells"].append(dict(code_cell("printed", "pass  # (it printed a lot once)"), outputs=[
        {"output_type": "stream", "name": "stdout", "text": "spam " * 8_000_000}]))
    many_outputs = nb.answers()
    many_outputs["cells"].append(dict(code_cell("flood", "for i in range(10_001):\n    display(i)"), outputs=[
        {"output_type": "stream", "name": "stdout", "text": "1"}] * 10_001))
    at_the_limits = nb.answers()
    filler = submissions.MAX_CELLS - len(at_the_limits["cells"])
    at_the_limits["cells"] += [code_cell(f"c{i}", "x = 1") for i in range(filler)]
    return {
        "right": nb.answers(),
        "long_answer": nb.answers(cube=nb.right["cube"] + "\n" + "_ = 1\n" * 22_000),
        "many_cells": many_cells,
        "huge_markdown": huge_markdown,
        "stored_outputs": stored_outputs,
        "many_outputs": many_outputs,
        "deep_expression": nb.answers(cube=nb.right["cube"] + "\n" + DEEP),
        "many_meanings": nb.answers(sqrt=MEANINGS + nb.right["sqrt"] + "\nTWICE = f(torch.ones(1))\n"),
        "at_the_limits": at_the_limits,
    }


@dataclass
class Run:
    course: object
    students: set[str]
    grade: object
    feedback: object
    stopped: object  # feedback again, with a time limit no page meets
    pages: dict[str, str]  # the pages of the first feedback run
    rows: dict[str, dict]
    scores: dict[str, dict[str, float]]


def _page(course, student: str) -> str:
    return (course.grading / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Run:
    course = _course(tmp_path_factory.mktemp("oversized"))
    subs = oversized(Notebooks(course.root))
    write_submissions(course, subs)
    graded = autograder(course, "grade", ASSIGNMENT, "--timeout", "20", "--jobs", "2")
    feedback = autograder(course, "feedback", ASSIGNMENT)
    pages = {student: _page(course, student) for student in subs}
    stopped = autograder(course, "feedback", ASSIGNMENT, "--page-timeout", "0.001")
    return Run(course, set(subs), graded, feedback, stopped, pages, grades_csv(course), gradebook_scores(course))


def _row(run: Run, student: str) -> tuple[float, str, str]:
    row = run.rows[student]
    assert float(row["max_score"]) == MAX_SCORE, row
    return float(row["score"]), row["status"], row["detail"]


REFUSED = {
    "long_answer": "01_first_function.ipynb: code cell ",
    "many_cells": "01_first_function.ipynb: it has 20,042 cells; a notebook may have at most 1,000 (remove the cells "
                  "you added)",
    "huge_markdown": "01_first_function.ipynb: its cells hold 1,",
    "many_outputs": "01_first_function.ipynb: it holds 10,001 saved outputs and attachments; a notebook may hold at "
                    "most 10,000 (clear its outputs",
}


def test_the_batch_finishes_and_the_notebooks_within_the_limits_are_graded_as_usual(run):
    assert run.grade.returncode == 0 and "Traceback" not in run.grade.stdout + run.grade.stderr, run.grade.stderr[-3000:]
    assert set(run.rows) == set(run.scores) == run.students  # a row and a gradebook entry for everyone
    for student in ("right", "stored_outputs", "at_the_limits"):
        assert _row(run, student)[:2] == (MAX_SCORE, "graded"), run.rows[student]
    # Saved outputs are cleared before the notebook runs: none of the 40 MB reaches the graded notebook.
    assert "spam spam" not in json.dumps(autograded(run.course, "stored_outputs"))
    assert len(autograded(run.course, "at_the_limits")["cells"]) == submissions.MAX_CELLS


@pytest.mark.parametrize("student", sorted(REFUSED))
def test_a_notebook_over_a_limit_is_refused_with_its_reason_in_one_line(run, student):
    score, status, detail = _row(run, student)
    assert (score, status) == (0.0, "invalid notebook") and detail.startswith(REFUSED[student]), detail
    assert "\n" not in detail
    assert set(run.scores[student].values()) == {0.0}  # in the gradebook, every test at 0
    page = run.pages[student]
    assert "This submission could not be graded" in page and REFUSED[student].split(": ", 1)[1][:40] in page


def test_the_limits_are_named_in_the_reasons(run):
    _, _, detail = _row(run, "long_answer")
    assert detail.endswith(f"lines; a code cell may have at most {submissions.MAX_CODE_CHARACTERS:,} characters and "
                           f"{submissions.MAX_CODE_LINES:,} lines (shorten it)"), detail
    assert "characters in 22,0" in detail
    _, _, detail = _row(run, "huge_markdown")
    assert detail.endswith(f"a notebook may hold at most {submissions.MAX_SOURCE_CHARACTERS:,} (remove what you "
                           "added)"), detail


def test_an_expression_nested_past_the_parser_fails_its_own_exercise_only(run):
    assert _row(run, "deep_expression")[:2] == (MAX_SCORE - 3, "graded")  # test_cube_forward 1, test_cube_backward 2
    assert run.scores["deep_expression"]["test_cube_forward"] == 0 and run.scores["deep_expression"]["test_net"] == 2
    assert "RecursionError" in run.pages["deep_expression"]


def test_a_name_bound_more_ways_than_the_scan_follows_is_refused_by_the_scan(run):
    assert _row(run, "many_meanings")[:2] == (MAX_SCORE - 3, "graded")  # test_sqrt
    assert run.scores["many_meanings"]["test_sqrt"] == 0
    assert (f"the name `f`, bound more than {bindings.MAX_MEANINGS} different ways" in run.pages["many_meanings"]
            .replace("&#96;", "`"))


def test_every_student_gets_a_page_and_a_page_past_its_time_says_so(run):
    assert run.feedback.returncode == 0, run.feedback.stderr[-3000:]
    assert run.feedback.stdout.strip().splitlines()[-1] == f"{len(run.rows)} feedback pages, 0 students with problems"
    assert all("could not be shown" not in page for page in run.pages.values())
    # With a limit no page meets, every page is stopped: each student gets the short page saying why, and the
    # command says who, in one line each.
    assert run.stopped.returncode == 1
    for student in run.rows:
        page = _page(run.course, student)
        assert "making the page took longer than 0.001 s, so the grader stopped it" in page and "Score: " in page
        assert f"{student}: only a page saying the feedback could not be made (making the page took longer than " \
               "0.001 s" in run.stopped.stderr


# --------------------------------------------------------------------------------------------
# The scan is linear in its input, counted in lines of its code run


def _lines_run(source: str) -> int:
    """Lines of the scan's code (scan.py, bindings.py) run to scan ``source``, from a cold cache."""
    bindings.cell.cache_clear()
    scan.problems("x = 1")  # (the allow-list and the course's imports, loaded once: not this source's work)
    bindings.cell.cache_clear()
    counted = {scan.__file__, bindings.__file__}
    count = 0

    def tracer(frame, event, arg):
        nonlocal count
        if frame.f_code.co_filename not in counted:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        scan.problems(source)
    finally:
        sys.settrace(None)
    return count


def _imports_as_f(n: int) -> str:
    """n lines each binding `f` to another of torch's functions (the allow-list names hundreds)."""
    names = sorted(name for name in allowed.load()["modules"]["torch"] if name.isidentifier() and name[0] != "_")
    assert len(names) >= 400
    return "import torch\nx = torch.ones(2)\n" + "".join(f"from torch import {name} as f\n" for name in names[:n])


# Each shape made n times: what an answer cell padded to grow the scan's work could repeat.
SHAPES = {
    "plain lines": lambda n: "import torch\nx = torch.zeros(3)\n" + "y = torch.nn.functional.gelu(x) + x.sum()\n" * n,
    "a name bound many ways, used often": lambda n: _imports_as_f(n) + "y = f(x)\n" * n,
    "aliases of a name bound many ways": lambda n: _imports_as_f(n) + "g = f\n" * n + "y = g(x)\n",
    "aliases of aliases": lambda n: "import torch\na0 = torch\n" + "".join(f"a{i + 1} = a{i}\n" for i in range(n))
                                    + f"y = a{n}.nn.functional.relu\n" * n,
    "one long attribute chain": lambda n: "x = None\ny = x" + ".real" * n + "\n",
    "nested calls, repeated": lambda n: "x = 1\n" + ("y = " + "abs(" * 50 + "x" + ")" * 50 + "\n") * (n // 10),
    "refused lines": lambda n: "import os\n" * n,
    "classes": lambda n: "".join(f"class C{i}:\n    def __init__(self):\n        self.v{i} = 1\n" for i in range(n)),
    "strings and formats": lambda n: "x = 1\n" + "s = '{0}'.format(x) + '__init__'\n" * n,
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_scans_work_grows_in_proportion_to_its_input(shape):
    small, large = (_lines_run(SHAPES[shape](n)) for n in (100, 400))
    assert small > 0 and large <= 4.4 * small, (shape, small, large)
