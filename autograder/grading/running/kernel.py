"""IPython extension loaded into every kernel nbgrader starts (see ``nbgrader_config.py``).

nbgrader scores a test cell 0 when it wrote anything to stderr, and torch prints harmless
warnings there. A warning is never the student's fault, so in grading kernels warnings are
printed to stdout instead: still visible in the feedback, never costing marks.

It also installs the tamper guard (``autograder.grading.running.judging.tamper``) before the first cell runs, so
student code that replaces ``torch.allclose``, the checker or the names the tests use is
undone after every cell and reported in it.

Triton kernels (assignment 10) run in Triton's interpreter there, as in the grader.

And an exercise not done yet (its ``raise NotImplementedError()`` still there) is said in one line,
as ``check`` and the feedback page say it, instead of a traceback through torch's own code
(JupyterLab's Validate button shows these kernels' errors; the grader's own shell,
``autograder.grading.running.warm``, loads this extension too).
"""

import sys
import warnings


def _show_on_stdout(message, category, filename, lineno, file=None, line=None):
    sys.stdout.write(warnings.formatwarning(message, category, filename, lineno, line))


def _not_done_yet(shell, etype, value, tb, tb_offset=None):
    """An exercise left as released is one line (``messages.show_error``, which student notebooks use too)."""
    from autograder.student.checker.messages import show_error  # (torch: loaded with the kernel's guard)

    show_error(shell, etype, value, tb, tb_offset)


def load_ipython_extension(ipython, guard=None):
    """Set up a grading kernel; return its tamper guard (the grader keeps it, and may pass one made earlier)."""
    import os

    from autograder.grading.running.judging import tamper

    # Assignment 10: kernels nbgrader starts (validate, autograde) run Triton kernels in Triton's
    # interpreter, as the grader does, GPU or not (set before a cell imports triton).
    os.environ["TRITON_INTERPRET"] = "1"

    warnings.showwarning = _show_on_stdout
    ipython.set_custom_exc((Exception,), _not_done_yet)
    return tamper.install(ipython, guard)
