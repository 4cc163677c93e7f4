"""IPython extension loaded into every kernel nbgrader starts (see ``nbgrader_config.py``).

nbgrader scores a test cell 0 when it wrote anything to stderr, and torch prints harmless
warnings there. A warning is never the student's fault, so in grading kernels warnings are
printed to stdout instead: still visible in the feedback, never costing marks.

It also installs the tamper guard (``autograder.grading.running.tamper``) before the first cell runs, so
student code that replaces ``torch.allclose``, the checker or the names the tests use is
undone after every cell and reported in it.

Triton kernels (assignment 10) run in Triton's interpreter there, as in the grader.

And an exercise not done yet (its ``raise NotImplementedError()`` still there) is said in one line,
as ``check`` says it, instead of a traceback through torch's own code (JupyterLab's Validate button
shows these kernels' errors).
"""

import sys
import warnings


def _show_on_stdout(message, category, filename, lineno, file=None, line=None):
    sys.stdout.write(warnings.formatwarning(message, category, filename, lineno, line))


NOT_DONE = "not done yet (replace `raise NotImplementedError()` with your code)"


def _not_done_yet(shell, etype, value, tb, tb_offset=None):
    """A bare NotImplementedError is an exercise left as released: one line; any other keeps its traceback.
    (IPython shows nothing for a custom exception itself: the handler does.)"""
    if str(value):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    else:
        shell._showtraceback(etype, value, [f"NotImplementedError: {NOT_DONE}"])


def load_ipython_extension(ipython, guard=None):
    """Set up a grading kernel; return its tamper guard (the grader keeps it, and may pass one made earlier)."""
    import os

    from autograder.grading.running import tamper

    # Assignment 10: kernels nbgrader starts (validate, autograde) run Triton kernels in Triton's
    # interpreter, as the grader does, GPU or not (set before a cell imports triton).
    os.environ["TRITON_INTERPRET"] = "1"

    warnings.showwarning = _show_on_stdout
    ipython.set_custom_exc((NotImplementedError,), _not_done_yet)
    return tamper.install(ipython, guard)
