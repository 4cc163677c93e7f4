"""Non-contiguous inputs: a check run again on a slice and on a transposed view of the same values.

The checks hand student code fresh contiguous copies, on which a stride mistake never shows: a
kernel that steps from row to row by the row length (``row * n_columns``) instead of the row stride,
code that reads raw memory (``data_ptr``, a Triton kernel, ``.view``) without ``.contiguous()``.
Once the ordinary checks pass, ``check_function``, ``check_forward`` and ``check_callable`` run
forward (and backward) again with every input of two or more dimensions laid out as a slice, then
as a transposed view (``references.laid_out``), and then with the upstream gradients laid out so;
``check_kernel`` does the same for its arguments. The values are the same, so the answers must be.
The first layout that changes an answer is reported, named as a stride mistake (``stride_problem``).
"""

from __future__ import annotations

from dataclasses import replace

from autograder.student.checker.core import _compare_outputs, _expected_gradients, _gradients_of, _upstream
from autograder.student.checker.messages import _run_reference, _run_student, wrong_gradient
from autograder.student.checker.references import (
    LAYOUTS, SLICE, TRANSPOSED, _as_tuple, _close, _Report, _StudentError, _Tensor, _zeros_like, can_lay_out,
)

_HINTS = {
    SLICE: ("does it step from row to row by the row length (row * n_columns) instead of the row stride "
            "(x.stride(0)), or read raw memory (a Triton kernel, data_ptr, .view, NumPy) as if the rows were "
            "packed? Pass the strides to the kernel, or make the input contiguous first (x = x.contiguous())."),
    TRANSPOSED: ("does it assume that a row's elements are next to each other in memory (stride 1 along the last "
                 "dimension)? Pass every stride to the kernel, or make the input contiguous first "
                 "(x = x.contiguous())."),
}
_SHAPES = {SLICE: "the first columns of a wider tensor: each row starts further on in memory than its length",
           TRANSPOSED: "the transpose of a contiguous tensor: a row's elements are a column apart in memory"}
_GRAD_OUTPUT_HINT = ("does backward read grad_output's memory as if it were contiguous? Autograd hands backward "
                     "grad_output in whatever layout the next step made (a transposed view after .mT, an expanded "
                     "one after .sum()): make it contiguous first (grad_output = grad_output.contiguous()), or "
                     "pass its strides to the kernel.")


def laid_out_names(args, names, layout) -> list[str]:
    """The names of the arguments ``layout`` makes non-contiguous."""
    return [name for name, a in zip(names, args) if can_lay_out(a, layout)]


def stride_problem(layout: str, names: list[str], problem: str) -> str:
    """A problem that shows only on non-contiguous tensors (the inputs ``names``, or grad_output when there
    are none), said as a stride mistake, then the problem as found on that layout."""
    if names:
        head = (f"gives the right answer on contiguous inputs and a wrong one on {layout} of "
                f"{' and '.join(f'`{n}`' for n in names)} ({_SHAPES[layout]}): {_HINTS[layout]}")
    else:
        head = (f"gives the right gradients for a contiguous grad_output and wrong ones for {layout} "
                f"({_SHAPES[layout]}): {_GRAD_OUTPUT_HINT}")
    first, _, rest = problem.partition("\n")
    return f"{head}\nOn {layout}, {first[:1].lower() + first[1:]}" + (f"\n{rest}" if rest else "")


def check_layouts(function, reference, inputs, report, rtol, atol, backward: bool) -> None:
    """Run the Function again on non-contiguous inputs (and, with ``backward``, non-contiguous upstream
    gradients): its outputs (and gradients) against the reference's on the contiguous inputs, the same values;
    the first layout on which one changes is reported."""
    expected = _as_tuple(_run_reference(reference, inputs.fresh()[0]))
    used = [k for k, o in enumerate(expected) if isinstance(o, _Tensor) and o.requires_grad] if backward else []
    upstream = _upstream(expected, used, 5) if used else []
    right = _expected_gradients(reference, inputs, used, upstream) if used else []

    def run(laid, found) -> None:
        call, leaves = laid.fresh()
        outputs = _as_tuple(_run_student("forward", lambda: function.apply(*call), laid))
        _compare_outputs(outputs, expected, found, rtol, atol)
        if used and not found.problems:
            for i, g, e in zip(laid.tensor_positions, _gradients_of(outputs, leaves, laid, used, upstream), right):
                g = g if g is not None else _zeros_like(e)
                if not _close(g, e, rtol, atol):
                    found.add(wrong_gradient(laid.names[i], e, g, rtol, atol))
                    return

    try_layouts(inputs, report, run, expected if used else ())


def try_layouts(inputs, report, run, outputs=()) -> None:
    """``run(laid, found)`` checks the student's code on ``laid``: ``inputs`` with every tensor of two or more
    dimensions laid out as a slice, then as a transposed view; then, for each of the reference's ``outputs``
    that can be laid out so, with the upstream gradients laid out so (``grad_layout``). It adds what it finds
    to ``found``; the first layout that finds something is reported, as a stride mistake."""
    for layout in LAYOUTS:
        names = laid_out_names(inputs.args, inputs.names, layout)
        if names and _layout_fails(replace(inputs, layout=layout), report, run,
                                   lambda problem: stride_problem(layout, names, problem)):
            return
    for layout in LAYOUTS:
        if any(isinstance(o, _Tensor) and o.requires_grad and can_lay_out(o, layout) for o in outputs) and \
                _layout_fails(replace(inputs, grad_layout=layout), report, run,
                              lambda problem: stride_problem(layout, [], problem)):
            return


def _layout_fails(inputs, report, run, said) -> bool:
    """``run(inputs, found)``; a problem it finds goes into ``report`` as ``said`` words it. Returns whether there
    was one."""
    found = _Report("")
    try:
        run(inputs, found)
    except _StudentError as err:
        found.add(err.message)
    if found.problems:
        report.add(said(found.problems[0]))
    return bool(found.problems)
