"""``check_callable``: a plain function, a custom operator or an ``nn.Module`` class against a torch reference.

The same comparison as ``check_function`` for what is not a Function class: outputs, then the
gradient of every floating-point tensor argument for random upstream gradients, compared with
torch autograd on the reference. A Module is passed as its class and built with no arguments, on
the arguments' device, so a grader can build it where the student's code runs.
"""

from __future__ import annotations

import inspect

from autograder.student.checker.core import _compare_outputs, _handed, _input_names, _upstream
from autograder.student.checker.layouts import try_layouts
from autograder.student.checker.messages import _run_reference, _run_student, _shape, wrong_gradient
from autograder.student.checker.patterns import _diagnose
from autograder.student.checker.references import (
    _as_tuple, _autograd_grad, _Case, CheckFailure, _close, _device_of, _Function, _Generator, _Inputs, _Module,
    _Report, _StudentError, _Tensor, _tolerances, _zeros_like,
)


def check_callable(function, reference, *args, rtol: float | None = None, atol: float | None = None,
                   uses: tuple = (), dtype=None, noncontiguous: bool = True, vmap: bool = False,
                   forward_ad: bool = False, double_backward: bool = False, compile: bool = False,
                   mutates: bool = False) -> None:  # noqa: A002
    """Check a differentiable function, custom operator or ``nn.Module`` class against a torch reference.

    ``function(*args)`` (for a Module class, ``function()(*args)``: built with no arguments) must
    give the reference's outputs, and the gradient of each floating-point tensor argument, for random
    upstream gradients on every output that needs one, must match torch autograd on ``reference``
    (a wrong gradient's likely mistake named, as ``check_function`` names it).
    Floating-point tensors in ``args`` are copied to fresh float64 leaves (``dtype`` and ``noncontiguous`` as
    for ``check_function``); other values pass through.
    A ``torch.autograd.Function`` is checked with ``check_function`` instead. ``uses`` names Functions
    (``("PolyFunction",)``) whose backward must be in the outputs' graph; that a callable follows them,
    changed, is ``check_built_on``'s check, which runs this one with ``uses`` first.
    ``vmap``, ``forward_ad``, ``double_backward`` and ``compile`` compare the results under that transform
    with the reference's (``transforms``); ``mutates``: the function changes its arguments in place
    (and returns None): the arguments after the call are compared, and no gradient is asked for.
    """
    __tracebackhide__ = True  # noqa: F841 - IPython leaves the checker's frames out of a failing test's traceback
    name = getattr(function, "__name__", type(function).__name__)
    rtol, atol = _tolerances("check_callable", args, rtol, atol, dtype)
    run = _callable(function, name, _device_of(args))
    inputs = _Inputs(args, _argument_names(function, len(args)), dtype=dtype)
    report = _Report(f"{name} does not match torch")
    options = {"vmap": vmap, "forward_ad": forward_ad, "double_backward": double_backward, "compile": compile,
               "mutates": mutates}
    try:
        if mutates:
            _compare_transforms(name, run, reference, args, ["mutates"], inputs, report, rtol, atol)
            report.raise_if_any()
            return
        got, expected = _outputs(name, run, reference, inputs, report, rtol, atol)
        report.raise_if_any()
        missing = missing_functions(uses, graph_names(got))
        if missing:
            report.add(missing_message(name, missing, graph_names(got)))
            report.raise_if_any()
        used = [k for k, e in enumerate(expected) if isinstance(e, _Tensor) and e.requires_grad]
        if used:
            _compare_gradients(name, run, reference, inputs, expected, used, report, rtol, atol)
        report.raise_if_any()
        if noncontiguous:
            def on_layout(laid, found):
                _compare_outputs(_call(run, laid)[1], expected, found, rtol, atol, who=name)
                if used and not found.problems:
                    _compare_gradients(name, run, reference, laid, expected, used, found, rtol, atol, diagnose=False)

            try_layouts(inputs, report, on_layout, expected if used else ())
            report.raise_if_any()
        _compare_transforms(name, run, reference, args, [k for k, on in options.items() if on], inputs, report,
                            rtol, atol)
    except _StudentError as err:
        report.add(err.message)
    report.raise_if_any()


def _outputs(name, run, reference, inputs, report, rtol, atol) -> tuple[tuple, tuple]:
    """(the callable's outputs, the reference's, in the checker's precision), compared into ``report``."""
    got = _call(run, inputs)[1]
    expected = _call(lambda: lambda *a: _run_reference(reference, a), inputs, student=False)[1]
    _compare_outputs(got, expected, report, rtol, atol, who=name)
    return got, expected


def _compare_transforms(name, run, reference, args, kinds, inputs, report, rtol, atol) -> None:
    """The options: each transform's results for the callable against the reference's, on the same random payload."""
    from autograder.student.checker.transforms import (
        difference, draw_payload, expected_results, fresh, run_transform, used_outputs,
    )

    for kind in kinds:
        reference_args = fresh(args)
        expected_outputs = _as_tuple(_run_reference(reference, reference_args)) if kind != "mutates" else ()
        used = used_outputs(expected_outputs)
        payload = draw_payload(kind, reference_args, expected_outputs, _Generator().manual_seed(97))
        expected = expected_results(kind, lambda *a: _run_reference(reference, a), fresh(args), payload, used)
        got = _run_student(f"{name} {kind}", lambda: run_transform(kind, run(), fresh(args), payload, used), inputs)
        problem = difference(kind, got, expected, rtol, atol)
        if problem:
            report.add(problem)
            return


