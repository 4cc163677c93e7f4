"""The same notebook gets the same score on every grading (issue 45, item 6).

Each test cell draws its inputs from its own seed (autograder.student.seeds), in the referee, the notebook's
process and the examinee. Here one notebook is graded 20 times in ONE `grade` run (20 students handing in the same
file: 10 right, 10 with a wrong Cube, whose messages quote values drawn from the seeds), and every copy gets the
same score and the same messages; and the referee asks every test cell of every assignment the same questions in
two processes whose string hashes differ (Python's set order does), so what holds in one run holds in the next.
Cost (2026-12-02): the 20 gradings, 16.3 s of CPU in all of grade's processes (28 s of wall-clock time at load 4);
planning every test cell of the course, 5.6 s of CPU a process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_robustness import (ASSIGNMENT, MAX_SCORE, Notebooks, _course, autograded, autograder, grades_csv,
                             write_submissions)
from conftest import REPO, nbgrader_meta

pytestmark = pytest.mark.slow

COPIES = 10


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = _course(tmp_path_factory.mktemp("same-score"))
    nb = Notebooks(course.root)
    # Right at the visible test's positive inputs, wrong for negative ones: only the hidden checks, drawn from the
    # test's seed, find it, and their message quotes the values they drew.
    wrong = nb.answers(cube=nb.edit("cube", "return grad_output * 3 * x ** 2", "return grad_output * 3 * x * x.abs()"))
    write_submissions(course, {**{f"right{i:02d}": nb.answers() for i in range(COPIES)},
                               **{f"wrong{i:02d}": wrong for i in range(COPIES)}})
    run = autograder(course, "grade", ASSIGNMENT, "--jobs", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    return course, grades_csv(course)


def _test_outputs(course, student: str) -> dict[str, str]:
    """Each test cell's outputs, as text."""
    return {nbgrader_meta(c)["grade_id"]: json.dumps(c.get("outputs", [])) for c in autograded(course, student)["cells"]
            if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")}


@pytest.mark.parametrize("kind", ["right", "wrong"])
def test_twenty_gradings_of_one_notebook_give_one_score_and_the_same_messages(graded, kind):
    course, rows = graded
    copies = [f"{kind}{i:02d}" for i in range(COPIES)]
    assert {(rows[s]["score"], rows[s]["status"], rows[s]["detail"]) for s in copies} == \
        {(f"{MAX_SCORE - 2 if kind == 'wrong' else MAX_SCORE:g}", "graded", "")}
    outputs = [_test_outputs(course, student) for student in copies]
    assert all(o == outputs[0] for o in outputs[1:])
    if kind == "wrong":  # its message quotes the values it got, drawn from the test's seed, and says the seed
        assert "the gradient for `x` is wrong" in outputs[0]["test_cube_backward"]
        assert "the test's inputs come from seed" in outputs[0]["test_cube_backward"]


PLANNED = """
import hashlib, json, sys
from pathlib import Path
from autograder.grading.running.judging import referee


def digests(folder):
    found = {}
    for path in sorted(Path(folder).glob("*/*.ipynb")):
        trusted = referee.trusted_cells(json.loads(path.read_text()))
        judge = referee.Referee(trusted["cells"], trusted["student_names"], None)
        judge.plan()
        asked = {grade_id: [request for request, _ in plan.pending] for grade_id, plan in judge.plans.items()}
        found[path.stem] = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()
    return found
"""


def test_the_referee_asks_the_same_questions_in_every_process():
    """Every request of every test cell (its inputs, upstream gradients, seeds): the same here and in a process whose
    string hashes, and so the order of Python's sets, differ from this one's (PYTHONHASHSEED)."""
    namespace: dict = {}
    exec(PLANNED, namespace)
    here = namespace["digests"](REPO / "solutions")
    there = subprocess.run([sys.executable, "-c", PLANNED + "\nprint(json.dumps(digests(sys.argv[1])))",
                            str(REPO / "solutions")], capture_output=True, text=True, timeout=600, cwd=REPO,
                           env={"PYTHONHASHSEED": "12345", "TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"})
    assert there.returncode == 0, there.stderr[-3000:]
    assert json.loads(there.stdout.strip().splitlines()[-1]) == here
    assert len(here) == 11 and len(set(here.values())) == 11


def test_a_failing_test_says_its_seed_where_it_drew_random_inputs(tmp_path):
    """In the notebook's process: a test cell starts from its seed; an error of one that drew random numbers names
    the seed, one that drew none says nothing of it (nothing to draw again)."""
    from autograder.grading.running.confinement.limits import Limits
    from autograder.grading.running.executor import execute
    from autograder.student.seeds import seed_of

    cells = [{"cell_type": "code", "source": "import torch"},
             {"cell_type": "code", "grade_id": "test_drew", "source": "x = torch.randn(2)\nprint(x.tolist())\nassert False, 'no'"},
             {"cell_type": "code", "grade_id": "test_did_not", "source": "assert False, 'no'"}]
    result = execute(cells, str(tmp_path), Limits(cell_timeout=30))
    import torch

    torch.manual_seed(seed_of("test_drew"))
    assert result.outputs[1][0]["text"] == f"{torch.randn(2).tolist()}\n"
    seed = seed_of("test_drew")
    assert result.outputs[1][1]["traceback"][-1].endswith(f"AssertionError: no [the test's inputs come from seed {seed}: "
                                                          f"torch.manual_seed({seed}) at the top of the test cell draws "
                                                          "them again]")
    assert result.outputs[2][0]["traceback"][-1].endswith("AssertionError: no")
