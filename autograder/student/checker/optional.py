"""The optional checks: the Function with PyTorch 2's transforms, forward-mode AD and the compiler.

Each runs only when asked for (``vmap``, ``forward_ad``, ``double_backward``, ``compile``) and once
the core checks pass; each message starts with the check's name.
"""

from __future__ import annotations

from autograder.student.checker.core import _defines, _expected_gradients, _upstream
from autograder.student.checker.messages import (
    _count, _difference, _dtype, _explain_compile, _output_label, _run_reference,
    _run_student, _shape,
)
from autograder.student.checker.patterns import _diagnose_tangent
from autograder.student.checker.references import (
    _allclose, _as_float64, _as_tuple, _autograd_grad, _close, _compiler_reset, _dual_level, _enable_grad,
    _draw, _equal, _func_vjp, _Generator, _Inputs, _make_dual, _in_dtype, _randperm, _stack,
    _is_float_tensor, _StudentError, _Tensor, _torch_compile, _unpack_dual, _vmap, _zeros_like,
)
from autograder.student.checker.transforms import COMPILE_BACKEND


_BATCH = 3  # examples in a vmap batch


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
    examples = [_Inputs(tuple(e), inputs.names, constants=inputs.constants, dtype=inputs.dtype) for e in examples]
    batched = [_stack([_working(e.args[i], inputs) for e in examples], dim=dims[i]) if i in dims
               else _working(a, inputs) for i, a in enumerate(inputs.args)]
    in_dims = tuple(dims.get(i) for i in range(len(batched)))
    hand_written = _defines(function, "vmap")
    moved = hand_written and any(dims.get(i) != 0 for i in inputs.tensor_positions)

    try:
        got = _as_tuple(_run_option(label, lambda: _vmap(_applier(function, inputs.inplace), in_dims=in_dims)(*batched),
                                    inputs))
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
    cotangents = [_draw((_BATCH, *expected[k].shape[1:]), cot_gen, expected[k].dtype, expected[k].device) for k in used]
    got_grads = _run_option(label, lambda: _vmapped_gradients(function, inputs, batched, in_dims, used, cotangents),
                            inputs)
    expected_grads = [_expected_gradients(reference, e, used, [c[b] for c in cotangents]) for b, e in enumerate(examples)]
    ok = True
    for j, i in enumerate(inputs.tensor_positions):
        e = _stack([grads[j] for grads in expected_grads])
        if not _close(got_grads[j], e, rtol, atol):
            ok = False
            report.add(f"{label}: the per-example gradient for `{inputs.names[i]}` is wrong (the first index "
                       f"is the example in the batch).{hint}\n{_difference(e, got_grads[j], rtol, atol)}")
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
                call[i] = t.clone() if inputs.inplace else t  # an in-place Function changes a copy, never a primal
            outputs = _as_tuple(function.apply(*call))
            return tuple(outputs[k] for k in used)

        _, pullback = _func_vjp(used_outputs, *[args[i] for i in positions])
        return pullback(tuple(grads_out))

    return _vmap(gradients, in_dims=in_dims + (0,) * len(used))(*batched, *cotangents)


def _check_forward_ad(function, reference, inputs, report, rtol, atol) -> None:
    """Output tangents from the Function's ``jvp`` against forward-mode AD on the reference."""
    label = "forward-mode AD (jvp)"
    gen = _Generator().manual_seed(2468)
    tangents = _drawn_for_inputs(inputs, gen)
    expected = _expected_tangents(reference, inputs, tangents)
    got = _student_tangents(function, inputs, tangents, label)
    if len(got) != len(expected):
        return  # the ordinary checks compared the number of outputs already
    for k, (g, e) in enumerate(zip(got, expected)):
        if e is None or _close(g, e, rtol, atol):
            continue
        hint = _diagnose_tangent(inputs, tangents, k, g, e, rtol, atol,
                                 student=lambda t: _student_tangents(function, inputs, t, label),
                                 torch_tangents=lambda t: _expected_tangents(reference, inputs, t))
        report.add(f"{label}: the tangent of {_output_label(k, len(got))} is wrong.{hint}\n"
                   f"For random input tangents, compared with forward-mode AD on the reference: "
                   f"{_difference(e, g, rtol, atol)}")


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
    directions = _drawn_for_inputs(inputs, gen)
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
                   f"with torch autograd on the reference: {_difference(e, g, rtol, atol)}")


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
        compiled = _torch_compile(_applier(function, inputs.inplace), backend=COMPILE_BACKEND, fullgraph=True)
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
                           f"without compiling.\n{_difference(e, g, rtol, atol)}")
    finally:
        _compiler_reset()


def _applier(function, inplace: bool = False):
    """A plain function that calls ``function.apply``: what vmap and torch.compile transform; with ``inplace``,
    on copies of the tensor arguments, which an in-place Function may change."""

    def apply(*args):
        return function.apply(*[a.clone() if inplace and isinstance(a, _Tensor) else a for a in args])

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
                       f"{_difference(e, g, rtol, atol)}")
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


def _permuted(value, gen):
    """``value`` as float64 with its elements in a random order (the same values, another example)."""
    flat = _as_float64(value).reshape(-1)
    return flat[_randperm(flat.numel(), generator=gen).to(flat.device)].reshape(value.shape)


def _drawn_for_inputs(inputs: _Inputs, gen) -> list:
    """Seeded random tensors (tangents, directions), one per float tensor input: its shape, in the dtype the
    student's code gets it in, on its device (read from the input, not from a copy of it)."""
    return [_draw(a.shape, gen, inputs.working_dtype(a), a.device)
            for a in (inputs.args[i] for i in inputs.tensor_positions)]


def _working(value, inputs: _Inputs):
    """A copy of an argument as the student's code gets it: a float tensor in its working dtype."""
    return _in_dtype(value, inputs.dtype) if _is_float_tensor(value) else _as_float64(value)
