"""The gradient checker: compare a student's ``torch.autograd.Function`` with torch's own gradients.

``check_function(function, reference, *args)`` runs the student's Function and a plain-torch
reference on fresh float64 copies of ``args`` (on their own device: CPU, CUDA, or mps, where it
works in float32 for want of float64), compares every output and the gradient of every
tensor input (with random upstream gradients, for all outputs at once and for each output alone),
and raises ``AssertionError`` with a message a student can act on when anything is off.
``check_forward(function, reference, *args)`` checks the outputs only, for tests of forward alone;
``check_device(function, *args)`` checks, on ``meta`` tensors and so on any machine, that forward and
backward make every tensor on their inputs' device (a GPU's, in use);
``check_callable(function, reference, *args)`` checks a plain function, a custom operator or an
``nn.Module`` class the same way (outputs, and gradients for random upstream gradients);
``check_built_on(Net, reference, *args, on={"PolyFunction": ...})`` checks that it follows the
student's Functions it is built on, with each of them changed in a known way.

Optional checks, off by default, cover how the Function works with the rest of PyTorch 2:
``vmap=True`` (outputs and per-example gradients under ``torch.func.vmap``), ``forward_ad=True``
(the ``jvp`` staticmethod, through forward-mode AD), ``double_backward=True`` (second derivatives
through ``backward``) and ``compile=True`` (outputs and gradients under ``torch.compile``). They
run once the ordinary checks pass, and each message names the check that failed.

The modules, from the bottom up (each imports only those before it):

- ``references``: the torch functions the checker relies on, captured when it is imported (so
  student code that later replaces ``torch.allclose`` and friends cannot fool it), and the
  shared types;
- ``messages``: what a student reads: torch's errors in course terms, how far a value is off;
- ``patterns``: the mistakes a wrong gradient reveals, and what autograd would sum, cast or drop;
- ``overwrites``: what backward must leave as it found it, and backward a second time on one graph (the
  grader's examinee makes the same record);
- ``core``: the checks of forward and backward;
- ``layouts``: the checks again on non-contiguous inputs (a stride mistake named as one);
- ``optional``: the optional checks;
- ``callables``: ``check_callable``;
- ``values``, ``kept``, ``saved``: ``check_saved`` (what a Function keeps for backward, and where it keeps anything
  else of the call, whatever its type);
- ``built_on``: ``check_built_on`` (a function or Module follows the Functions it is built on);
- ``contracts``: ``requires`` (an exercise's requirement, stated once beside its tests and quoted by its checks);
- ``harness``: ``check_values`` and ``check_with`` (plain results: a function of numbers, a training loop);
- ``devices``: ``check_device`` (where a Function makes its tensors, checked on meta tensors);
- ``kernels``: ``check_kernel`` (a function that launches Triton kernels; a wrong result explained);
- ``operators``: ``check_custom_op`` (``torch.library.opcheck`` on a custom operator, its failures explained);
- ``transforms``, ``named``: what the options and the referee share.
"""

from __future__ import annotations

from autograder.student.checker.built_on import check_built_on
from autograder.student.checker.callables import check_callable
from autograder.student.checker.contracts import requires
from autograder.student.checker.devices import check_device
from autograder.student.checker.core import _check_backward, _check_forward, _check_is_function_class, _describe_inputs
from autograder.student.checker.optional import (
    _check_double_backward, _check_forward_ad, _check_under_compile, _check_under_vmap,
)
from autograder.student.checker.harness import check_values, check_with
from autograder.student.checker.kernels import check_kernel
from autograder.student.checker.operators import check_custom_op
from autograder.student.checker.saved import check_saved
from autograder.student.checker.layouts import check_layouts
from autograder.student.checker.references import _Inputs, _Report, _StudentError, _tolerances