def graph_names(outputs, limit: int = 200) -> list[str]:
    """The names of the backward graph's nodes behind ``outputs`` (``PolyFunctionBackward``, ...), at most ``limit``."""
    seen, names = set(), set()
    todo = [o.grad_fn for o in outputs if isinstance(o, _Tensor) and o.grad_fn is not None]
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(type(node).__name__)
        todo += [n for n, _ in node.next_functions]
    return sorted(names)


def missing_functions(uses: tuple, names: list[str]) -> list[str]:
    """The Functions of ``uses`` whose backward node is not among the graph's node ``names``."""
    return [u for u in uses if f"{u}Backward" not in names]


def missing_message(name: str, missing: list[str], names: list[str]) -> str:
    return (f"{name}'s output should come from {' and '.join(m + '.apply' for m in missing)}, but its backward graph "
            f"holds only {', '.join(names) or 'no node'}: call your Function in forward, not a torch equivalent")


def _callable(function, name: str, device):
    """What builds the thing to call: the function itself, or a new instance of a Module class on ``device``
    (the arguments')."""
    if isinstance(function, type) and issubclass(function, _Function):
        raise CheckFailure(f"{name} is a torch.autograd.Function: check it with check_function({name}, ...).")
    if isinstance(function, _Module):
        raise CheckFailure(f"{name} is a Module instance: pass the class itself, check_callable("
                             f"{type(function).__name__}, ...); it is built with no arguments.")
    if isinstance(function, type) and issubclass(function, _Module):
        return lambda: function().to(device)
    if callable(function) and not isinstance(function, type):
        return lambda: function
    raise CheckFailure(f"{name} is not a function or an nn.Module class.")


def argument_names(target, count: int) -> list[str]:
    """The names the checks give ``target``'s ``count`` arguments (the grader's referee asks for them too):
    ``forward``'s parameters after ``ctx`` for a Function class, else the function's (a Module's ``forward``'s)."""
    if isinstance(target, type) and issubclass(target, _Function):
        return _input_names(target, count)
    return _argument_names(target, count)


def _argument_names(function, count: int) -> list[str]:
    """The parameter names of the function (of ``forward`` for a Module), ``input i`` where unknown."""
    target = function.forward if isinstance(function, type) else function
    try:
        params = [p.name for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if isinstance(function, type) and params[:1] == ["self"]:
        params = params[1:]
    return (params + [f"input {i}" for i in range(len(params), count)])[:count]


def _call(run, inputs, student: bool = True, upstream=None, used=()):
    """(the leaves, the outputs as a tuple) of ``run()`` called on fresh copies of the arguments (``inputs.fresh``);
    the ``student``'s runs as student code. With ``upstream``, also the gradients of the ``used``
    outputs for those upstream gradients, one per leaf (zeros for none)."""
    call, leaves = inputs.fresh()

    def go():
        outputs = _as_tuple(run()(*call))
        if upstream is None:
            return outputs
        for k in used:
            if not isinstance(outputs[k], _Tensor) or outputs[k].grad_fn is None:
                raise _StudentError(f"its output {k} is not connected to its inputs (it has no grad_fn): compute it "
                                    f"from the inputs with differentiable operations, not from a detached copy.")
        chosen = [outputs[k] for k in used]
        grads = _autograd_grad(chosen, leaves, _handed(upstream, chosen, inputs) if student else upstream,
                               allow_unused=True)
        return [g.detach() if g is not None else _zeros_like(leaf) for g, leaf in zip(grads, leaves)]

    return leaves, (_run_student("the call", go, inputs) if student else go())


def _compare_gradients(name, run, reference, inputs, expected_outputs, used, report, rtol, atol,
                       diagnose: bool = True) -> None:
    """Each float argument's gradient for random upstream gradients on the ``used`` outputs of the reference's
    ``expected_outputs``, against torch's on the reference; a wrong one's likely mistake named (``_diagnose``),
    as check_function names it."""
    upstream = _upstream(expected_outputs, used, 0)

    def student(upstream):
        return _call(run, inputs, upstream=upstream, used=used)[1]

    def torch_gradients(upstream):
        return _call(lambda: lambda *a: _run_reference(reference, a), inputs, student=False, upstream=upstream,
                     used=used)[1]

    grads, right = student(upstream), torch_gradients(upstream)
    case = _Case(used, upstream, "", len(used) > 1)
    for j, (i, have, want) in enumerate(zip(inputs.tensor_positions, grads, right)):
        label = inputs.names[i]
        if have.shape != want.shape:
            report.add(f"the gradient for `{label}` has shape {_shape(have)}, expected {_shape(want)}.")
        elif not _close(have, want, rtol, atol):
            hint = _diagnose(inputs, case, j, have, right, rtol, atol, student, torch_gradients) if diagnose else ""
            report.add(wrong_gradient(label, want, have, rtol, atol, hint=hint))
