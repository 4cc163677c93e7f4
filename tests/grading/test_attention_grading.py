"""Assignment 11 graded end to end: a mistake that only the hidden tests meet is named by the grader's examinee.

The notebook's process runs 11's attention cells with the visible part of ``test_attention_backward`` (Exercise 5) left
out; the examinee (a sandboxed process of its own, which runs the given cells tagged ``setup`` whole: Triton's
interpreter, the memory guard) answers the referee's ``check_attention_backward``, whose watched launches show two
programs of the query kernel writing the same element of dq: the mistake typed in stores every head's rows of dq at
the first head's. That message is what ``check`` prints and the feedback page shows.
"""

from __future__ import annotations

import json

import pytest

from autograder.authoring.attention_timings import NOTEBOOK
from autograder.grading.running.confinement.limits import Limits
from autograder.grading.running.executor import execute
from autograder.grading.running.judging import referee
from autograder.grading.running.judging.referee_process import stop_referee
from autograder.grading.running.preparation import cells_to_run

pytest.importorskip("triton")

KEPT = ("setup", "tiles", "attention-references", "attention_forward", "attention_backward",
        "test_attention_backward")  # the cells this test needs, by id (the others only cost time)
STORE = "tl.store(dq_ptr + offsets, (dq * scale)"


@pytest.fixture(autouse=True, scope="module")
def _no_referee_left():
    yield
    stop_referee()


def _notebook() -> dict:
    notebook = json.loads(NOTEBOOK.read_text())
    notebook["cells"] = [c for c in notebook["cells"] if c.get("id") in KEPT]
    return notebook


@pytest.mark.slow
def test_a_query_gradient_race_is_named_by_the_examinee(tmp_path):
    handed_in = _notebook()
    for cell in handed_in["cells"]:
        source = "".join(cell["source"])
        if cell.get("id") == "attention_backward":
            assert STORE in source
            source = source.replace(STORE, STORE.replace("dq_ptr + offsets", "dq_ptr + offsets - head * HEAD_DIM"))
        elif cell.get("id") == "test_attention_backward":  # its visible part left out of the student's run
            source = "".join(source.partition(referee.HIDDEN_BEGIN)[1:])
        cell["source"] = source
    cells = cells_to_run(handed_in)
    result = execute(cells, str(tmp_path), Limits(cell_timeout=60), {}, referee.trusted_cells(_notebook()))
    index = next(i for i, c in enumerate(cells) if c.get("grade_id") == "test_attention_backward")
    errors = [o["evalue"] for o in result.outputs[index] if o["output_type"] == "error"]
    assert len(errors) == 1, errors
    assert "two programs of attention_backward_q_kernel write element" in errors[0] and "`dq_ptr`" in errors[0], errors
    assert "found by the grader's own check" in errors[0], errors
