"""The gradient checker: compare a student's ``torch.autograd.Function`` with torch's own gradients.

``check_function(function, reference, *args)`` runs the student's Function and a plain-torch
reference on fresh float64 copies of ``args``, compares every output and the gradient of every
tensor input (with random upstream gradients, for all outputs at once and for each output alone),
and raises ``AssertionError`` with a message a student can act on when anything is off.

Optional checks, off by default, cover how the Function works with the rest of PyTorch 2:
``vmap=True`` (outputs and per-example gradients under ``torch.func.vmap``), ``forward_ad=True``
(the ``jvp`` staticmethod, through forward-mode AD), ``double_backward=True`` (second derivatives
through ``backward``) and ``compile=True`` (outputs and gradients under ``torch.compile``). They
run once the ordinary checks pass, and each message names the check that failed.

References to the torch functions the checker relies on are captured when this module is
imported, so student code that later replaces ``torch.allclose`` and friends cannot fool it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import traceback
from dataclasses import dataclass, field

import torch

# Captured at import time, before any student code runs (see module docstring).
_Tensor = torch.Tensor
_Function = torch.autograd.Function
_autograd_grad = torch.autograd.grad
_no_grad = torch.no_grad
_allclose = torch.allclose
_equal = torch.equal
_isclose = torch.isclose
_randn = torch.randn
_zeros_like = torch.zeros_like
_ones_like = torch.ones_like
_float64 = torch.float64
_Generator = torch.Generator
_engine_module = torch.autograd
_engine_run_backward = torch.autograd._engine_run_backward
_enable_grad = torch.enable_grad
_stack = torch.stack
_randperm = torch.randperm
_vmap = torch.func.vmap
_func_vjp = torch.func.vjp
_dual_level = torch.autograd.forward_ad.dual_level
_make_dual = torch.autograd.forward_ad.make_dual
_unpack_dual = torch.autograd.forward_ad.unpack_dual
_torch_compile = torch.compile
_compiler_reset = torch.compiler.reset

# Tracebacks are trimmed to the student's own frames: these folders are not the student's.
_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))

RTOL = 1e-6
ATOL = 1e-8


@dataclass
class _Inputs:
    """The example arguments, with the names the student's ``forward`` gives them."""

    args: tuple
    names: list[str]
    inplace: bool = False

    @property
    def tensor_positions(self) -> list[int]:
        return [i for i, a in enumerate(self.args) if _is_float_tensor(a)]

    def fresh(self) -> tuple[tuple, list]:
        """(arguments to call with, float64 leaves to differentiate with respect to).

        Float tensors become new float64 leaves; other values pass through. With ``inplace``,
        the call gets a copy of each leaf, so a Function may modify its input in place.
        """
        leaves, call = [], []
        for a in self.args:
            if _is_float_tensor(a):
                leaf = a.detach().to(_float64).clone().requires_grad_(True)
                leaves.append(leaf)
                call.append(leaf.clone() if self.inplace else leaf)
            else:
                call.append(a.clone() if isinstance(a, _Tensor) else a)
        return tuple(call), leaves


@dataclass
class _Report:
    """Problems found so far, in the order a student should read them."""

    title: str
    problems: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def raise_if_any(self) -> None:
        if self.problems:
            count = len(self.problems)
            head = f"{self.title}: {count} problem{'s' if count > 1 else ''} found."
            body = "\n".join("- " + p.replace("\n", "\n  ") for p in self.problems)
            raise AssertionError(f"{head}\n{body}")


class _StudentError(Exception):
    """Student code raised; ``message`` already explains it in course terms."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class _HandedBackToAutograd(RuntimeError):
    """Raised inside a student's backward that calls autograd itself."""


def check_function(function, reference, *args, rtol: float = RTOL, atol: float = ATOL,
                   inplace: bool = False, vmap: bool = False, forward_ad: bool = False,
                   double_backward: bool = False, compile: bool = False) -> None:  # noqa: A002
    """Check a ``torch.autograd.Function`` subclass against a differentiable torch reference.

    ``function`` is called as ``function.apply(*args)``; ``reference(*args)`` must compute the same
    outputs with ordinary torch operations, so torch autograd gives the expected gradients.
    Floating-point tensors in ``args`` are copied to fresh float64 leaves; other values pass through.
    ``inplace=True`` hands the Function copies of those leaves, for Functions that modify an
    input in place (with ``ctx.mark_dirty``). Returns ``None`` when everything matches, otherwise
    raises ``AssertionError`` explaining what is wrong, naming each failing input by its
    parameter name in ``forward``.

    Once those checks pass, the optional ones run:

    - ``vmap``: a batch of examples through ``torch.func.vmap`` (batched along the first dim, the
      last dim, and with only the first tensor batched): outputs and per-example gradients.
    - ``forward_ad``: output tangents from the ``jvp`` staticmethod, for random input tangents.
    - ``double_backward``: gradients of ``backward``'s results, as ``gradgradcheck`` would check.
    - ``compile``: outputs and gradients of ``torch.compile(..., backend="aot_eager",
      fullgraph=True)``, which must trace forward and backward into one graph.
    """
    name = getattr(function, "__name__", repr(function))
    report = _Report(f"{name} does not match torch")
    _check_is_function_class(function, name)
    inputs = _Inputs(args, _input_names(function, len(args)), inplace)
    if not inputs.tensor_positions:
        raise RuntimeError("check_function needs at least one floating-point tensor argument "
                           "(this is a problem with the test, not with your Function)")
    try:
        _check_forward(function, reference, inputs, report, rtol, atol)
        _check_backward(function, reference, inputs, report, rtol, atol)
    except _StudentError as err:
        report.add(err.message)
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


