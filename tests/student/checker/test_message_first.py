"""A failing check shows its explanation first, without the checker's frames; an exercise left as released
says "not done yet" however it is reached (issue 40). Checked as IPython renders it, in a real kernel."""

from __future__ import annotations

import re

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from autograder import check_function
from autograder.student.checker.messages import NOT_DONE, not_done
from checker_examples import cube, CubeSignFlipped

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_a_failure_renders_its_message_first_then_the_tests_line():
    with pytest.raises(AssertionError) as info:
        check_function(CubeSignFlipped, cube, torch.randn(4))
    assert type(info.value).__name__ == "AssertionError"
    (rendered,) = info.value._render_traceback_()
    assert rendered.startswith("AssertionError: CubeSignFlipped does not match torch")
    assert rendered.index("sign is flipped") < rendered.index("(raised by")
    assert "check_function(CubeSignFlipped, cube, torch.randn(4))" in rendered.splitlines()[-1]
    assert "autograder" not in rendered.splitlines()[-1], "no frame of the checker's own"


def test_an_error_caused_by_an_unfinished_exercise_is_not_done():
    def unfinished():
        raise NotImplementedError()

    try:
        try:
            unfinished()
        except NotImplementedError as error:
            raise RuntimeError("opcheck(op, ...): test_schema failed with (scroll up for stack trace)") from error
    except RuntimeError as wrapped:
        assert not_done(wrapped)
    assert not not_done(NotImplementedError("torch has no kernel for this"))


NOTEBOOK = [
    """import torch
from autograder import check_function

class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return -3 * x ** 2 * grad_output

class Unfinished(Cube):
    @staticmethod
    def backward(ctx, grad_output):
        raise NotImplementedError()

@torch.library.custom_op("message_first::unfinished", mutates_args=())
def unfinished(x: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError()""",
    "check_function(Cube, lambda x: x ** 3, torch.randn(3, 4))",
    "check_function(Unfinished, lambda x: x ** 3, torch.randn(3, 4))",
    "Unfinished.apply(torch.randn(3, requires_grad=True)).sum().backward()",
    "torch.library.opcheck(unfinished, (torch.randn(3),))",
]


def test_in_a_real_kernel_the_message_leads_and_not_done_is_said_everywhere(tmp_path):
    """A student's own kernel (no extension loaded: the course's import installs the handler)."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK])
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True).execute(cwd=str(tmp_path))
    errors = [[o for o in cell.outputs if o.output_type == "error"] for cell in notebook.cells]
    assert errors[0] == []
    shown = [ANSI.sub("", "\n".join(cell_errors[0].traceback)) for cell_errors in errors[1:]]
    assert shown[0].startswith("AssertionError: Cube does not match torch") and "sign is flipped" in shown[0]
    assert "(raised by Cell In[2], line 1: check_function(Cube" in shown[0]
    assert "site-packages" not in shown[0] and "checker" not in shown[0].split("(raised by")[1]
    for text in shown[1:]:
        assert text.startswith(f"NotImplementedError: {NOT_DONE}"), text[:300]
