"""The core checks: is it a Function, do its outputs match the reference, are its gradients right?

Forward's outputs are compared with the reference's; backward's gradients with torch autograd's
on the reference, for random upstream gradients (all outputs at once and each output alone).
What backward returns is first checked raw, by calling the graph node directly, before autograd
would sum, cast, drop or reject it; that run also watches what backward must leave alone (its inputs,
forward's outputs, the saved tensors, grad_output) and calls backward a second time on the same graph
(``overwrites``).
"""

from __future__ import annotations

import contextlib
import inspect

from autograder.student.checker.messages import (
    _DEVICE_RULE, _a_tensor_on, _a_value_of_type, _count, _difference, _dtype, _output_label, _run_reference,
    _run_student, _shape, _short, _same_value, wrong_gradient, wrong_output,
)
from autograder.student.checker.patterns import (
    _diagnose, _is_integer_tensor, _is_tensor_close, _raw_problem, _returned_none, _tidied, integer_gradient,
    tidying_words,
)
from autograder.student.checker.overwrites import overwrite_problem, overwritten, second_backward, second_problem, watch
from autograder.student.checker.flags import _FLAG_RULE, _explain_needs_input_grad_error, _flag_branches, _wrong_flag
from autograder.student.checker.references import (
    _allclose, _as_tuple, _autograd_backward, _autograd_grad, _Case, CheckFailure, _close, _draw, _engine_module,
    _equal, _Function, _Generator, _graph_node, _HandedBackToAutograd, _Inputs, _is_float_tensor, laid_out, _no_grad,
    _StudentError, _Tensor, _TORCH_BASES, _zeros_like,
)

# --------------------------------------------------------------------------------------------
# Structure: is it a Function, which methods does it define, what are its inputs called?

_METHODS = ("forward", "backward", "setup_context")


def _check_is_function_class(function, name: str) -> None:
    """A Function class that defines forward and backward; each may be a staticmethod, a classmethod
    or a plain function, as ``Function.apply`` calls each of them on the class."""
    if isinstance(function, _Function):
        raise CheckFailure(
            f"{name} is an instance; pass the class itself. Custom Functions are never "
            f"instantiated: call them as {type(function).__name__}.apply(...)."
        )
    if not (isinstance(function, type) and issubclass(function, _Function)):
        raise CheckFailure(f"{name} is not a subclass of torch.autograd.Function.")
    for method in ("forward", "backward"):
        if not _defines(function, method) and (method == "forward" or not _defines(function, "vjp")):
            raise CheckFailure(f"{name} does not define {method}(ctx, ...).")
    legacy = [m for m in _undecorated(function) if _first_parameter(getattr(function, m)) == "self"]
    if legacy:
        methods, has = " and ".join(legacy), "has" if len(legacy) == 1 else "have"
        raise CheckFailure(
            f"{name} is written in PyTorch's legacy style: {methods} {has} no @staticmethod and take `self` "
            f"first. {name}.apply(...) runs it anyway (torch passes ctx as `self`), but the legacy call "
            f"{name}()(x) raises \"Legacy autograd function with non-static forward method is deprecated\", and "
            f"nothing set on `self` in __init__ is there. Put @staticmethod on the line above each 'def', take ctx "
            f"first, and call {name}.apply(x), with settings as arguments of apply, kept on ctx.")


def _first_parameter(method) -> str | None:
    try:
        return next(iter(inspect.signature(method).parameters), None)
    except (TypeError, ValueError):
        return None


def _defines(function, method: str) -> bool:
    """Whether ``function`` or a base class of its own (not one of torch's) defines ``method``."""
    return any(method in vars(k) for k in function.__mro__ if k not in _TORCH_BASES)


def _uses_setup_context(function) -> bool:
    return _defines(function, "setup_context")


def _undecorated(function) -> tuple[str, ...]:
    """The Function's methods written without @staticmethod or @classmethod (the legacy style)."""
    found = []
    for method in _METHODS:
        defined_in = next((k for k in function.__mro__ if method in vars(k)), None)
        if defined_in is not None and defined_in not in _TORCH_BASES \
                and not isinstance(vars(defined_in)[method], (staticmethod, classmethod)):
            found.append(method)
    return tuple(found)