# --------------------------------------------------------------------------------------------
# Structure: is it a Function, are its methods static, what are its inputs called?


def _check_is_function_class(function, name: str) -> None:
    if isinstance(function, _Function):
        raise AssertionError(
            f"{name} is an instance; pass the class itself. Custom Functions are never "
            f"instantiated: call them as {type(function).__name__}.apply(...)."
        )
    if not (isinstance(function, type) and issubclass(function, _Function)):
        raise AssertionError(f"{name} is not a subclass of torch.autograd.Function.")
    for method in ("forward", "backward"):
        defined_in = next((k for k in function.__mro__ if method in vars(k)), None)
        if defined_in is None or defined_in.__module__.startswith("torch"):
            if method == "forward" or not _defines(function, "vjp"):
                raise AssertionError(f"{name} does not define {method}(ctx, ...).")
            continue
        if not isinstance(vars(defined_in)[method], staticmethod):
            raise AssertionError(
                f"{name}.{method} is missing @staticmethod. forward and backward belong to the "
                f"class, not to an instance: PyTorch passes ctx as their first argument. Put "
                f"@staticmethod on the line above 'def {method}'."
            )


def _defines(function, method: str) -> bool:
    return any(method in vars(k) for k in function.__mro__ if not k.__module__.startswith("torch"))


def _uses_setup_context(function) -> bool:
    return _defines(function, "setup_context")


