"""The executor's verdict on a cell does not depend on IPython managing to show the error."""

from autograder.grading.running.confinement.limits import Limits
from autograder.grading.running.executor import execute


def _code(source: str) -> dict:
    return {"cell_type": "code", "source": source}


def test_a_failing_cell_fails_even_when_its_traceback_cannot_be_shown(tmp_path):
    # Student code breaks IPython's traceback formatter. IPython then prints a fallback text and
    # records no error, which nbgrader would score as a passing test. (Seen for real: a cell time
    # limit striking inside the slow formatting of a traceback on a loaded machine.)
    cells = [_code("get_ipython().InteractiveTB.structured_traceback = lambda *a, **k: 1 / 0\n"),
             _code("assert False, 'the test failed'\n"),
             _code("print('still running')\n")]
    result = execute(cells, str(tmp_path), Limits(cell_timeout=30))
    errors = [o for o in result.outputs[1] if o["output_type"] == "error"]
    assert [(e["ename"], e["evalue"]) for e in errors] == [("AssertionError", "the test failed")]
    assert result.outputs[2] == [{"output_type": "stream", "name": "stdout", "text": "still running\n"}]


def test_a_passing_cell_gets_no_error(tmp_path):
    result = execute([_code("x = 1\nassert x == 1\n")], str(tmp_path), Limits(cell_timeout=30))
    assert result.outputs[0] == [] and result.status == "graded"


def test_cells_that_never_ran_never_count_as_passed(tmp_path):
    # The notebook's process dies before its first cell (here: its working folder is gone, so no sandbox can be
    # made; it used to be a program read from stdin, which the forkserver could not re-import as the main module,
    # until the warm process stopped taking the grader's main module). Every cell must then fail as "not run",
    # not pass for want of an error.
    cells = [{"cell_type": "code", "source": "assert False"}, {"cell_type": "code", "source": "x = 1"}]
    result = execute(cells, str(tmp_path / "gone"), Limits(cell_timeout=30))
    verdict = {"status": result.status, "errors": {str(i): [o.get("ename") for o in outs]
                                                   for i, outs in result.outputs.items()}}
    assert verdict == {"status": "kernel died", "errors": {"0": ["NotRunError"], "1": ["NotRunError"]}}, result