def check_function(function, reference, *args, rtol: float | None = None, atol: float | None = None,
                   inplace: bool = False, constants: tuple = (), autograd_in_backward: bool = False,
                   dtype=None, strict_gradients: bool = False, noncontiguous: bool = True,
                   vmap: bool = False, forward_ad: bool = False, double_backward: bool = False,
                   compile: bool = False) -> None:  # noqa: A002
    """Check a ``torch.autograd.Function`` subclass against a differentiable torch reference.

    ``function`` is called as ``function.apply(*args)``; ``reference(*args)`` must compute the same
    outputs with ordinary torch operations, so torch autograd gives the expected gradients.
    Floating-point tensors in ``args`` are copied to fresh float64 leaves on their device (float32 on
    mps, which has no float64, with tolerances loosened to at least 1e-4 and 1e-5); other values pass
    through, and every random tensor the check draws lives on the device of the tensor it stands for.
    ``inplace=True`` hands the Function copies of those leaves, for Functions that modify an
    input in place (with ``ctx.mark_dirty``). Returns ``None`` when everything matches, otherwise
    raises ``AssertionError`` explaining what is wrong, naming each failing input by its
    parameter name in ``forward``.

    forward, backward and setup_context may be staticmethods or classmethods. Backward is also run
    with each tensor input alone requiring grad, and with the optional ones (parameters with a
    default, such as ``bias=None``) not requiring it, so a ``ctx.needs_input_grad`` branch that
    leaves a needed gradient out, or uses one it did not compute, is found.

    Backward must leave what it was given as it found it (``overwrites``): forward's inputs, its outputs,
    the saved tensors and grad_output are compared before and after it runs (version counters and values, so
    a Triton kernel that stores into an input's pointer is found too), and what it wrote over is named
    (inputs by their names in ``forward``). It is then called a second time on the same graph, as
    ``retain_graph=True`` allows and ``torch.autograd.gradcheck`` does, and must give the right gradients
    again; a second call that raises (a Function that frees what it kept) is not held against it. A
    gradient returned for an integer or bool tensor input is refused by name (autograd drops it silently),
    and a wrong gradient returned in another float dtype says which, and what autograd cast it to.

    - ``constants``: tensor arguments that need no gradient (a filter bank, a mask), by name in
      ``forward`` or by position: backward may return None for them; a gradient it returns anyway
      must be right.
    - ``autograd_in_backward``: allow backward to call autograd itself, as gradient checkpointing
      does (otherwise that is reported: a backward is meant to compute the gradients itself).
    - ``dtype``: ``"keep"`` hands the Function each float tensor in its own dtype, a float dtype
      (``torch.float32``, ``torch.float16``, ``torch.bfloat16``) in that one, for code that works in
      it only (a Triton kernel, fake quantisation); the reference gets the same, and ``rtol``/``atol``
      default to ``torch.testing.assert_close``'s for the least precise dtype (float32: 1.3e-6 and
      1e-5), as for two results in that dtype. Without it, the defaults are 1e-6 and 1e-8 in float64.
    - ``strict_gradients``: each gradient backward returns must have its input's shape and dtype.
      By default a gradient that autograd sums to its input's shape (one that broadcasts to it) or
      casts to its dtype is judged as autograd leaves it, as autograd itself does; a course exercise that
      asks for the input's shape passes ``strict_gradients=True``.
    - ``noncontiguous``: once everything passes, forward and backward run again on a slice and on a
      transposed view of the inputs of two or more dimensions, and with such upstream gradients
      (``layouts``): a stride mistake is named as one. ``False`` leaves that out.

    Once those checks pass, the optional ones run:

    - ``vmap``: a batch of examples through ``torch.func.vmap`` (batched along the first dim, the
      last dim, and with only the first tensor batched): outputs and per-example gradients.
    - ``forward_ad``: output tangents from the ``jvp`` staticmethod, for random input tangents.
    - ``double_backward``: gradients of ``backward``'s results, as ``gradgradcheck`` would check.
    - ``compile``: outputs and gradients of ``torch.compile(..., backend="aot_eager",
      fullgraph=True)``, which must trace forward and backward into one graph.
    """
    __tracebackhide__ = True  # noqa: F841 - IPython leaves the checker's frames out of a failing test's traceback
    rtol, atol = _tolerances("check_function", args, rtol, atol, dtype)
    report, inputs = _start(function, args, inplace, constants, autograd_in_backward, dtype, strict_gradients)
    if not inputs.tensor_positions:
        raise RuntimeError("check_function needs at least one floating-point tensor argument "
                           "(this is a problem with the test, not with your Function)")
    try:
        _check_forward(function, reference, inputs, report, rtol, atol)
        _check_backward(function, reference, inputs, report, rtol, atol)
    except _StudentError as err:
        report.add(err.message)
    report.raise_if_any()
    if noncontiguous:
        check_layouts(function, reference, inputs, report, rtol, atol, backward=True)
        report.raise_if_any()
    options = [(vmap, _check_under_vmap), (forward_ad, _check_forward_ad),
               (double_backward, _check_double_backward), (compile, _check_under_compile)]
    for wanted, check in options:
        if wanted:
            try:
                check(function, reference, inputs, report, rtol, atol)
            except _StudentError as err:
                report.add(err.message)
    report.raise_if_any()


def check_forward(function, reference, *args, rtol: float | None = None, atol: float | None = None,
                  inplace: bool = False, dtype=None, noncontiguous: bool = True) -> None:
    """Check only the forward of a ``torch.autograd.Function`` subclass against a torch reference.

    Forward's outputs are checked as ``check_function`` checks them (number, shape, dtype, values,
    inputs modified in place; ``inplace``, ``dtype`` and ``noncontiguous`` as there), with the same messages,
    but backward is never called: a test of forward alone must not fail because backward is not written yet.
    """
    __tracebackhide__ = True  # noqa: F841
    rtol, atol = _tolerances("check_forward", args, rtol, atol, dtype)
    report, inputs = _start(function, args, inplace, (), False, dtype)
    try:
        _check_forward(function, reference, inputs, report, rtol, atol)
    except _StudentError as err:
        report.add(err.message)
    report.raise_if_any()
    if noncontiguous:
        check_layouts(function, reference, inputs, report, rtol, atol, backward=False)
        report.raise_if_any()


def _start(function, args, inplace, constants, autograd_in_backward, dtype=None,
           strict_gradients=False) -> tuple[_Report, _Inputs]:
    """What every check begins with: an empty report titled by the Function, which must be a
    Function class, and its arguments as the checks see them."""
    name = getattr(function, "__name__", repr(function))
    _check_is_function_class(function, name)
    return (_Report(f"{name} does not match torch"),
            _describe_inputs(function, args, inplace, constants, autograd_in_backward, dtype, strict_gradients))


__all__ = ["check_built_on", "check_callable", "check_custom_op", "check_device", "check_forward", "check_function", "check_kernel", "check_saved",
           "check_values", "check_with", "requires"]