def _input_names(function, count: int) -> list[str]:
    """Parameter names of ``forward`` after ``ctx`` (``args[i]`` for ``*args``)."""
    try:
        params = list(inspect.signature(function.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    if not _uses_setup_context(function) and params and params[0].kind is not params[0].VAR_POSITIONAL:
        params = params[1:]
    names: list[str] = []
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            names += [f"{p.name}[{i}]" for i in range(count - len(names))]
            break
        names.append(p.name)
    names += [f"input {i}" for i in range(len(names), count)]
    return names[:count]


# --------------------------------------------------------------------------------------------
# Forward


def _check_forward(function, reference, inputs, report, rtol, atol) -> None:
    call, _ = inputs.fresh()
    versions = [a._version if isinstance(a, _Tensor) else None for a in call]
    got = _as_tuple(_run_student("forward", lambda: function.apply(*call), inputs))
    _check_modified_inputs(call, versions, got, inputs, report)
    expected = _as_tuple(_run_reference(reference, inputs.fresh()[0]))
    if len(got) != len(expected):
        report.add(
            f"forward returned {_count(len(got), 'output')}, but the reference returns "
            f"{len(expected)}. Return them in the same order as the reference."
        )
        report.raise_if_any()
    for k, (g, e) in enumerate(zip(got, expected)):
        label = _output_label(k, len(got))
        if not isinstance(g, _Tensor):
            report.add(f"{label} is a {type(g).__name__}, expected a tensor.")
        elif g.shape != e.shape:
            report.add(f"{label} has shape {_shape(g)}, expected {_shape(e)}.")
        elif g.dtype != e.dtype:
            why = ("new tensors made in forward should use the input's dtype" if e.is_floating_point()
                   else "integer outputs such as indices must keep their integer dtype")
            report.add(f"{label} has dtype {_dtype(g)}, expected {_dtype(e)}: {why}.")
        elif not e.is_floating_point() and not _equal(g, e):
            report.add(f"{label} is wrong (integer values must match exactly).\n{_difference(e, g)}")
        elif not _close(g, e, rtol, atol):
            report.add(f"{label} is wrong, so the gradients cannot be right either; fix forward "
                       f"first.\n{_difference(e, g)}")


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


@dataclass
class _Case:
    """One way the loss can use the outputs: which outputs, with which random upstream gradients."""

    used: list[int]
    upstream: list
    when: str = ""  # how a message describes this case ("" when all outputs are used)
    several_outputs: bool = False


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
    got, unsound = raw
    if unsound:
        # Autograd would reject, sum or cast those gradients: judge the others as backward returned them.
        _judge(function, reference, inputs, cases[0], got, unsound, report, rtol, atol)
        return
    for case in cases:
        try:
            got = _student_gradients(function, inputs, case.used, case.upstream)
        except _StudentError as err:
            report.add(err.message)
            continue
        _judge(function, reference, inputs, case, got, set(), report, rtol, atol)


def _upstream(outputs, used, seed: int) -> list:
    """Random upstream gradients (never ones) for the outputs in ``used``."""
    gen = _Generator().manual_seed(1234 + seed)
    return [_randn(outputs[k].shape, generator=gen, dtype=outputs[k].dtype) for k in used]


def _expected_gradients(reference, inputs, used, upstream) -> list:
    call, leaves = inputs.fresh()
    outputs = _as_tuple(_run_reference(reference, call))
    grads = _autograd_grad([outputs[k] for k in used], leaves, upstream, allow_unused=True)
    return [g if g is not None else _zeros_like(leaf) for g, leaf in zip(grads, leaves)]


def _student_gradients(function, inputs, used, upstream) -> list:
    call, leaves = inputs.fresh()
    outputs = _as_tuple(_run_student("forward", lambda: function.apply(*call), inputs))
    for k in used:
        if not isinstance(outputs[k], _Tensor) or outputs[k].grad_fn is None:
            raise _StudentError(
                f"forward's output {k} is not connected to the inputs (it has no grad_fn): "
                f"return a new tensor computed in forward, not a detached or .data copy."
            )
    grads = _run_student(
        "backward",
        lambda: _autograd_grad([outputs[k] for k in used], leaves, [u.clone() for u in upstream],
                               allow_unused=True),
        inputs,
    )
    return [g.detach() if g is not None else None for g in grads]


def _raw_gradients(function, reference, inputs, case, report, rtol, atol):
    """Call the student's backward directly and check what it returns before autograd tidies it.

    Autograd silently sums a broadcastable gradient to the input's shape and casts its dtype;
    calling the graph node ourselves sees exactly what ``backward`` returned. It also catches a
    backward that modifies ``grad_output`` in place or hands the work back to autograd.
    Returns ``None`` when backward's answer is unusable as a whole, else (the gradient of each
    tensor input as returned, the indices of those with the wrong type, shape or dtype).
    """
    call, _ = inputs.fresh()
    outputs = _as_tuple(_run_student("forward", lambda: function.apply(*call), inputs))
    node = _graph_node(outputs)
    if node is None:
        report.add("forward's outputs are not connected to the inputs (no grad_fn): return new "
                   "tensors computed from the inputs, not detached copies.")
        return None
    grads_in = [_zeros_like(o) if isinstance(o, _Tensor) else None for o in outputs]
    for k, u in zip(case.used, case.upstream):
        grads_in[k] = u.clone()
    versions = [g._version if g is not None else None for g in grads_in]
    snapshots = [g.clone() if g is not None else None for g in grads_in]
    with _autograd_forbidden(), _no_grad():
        raw = _run_student("backward", lambda: node.apply(*grads_in), inputs)
    for g, v, s in zip(grads_in, versions, snapshots):
        if g is not None and (g._version != v or not _allclose(g, s)):
            report.add(
                "backward modified grad_output in place (for example grad_output[x < 0] = 0). "
                "grad_output belongs to autograd and may be used elsewhere in the graph: work on a "
                "copy (grad_output.clone()) or build a new tensor (grad_output * mask)."
            )
            return None
    raw = tuple(r.detach() if isinstance(r, _Tensor) else r for r in _as_tuple(raw))
    n, names = len(inputs.args), inputs.names
    if len(raw) < n or any(r is not None for r in raw[n:]):
        report.add(
            f"backward returned {_count(len(raw), 'gradient')}, but forward takes {n} input"
            f"{'s' if n > 1 else ''} ({', '.join(names)}). Return exactly one gradient per forward "
            f"input, in forward's order, with None for inputs that are not tensors."
        )
        return None
    expected = _expected_gradients(reference, inputs, case.used, case.upstream)
    for i, r in enumerate(raw[:n]):
        if not isinstance(inputs.args[i], _Tensor) and r is not None:
            report.add(
                f"backward returned a gradient for `{names[i]}` (position {i + 1}), but `{names[i]}` "
                f"is a {type(inputs.args[i]).__name__}, not a tensor. Return None in its place."
            )
            return None
    got = [raw[i] for i in inputs.tensor_positions]
    unsound = set()
    for j, i in enumerate(inputs.tensor_positions):
        problem = _raw_problem(got, j, names[i], expected, inputs, rtol, atol)
        if problem:
            report.add(problem)
            unsound.add(j)
    return got, unsound


def _is_tensor_close(value, expected, rtol, atol) -> bool:
    return isinstance(value, _Tensor) and _close(value, expected, rtol, atol)


def _raw_problem(got, j, name, expected, inputs, rtol, atol) -> str | None:
    """What is wrong with the type, shape or dtype of ``got[j]``, the gradient of tensor input ``j``."""
    r, e = got[j], expected[j]
    if r is None:
        return None
    if not isinstance(r, _Tensor):
        return (f"backward returned a {type(r).__name__} as the gradient for `{name}`; "
                f"return a tensor of {name}'s shape {_shape(e)}.")
    if r.shape != e.shape:
        # A swap: this gradient is another input's, and that input's own gradient is wrong too.
        others = [k for k, e_k in enumerate(expected) if k != j and _close(r, e_k, rtol, atol)
                  and not _is_tensor_close(got[k], e_k, rtol, atol)]
        if others:
            other = inputs.names[inputs.tensor_positions[others[0]]]
            hint = (f" It is the gradient of `{other}`: backward returns its gradients in the wrong "
                    f"order. Return them in the order of forward's arguments.")
        elif r.dim() >= 2 and r.mT.shape == e.shape and _close(r.mT, e, rtol, atol):
            hint = " It is the transpose of the right gradient: swap the matrix product's order or transpose it."
        elif _broadcasts_to(r.shape, e.shape):
            hint = (" PyTorch would silently sum it down to the right shape and hide the bug: "
                    "reduce it yourself (e.g. .sum(dim=...)) so the shapes match.")
        else:
            hint = ""
        return (f"backward's gradient for `{name}` has shape {_shape(r)}, but `{name}` has shape "
                f"{_shape(e)}: each gradient must have its input's shape.{hint}")
    if r.dtype != e.dtype:
        return (f"backward's gradient for `{name}` has dtype {_dtype(r)}, but `{name}` is "
                f"{_dtype(e)}: make new tensors with dtype={name}.dtype (or torch.zeros_like / "
                f"torch.ones_like).")
    return None


def _judge(function, reference, inputs, case, got, skip, report, rtol, atol) -> None:
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
        hint = _diagnose(function, reference, inputs, case, j, g, expected, rtol, atol)
        report.add(f"the gradient for `{names[j]}` is wrong{case.when}.{hint}\n"
                   f"For a random grad_output, compared with torch autograd on the reference: "
                   f"{_difference(e, g)}")


def _diagnose(function, reference, inputs, case, j, g, expected, rtol, atol) -> str:
    """Name the likely mistake behind the wrong gradient ``g`` of tensor input ``j``, if recognisable."""
    e = expected[j]
    names = [inputs.names[i] for i in inputs.tensor_positions]
    for other, e_other in enumerate(expected):
        if other != j and _close(g, e_other, rtol, atol):
            return (f" It equals the gradient of `{names[other]}`: backward returns its gradients in "
                    f"the wrong order. Return them in the order of forward's arguments.")
    if g.dim() >= 2 and g.shape == g.mT.shape and _close(g.mT, e, rtol, atol):
        return " It is the transpose of the right gradient."
    if case.several_outputs and len(case.used) == 1 and _allclose(g, _zeros_like(g)):
        k = case.used[0]
        return (f" backward ignores the gradient of output {k} (its argument number {k + 1} after "
                f"ctx): every output's gradient must flow back to the inputs.")
    if _allclose(g, _zeros_like(g)):
        return " Yours is zero everywhere: backward returns no gradient at all for it."
    ones = [_ones_like(u) for u in case.upstream]
    try:
        got_ones = _student_gradients(function, inputs, case.used, ones)[j]
    except _StudentError:
        got_ones = None
    if got_ones is not None and _close(got_ones, g, rtol, atol):
        expected_ones = _expected_gradients(reference, inputs, case.used, ones)[j]
        if _close(got_ones, expected_ones, rtol, atol):
            return (" It does not change when grad_output changes: you forgot to multiply by "
                    "grad_output (the chain rule: return grad_output * local derivative).")
        return " It does not depend on grad_output: multiply the local derivative by grad_output."
    scale = _scale(g, e)
    if scale is not None:
        if abs(scale + 1) < 1e-6:
            return " Its sign is flipped."
        return f" It is {scale:.4g} times the right gradient: a constant factor is off."
    return ""


# --------------------------------------------------------------------------------------------
# Optional checks: the Function with PyTorch 2's transforms, forward-mode AD and the compiler

_BATCH = 3  # examples in a vmap batch
_COMPILE_BACKEND = "aot_eager"  # traces forward and backward like inductor, without a C++ compiler


def _check_under_vmap(function, reference, inputs, report, rtol, atol) -> None:
    """Outputs and per-example gradients of a batch under ``torch.func.vmap``.

    The batch is laid out three ways, which catch a hand-written ``vmap`` staticmethod that
    assumes the batch dimension comes first or that every input is batched. The first failing
    layout is reported.
    """
    positions = inputs.tensor_positions
    layouts = [("batch along dim 0", {i: 0 for i in positions}),
               ("batch along the last dim", {i: -1 for i in positions})]
    if len(positions) > 1:
        layouts.append((f"only `{inputs.names[positions[0]]}` batched", {positions[0]: 0}))
    for where, dims in layouts:
        if not _vmap_layout(function, reference, inputs, report, rtol, atol, f"under vmap ({where})", dims):
            return


def _vmap_layout(function, reference, inputs, report, rtol, atol, label, dims) -> bool:
    """One batch layout: ``dims`` maps each batched argument's position to its batch dimension.

    Example 0 is the given arguments; the others permute the batched tensors' elements, so every
    example stays in the Function's domain. Each example alone through the reference gives the
    expected results. Returns whether everything matched.
    """
    gen = _Generator().manual_seed(4321)
    examples = [list(inputs.args) for _ in range(_BATCH)]
    for i in dims:
        for example in examples[1:]:
            example[i] = _permuted(inputs.args[i], gen)
    examples = [_Inputs(tuple(e), inputs.names) for e in examples]
    batched = [_stack([_as_float64(e.args[i]) for e in examples], dim=dims[i]) if i in dims else _as_float64(a)
               for i, a in enumerate(inputs.args)]
    in_dims = tuple(dims.get(i) for i in range(len(batched)))
    hand_written = _defines(function, "vmap")
    moved = hand_written and any(dims.get(i) != 0 for i in inputs.tensor_positions)

    try:
        got = _as_tuple(_run_option(label, lambda: _vmap(_applier(function), in_dims=in_dims)(*batched), inputs))
    except _StudentError as err:
        if hand_written and "(in vmap," in err.message and "None" in err.message:
            raise _StudentError(f"{err.message} in_dims holds None for an argument that is not batched: "
                                f"use it as it is, and move only the batched ones.") from None
        raise
    per_example = [_as_tuple(_run_reference(reference, e.fresh()[0])) for e in examples]
    expected = [_stack([outs[k].detach() for outs in per_example]) if isinstance(o, _Tensor) else o
                for k, o in enumerate(per_example[0])]
    hint = (" Your vmap staticmethod gets the batch's position in each input from in_dims (here not "
            "always 0): move it where your code expects it, e.g. x.movedim(in_dims[0], 0), and return "
            "out_dims saying where it is in the output." if moved else "")
    if not _outputs_match(label, got, expected, report, rtol, atol, hint):
        return False

    used = [k for k, o in enumerate(per_example[0]) if isinstance(o, _Tensor) and o.requires_grad]
    cot_gen = _Generator().manual_seed(8765)
    cotangents = [_randn((_BATCH, *expected[k].shape[1:]), generator=cot_gen, dtype=expected[k].dtype) for k in used]
    got_grads = _run_option(label, lambda: _vmapped_gradients(function, inputs, batched, in_dims, used, cotangents),
                            inputs)
    expected_grads = [_expected_gradients(reference, e, used, [c[b] for c in cotangents]) for b, e in enumerate(examples)]
    ok = True
    for j, i in enumerate(inputs.tensor_positions):
        e = _stack([grads[j] for grads in expected_grads])
        if not _close(got_grads[j], e, rtol, atol):
            ok = False
            report.add(f"{label}: the per-example gradient for `{inputs.names[i]}` is wrong (the first index "
                       f"is the example in the batch).{hint}\n{_difference(e, got_grads[j])}")
    return ok


def _vmapped_gradients(function, inputs, batched, in_dims, used, cotangents):
    """Per-example gradients of the float inputs: ``torch.func.vjp`` of the Function, under vmap.

    This runs ``backward`` under vmap too, as per-example gradients (and ``jacrev``) do.
    """
    positions = inputs.tensor_positions

    def gradients(*flat):
        args, grads_out = flat[:len(batched)], flat[len(batched):]

        def used_outputs(*tensors):
            call = list(args)
            for i, t in zip(positions, tensors):
                call[i] = t
            outputs = _as_tuple(function.apply(*call))
            return tuple(outputs[k] for k in used)

        _, pullback = _func_vjp(used_outputs, *[args[i] for i in positions])
        return pullback(tuple(grads_out))

    return _vmap(gradients, in_dims=in_dims + (0,) * len(used))(*batched, *cotangents)


def _check_forward_ad(function, reference, inputs, report, rtol, atol) -> None:
    """Output tangents from the Function's ``jvp`` against forward-mode AD on the reference."""
    label = "forward-mode AD (jvp)"
    gen = _Generator().manual_seed(2468)
    tangents = [_randn(inputs.args[i].shape, generator=gen, dtype=_float64) for i in inputs.tensor_positions]
    expected = _expected_tangents(reference, inputs, tangents)
    got = _student_tangents(function, inputs, tangents, label)
    if len(got) != len(expected):
        return  # the ordinary checks compared the number of outputs already
    for k, (g, e) in enumerate(zip(got, expected)):
        if e is None or _close(g, e, rtol, atol):
            continue
        hint = _diagnose_tangent(function, reference, inputs, tangents, k, g, e, label, rtol, atol)
        report.add(f"{label}: the tangent of {_output_label(k, len(got))} is wrong.{hint}\n"
                   f"For random input tangents, compared with forward-mode AD on the reference: "
                   f"{_difference(e, g)}")


def _diagnose_tangent(function, reference, inputs, tangents, k, g, e, label, rtol, atol) -> str:
    """Name the likely mistake behind the wrong tangent ``g`` of output ``k``, if recognisable."""
    doubled = _student_tangents(function, inputs, [2 * t for t in tangents], label)[k]
    if _close(doubled, g, rtol, atol) and not _allclose(g, _zeros_like(g)):
        return (" It does not change when the input tangents change: multiply by the tangent "
                "(jvp returns the Jacobian times the tangents).")
    positions = inputs.tensor_positions
    if len(positions) > 1:
        wrong = []
        for j, i in enumerate(positions):
            alone = [t if m == j else _zeros_like(t) for m, t in enumerate(tangents)]
            if not _close(_student_tangents(function, inputs, alone, label)[k],
                          _expected_tangents(reference, inputs, alone)[k], rtol, atol):
                wrong.append(f"`{inputs.names[i]}`")
        if wrong:
            return f" The part that comes from the tangent of {' and '.join(wrong)} is wrong."
    scale = _scale(g, e)
    if scale is not None:
        return " Its sign is flipped." if abs(scale + 1) < 1e-6 else f" It is {scale:.4g} times the right tangent."
    return ""


def _student_tangents(function, inputs, tangents, label) -> list:
    """Each output's tangent when the float inputs carry ``tangents`` (zeros for no tangent)."""
    call, _ = inputs.fresh()
    duals = list(call)

    def run():
        for i, t in zip(inputs.tensor_positions, tangents):
            duals[i] = _make_dual(call[i].detach(), t)
        return _as_tuple(function.apply(*duals))

    with _dual_level():
        try:
            outputs = _run_option(label, run, inputs)
        except _StudentError as err:
            if "unpack" in err.message and "(in jvp," in err.message:
                raise _StudentError(f"{err.message} In jvp, ctx.saved_tensors holds only the tensors "
                                    f"saved with ctx.save_for_forward(...), not those saved for "
                                    f"backward.") from None
            raise
        return [_tangent(o) for o in outputs]


def _expected_tangents(reference, inputs, tangents) -> list:
    call = list(inputs.fresh()[0])
    with _dual_level():
        for i, t in zip(inputs.tensor_positions, tangents):
            call[i] = _make_dual(call[i].detach(), t)
        return [_tangent(o) for o in _as_tuple(_run_reference(reference, tuple(call)))]


def _tangent(output):
    """A float output's tangent (zeros when it has none); None for integer or non-tensor outputs."""
    if not _is_float_tensor(output):
        return None
    primal, tangent = _unpack_dual(output)
    return (tangent if tangent is not None else _zeros_like(primal)).detach().clone()


def _check_double_backward(function, reference, inputs, report, rtol, atol) -> None:
    """Gradients of ``backward``'s results, for random grad_outputs and directions (gradgradcheck's question)."""
    label = "double backward"
    ref_outputs = _as_tuple(_run_reference(reference, inputs.fresh()[0]))
    used = [k for k, o in enumerate(ref_outputs) if isinstance(o, _Tensor) and o.requires_grad]
    upstream = _upstream(ref_outputs, used, 99)
    gen = _Generator().manual_seed(1357)
    directions = [_randn(inputs.args[i].shape, generator=gen, dtype=_float64) for i in inputs.tensor_positions]
    names = [f"`{inputs.names[i]}`" for i in inputs.tensor_positions]
    names += ["grad_output" if len(used) == 1 else f"the grad_output of output {k}" for k in used]

    expected_first, expected = _second_derivatives(lambda call: _run_reference(reference, call),
                                                   inputs, used, upstream, directions)
    first, got = _run_option(label, lambda: _second_derivatives(lambda call: function.apply(*call),
                                                                inputs, used, upstream, directions), inputs)
    if any(g is not None and type(g.grad_fn).__name__ == "Error" for g in first):  # torch's DelayedError node
        report.add(f"{label}: backward is decorated with @once_differentiable, so autograd cannot "
                   f"differentiate through it. Remove the decorator and compute the gradients with "
                   f"differentiable torch operations.")
        return
    detached = [names[j] for j, (g, e) in enumerate(zip(first, expected_first))
                if e is not None and e.requires_grad and (g is None or not g.requires_grad)]
    if detached:
        report.add(f"{label}: backward's gradient for {' and '.join(detached)} is not differentiable (it "
                   f"has no grad_fn): backward computed it outside autograd's view (.detach(), "
                   f"torch.no_grad(), .data or NumPy). Use torch operations on the saved tensors and "
                   f"grad_output.")
        return
    for j, (g, e) in enumerate(zip(got, expected)):
        if g is None and e is None:
            continue
        e = e if e is not None else _zeros_like(g)
        g = g if g is not None else _zeros_like(e)
        if _close(g, e, rtol, atol):
            continue
        hint = ""
        if _allclose(g, _zeros_like(g)):
            hint = (" Yours is zero: backward uses a tensor that autograd treats as a constant, usually "
                    "an intermediate computed in forward (or setup_context) and saved for backward. Save "
                    "the inputs or outputs instead and compute the rest in backward.")
        report.add(f"{label}: the derivative of backward's result with respect to {names[j]} is wrong "
                   f"(gradgradcheck would fail).{hint}\nFor random grad_output and directions, compared "
                   f"with torch autograd on the reference: {_difference(e, g)}")


def _second_derivatives(run, inputs, used, upstream, directions):
    """(first-order gradients, gradients of sum(first * directions) w.r.t. the inputs and grad_outputs).

    ``run(call)`` computes the outputs from the call's arguments; the first-order gradients keep
    their graph (``create_graph=True``) so they can be differentiated again.
    """
    call, leaves = inputs.fresh()
    with _enable_grad():
        outputs = _as_tuple(run(call))
        grads_out = [u.clone().requires_grad_(True) for u in upstream]
        first = _autograd_grad([outputs[k] for k in used], leaves, grads_out, create_graph=True, allow_unused=True)
        terms = [(g * d).sum() for g, d in zip(first, directions) if g is not None and g.requires_grad]
        if not terms:
            return first, [None] * (len(leaves) + len(grads_out))
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        second = _autograd_grad(total, leaves + grads_out, allow_unused=True)
    return first, [s.detach() if s is not None else None for s in second]


def _check_under_compile(function, reference, inputs, report, rtol, atol) -> None:
    """Outputs and gradients when ``torch.compile`` traces forward and backward into one graph.

    ``fullgraph=True`` turns each graph break (an ``if`` on a tensor's value, ``.item()``) into an
    error, so the Function compiles whole or the check names what stops it. Dynamo's caches are
    reset before and after, so checks never share compiled code or hit its recompilation limit.
    """
    label = "under torch.compile"
    _compiler_reset()
    try:
        compiled = _torch_compile(_applier(function), backend=_COMPILE_BACKEND, fullgraph=True)
        call, leaves = inputs.fresh()
        got = _as_tuple(_run_compiled(label, lambda: compiled(*call), inputs))
        expected = _as_tuple(_run_reference(reference, inputs.fresh()[0]))
        if not _outputs_match(label, got, expected, report, rtol, atol):
            return
        used = [k for k, o in enumerate(expected) if isinstance(o, _Tensor) and o.requires_grad]
        upstream = _upstream(expected, used, 7)
        grads = _run_compiled(label, lambda: _autograd_grad([got[k] for k in used], leaves,
                                                            [u.clone() for u in upstream], allow_unused=True),
                              inputs)
        for i, g, e in zip(inputs.tensor_positions, grads, _expected_gradients(reference, inputs, used, upstream)):
            g = g.detach() if g is not None else _zeros_like(e)
            if not _close(g, e, rtol, atol):
                report.add(f"{label}: the gradient for `{inputs.names[i]}` is wrong, though it is right "
                           f"without compiling.\n{_difference(e, g)}")
    finally:
        _compiler_reset()


def _applier(function):
    """A plain function that calls ``function.apply``: what vmap and torch.compile transform."""

    def apply(*args):
        return function.apply(*args)

    return apply


def _outputs_match(label, got, expected, report, rtol, atol, hint: str = "") -> bool:
    """Compare outputs made under a transform with the expected ones; report each mismatch (with ``hint``)."""
    if len(got) != len(expected):
        report.add(f"{label}: the Function returned {_count(len(got), 'output')}, expected {len(expected)}.")
        return False
    ok = True
    for k, (g, e) in enumerate(zip(got, expected)):
        what = _output_label(k, len(got))
        if not isinstance(e, _Tensor):
            continue
        if not isinstance(g, _Tensor):
            report.add(f"{label}: {what} is a {type(g).__name__}, expected a tensor.")
        elif g.shape != e.shape:
            report.add(f"{label}: {what} has shape {_shape(g)}, expected {_shape(e)}.{hint}")
        elif g.dtype != e.dtype:
            report.add(f"{label}: {what} has dtype {_dtype(g)}, expected {_dtype(e)}.")
        elif not (_equal(g, e) if not e.is_floating_point() else _close(g, e, rtol, atol)):
            report.add(f"{label}: {what} is wrong, though it is right without the transform.{hint}\n"
                       f"{_difference(e, g)}")
        else:
            continue
        ok = False
    return ok


def _run_option(label: str, call, inputs: _Inputs):
    """Run student code under an optional check; its errors are explained with ``label`` first."""
    try:
        return _run_student("the Function", call, inputs)
    except _StudentError as err:
        raise _StudentError(f"{label}: {err.message}") from None


def _run_compiled(label: str, call, inputs: _Inputs):
    """Run compiled student code; dynamo's long reports shrink to what stopped the tracing and where."""

    def run():
        try:
            return call()
        except Exception as err:
            if type(err).__module__.startswith("torch._dynamo"):
                raise _StudentError(_explain_compile(err)) from None
            raise

    return _run_option(label, run, inputs)


def _explain_compile(err: Exception) -> str:
    text = str(err).strip()
    headline = text.splitlines()[0].strip() if text else type(err).__name__
    explanation = next((line.strip()[len("Explanation:"):].strip() for line in text.splitlines()
                        if line.strip().startswith("Explanation:")), "")
    if "item()" in text or "unbacked" in text.lower():
        headline = "a tensor was turned into a Python number (.item(), float(tensor), .tolist())"
        hint = " Keep values as tensors: a Python number computed from data cannot stay in one graph."
    elif "custom jvp" in text.lower():
        hint = (" On this torch a Function with a jvp staticmethod compiles only with graph breaks "
                "(torch.compile without fullgraph=True runs it eagerly); leave jvp out of a Function "
                "that must compile whole.")
    elif "data-dependent" in text.lower():
        hint = (" An `if` on a tensor's value decides at run time which code runs: compute without the "
                "`if` (torch.where, torch.clamp) so one graph serves every input.")
    else:
        hint = ""
    return (f"torch.compile(fullgraph=True) cannot trace the Function into one graph: {headline.rstrip('.')}."
            f"{' ' + explanation if explanation else ''}{_user_code_line(text)}{hint}")


def _user_code_line(text: str) -> str:
    """' (in backward, line 8: code)' for the last student frame in dynamo's 'from user code' trace."""
    _, _, trace = text.partition("from user code:")
    frames = [m for m in re.finditer(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', trace)
              if not m[1].startswith(_LIBRARY_DIRS)]
    if not frames:
        return ""
    m = frames[-1]
    return f" (in {m[3]}, line {m[2]}: {m[4].strip()})"


def _permuted(value, gen):
    """``value`` as float64 with its elements in a random order (the same values, another example)."""
    flat = _as_float64(value).reshape(-1)
    return flat[_randperm(flat.numel(), generator=gen)].reshape(value.shape)


def _as_float64(value):
    """A detached float64 copy of a float tensor, a copy of another tensor, any other value as is."""
    if _is_float_tensor(value):
        return value.detach().to(_float64).clone()
    return value.clone() if isinstance(value, _Tensor) else value


# --------------------------------------------------------------------------------------------
# Running student code and explaining what went wrong


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


_TORCH_ERRORS = [
    (r"returned an incorrect number of gradients \(expected (\d+), got (\d+)\)",
     lambda m, names: f"backward returned {m[2]} gradients, but forward takes {m[1]} inputs "
                      f"({', '.join(names)}). Return one gradient per input, in forward's order, "
                      f"with None for inputs that are not tensors."),
    (r"returned a gradient different than None at position (\d+), but the corresponding forward input was not a Variable",
     lambda m, names: f"backward returned a gradient for `{_name(names, int(m[1]) - 1)}` (position "
                      f"{m[1]}), which is not a tensor: return None in its place."),
    (r"expected Variable or None \(got (\w+)\)",
     lambda m, names: f"backward returned a plain {m[1]} as a gradient: gradients must be tensors (or None)."),
    (r"invalid gradient at index (\d+) - got \[([^\]]*)\] but expected shape compatible with \[([^\]]*)\]",
     lambda m, names: f"backward's gradient for `{_name(names, int(m[1]))}` has shape [{m[2]}], but the "
                      f"input has shape [{m[3]}]: each gradient must have its input's shape."),
    (r"save_for_backward can only save variables, but argument (\d+) is of type (\w+)",
     lambda m, names: f"ctx.save_for_backward is for tensors only, but it was given a {m[2]}. Keep "
                      f"non-tensors as attributes instead, e.g. ctx.alpha = alpha."),
    (r"modified by an inplace operation",
     lambda m, names: "a tensor saved for backward was modified in place after it was saved, so its "
                      "saved value is gone. Save a tensor that is not changed later, or clone it "
                      "before changing it."),
    (r"Legacy autograd function with non-static forward method",
     lambda m, names: "the Function was called as an instance, F()(x). Custom Functions are called "
                      "as F.apply(x), with @staticmethod forward and backward."),
    (r"You must implement (either the backward or vjp method|the forward function)",
     lambda m, names: f"the Function does not implement {'backward' if 'backward' in m[1] else 'forward'}."),
    (r"must override the setup_context staticmethod",
     lambda m, names: "torch.func (vmap, grad, jacrev, jvp, ...) works only with Functions in the split "
                      "style: forward(*args) without ctx, plus setup_context(ctx, inputs, output) that "
                      "saves what backward needs."),
    (r"You tried to vmap over (\w+), but it does not have vmap support",
     lambda m, names: f"{m[1]} has no vmap support: set generate_vmap_rule = True in the class (when "
                      f"forward and backward use only torch operations), or write a vmap staticmethod."),
    (r"You tried to vmap over (\w+), but it has both generate_vmap_rule=True and an overridden vmap",
     lambda m, names: f"{m[1]} has both generate_vmap_rule = True and a vmap staticmethod: keep one."),
    (r"Expected the vmap staticmethod to have two returns",
     lambda m, names: "the vmap staticmethod must return two things: the output and out_dims, the "
                      "dimension of the batch in the output (e.g. return output, 0)."),
    (r"You must implement the jvp function",
     lambda m, names: "the Function has no jvp staticmethod: write jvp(ctx, *tangents) returning each "
                      "output's tangent, and save what it needs with ctx.save_for_forward(...)."),
    (r"jvp returned an invalid number of forward gradients \(expected (\d+) but got (\d+)\)",
     lambda m, names: f"jvp returned {m[2]} tangents, but forward has {_count(int(m[1]), 'output')}: "
                      f"return one tangent per output."),
    (r"Tensor is of size \[([^\]]*)\] while the given forward gradient is of size \[([^\]]*)\]",
     lambda m, names: f"jvp returned a tangent of shape [{m[2]}] for an output of shape [{m[1]}]: each "
                      f"tangent has its output's shape."),
    (r"Expected both tensor and its forward grad to be floating point",
     lambda m, names: "jvp must return a float tensor (not None) as the tangent of each float output."),
    (r"vmap: It looks like you're .*data-dependent control flow",
     lambda m, names: "an `if` (or `while`, or bool()) on a tensor's value: under vmap one call handles "
                      "the whole batch, so Python cannot take a different branch for each example. "
                      "Compute without the `if` (torch.where, torch.clamp)."),
    (r"does not require grad and does not have a grad_fn",
     lambda m, names: "an output of forward is not connected to the inputs: return new tensors "
                      "computed in forward, not detached copies."),
]


def _name(names: list[str], index: int) -> str:
    return names[index] if 0 <= index < len(names) else f"input {index}"


def _run_student(stage: str, call, inputs: _Inputs):
    """Run student code; turn any exception into a ``_StudentError`` that explains it."""
    try:
        return call()
    except _StudentError:
        raise
    except _HandedBackToAutograd:
        raise _StudentError(
            "backward calls autograd itself (torch.autograd.grad or .backward()). backward must "
            "compute the gradients from the saved tensors and grad_output with ordinary tensor "
            "operations: that is the point of writing it."
        ) from None
    except NotImplementedError as err:
        where = _student_line(err)
        raise _StudentError(
            f"{stage} is not implemented yet{where}: replace `raise NotImplementedError()` with your code."
            if "You must implement" not in str(err) else _explain(err, stage, inputs.names)
        ) from None
    except Exception as err:  # noqa: BLE001 - any student error becomes an explanation
        raise _StudentError(_explain(err, stage, inputs.names)) from None


def _explain(err: Exception, stage: str, names: list[str]) -> str:
    text = str(err)
    for pattern, explain in _TORCH_ERRORS:
        match = re.search(pattern, text)
        if match:
            return explain(match, names) + _student_line(err)
    return f"{stage} raised {type(err).__name__}: {text}{_student_line(err)}"


def _student_line(err: BaseException) -> str:
    """' (line N: code)' for the last traceback frame outside torch and this package."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith(_LIBRARY_DIRS)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (in {frame.name}, line {frame.lineno}: {frame.line.strip() if frame.line else '?'})"


def _run_reference(reference, args):
    try:
        return reference(*args)
    except Exception as err:
        raise RuntimeError(f"the reference raised {type(err).__name__}: {err} "
                           f"(this is a problem with the test, not with your Function)") from err


# --------------------------------------------------------------------------------------------
# Small helpers


def _is_float_tensor(value) -> bool:
    return isinstance(value, _Tensor) and value.is_floating_point()


def _graph_node(outputs):
    """The backward node ``apply`` recorded for these outputs (shared by all of them), or None."""
    return next((o.grad_fn for o in outputs if isinstance(o, _Tensor) and o.grad_fn is not None), None)


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _close(got, expected, rtol, atol) -> bool:
    return got.shape == expected.shape and _allclose(got.detach().to(_float64),
                                                     expected.detach().to(_float64),
                                                     rtol=rtol, atol=atol, equal_nan=True)


def _scale(got, expected):
    """c when ``got`` is ``c * expected`` for a constant c far from 1, else None."""
    norm = float((expected * expected).sum())
    if norm == 0:
        return None
    c = float((got * expected).sum()) / norm
    if abs(c - 1) > 1e-3 and _allclose(got, c * expected, rtol=1e-6, atol=1e-9):
        return c
    return None


def _broadcasts_to(shape, target) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == shape
    except RuntimeError:
        return False


def _difference(expected, got) -> str:
    """Where and by how much ``got`` differs from ``expected``."""
    expected = expected.detach().to(_float64)
    got = got.detach().to(_float64)
    error = (got - expected).abs()
    wrong = ~_isclose(got, expected, rtol=RTOL, atol=ATOL, equal_nan=True)
    flat = int(error.nan_to_num(float("inf")).argmax()) if error.numel() else 0
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), expected.shape)) if expected.dim() else ()
    at = f" at index {list(index)}" if index else ""
    lines = [f"{int(wrong.sum())} of {expected.numel()} elements differ; the largest error is "
             f"{float(error.flatten()[flat]):.3g}{at} (torch {float(expected.flatten()[flat]):.6g}, "
             f"yours {float(got.flatten()[flat]):.6g})."]
    if expected.numel() <= 8:
        lines.append(f"torch: {_values(expected)}\nyours: {_values(got)}")
    return "\n".join(lines)


def _values(t) -> str:
    return "[" + ", ".join(f"{float(v):.4g}" for v in t.flatten()) + "]"


def _shape(t) -> str:
    return str(list(t.shape))


def _dtype(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _output_label(k: int, count: int) -> str:
    return "forward's output" if count == 1 else f"forward's output {k}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


__all__ = ["check_function"]
