"""Grading survives bad submissions and resists cheating (README, "What grading guarantees").

One class of crafted submissions of 01_first_function, each the release filled with the
solution's answers and then broken in one way, is graded in ONE batch through the real command
line (`python -m autograder grade`, then `feedback`) with small limits: a cell may run 2 s and
a notebook may use 1 GB. Each test then checks one family of cases in the grade table, the
gradebook, the autograded notebooks and the feedback pages. Interruption, concurrent runs and the
tamper guard inside nbgrader's own kernels get small classes of their own.

Points of 01_first_function: test_cube_forward 1, test_cube_backward 2, test_sqrt 3,
test_poly_function 3, test_net 2 (11 in all).
"""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.course import Course
from autograder.student.checker.messages import NOT_DONE
from conftest import REPO, filled_release, nbgrader_meta, solution_answers

pytestmark = pytest.mark.slow

ASSIGNMENT = "01_first_function"
NOTEBOOK = f"{ASSIGNMENT}.ipynb"
MAX_SCORE = 11.0
POINTS = {"test_cube_forward": 1, "test_cube_backward": 2, "test_sqrt": 3, "test_poly_function": 3, "test_net": 2}
LIMITS = ["--timeout", "2", "--memory", "1"]


# --------------------------------------------------------------------------------------------
# Building submissions


def _course(root: Path) -> Course:
    """A throwaway course with this repository's solutions/ and course/."""
    for folder in ("solutions", "course"):
        shutil.copytree(REPO / folder, root / folder)
    (root / "grading").mkdir()
    return Course(root)


class Notebooks:
    """The release of 01_first_function filled with the solution's answers, and variations of it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.right = solution_answers(root, ASSIGNMENT)

    def answers(self, **changes: str) -> dict:
        """The notebook with the solution's answers, except the exercises (grade ids) in ``changes``."""
        return filled_release(self.root, ASSIGNMENT, {**self.right, **changes})

    def edit(self, grade_id: str, old: str, new: str, base: dict | None = None) -> str:
        """The solution's answer to ``grade_id`` with ``old`` replaced by ``new`` (which must be there)."""
        answer = (base or self.right)[grade_id]
        assert old in answer, f"'{old}' is no longer in the answer to {grade_id}: update the test"
        return answer.replace(old, new)

    def in_backward(self, grade_id: str, code: str) -> str:
        """The answer to ``grade_id`` (cube or sqrt) with ``code`` run first thing in backward."""
        first_line = "(x,) = ctx.saved_tensors" if grade_id == "cube" else "(result,) = ctx.saved_tensors"
        return self.edit(grade_id, first_line, first_line + "\n        " + code.replace("\n", "\n        "))


def cell_index(nb: dict, grade_id: str) -> int:
    return next(i for i, c in enumerate(nb["cells"]) if nbgrader_meta(c).get("grade_id") == grade_id)


def code_cell(cell_id: str, source: str) -> dict:
    return {"cell_type": "code", "id": cell_id, "metadata": {}, "execution_count": None, "outputs": [],
            "source": source}


# Wrong answers that the tests catch: what a tampering student hopes to hide.
WRONG_CUBE = {"forward": ("return x ** 3", "return x ** 2"),
              "backward": ("return grad_output * 3 * x ** 2", "return grad_output * 2 * x")}
WRONG_SQRT = ("return grad_output / (2 * result)", "return -grad_output / (2 * result)")
# Right where the visible test looks (grad_output is all ones there); only the checker catches it.
FORGOT_GRAD_OUTPUT = ("return grad_output / (2 * result)", "return 1 / (2 * result)")

# student -> (the exercise whose wrong answer it adds this code to, the code)
TAMPERING = {
    # The classic: torch's comparison and checking functions always say yes.
    "tamper_torch": ("cube", "torch.allclose = torch.isclose = lambda *a, **k: True\n"
                             "torch.testing.assert_close = lambda *a, **k: None\n"
                             "torch.autograd.gradcheck = torch.autograd.gradgradcheck = lambda *a, **k: True\n"
                             "torch.autograd.grad = lambda *a, **k: None\n"
                             "torch.Tensor.__bool__ = lambda self: True\n"),
    # The checker's own captured references and functions, from outside.
    "tamper_checker": ("sqrt", "import autograder, autograder.student.checker\n"
                               "autograder.student.checker.core._allclose = lambda *a, **k: True\n"
                               "autograder.student.checker.references._Report.raise_if_any = lambda self: None\n"
                               "autograder.student.checker.check_function.__code__ = (lambda *a, **k: None).__code__\n"
                               "autograder.check_function = lambda *a, **k: None\n"),
    # Names the tests use, redefined in the notebook.
    "tamper_names": ("cube", "check_function = lambda *a, **k: None\n"
                             "def isinstance(*args):\n    return True\n"
                             "class FakeTorch:\n    def __getattr__(self, name):\n"
                             "        return getattr(__import__('torch'), name)\n"
                             "    allclose = isclose = staticmethod(lambda *a, **k: True)\n"
                             "torch = FakeTorch()\n"),
}
# The same wrong answer, untampered: the most a tampering student may score.
UNTAMPERED = {"cube": "wrong_cube", "sqrt": "forgot_grad_output"}


