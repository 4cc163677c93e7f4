"""What a function gives under PyTorch's transforms, computed the same way for the student's and the reference.

``check_callable``'s options (``vmap``, ``forward_ad``, ``double_backward``, ``compile``, ``mutates``)
and the grader's referee both compare ``run_transform(kind, student, ...)`` with
``expected_results(kind, reference, ...)`` on the same inputs and the same random ``payload``
(``draw_payload``): per-example outputs and gradients under ``torch.func.vmap``, output tangents
through forward-mode AD, first and second derivatives through backward, outputs and gradients under
``torch.compile``, the arguments after a call that changes them in place. The referee computes the
reference's side itself and asks the student's process for the other, as plain tensors. Under
``compile`` the reference runs eagerly: its compiled results are the same, and compiling it cost
the referee about 2 s of an assignment-09 notebook.
"""

from __future__ import annotations

import torch

from autograder.student.checker.references import (
    _as_float64, _as_tuple, _autograd_grad, _close, _compiler_reset, _draw, _dual_level, _enable_grad, _equal,
    _func_vjp, _is_float_tensor, _make_dual, _randperm, _stack, _Tensor, _torch_compile, _unpack_dual, _vmap,
    _zeros_like,
)

KINDS = ("vmap", "forward_ad", "double_backward", "compile", "mutates")
LABELS = {"vmap": "under torch.func.vmap", "forward_ad": "through forward-mode AD (jvp)",
          "double_backward": "differentiating backward again (double backward)",
          "compile": "under torch.compile", "mutates": "changing its inputs in place"}
BATCH = 3
COMPILE_BACKEND = "aot_eager"  # Dynamo and AOTAutograd capture as for inductor; no inductor, no C++ compiler


def fresh(args) -> list:
    """Float64 leaves (float32 on mps) that need a gradient for the float tensors of ``args``, on their device;
    copies of other tensors; the rest as is."""
    return [_as_float64(a).requires_grad_(True) if _is_float_tensor(a)
            else a.clone() if isinstance(a, _Tensor) else a for a in args]


def positions(args) -> list[int]:
    return [i for i, a in enumerate(args) if _is_float_tensor(a)]


def used_outputs(outputs) -> list[int]:
    """The outputs that carry a gradient (float tensors that need one)."""
    return [k for k, o in enumerate(outputs) if isinstance(o, _Tensor) and o.requires_grad]


def draw_payload(kind: str, args, outputs, generator=None) -> dict:
    """The random tensors a transform needs, drawn once and given to both sides (``outputs``: the reference's).

    Each lives on the device of the tensor it stands for, in its dtype (``_draw``)."""
    args = [a.detach() if isinstance(a, _Tensor) else a for a in args]
    where, used = positions(args), used_outputs(outputs)
    if kind == "vmap":
        batched = []
        for i, a in enumerate(args):
            if i in where:
                flat = a.reshape(-1)
                examples = [a] + [flat[_randperm(flat.numel(), generator=generator).to(a.device)].reshape(a.shape)
                                  for _ in range(BATCH - 1)]
                batched.append(_stack(examples))
            else:
                batched.append(a)
        cotangents = [_draw((BATCH, *outputs[k].shape), generator, outputs[k].dtype, outputs[k].device) for k in used]
        return {"batched": batched, "cotangents": cotangents}
    if kind == "forward_ad":
        return {"tangents": [_draw(args[i].shape, generator, args[i].dtype, args[i].device) for i in where]}
    if kind in ("double_backward", "compile"):
        return {"upstream": [_draw(outputs[k].shape, generator, outputs[k].dtype, outputs[k].device) for k in used],
                "directions": [_draw(args[i].shape, generator, args[i].dtype, args[i].device) for i in where]}
    return {}


def run_transform(kind: str, call, args, payload: dict, used: list[int]) -> list:
    """``call``'s results under the transform ``kind`` (a flat list of tensors, bools and None)."""
    if kind == "vmap":
        return _vmap_results(call, payload["batched"], payload["cotangents"], used)
    if kind == "forward_ad":
        return _tangents(call, args, payload["tangents"])
    if kind == "double_backward":
        return _second_derivatives(call, args, payload["upstream"], payload["directions"], used)
    if kind == "compile":
        return _compiled(call, args, payload["upstream"], used)
    if kind == "mutates":
        copies = [a.detach().clone() if isinstance(a, _Tensor) else a for a in args]
        returned = call(*copies)
        return [returned is None] + [c for c in copies if isinstance(c, _Tensor)]
    raise ValueError(f"no transform {kind!r}")


def expected_results(kind: str, reference, args, payload: dict, used: list[int]) -> list:
    """The reference's side of ``run_transform``: the same, except that under ``compile`` the
    reference runs eagerly (the instructor's function needs no proof that it compiles)."""
    if kind == "compile":
        return _outputs_and_gradients(reference, args, payload["upstream"], used)
    return run_transform(kind, reference, args, payload, used)