def _forward_params(function) -> list:
    """``forward``'s parameters after ``ctx`` (all of them in the setup_context style)."""
    try:
        params = list(inspect.signature(function.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    if not _uses_setup_context(function) and params and params[0].kind is not params[0].VAR_POSITIONAL:
        params = params[1:]
    return params


def _input_names(function, count: int) -> list[str]:
    """Parameter names of ``forward`` after ``ctx`` (``args[i]`` for ``*args``)."""
    names: list[str] = []
    for p in _forward_params(function):
        if p.kind is p.VAR_POSITIONAL:
            names += [f"{p.name}[{i}]" for i in range(count - len(names))]
            break
        names.append(p.name)
    names += [f"input {i}" for i in range(len(names), count)]
    return names[:count]


def _describe_inputs(function, args, inplace, constants, autograd_in_backward, dtype=None,
                     strict_gradients=False) -> _Inputs:
    """The arguments as the checks see them; ``constants`` name tensor arguments by name or position."""
    names = _input_names(function, len(args))
    params = [p for p in _forward_params(function) if p.kind is not p.VAR_POSITIONAL][:len(args)]
    optional = frozenset(i for i, p in enumerate(params) if p.default is not p.empty)
    positions = set()
    for c in constants:
        i = names.index(c) if c in names else c
        if not isinstance(i, int) or not 0 <= i < len(args) or not isinstance(args[i], _Tensor):
            raise RuntimeError(f"constants={tuple(constants)!r}: {c!r} is not a tensor argument of forward "
                               f"({', '.join(names)}) (this is a problem with the test, not with your Function)")
        positions.add(i)
    return _Inputs(args, names, inplace, frozenset(positions), optional, _undecorated(function),
                   autograd_in_backward, dtype, strict_gradients=strict_gradients)


# --------------------------------------------------------------------------------------------
# Forward


def _check_forward(function, reference, inputs, report, rtol, atol) -> None:
    call, _ = inputs.fresh()
    versions = [a._version if isinstance(a, _Tensor) else None for a in call]
    got = _as_tuple(_run_student("forward", lambda: function.apply(*call), inputs))
    _check_modified_inputs(call, versions, got, inputs, report)
    expected = _as_tuple(_run_reference(reference, inputs.fresh()[0]))
    _compare_outputs(got, expected, report, rtol, atol)


def _compare_outputs(got: tuple, expected: tuple, report, rtol, atol, who: str = "forward") -> None:
    """Report each output of ``who`` (forward, or a function's name) that differs from the reference's
    in number, type, shape, dtype or value."""
    if len(got) != len(expected):
        report.add(
            f"{who} returned {_count(len(got), 'output')}, but the reference returns "
            f"{len(expected)}. Return them in the same order as the reference."
        )
        report.raise_if_any()
    for k, (g, e) in enumerate(zip(got, expected)):
        label = _output_label(k, len(got), f"{who}'s output")
        if not isinstance(e, _Tensor):
            if not _same_value(g, e):
                report.add(f"{label} is {_short(g)}, expected {_short(e)}.")
        elif not isinstance(g, _Tensor):
            numpy = type(g).__module__ == "numpy"
            report.add(f"{label} is {'a NumPy array' if numpy else 'a ' + type(g).__name__}, expected a tensor"
                       + (": return a tensor (torch.as_tensor(array, device=x.device))." if numpy else "."))
        elif g.shape != e.shape:
            report.add(f"{label} has shape {_shape(g)}, expected {_shape(e)}.")
        elif g.device != e.device:
            report.add(f"{label} is {_a_tensor_on(g.device)}, but the inputs are on {e.device}: {_DEVICE_RULE}")
        elif g.dtype != e.dtype:
            why = ("new tensors made in forward should use the input's dtype" if e.is_floating_point()
                   else "integer outputs such as indices must keep their integer dtype")
            report.add(f"{label} has dtype {_dtype(g)}, expected {_dtype(e)}: {why}.")
        elif not e.is_floating_point() and not _equal(g, e):
            report.add(f"{label} is wrong (integer values must match exactly).\n{_difference(e, g, 0.0, 0.0)}")
        elif not _close(g, e, rtol, atol):
            report.add(wrong_output(label, who, e, g, rtol, atol))


def _check_modified_inputs(call, versions, outputs, inputs, report) -> None:
    """An input that forward changed in place must be declared with ``ctx.mark_dirty``.

    Without it autograd keeps the input's old history, so gradients through the modified tensor
    are silently wrong. ``mark_dirty`` moves the input's history onto this Function's node.
    """
    node = _graph_node(outputs)
    for name, arg, version in zip(inputs.names, call, versions):
        if not isinstance(arg, _Tensor) or arg._version == version:
            continue
        if not inputs.inplace:
            report.add(f"forward modified its input `{name}` in place. Compute a new tensor instead "
                       f"(e.g. {name} * 2, not {name}.mul_(2)); an in-place Function must call "
                       f"ctx.mark_dirty({name}) and is checked with check_function(..., inplace=True).")
        elif node is None or arg.grad_fn is not node:
            report.add(f"forward modified `{name}` in place without ctx.mark_dirty({name}): autograd "
                       f"still believes `{name}` holds its old values, so gradients through it are "
                       f"silently wrong. Call ctx.mark_dirty({name}) in forward and return `{name}`.")


# --------------------------------------------------------------------------------------------
# Backward


def _check_backward(function, reference, inputs, report, rtol, atol) -> None:
    ref_outputs = _as_tuple(_run_reference(reference, inputs.fresh()[0]))
    differentiable = [k for k, o in enumerate(ref_outputs) if isinstance(o, _Tensor) and o.requires_grad]
    if not differentiable:
        raise RuntimeError("the reference's outputs do not depend differentiably on any tensor input "
                           "(this is a problem with the test, not with your Function)")
    several = len(differentiable) > 1
    cases = [_Case(differentiable, _upstream(ref_outputs, differentiable, 0), "", several)]
    if several:
        cases += [_Case([k], _upstream(ref_outputs, [k], k + 1),
                        f" (only output {k} used; the other outputs' gradients arrive as zeros, or "
                        f"None after ctx.set_materialize_grads(False))", several)
                  for k in differentiable]
    raw = _raw_gradients(function, reference, inputs, cases[0], report, rtol, atol)
    if raw is None:
        return
    got, unsound, notes, second = raw
    if unsound:
        # Autograd would reject, sum or cast those gradients: judge the others as backward returned them.
        _judge(function, reference, inputs, cases[0], got, unsound, report, rtol, atol, notes)
        return
    for case in cases:
        try:
            got = _student_gradients(function, inputs, case.used, case.upstream)
        except _StudentError as err:
            report.add(err.message)
            continue
        _judge(function, reference, inputs, case, got, set(), report, rtol, atol, notes)
    if not report.problems:
        expected = _expected_gradients(reference, inputs, cases[0].used, cases[0].upstream)
        again = second_problem(second, expected, inputs.tensor_positions, inputs.names, rtol, atol)
        if again:
            report.add(again)
    if not report.problems:
        _check_needs_input_grad(function, reference, inputs, cases[0], report, rtol, atol)


def _upstream(outputs, used, seed: int) -> list:
    """Random upstream gradients (never ones) for the outputs in ``used``."""
    gen = _Generator().manual_seed(1234 + seed)
    return [_draw(outputs[k].shape, gen, outputs[k].dtype, outputs[k].device) for k in used]


def _handed(upstream, outputs, inputs) -> list:
    """The upstream gradients as the student's backward gets them: copies in each output's dtype, laid out as
    ``inputs.grad_layout`` says."""
    return [laid_out(u.to(o.dtype if isinstance(o, _Tensor) and o.is_floating_point() else u.dtype, copy=True),
                     inputs.grad_layout) for u, o in zip(upstream, outputs)]


def _expected_gradients(reference, inputs, used, upstream) -> list:
    call, leaves = inputs.fresh()
    outputs = _as_tuple(_run_reference(reference, call))
    grads = _autograd_grad([outputs[k] for k in used], leaves, upstream, allow_unused=True)
    return [g if g is not None else _zeros_like(leaf) for g, leaf in zip(grads, leaves)]


def _student_gradients(function, inputs, used, upstream) -> list:
    """The gradients autograd gives each tensor input for ``upstream`` on the ``used`` outputs; with
    ``inputs.autograd_in_backward``, by ``.backward()``, as reentrant checkpointing needs (it refuses
    ``torch.autograd.grad``)."""
    call, leaves = inputs.fresh()
    outputs = _as_tuple(_run_student("forward", lambda: function.apply(*call), inputs))
    return _gradients_of(outputs, leaves, inputs, used, upstream)


def _gradients_of(outputs, leaves, inputs, used, upstream) -> list:
    """The gradients of ``leaves`` for ``upstream`` on the ``used`` ``outputs`` of the student's forward."""
    for k in used:
        if not isinstance(outputs[k], _Tensor) or outputs[k].grad_fn is None:
            raise _StudentError(
                f"forward's output {k} is not connected to the inputs (it has no grad_fn): "
                f"return a new tensor computed in forward, not a detached or .data copy."
            )
    chosen = [outputs[k] for k in used]
    if inputs.autograd_in_backward:
        _run_student("backward", lambda: _autograd_backward(chosen, _handed(upstream, chosen, inputs)), inputs)
        grads = [leaf.grad for leaf in leaves]
    else:
        grads = _run_student("backward", lambda: _autograd_grad(chosen, leaves, _handed(upstream, chosen, inputs),
                                                                allow_unused=True), inputs)
    return [g.detach() if g is not None else None for g in grads]


def _run_backward(function, inputs, case, requires=None):
    """Run forward, then the student's backward by calling the graph node directly.

    Returns (what backward returned, what it wrote over in words (``overwrites.overwrite_problem``) or None, the
    record of a second call on the same graph (``overwrites.second_backward``; None where the first wrote over
    something)), or None when
    forward's outputs are not connected to the inputs. ``requires``: the positions of the inputs that require grad
    (default: every tensor input), which sets ``ctx.needs_input_grad``; then nothing is watched and backward runs
    once (the first run did that).
    """
    call, _ = inputs.fresh(requires)
    outputs = _as_tuple(_run_student("forward", lambda: function.apply(*call), inputs))
    node = _graph_node(outputs)
    if node is None:
        return None
    grads_in = [_zeros_like(o) if isinstance(o, _Tensor) else None for o in outputs]
    for k, u in zip(case.used, _handed(case.upstream, [outputs[k] for k in case.used], inputs)):
        grads_in[k] = u
    first = requires is None
    watched = watch(call, outputs, node, grads_in) if first else []
    with _autograd_guard(inputs), _no_grad():
        raw = _run_student("backward", lambda: node.apply(*grads_in), inputs)
    found = overwrite_problem(overwritten(watched), inputs.names, len(outputs))
    second = None
    if first and not found:
        with _autograd_guard(inputs):
            second = second_backward(node, grads_in)
    if raw is not None:
        raw = tuple(r.detach() if isinstance(r, _Tensor) else r for r in _as_tuple(raw))
    return raw, found, second


def _autograd_guard(inputs):
    """Where backward may not call autograd (``check_function``'s default), a guard that makes it raise."""
    return contextlib.nullcontext() if inputs.autograd_in_backward else _autograd_forbidden()


def _raw_gradients(function, reference, inputs, case, report, rtol, atol):
    """Call the student's backward directly and check what it returns before autograd tidies it.

    Autograd silently sums a broadcastable gradient to the input's shape and casts its dtype, and drops a
    gradient returned for an integer tensor; calling the graph node ourselves sees exactly what ``backward``
    returned. It also catches a backward that writes over what it was given (its inputs, forward's outputs, the
    saved tensors, grad_output: ``overwrites``) or hands the work back to autograd.
    Returns ``None`` when backward's answer is unusable as a whole, else (the gradient of each
    tensor input as autograd leaves it, the indices of those with the wrong type, shape or dtype, for each
    one autograd summed to its input's shape or cast to its dtype the words that say so, and the record of a
    second backward on the same graph).
    """
    ran = _run_backward(function, inputs, case)
    if ran is None:
        report.add("forward's outputs are not connected to the inputs (no grad_fn): return new "
                   "tensors computed from the inputs, not detached copies.")
        return None
    raw, found, second = ran
    if found:
        report.add(found)
        return None
    n, names = len(inputs.args), inputs.names
    expected = _expected_gradients(reference, inputs, case.used, case.upstream)
    if raw is None:
        needed = [names[i] for i, e in zip(inputs.tensor_positions, expected) if not _allclose(e, _zeros_like(e))]
        if needed:
            report.add(_returned_none(needed, names))
            return None
        raw = (None,)
    if len(raw) < n or any(r is not None for r in raw[n:]):
        report.add(
            f"backward returned {_count(len(raw), 'gradient')}, but forward takes {n} input"
            f"{'s' if n > 1 else ''} ({', '.join(names)}). Return exactly one gradient per forward "
            f"input, in forward's order, with None for inputs that are not tensors."
        )
        return None
    for i, r in enumerate(raw[:n]):
        if not isinstance(inputs.args[i], _Tensor) and r is not None:
            report.add(
                f"backward returned a gradient for `{names[i]}` (position {i + 1}), but `{names[i]}` "
                f"is {_a_value_of_type(inputs.args[i])}, not a tensor. Return None in its place."
            )
            return None
        if _is_integer_tensor(inputs.args[i]) and r is not None:
            report.add(integer_gradient(names[i], inputs.args[i].dtype))
            return None
    for i in sorted(inputs.constants):
        if raw[i] is not None:
            _check_constant_gradient(reference, inputs, case, i, raw[i], report, rtol, atol)
    got = [raw[i] for i in inputs.tensor_positions]
    unsound = set()
    for j, i in enumerate(inputs.tensor_positions):
        problem = _raw_problem(got, j, names[i], expected, inputs, rtol, atol)
        if problem:
            report.add(problem)
            unsound.add(j)
    tidied = [g if j in unsound else _tidied(g, expected[j], inputs.working_dtype(inputs.args[i]))
              for j, (i, g) in enumerate(zip(inputs.tensor_positions, got))]
    return tidied, unsound, tidying_words(got, expected, inputs, unsound, rtol, atol), second


def _check_constant_gradient(reference, inputs, case, i, got, report, rtol, atol) -> None:
    """A constant needs no gradient, so None is right; a gradient backward returns anyway must be right."""
    name = inputs.names[i]
    call = list(inputs.fresh()[0])
    if not _is_float_tensor(call[i]):
        report.add(f"backward returned a gradient for the constant `{name}`, which is not a float tensor: "
                   f"return None in its place.")
        return
    call[i] = call[i].requires_grad_(True)
    outputs = _as_tuple(_run_reference(reference, tuple(call)))
    (expected,) = _autograd_grad([outputs[k] for k in case.used], [call[i]], case.upstream, allow_unused=True)
    expected = expected if expected is not None else _zeros_like(call[i])
    if isinstance(got, _Tensor) and _close(got, expected, rtol, atol):
        return
    if isinstance(got, _Tensor) and got.shape == expected.shape:
        detail = f"\n{_difference(expected, got, rtol, atol)}"
    else:
        what = f"has shape {_shape(got)}" if isinstance(got, _Tensor) else f"is not a tensor but a {type(got).__name__}"
        detail = f" It {what}; `{name}` has shape {_shape(expected)}."
    report.add(f"backward returned a gradient for the constant `{name}`, and it is wrong: return None for "
               f"`{name}` (a constant needs no gradient), or its right gradient.{detail}")


def _judge(function, reference, inputs, case, got, skip, report, rtol, atol, notes=None) -> None:
    """Compare each tensor input's gradient with torch's; report and diagnose the wrong ones."""
    expected = _expected_gradients(reference, inputs, case.used, case.upstream)
    names = [inputs.names[i] for i in inputs.tensor_positions]
    for j, (e, g) in enumerate(zip(expected, got)):
        if j in skip:
            continue
        if g is None:
            if not _allclose(e, _zeros_like(e)):
                report.add(f"backward returned None for `{names[j]}`{case.when}, but `{names[j]}` needs "
                           f"a gradient: return its gradient tensor in position "
                           f"{inputs.tensor_positions[j] + 1}.")
            continue
        if _close(g, e, rtol, atol):
            continue
        hint = _diagnose(inputs, case, j, g, expected, rtol, atol,
                         student=lambda upstream: _student_gradients(function, inputs, case.used, upstream),
                         torch_gradients=lambda upstream: _expected_gradients(reference, inputs, case.used,
                                                                              upstream))
        report.add(wrong_gradient(names[j], e, g, rtol, atol, case.when + (notes or {}).get(j, ""), hint))


def _check_needs_input_grad(function, reference, inputs, case, report, rtol, atol) -> None:
    """Backward again with only some inputs requiring grad: each tensor input alone, then all but the optional ones.

    ``ctx.needs_input_grad`` is False for the others. A backward that computes a gradient only
    ``if ctx.needs_input_grad[i]`` must still return every gradient needed, and must not compute
    one under the flag of another input (a wrong index). The first run that goes wrong is reported.
    """
    positions, names = inputs.tensor_positions, inputs.names
    configs = []
    if len(positions) > 1:
        configs += [({i}, f"with only `{names[i]}` requiring grad") for i in positions]
    optional = [i for i in positions if i in inputs.optional]
    rest = {i for i in positions if i not in inputs.optional}
    if optional and len(rest) > 1:
        configs.append((rest, f"with {' and '.join(f'`{names[i]}`' for i in optional)} not requiring grad"))
    if not configs:
        return
    expected = dict(zip(positions, _expected_gradients(reference, inputs, case.used, case.upstream)))
    read = []  # backward's needs_input_grad branches, read from its source once, when a clue is needed

    def wrong_flag(i: int) -> str:
        if not read:
            read.append(_flag_branches(function))
        return _wrong_flag(read[0], i, names)

    for requires, label in configs:
        if report.problems:
            return  # one way of failing is enough to show the mistake
        try:
            ran = _run_backward(function, inputs, case, requires)
        except _StudentError as err:
            report.add(f"{label}, {_explain_needs_input_grad_error(function, err.message, names)}")
            continue
        if ran is None:
            continue
        raw = ran[0]
        if raw is None:
            needed = [names[i] for i in requires if not _allclose(expected[i], _zeros_like(expected[i]))]
            if needed:
                report.add(f"{label}, {_returned_none(needed, names)}")
            continue
        for i in positions:
            got = raw[i] if i < len(raw) else None
            if not inputs.strict_gradients:
                got = _tidied(got, expected[i], inputs.working_dtype(inputs.args[i]))
            if i not in requires:
                clue = wrong_flag(i) if got is not None else ""
                if clue:
                    report.add(f"{label}, backward computed a gradient for `{names[i]}`, which needs none "
                               f"(ctx.needs_input_grad[{i}] is False).{clue}")
            elif got is None:
                if not _allclose(expected[i], _zeros_like(expected[i])):
                    report.add(f"{label}, backward returned None for `{names[i]}`, which needs a gradient."
                               f"{wrong_flag(i) or _FLAG_RULE}")
            elif not _is_tensor_close(got, expected[i], rtol, atol):
                shown = (f"\n{_difference(expected[i], got, rtol, atol)}" if isinstance(got, _Tensor)
                         and got.shape == expected[i].shape else f" It is not a tensor of shape {_shape(expected[i])}.")
                report.add(f"{label}, the gradient for `{names[i]}` is wrong, though it is right when every "
                           f"input requires grad.{_FLAG_RULE}{shown}")


@contextlib.contextmanager
def _autograd_forbidden():
    """Make any autograd run inside the student's backward raise ``_HandedBackToAutograd``."""

    def refuse(*args, **kwargs):
        raise _HandedBackToAutograd("backward called autograd")

    saved = _engine_module._engine_run_backward
    _engine_module._engine_run_backward = refuse
    try:
        yield
    finally:
        _engine_module._engine_run_backward = saved