def after(notebook: dict, grade_id: str, source: str) -> dict:
    """``notebook`` with a cell of the student's own holding ``source`` right after the answer cell ``grade_id``:
    the grader's examinee runs only answer cells, and refuses one that uses what an answer never needs
    (``open``, ``exit``, ``IPython.display``), so what these students do runs in the notebook's process alone."""
    notebook["cells"].insert(cell_index(notebook, grade_id) + 1, code_cell(f"after-{grade_id}", source))
    return notebook


def submissions(notebooks: Notebooks) -> dict[str, str | bytes | dict[str, str | bytes] | None]:
    """student -> what they hand in: a notebook (text or bytes), {file name: content}, or None (empty folder)."""
    nb = notebooks
    right = nb.answers()
    wrong_sqrt = nb.answers(sqrt=nb.edit("sqrt", *WRONG_SQRT))
    wrong_cube_answer = nb.edit("cube", *WRONG_CUBE["forward"], base={"cube": nb.edit("cube", *WRONG_CUBE["backward"])})
    wrong_answers = {"cube": wrong_cube_answer, "sqrt": nb.edit("sqrt", *FORGOT_GRAD_OUTPUT)}
    subs: dict = {
        "right": right,
        "wrong_sqrt": wrong_sqrt,
        "wrong_cube": nb.answers(cube=wrong_answers["cube"]),
        "forgot_grad_output": nb.answers(sqrt=wrong_answers["sqrt"]),
        # Runaway code
        "loop_in_solution": nb.answers(sqrt="while True:\n    pass\n" + nb.right["sqrt"]),
        "loop_in_backward": nb.answers(cube=nb.in_backward("cube", "while True:\n    pass")),
        "memory_bomb": nb.answers(sqrt=nb.in_backward("sqrt", "hog = torch.ones(3 * 1024**3, dtype=torch.uint8)")),
        # 20 MB of output in 20 000 prints: far over the limits, and quick enough for the 2 s cell limit on a loaded machine
        "print_flood": nb.answers(sqrt=nb.right["sqrt"] + "\nfor i in range(20_000):\n    print('spam ' * 200)\n"),
        "display_flood": after(nb.answers(), "sqrt", "from IPython.display import HTML, display\n"
                                                     "display(HTML('<b>x</b>' * 10**7))\n'y' * 10**7\n"),
        # Crashes
        "os_exit": nb.answers(poly_function=nb.right["poly_function"] + "\nimport os\nos._exit(1)\n"),
        "segfault": nb.answers(cube=nb.in_backward("cube", "import ctypes\nctypes.string_at(0)")),
        "sys_exit": nb.answers(sqrt=nb.right["sqrt"] + "\nraise SystemExit(0)  # what sys.exit() raises\n"),
        "exit_call": after(nb.answers(), "sqrt", "exit()\n"),
        "keyboard_interrupt": nb.answers(cube=nb.in_backward("cube", "raise KeyboardInterrupt")),
        # Student code runs in the grading process, so it can break the grader's own objects.
        "breaks_the_grader": nb.answers(poly_function=nb.right["poly_function"]
                                        + "\ntype(get_ipython().recorder).end = lambda self: 1 / 0\n"),
        # Ordinary errors
        "syntax_error": nb.answers(sqrt=nb.edit("sqrt", "def backward(ctx, grad_output):",
                                                "def backward(ctx, grad_output)")),
        "name_error": nb.answers(sqrt=nb.edit("sqrt", "grad_output / (2 * result)", "grad_output / (2 * reslt)")),
        "not_implemented": filled_release(nb.root, ASSIGNMENT, {k: v for k, v in nb.right.items() if k != "sqrt"}),
        # Warnings and stderr text never cost marks.
        "warnings": nb.answers(cube=nb.in_backward(
            "cube", "import sys, warnings\nwarnings.warn('float32 is imprecise', UserWarning)\n"
                    "print('debugging', file=sys.stderr)")),
    }
    # Edited notebooks
    edited = copy.deepcopy(wrong_sqrt)
    edited["cells"][cell_index(edited, "test_sqrt")]["source"] = "print('Sqrt passes')"
    subs["edited_test_wrong"] = edited
    deleted = copy.deepcopy(right)
    del deleted["cells"][cell_index(deleted, "test_sqrt")]
    subs["deleted_test"] = deleted
    subs["deleted_all_tests"] = {**right, "cells": [c for c in right["cells"]
                                                    if not nbgrader_meta(c).get("grade")]}
    duplicated = copy.deepcopy(right)
    copied = copy.deepcopy(duplicated["cells"][cell_index(duplicated, "test_sqrt")])
    copied["id"] = "a-copy"
    duplicated["cells"].insert(cell_index(duplicated, "sqrt"), copied)
    subs["duplicated_test"] = duplicated
    moved = copy.deepcopy(right)
    test = moved["cells"].pop(cell_index(moved, "test_sqrt"))
    moved["cells"].insert(cell_index(moved, "sqrt"), test)
    subs["moved_test"] = moved
    points = copy.deepcopy(wrong_sqrt)
    points["cells"][cell_index(points, "test_sqrt")]["metadata"]["nbgrader"]["points"] = 0
    points["cells"][cell_index(points, "test_cube_forward")]["metadata"]["nbgrader"]["points"] = 100
    subs["changed_points_wrong"] = points
    renamed = copy.deepcopy(right)
    renamed["cells"][cell_index(renamed, "test_sqrt")]["metadata"]["nbgrader"]["grade_id"] = "my_test"
    renamed["cells"][cell_index(renamed, "sqrt")]["metadata"]["nbgrader"]["grade_id"] = "my_sqrt"
    subs["renamed_grade_ids"] = renamed
    unmarked = copy.deepcopy(wrong_sqrt)
    test = unmarked["cells"][cell_index(unmarked, "test_sqrt")]
    test["metadata"], test["source"] = {}, "pass"
    subs["unmarked_test_wrong"] = unmarked
    broken = copy.deepcopy(right)
    broken["cells"][cell_index(broken, "test_sqrt")]["metadata"]["nbgrader"] = "broken"
    subs["broken_metadata"] = broken
    no_ids = copy.deepcopy(right)
    no_ids["nbformat_minor"] = 4
    for cell in no_ids["cells"]:
        cell.pop("id")
    subs["cells_without_ids"] = no_ids
    subs["marker_in_answer"] = nb.answers(sqrt="# ### BEGIN HIDDEN TESTS (no end)\n" + nb.right["sqrt"])
    # Tampering: each variant added to a wrong answer; it must not score more than that answer alone.
    for student, (exercise, code) in TAMPERING.items():
        subs[student] = nb.answers(**{exercise: wrong_answers[exercise] + "\n\n" + code})
    # Tampering while a test runs: the wrong Cube's backward replaces the checker's functions.
    tamper_when_called = nb.in_backward("cube", "import autograder.student.checker\n"
                                                "torch.allclose = lambda *a, **k: True\n"
                                                "autograder.student.checker.core._allclose = lambda *a, **k: True\n"
                                                "autograder.student.checker.references._Report.raise_if_any = lambda self: None")
    subs["tamper_in_backward"] = nb.answers(cube=tamper_when_called.replace(*WRONG_CUBE["forward"])
                                            .replace(*WRONG_CUBE["backward"]))
    # Code that rewrites the notebook file it runs from (in the folder that becomes autograded/), so
    # that the tests would land on cells without errors; or garbage; or deletes that folder.
    forge = ("import json\n_nb = json.load(open('01_first_function.ipynb'))\n"
             "_free = [i for i, c in enumerate(_nb['cells']) if c['cell_type'] == 'markdown']\n"
             "_tests = [c for c in _nb['cells'] if c['metadata'].get('nbgrader', {}).get('grade')]\n"
             "_rest = iter([c for c in _nb['cells'] if not c['metadata'].get('nbgrader', {}).get('grade')])\n"
             "_placed = dict(zip(_free, _tests))\n"
             "_nb['cells'] = [_placed[i] if i in _placed else next(_rest) for i in range(len(_nb['cells']))]\n"
             "json.dump(_nb, open('01_first_function.ipynb', 'w'))\n")
    subs["forges_its_notebook"] = nb.answers(cube=wrong_answers["cube"] + "\n\n" + forge)
    subs["overwrites_its_notebook"] = after(nb.answers(), "net", f"open('{NOTEBOOK}', 'w').write('?')\n")
    deletes = nb.answers()  # in a cell of its own: an answer cell importing os is not run by the grader's examinee
    deletes["cells"].insert(cell_index(deletes, "net") + 1,
                            code_cell("deletes", "import os, shutil\nshutil.rmtree(os.getcwd())\n"))
    subs["deletes_its_folder"] = deletes
    # Hidden tests: code that prints the test cell it runs in, now and in a cell of its own later.
    leak = nb.answers(cube=nb.in_backward("cube", (
        "import builtins\nbuiltins.stolen = get_ipython().user_ns['In'][-1]\nprint(builtins.stolen)")))
    leak["cells"].append(code_cell("later", "import builtins\nprint(builtins.stolen)\n"
                                            "raise ValueError(builtins.stolen)"))
    subs["leak_hidden_tests"] = leak
    # Malformed files
    text = json.dumps(right, indent=1)
    subs["invalid_json"] = text[: len(text) // 2]
    subs["empty_file"] = ""
    subs["not_utf8"] = text.replace("Cube", "C\u00fcbe", 1).encode("latin-1")
    subs["json_not_a_notebook"] = '{"name": "not a notebook"}'
    subs["nbformat_3"] = nbformat.writes(nbformat.convert(nbformat.reads(text, as_version=4), 3))
    subs["too_big"] = {NOTEBOOK: 200 * 1024**2}  # a 200 MB file (sparse: no disk used)
    subs["wrong_file_name"] = {"Untitled.ipynb": text}
    subs["extra_notebook"] = {NOTEBOOK: text, "scratch.ipynb": text}
    subs["no_notebook"] = None
    return subs


def write_submissions(course: Course, subs: dict) -> None:
    """Put each student's files where `collect` would: grading/submitted/<student>/<assignment>/."""
    for student, content in subs.items():
        folder = course.grading / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        if content is None:
            files = {}
        elif isinstance(content, dict) and "cells" not in content:
            files = content
        else:
            files = {NOTEBOOK: content}
        for name, data in files.items():
            if isinstance(data, int):  # a file of that many bytes
                with open(folder / name, "wb") as f:
                    f.truncate(data)
            elif isinstance(data, bytes):
                (folder / name).write_bytes(data)
            else:
                (folder / name).write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


# --------------------------------------------------------------------------------------------
# Running the grader


def autograder(course: Course, *args: str, **popen) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course.root, env=course.environment(),
                          capture_output=True, text=True, timeout=600, **popen)