def _vmap_results(call, batched, cotangents, used) -> list:
    where = positions(batched)
    in_dims = tuple(0 if i in where else None for i in range(len(batched)))
    outputs = _as_tuple(_vmap(call, in_dims=in_dims)(*batched))
    if not used:
        return [o.detach() if isinstance(o, _Tensor) else o for o in outputs]

    def gradients(*flat):
        args, grads_out = flat[:len(batched)], flat[len(batched):]

        def chosen(*tensors):
            chosen_args = list(args)
            for i, t in zip(where, tensors):
                chosen_args[i] = t
            results = _as_tuple(call(*chosen_args))
            return tuple(results[k] for k in used)

        _, pullback = _func_vjp(chosen, *[args[i] for i in where])
        return pullback(tuple(grads_out))

    grads = _vmap(gradients, in_dims=in_dims + (0,) * len(used))(*batched, *cotangents)
    return [o.detach() if isinstance(o, _Tensor) else o for o in outputs] + [g.detach() for g in grads]


def _tangents(call, args, tangents) -> list:
    where = positions(args)
    with _dual_level():
        duals = list(args)
        for i, t in zip(where, tangents):
            duals[i] = _make_dual(args[i].detach(), t)
        outputs = _as_tuple(call(*duals))
        found = []
        for o in outputs:
            if _is_float_tensor(o):
                primal, tangent = _unpack_dual(o)
                found.append((tangent if tangent is not None else _zeros_like(primal)).detach().clone())
        return found


def _second_derivatives(call, args, upstream, directions, used) -> list:
    leaves = [args[i] for i in positions(args)]
    with _enable_grad():
        outputs = _as_tuple(call(*args))
        grads_out = [u.clone().requires_grad_(True) for u in upstream]
        first = _autograd_grad([outputs[k] for k in used], leaves, grads_out, create_graph=True, allow_unused=True)
        differentiable = [g is not None and g.requires_grad for g in first]
        terms = [(g * d).sum() for g, d, ok in zip(first, directions, differentiable) if ok]
        second = [None] * (len(leaves) + len(grads_out))
        if terms:
            total = terms[0]
            for term in terms[1:]:
                total = total + term
            second = _autograd_grad(total, leaves + grads_out, allow_unused=True)
    return ([bool(ok) for ok in differentiable] + [g.detach() if g is not None else None for g in first]
            + [s.detach() if s is not None else None for s in second])


def _compiled(call, args, upstream, used) -> list:
    _compiler_reset()
    try:
        def apply(*a):
            return call(*a)

        return _outputs_and_gradients(_torch_compile(apply, backend=COMPILE_BACKEND, fullgraph=True), args,
                                      upstream, used)
    finally:
        _compiler_reset()


def _outputs_and_gradients(call, args, upstream, used) -> list:
    """``call``'s outputs, then the gradients of ``used`` outputs weighted by ``upstream`` for each tensor argument."""
    outputs = _as_tuple(call(*args))
    leaves = [args[i] for i in positions(args)]
    grads = _autograd_grad([outputs[k] for k in used], leaves, [u.clone() for u in upstream],
                           allow_unused=True) if used else []
    return ([o.detach() if isinstance(o, _Tensor) else o for o in outputs]
            + [g.detach() if g is not None else None for g in grads])


def difference(kind: str, got: list, expected: list, rtol: float, atol: float) -> str | None:
    """What differs between the two sides' results of one transform, in a few words, or None."""
    label = LABELS[kind]
    if len(got) != len(expected):
        return f"{label}: {len(got)} results, the reference gives {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        if e is None or isinstance(e, bool):
            g = g if not isinstance(g, _Tensor) or g.numel() != 1 or g.dtype != torch.bool else bool(g)
            if isinstance(e, bool) and e and g is not True:
                return (f"{label}: result {k + 1} is not differentiable, though the reference's is (backward "
                        f"computed it outside autograd's view: .detach(), torch.no_grad(), NumPy)"
                        if kind == "double_backward" else f"{label}: result {k + 1} differs from the reference")
            continue
        if not isinstance(g, _Tensor):
            g = _zeros_like(e) if g is None else g
            if not isinstance(g, _Tensor):
                return f"{label}: result {k + 1} is a {type(g).__name__}, expected a tensor"
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"{label}: result {k + 1} has shape {list(g.shape)} and dtype {g.dtype}, expected {list(e.shape)} and {e.dtype}"
        if not (_close(g, e, rtol, atol) if e.is_floating_point() else _equal(g, e)):
            return f"{label}: result {k + 1} is wrong"
    return None
