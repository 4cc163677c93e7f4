"""The student's library: what a course notebook imports.

- ``checker``: ``check_function`` compares a custom ``torch.autograd.Function`` with torch's own
  gradients and explains a mistake in course terms (every assignment's tests call it);
  ``check_forward`` checks forward alone, ``check_callable`` a function or an ``nn.Module`` class,
  ``check_built_on`` that one follows the Functions it is built on,
  ``check_saved`` what a Function keeps for backward, ``requires`` what an exercise requires beyond values,
  ``check_kernel`` a function that launches Triton
  kernels and ``check_custom_op`` a custom operator (``opcheck``, in course words; assignment 10);
- ``graph``: ``draw_graph`` pictures the backward graph autograd records;
- ``timing``: assignment 07's timing helpers, workloads and plots; ``records``: the recordings it reads;
- ``kernels``: Triton's interpreter on a CPU, with every memory access of a kernel checked (assignment 10).

Nothing here imports from ``autograder.authoring`` or ``autograder.grading``: a student's
notebook needs neither the course's sources nor the grader.

Imported in a notebook whose kernel has no error handler of its own, it makes an exercise left as
released say "not done yet" in one line however it is reached (``checker.messages.show_error``), as
the grader's kernels and JupyterLab's Validate say it. Imported in a notebook's kernel, it also seeds
each test cell before it runs, as the grader does (``seeds``): a test draws the inputs the grader draws.
"""

import sys

from autograder.student.checker import (
    check_built_on, check_callable, check_custom_op, check_device, check_forward, check_function, check_kernel, check_saved, check_values,
    check_with, requires,
)
from autograder.student.checker.messages import show_error
from autograder.student.graph import draw_graph
from autograder.student.seeds import seed_test_cells


def _set_up_notebooks() -> None:
    """In an IPython kernel (a notebook): errors go through ``show_error`` where it has no error handler of its own,
    and each test cell is seeded before it runs (``seeds``)."""
    ipython = sys.modules.get("IPython")  # (None where an import of it was blocked, as on a bare GPU machine)
    if ipython is None:
        return
    shell = ipython.get_ipython()
    if shell is None:
        return
    if not shell.custom_exceptions:
        shell.set_custom_exc((Exception,), show_error)
    seed_test_cells(shell)


_set_up_notebooks()

__all__ = ["check_built_on", "check_callable", "check_custom_op", "check_device", "check_forward", "check_function", "check_kernel",
           "check_saved", "check_values", "check_with", "draw_graph", "requires"]