def grades_csv(course: Course) -> dict[str, dict]:
    with open(course.grading / "grades.csv", newline="") as f:
        return {row["student_id"]: row for row in csv.DictReader(f)}


def gradebook_scores(course: Course) -> dict[str, dict[str, float]]:
    """student -> grade id -> auto score, as nbgrader's gradebook has them."""
    with Gradebook(f"sqlite:///{course.grading / 'gradebook.db'}", "custom-autograd-functions") as gb:
        return {s.student.id: {g.name: g.auto_score for g in s.notebooks[0].grades}
                for s in gb.find_assignment(ASSIGNMENT).submissions}


def autograded(course: Course, student: str) -> dict:
    return json.loads((course.grading / "autograded" / student / ASSIGNMENT / NOTEBOOK).read_text(encoding="utf-8"))


def outputs_of(nb: dict, grade_id: str) -> str:
    """Everything a cell showed, as text (streams, errors, results)."""
    cell = nb["cells"][cell_index(nb, grade_id)]
    return json.dumps(cell.get("outputs", []))


def hidden_lines(course: Course) -> list[str]:
    """Every substantial line of the solution notebook's hidden tests that students never see."""
    hidden, visible, inside = set(), set(), False
    nb = json.loads((course.solutions / ASSIGNMENT / NOTEBOOK).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        for line in "".join(cell["source"]).splitlines():
            if "### BEGIN HIDDEN TESTS" in line or "### END HIDDEN TESTS" in line:
                inside = "BEGIN" in line
            else:
                (hidden if inside else visible).add(line.strip())
    return sorted(line for line in hidden - visible if len(line) > 12)


@dataclass
class Batch:
    course: Course
    grade: subprocess.CompletedProcess
    feedback: subprocess.CompletedProcess
    seconds: float
    rows: dict[str, dict]
    scores: dict[str, dict[str, float]]

    def page(self, student: str) -> str:
        page = self.course.grading / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html"
        return page.read_text(encoding="utf-8")

    def score(self, student: str) -> float:
        return float(self.rows[student]["score"])


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Batch:
    course = _course(tmp_path_factory.mktemp("robustness"))
    subs = submissions(Notebooks(course.root))
    write_submissions(course, subs)
    started = time.monotonic()
    graded = autograder(course, "grade", ASSIGNMENT, *LIMITS, "--jobs", "2")
    seconds = time.monotonic() - started
    feedback = autograder(course, "feedback", ASSIGNMENT)
    assert set(grades_csv(course)) == set(subs), graded.stdout + graded.stderr
    return Batch(course, graded, feedback, seconds, grades_csv(course), gradebook_scores(course))


def assert_row(batch: Batch, student: str, score: float, status: str, *in_detail: str) -> None:
    row = batch.rows[student]
    assert (float(row["score"]), float(row["max_score"]), row["status"]) == (score, MAX_SCORE, status), (student, row)
    for text in in_detail:
        assert text in row["detail"], (student, row)


# --------------------------------------------------------------------------------------------
# The whole batch


def test_the_batch_finishes_with_exit_0_and_a_summary(batch):
    assert batch.grade.returncode == 0, batch.grade.stderr
    assert "Traceback" not in batch.grade.stderr
    summary = batch.grade.stdout.strip().splitlines()[-1]
    for status in ("graded", "timed out", "ran out of memory", "kernel died", "invalid notebook", "tampering found"):
        assert status in summary, summary
    assert batch.feedback.returncode == 0, batch.feedback.stdout + batch.feedback.stderr
    assert batch.rows["right"]["status"] == "graded" and batch.score("right") == MAX_SCORE
    assert batch.score("wrong_sqrt") == MAX_SCORE - POINTS["test_sqrt"]
    assert batch.score("wrong_cube") == MAX_SCORE - POINTS["test_cube_forward"] - POINTS["test_cube_backward"]
    # Every student's grades.csv score is what the gradebook holds.
    for student, grades in batch.scores.items():
        assert sum(v or 0 for v in grades.values()) == batch.score(student), student


def test_every_student_gets_a_feedback_page(batch):
    pages = {p.parts[-3] for p in (batch.course.grading / "feedback").glob(f"*/{ASSIGNMENT}/{ASSIGNMENT}.html")}
    assert pages == set(batch.rows)


# --------------------------------------------------------------------------------------------
# Runaway code


def test_an_infinite_loop_scores_0_for_its_exercise_only(batch):
    # A solution cell that never finishes: Sqrt is never defined; the other exercises still count.
    assert_row(batch, "loop_in_solution", MAX_SCORE - POINTS["test_sqrt"], "timed out", "cell 'sqrt'")
    assert "timed out after 2 s" in outputs_of(autograded(batch.course, "loop_in_solution"), "sqrt")
    assert "timed out after 2 s" in batch.page("loop_in_solution")
    # A backward that loops: only its test fails, later tests run.
    assert_row(batch, "loop_in_backward", MAX_SCORE - POINTS["test_cube_backward"], "timed out",
               "cell 'test_cube_backward'")
    nb = autograded(batch.course, "loop_in_backward")
    assert "timed out after 2 s" in outputs_of(nb, "test_cube_backward")
    assert "Net passes" in outputs_of(nb, "test_net")


def test_a_memory_bomb_scores_0_for_its_exercise_only(batch):
    assert_row(batch, "memory_bomb", MAX_SCORE - POINTS["test_sqrt"], "ran out of memory", "cell 'test_sqrt'")
    assert "ran out of memory (a notebook may use 1 GB)" in outputs_of(autograded(batch.course, "memory_bomb"),
                                                                      "test_sqrt")
    assert "ran out of memory" in batch.page("memory_bomb")


def test_huge_output_is_cut_and_costs_nothing(batch):
    for student in ("print_flood", "display_flood"):
        assert_row(batch, student, MAX_SCORE, "graded")
        notebook = batch.course.grading / "autograded" / student / ASSIGNMENT / NOTEBOOK
        assert notebook.stat().st_size < 3 * 1024**2, student
    assert "output truncated" in outputs_of(autograded(batch.course, "print_flood"), "sqrt")
    flooded = autograded(batch.course, "display_flood")
    assert "output left out" in json.dumps(next(c for c in flooded["cells"] if c.get("id") == "after-sqrt")["outputs"])


# --------------------------------------------------------------------------------------------
# Crashes


def test_a_dead_kernel_gets_a_row_and_feedback_saying_where(batch):
    before_poly = POINTS["test_cube_forward"] + POINTS["test_cube_backward"] + POINTS["test_sqrt"]
    assert_row(batch, "os_exit", before_poly, "kernel died", "cell 'poly_function'", "exited with status 1")
    # Its answer cell imports ctypes: the grader's examinee does not run it, so even Cube's forward scores 0.
    assert_row(batch, "segfault", 0, "kernel died", "cell 'test_cube_backward'", "SIGSEGV")
    assert_row(batch, "breaks_the_grader", before_poly, "kernel died", "cell 'poly_function'",
               "the grading process failed: ZeroDivisionError")
    for student, where in [("os_exit", "the kernel died while running this cell"),
                           ("segfault", "the kernel died while running this cell"),
                           ("breaks_the_grader", "the grading process failed")]:
        page = batch.page(student)
        assert where in page and "not run: grading of this notebook stopped" in page, student
        assert (batch.course.grading / "autograded" / student / ASSIGNMENT / NOTEBOOK).exists()


def test_exit_and_keyboard_interrupt_are_errors_in_their_cell(batch):
    for student in ("sys_exit", "exit_call"):
        assert_row(batch, student, MAX_SCORE, "graded")
    assert "SystemExit" in outputs_of(autograded(batch.course, "sys_exit"), "sqrt")
    assert_row(batch, "keyboard_interrupt", MAX_SCORE - POINTS["test_cube_backward"], "graded")
    assert "KeyboardInterrupt" in outputs_of(autograded(batch.course, "keyboard_interrupt"), "test_cube_backward")


# --------------------------------------------------------------------------------------------
# Ordinary errors


def test_ordinary_errors_fail_their_exercise_with_the_error(batch):
    for student, error in [("syntax_error", "SyntaxError"), ("name_error", "NameError"),
                           ("not_implemented", "NotImplementedError")]:
        assert_row(batch, student, MAX_SCORE - POINTS["test_sqrt"], "graded")
        assert error in batch.page(student), student
    # Left as released: one line on the feedback page, the same `check` prints; the grader's own check,
    # which meets the same NotImplementedError, adds nothing.
    shown = json.loads(outputs_of(autograded(batch.course, "not_implemented"), "test_sqrt"))
    assert [(o["ename"], o["evalue"], o["traceback"]) for o in shown if o["output_type"] == "error"] == [
        ("NotImplementedError", NOT_DONE, [f"NotImplementedError: {NOT_DONE}"])]
    assert "NotImplementedError: not done yet (replace" in batch.page("not_implemented")
    # nbgrader's own "No response." comment on that answer is not on the page, nor in its contents list.
    assert "No response." not in batch.page("not_implemented") and 'href="#comment-' not in batch.page("not_implemented")


def test_warnings_and_stderr_text_never_cost_marks(batch):
    assert_row(batch, "warnings", MAX_SCORE, "graded")
    shown = outputs_of(autograded(batch.course, "warnings"), "test_cube_backward")
    assert "UserWarning: float32 is imprecise" in shown and "debugging" in shown


# --------------------------------------------------------------------------------------------
# Edited notebooks: the tests come back from the gradebook, the maximum never drops


def test_edited_deleted_or_unmarked_tests_are_restored(batch):
    wrong = batch.score("wrong_sqrt")
    assert_row(batch, "edited_test_wrong", wrong, "graded")
    assert_row(batch, "unmarked_test_wrong", wrong, "graded")
    assert_row(batch, "deleted_test", MAX_SCORE, "graded")
    assert_row(batch, "deleted_all_tests", MAX_SCORE, "graded")
    nb = autograded(batch.course, "deleted_all_tests")
    assert sorted(nbgrader_meta(c)["grade_id"] for c in nb["cells"] if nbgrader_meta(c).get("grade")) == sorted(POINTS)
    assert "the grader put it back" in batch.page("deleted_all_tests")
    for student in ("edited_test_wrong", "unmarked_test_wrong", "deleted_test"):
        assert batch.scores[student]["test_sqrt"] == (POINTS["test_sqrt"] if student == "deleted_test" else 0)


def test_duplicated_moved_renamed_and_repointed_tests_change_nothing(batch):
    for student in ("duplicated_test", "moved_test", "renamed_grade_ids", "broken_metadata", "cells_without_ids",
                    "marker_in_answer"):
        assert_row(batch, student, MAX_SCORE, "graded")
    assert_row(batch, "changed_points_wrong", batch.score("wrong_sqrt"), "graded")
    assert batch.scores["changed_points_wrong"]["test_cube_forward"] == POINTS["test_cube_forward"]


# --------------------------------------------------------------------------------------------
# Tampering


@pytest.mark.parametrize("student", [*TAMPERING, "tamper_in_backward"])
def test_tampering_never_scores_more_and_is_reported(batch, student):
    untampered = UNTAMPERED[TAMPERING[student][0] if student in TAMPERING else "cube"]
    assert batch.score(untampered) == MAX_SCORE - (3 if untampered == "wrong_cube" else POINTS["test_sqrt"])
    assert batch.score(student) <= batch.score(untampered), batch.rows[student]
    assert batch.rows[student]["status"] == "tampering found", batch.rows[student]
    assert "tampering found:" in batch.page(student) and "(restored)" in batch.page(student)


def test_tampering_in_a_test_fails_that_test(batch):
    """Tampering that happens while a test runs makes that test fail, whatever the answer."""
    nb = autograded(batch.course, "tamper_in_backward")
    assert "autograder.student.checker.core._allclose" in outputs_of(nb, "test_cube_backward")
    assert batch.scores["tamper_in_backward"]["test_cube_backward"] == 0


def test_no_tampering_is_reported_for_honest_students(batch):
    honest = [s for s in batch.rows if not s.startswith("tamper")]
    flagged = [s for s in honest if batch.rows[s]["status"] == "tampering found"
               or ((batch.course.grading / "autograded" / s / ASSIGNMENT / NOTEBOOK).exists()
                   and "TamperingFound" in json.dumps(autograded(batch.course, s)))]
    assert not flagged


def test_code_that_rewrites_or_deletes_its_notebook_file_changes_nothing(batch):
    """Scores come from the notebook as handed in and run, not from the file student code left behind."""
    assert_row(batch, "forges_its_notebook", batch.score("wrong_cube"), "graded")
    assert_row(batch, "overwrites_its_notebook", MAX_SCORE, "graded")
    assert_row(batch, "deletes_its_folder", MAX_SCORE, "graded")


# --------------------------------------------------------------------------------------------
# Malformed files


def test_malformed_files_get_a_clear_status_each(batch):
    cases = {
        "invalid_json": "not valid JSON",
        "empty_file": "the file is empty",
        "not_utf8": "not UTF-8",
        "json_not_a_notebook": "JSON but not a notebook",
        "too_big": "notebooks over 50 MB are not graded",
        "wrong_file_name": f"{NOTEBOOK} is missing from the submission",
        "no_notebook": f"{NOTEBOOK} is missing from the submission",
    }
    for student, detail in cases.items():
        assert_row(batch, student, 0.0, "invalid notebook", detail)
        assert "could not be graded" in batch.page(student), student
    assert_row(batch, "nbformat_3", MAX_SCORE, "graded")
    assert_row(batch, "extra_notebook", MAX_SCORE, "graded")


# --------------------------------------------------------------------------------------------
# Hidden tests


def test_hidden_tests_never_appear_in_feedback_or_outputs(batch):
    hidden = hidden_lines(batch.course)
    assert len(hidden) > 10
    for student in batch.rows:
        leaked = [line for line in hidden if line in batch.page(student)]
        assert not leaked, f"{student}'s feedback shows hidden test lines: {leaked[:2]}"
    # The student whose backward printed its own test cell sees the visible part only: the referee decides
    # that cell, so its hidden tests were never in the student's process (not even to be filtered out).
    nb = autograded(batch.course, "leak_hidden_tests")
    shown = outputs_of(nb, "test_cube_backward") + json.dumps(nb["cells"][-1]["outputs"])
    assert "Cube.apply(x).sum().backward()" in shown and "<hidden test line>" not in shown
    assert not [line for line in hidden if line in shown]
    assert "HIDDEN TESTS" not in json.dumps([cell.get("outputs", []) for cell in nb["cells"]])


# --------------------------------------------------------------------------------------------
# Interruption and concurrent runs


def small_class(root: Path) -> tuple[Course, dict[str, float]]:
    """Eight students whose notebooks each take about a second (a sleep); student -> expected score.

    Eight, so that on a loaded machine (make test runs two test files at once) a run is still grading
    when the test, having seen the first markers, interrupts it."""
    course = _course(root)
    notebooks = Notebooks(course.root)
    slow = "import time\ntime.sleep(0.6)\n"
    subs = {f"s{i}": notebooks.answers(cube=slow + notebooks.right["cube"],
                                       **({"sqrt": notebooks.edit("sqrt", *WRONG_SQRT)} if i % 2 else {}))
            for i in range(8)}
    write_submissions(course, subs)
    return course, {s: MAX_SCORE - (POINTS["test_sqrt"] if int(s[1]) % 2 else 0) for s in subs}


def markers(course: Course) -> dict[str, int]:
    """student -> modification time of the marker saying their grading finished."""
    found = (course.grading / "autograded").glob(f"*/{ASSIGNMENT}/.autograder.json")
    return {p.parts[-3]: p.stat().st_mtime_ns for p in found}


def start_grading(course: Course) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--jobs", "1", *LIMITS],
                            cwd=course.root, env=course.environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            # A pytest-xdist worker ignores SIGINT, and an ignored signal stays ignored
                            # across exec: give the run Ctrl-C back, as a terminal would
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def interrupt_after(course: Course, run: subprocess.Popen, finished: int, how: signal.Signals) -> tuple[dict, str]:
    """Send ``how`` to the run's process group once ``finished`` students have markers; wait for it.

    Returns the markers then, and what the run wrote to stderr."""
    deadline = time.monotonic() + 120
    while len(markers(course)) < finished and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.poll() is None, "the run finished before it could be interrupted"
    os.killpg(run.pid, how)
    _, stderr = run.communicate(timeout=60)
    return markers(course), stderr


def test_interrupted_killed_and_simultaneous_runs_lose_nothing(tmp_path):
    course, expected = small_class(tmp_path)

    # Ctrl-C (SIGINT to the whole process group) once two students are graded.
    run = start_grading(course)
    after_sigint, stderr = interrupt_after(course, run, 2, signal.SIGINT)
    assert run.returncode == 130 and "interrupted" in stderr, stderr
    assert 2 <= len(after_sigint) < len(expected)

    # kill -9 of everything once one more is graded: the finished ones were not graded again.
    run = start_grading(course)
    after_sigkill, _ = interrupt_after(course, run, len(after_sigint) + 1, signal.SIGKILL)
    assert run.returncode == -signal.SIGKILL
    assert len(expected) > len(after_sigkill) > len(after_sigint)
    assert {s: after_sigkill[s] for s in after_sigint} == after_sigint, "finished students are not graded again"

    # Two runs at once finish the job: one waits for the other, and both report the same grades.
    first, second = start_grading(course), start_grading(course)
    outputs = [run.communicate(timeout=300) for run in (first, second)]
    assert (first.returncode, second.returncode) == (0, 0), outputs
    assert any("another grading run is in progress" in err for _, err in outputs)
    assert outputs[0][0] == outputs[1][0], "both runs print the same grades"
    assert {s: float(r["score"]) for s, r in grades_csv(course).items()} == expected
    assert {s: sum(g.values()) for s, g in gradebook_scores(course).items()} == expected
    done = markers(course)
    assert {s: done[s] for s in after_sigkill} == after_sigkill, "finished students are not graded again"
    assert not any((course.grading / ".staging").glob(f"*/{ASSIGNMENT}")), "no half-graded leftovers"
    with sqlite3.connect(course.grading / "gradebook.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


# --------------------------------------------------------------------------------------------
# The tamper guard in nbgrader's own kernels (autograde, and the Validate button)


def test_plain_nbgrader_autograde_also_restores_and_reports_tampering(tmp_path):
    """nbgrader alone gives full marks to a wrong answer that replaces torch.allclose and gradcheck;
    its kernels load autograder.grading.running.kernel, whose guard undoes that."""
    course = _course(tmp_path)
    notebooks = Notebooks(course.root)
    wrong_cube = notebooks.edit("cube", *WRONG_CUBE["forward"],
                                base={"cube": notebooks.edit("cube", *WRONG_CUBE["backward"])})
    write_submissions(course, {"tamper": notebooks.answers(
        cube=wrong_cube + "\n\n" + TAMPERING["tamper_torch"][1],
        sqrt=notebooks.edit("sqrt", *FORGOT_GRAD_OUTPUT) + "\n\n" + TAMPERING["tamper_checker"][1])})
    course.nbgrader("generate_assignment", ASSIGNMENT, "--force", "--log-level=ERROR",
                    f"--CourseDirectory.release_directory={tmp_path / 'scratch'}")
    course.nbgrader("autograde", ASSIGNMENT, "--log-level=ERROR")
    # The same wrong answers untampered score 11 - 3 (Cube) - 3 (Sqrt) (see the batch's wrong_cube and
    # forgot_grad_output); with torch and the checker faked they would score 11.
    scores = {s: sum(g.values()) for s, g in gradebook_scores(course).items()}
    assert scores["tamper"] <= MAX_SCORE - 3 - POINTS["test_sqrt"], scores
    tampered = (course.grading / "autograded" / "tamper" / ASSIGNMENT / NOTEBOOK).read_text(encoding="utf-8")
    assert "tampering found: " in tampered and "torch.allclose" in tampered
