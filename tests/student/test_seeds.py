"""A test cell run in JupyterLab draws the inputs the grader draws (autograder.student.seeds; issue 45, item 6).

A real IPython kernel (ipykernel, as JupyterLab starts it) gets execute requests as JupyterLab sends them, with
the cell's id in the request's metadata (``cellId``). Once the notebook has imported the course's library, a test
cell (its id is its grade id, ``test_...``) starts from its seed, as in the grader's processes; other cells draw on.
The test cells of the released notebooks are the cells whose ids say so.
"""

from __future__ import annotations

import json
import queue

import pytest
import torch
from jupyter_client.manager import start_new_kernel

from autograder.student import seeds
from conftest import REPO, nbgrader_meta

DRAW = "import torch\nprint(torch.randn(4).tolist())"


def _run(client, code: str, cell_id: str | None = None) -> str:
    """Run ``code`` as JupyterLab runs a cell (its id in the request's metadata); what it printed."""
    message = client.session.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                                     "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
                                 metadata={"cellId": cell_id} if cell_id else {})
    client.shell_channel.send(message)
    printed = []
    while True:
        try:
            reply = client.get_iopub_msg(timeout=120)
        except queue.Empty:
            pytest.fail(f"the kernel did not finish {code!r}")
        if reply["parent_header"].get("msg_id") != message["header"]["msg_id"]:
            continue
        if reply["msg_type"] == "stream":
            printed.append(reply["content"]["text"])
        elif reply["msg_type"] == "error":
            pytest.fail("\n".join(reply["content"]["traceback"]))
        elif reply["msg_type"] == "status" and reply["content"]["execution_state"] == "idle":
            return "".join(printed)


@pytest.fixture(scope="module")
def kernel():
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_a_test_cell_in_a_notebooks_kernel_draws_what_the_grader_draws(kernel):
    seeds.seed_test("test_cube_backward")
    graders = str(torch.randn(4).tolist())
    before = _run(kernel, DRAW, "test_cube_backward")
    assert before.strip() != graders  # the library is not imported yet: nothing seeds the cell
    _run(kernel, "from autograder import check_function")
    assert _run(kernel, DRAW, "test_cube_backward").strip() == graders
    assert _run(kernel, DRAW, "test_cube_backward").strip() == graders  # run again: the same inputs
    assert _run(kernel, DRAW, "cube").strip() != graders  # an answer or demo cell draws on, unseeded


def test_every_test_cells_id_is_its_grade_id_and_no_other_cell_looks_like_a_test():
    for folder in ("solutions", "course"):
        for path in sorted((REPO / folder).glob("*/*.ipynb")):
            for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
                meta = nbgrader_meta(cell)
                is_test = bool(meta.get("grade")) and not meta.get("solution") and cell["cell_type"] == "code"
                assert cell.get("id", "").startswith(seeds.TEST_PREFIX) == is_test, (path.name, cell.get("id"))
                if is_test:
                    assert cell["id"] == meta["grade_id"], (path.name, cell["id"])
