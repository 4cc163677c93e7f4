"""Mistake patterns: what a wrong gradient (or tangent) reveals, and what backward returned that autograd would
refuse, sum or cast.

``_raw_problem`` judges a gradient as backward returned it (type, shape, device, dtype), naming a swap or a
transpose where the values show one; ``_tidied`` is the gradient as autograd leaves it (summed to the
input's shape, cast to its dtype), which is accepted unless a test asks for ``strict_gradients``.
``_diagnose`` names the likely mistake behind a wrong gradient (forgotten grad_output, swapped order,
transposed, an ignored output, a constant factor, a flipped sign), only where the values can show it.
"""

from __future__ import annotations

import math

import torch

from autograder.student.checker.messages import _a_tensor_on, _DEVICE_RULE, _dtype, _dtype_name, _shape
from autograder.student.checker.references import (
    _allclose, _close, _float64, _is_float_tensor, _isclose, _ones_like, _StudentError, _Tensor, _zeros_like,
)


def _is_tensor_close(value, expected, rtol, atol) -> bool:
    return isinstance(value, _Tensor) and _close(value, expected, rtol, atol)


def _raw_problem(got, j, name, expected, inputs, rtol, atol) -> str | None:
    """What is wrong with the type, shape, device or dtype of ``got[j]``, the gradient of tensor input ``j``
    as backward returned it, before autograd validates it; None when autograd would take it.

    Autograd sums a gradient of a shape that broadcasts to the input's down to it, and casts a gradient
    of another float dtype to the input's: that is accepted, and judged by value as autograd leaves it,
    unless ``inputs.strict_gradients`` asks for each gradient in its input's shape and dtype.
    """
    r, e = got[j], expected[j]
    if r is None:
        return None
    want = inputs.working_dtype(inputs.args[inputs.tensor_positions[j]])
    if not isinstance(r, _Tensor):
        what = "a NumPy array" if type(r).__module__ == "numpy" else f"a {type(r).__name__}"
        return (f"backward returned {what} as the gradient for `{name}`; return a tensor of {name}'s shape "
                f"{_shape(e)}" + (" (torch.as_tensor(array, device=grad_output.device))." if "NumPy" in what else "."))
    if r.device != e.device:
        return (f"backward returned {_a_tensor_on(r.device)} as the gradient for `{name}`, which is on {e.device}: "
                f"{_DEVICE_RULE}")
    summed = r.shape != e.shape and _broadcasts_to(r.shape, e.shape)
    cast = r.dtype != want and r.is_floating_point()
    if r.shape != e.shape and not summed or summed and inputs.strict_gradients:
        return _wrong_shape(got, j, name, expected, inputs, rtol, atol, summed)
    if r.dtype != want and (inputs.strict_gradients or not cast):
        return (f"backward's gradient for `{name}` has dtype {_dtype(r)}, but `{name}` is {_dtype_name(want)}"
                f"{_AUTOGRAD_CASTS if cast else ''}: make new tensors with dtype={name}.dtype (or "
                f"torch.zeros_like / torch.ones_like).")
    return None


_AUTOGRAD_CASTS = (" (autograd would cast it to the input's dtype, and this test asks for each gradient in its "
                   "input's dtype, as backward returns it)")


def _wrong_shape(got, j, name, expected, inputs, rtol, atol, summed: bool) -> str:
    """A gradient whose shape is not its input's: whose it is, when that shows (a swap, a transpose)."""
    r, e = got[j], expected[j]
    # A swap: this gradient is another input's, and that input's own gradient is wrong too.
    others = [k for k, e_k in enumerate(expected) if k != j and _close(r, e_k, rtol, atol)
              and not _is_tensor_close(got[k], e_k, rtol, atol)]
    if others:
        other = inputs.names[inputs.tensor_positions[others[0]]]
        hint = (f" It is the gradient of `{other}`: backward returns its gradients in the wrong "
                f"order. Return them in the order of forward's arguments.")
    elif r.dim() >= 2 and r.mT.shape == e.shape and _close(r.mT, e, rtol, atol):
        hint = " It is the transpose of the right gradient: swap the matrix product's order or transpose it."
    elif summed:
        hint = (f" Autograd would sum it down to {_shape(e)} (it sums a gradient over the dimensions "
                f"broadcasting added or stretched), and this test asks for each gradient in its input's shape, "
                f"as backward returns it: reduce it yourself ({name}'s gradient .sum_to_size({name}.shape)).")
    else:
        hint = ""
    return (f"backward's gradient for `{name}` has shape {_shape(r)}, but `{name}` has shape "
            f"{_shape(e)}: each gradient must have its input's shape.{hint}")


def _is_integer_tensor(value) -> bool:
    """An integer or bool tensor: one autograd never differentiates with respect to."""
    return isinstance(value, _Tensor) and not value.is_floating_point() and not value.is_complex()


def integer_gradient(name: str, dtype) -> str:
    """backward returned a gradient for ``name``, a tensor of the integer (or bool) ``dtype``."""
    kind = "a bool" if dtype == torch.bool else "an integer"
    return (f"backward returned a gradient for `{name}`, which is {kind} tensor ({_dtype_name(dtype)}): only "
            f"floating-point tensors have gradients, and autograd drops this one without a word. Return None in its "
            f"place.")


def cast_words(name: str, returned, dtype) -> str:
    """' (backward returned it in float16, ...)': what autograd did to a gradient of another float dtype than its
    input's, and whether that can be why it is wrong; "" where the dtypes agree."""
    if returned == dtype or not returned.is_floating_point:
        return ""
    said = (f" (backward returned it in {_dtype_name(returned)}, which autograd casts to `{name}`'s "
            f"{_dtype_name(dtype)}")
    coarse, fine = torch.finfo(returned), torch.finfo(dtype)
    digits = {d: round(-math.log10(f.resolution)) for d, f in ((returned, coarse), (dtype, fine))}
    if coarse.eps <= fine.eps:
        return said + f", which keeps all {_dtype_name(dtype)} can hold: the dtype is not what makes it wrong)"
    return (said + f", but only after backward rounded it to {_dtype_name(returned)}, which keeps about "
            f"{digits[returned]} significant digits where {_dtype_name(dtype)} keeps {digits[dtype]}: compute it in "
            f"`{name}`'s dtype, making new tensors with dtype={name}.dtype and converting nothing to "
            f"{_dtype_name(returned)})")


def tidying_words(got, expected, inputs, unsound, rtol, atol) -> dict[int, str]:
    """For each gradient ``got[j]`` (of tensor input j, as backward returned it) that autograd would sum to its
    input's shape or cast to its dtype before judging it, and is not ``unsound``, the words that say so: added to
    its message if it is wrong."""
    notes = {}
    for j, (i, g) in enumerate(zip(inputs.tensor_positions, got)):
        if j not in unsound and isinstance(g, _Tensor):
            words = (_summed_words(got, j, expected, inputs, rtol, atol) if g.shape != expected[j].shape else "") \
                + cast_words(inputs.names[i], g.dtype, inputs.working_dtype(inputs.args[i]))
            if words:
                notes[j] = words
    return notes


def _summed_words(got, j, expected, inputs, rtol, atol) -> str:
    """' (backward returned it with shape [4, 3], which autograd summed to ...)', or, where it is another input's
    gradient, that backward returns its gradients in the wrong order."""
    names = [inputs.names[i] for i in inputs.tensor_positions]
    whose = [k for k, e in enumerate(expected) if k != j and _close(got[j], e, rtol, atol)]
    if whose:
        return (f" (backward returned it with shape {_shape(got[j])}: it is the gradient of `{names[whose[0]]}`, so "
                f"backward returns its gradients in the wrong order)")
    return (f" (backward returned it with shape {_shape(got[j])}, which autograd summed to `{names[j]}`'s shape "
            f"{_shape(expected[j])})")


def _tidied(gradient, like, dtype):
    """A gradient as autograd leaves it for an input like ``like``: summed to its shape, cast to ``dtype``."""
    if not isinstance(gradient, _Tensor):
        return gradient
    if gradient.shape != like.shape and _broadcasts_to(gradient.shape, like.shape):
        gradient = gradient.sum_to_size(like.shape)
    return gradient.to(dtype) if gradient.is_floating_point() else gradient


def _diagnose(inputs, case, j, g, expected, rtol, atol, student, torch_gradients) -> str:
    """Name the likely mistake behind the wrong gradient ``g`` of tensor input ``j``, if recognisable.

    ``student(upstream)`` and ``torch_gradients(upstream)`` give the student's and torch's
    gradients for other upstream gradients (the student's may raise ``_StudentError``).
    """
    e = expected[j]
    names = [inputs.names[i] for i in inputs.tensor_positions]
    if bool(torch.isnan(g).any()) and not bool(torch.isnan(e).any()):  # NaN shows no pattern: say where it comes from
        return (" It holds NaN where torch's gradient is finite: a value nothing should have used, such as an element "
                "no code wrote, a masked lane of a kernel's tl.load without other=, or 0/0.")
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
        got_ones = student(ones)[j]
    except _StudentError:
        got_ones = None
    if got_ones is not None and _close(got_ones, g, rtol, atol):
        expected_ones = torch_gradients(ones)[j]
        if _close(got_ones, expected_ones, rtol, atol):
            return (" It does not change when grad_output changes: you forgot to multiply by "
                    "grad_output (the chain rule: return grad_output * local derivative).")
        return " It does not depend on grad_output: multiply the local derivative by grad_output."
    return _scaled(g, e, rtol, atol, "gradient", _inputs_vary(inputs))


def _diagnose_tangent(inputs, tangents, k, g, e, rtol, atol, student, torch_tangents) -> str:
    """Name the likely mistake behind the wrong tangent ``g`` of output ``k``, if recognisable.

    ``student(tangents)`` and ``torch_tangents(tangents)`` give each output's tangent for other
    input tangents.
    """
    doubled = student([2 * t for t in tangents])[k]
    if _close(doubled, g, rtol, atol) and not _allclose(g, _zeros_like(g)):
        return (" It does not change when the input tangents change: multiply by the tangent "
                "(jvp returns the Jacobian times the tangents).")
    positions = inputs.tensor_positions
    if len(positions) > 1:
        wrong = []
        for j, i in enumerate(positions):
            alone = [t if m == j else _zeros_like(t) for m, t in enumerate(tangents)]
            if not _close(student(alone)[k], torch_tangents(alone)[k], rtol, atol):
                wrong.append(f"`{inputs.names[i]}`")
        if wrong:
            return f" The part that comes from the tangent of {' and '.join(wrong)} is wrong."
    return _scaled(g, e, rtol, atol, "tangent", _inputs_vary(inputs))


def _returned_none(needed: list[str], names: list[str]) -> str:
    """backward returned None as a whole, though the inputs ``needed`` need gradients."""
    who = " and ".join(f"`{n}`" for n in needed)
    need = "needs a gradient" if len(needed) == 1 else "need gradients"
    return (f"backward returned None, but {who} {need}: is a `return` missing? backward must return one "
            f"gradient per input of forward ({', '.join(names)}), in forward's order, with None for an "
            f"input that needs none.")


def _scaled(got, expected, rtol: float, atol: float, what: str, inputs_vary: bool) -> str:
    """' Its sign is flipped.' or ' It is c times the right {what}...' when ``got`` is ``c * expected``, else "".

    Only where the values can show it: a ratio of single numbers is always some c, and so is one of two
    formulas' values at a single input value; so ``expected`` must hold two clearly non-zero values that
    differ, and the inputs two values that differ (``inputs_vary``). The comparison allows the rounding of
    two results in the check's dtype (4 * rtol, 4 * atol).
    """
    values = expected.detach().to(_float64).flatten()
    values = values[values.abs() > atol + rtol * values.abs().max()] if values.numel() else values
    if not inputs_vary or values.numel() < 2 or bool(_isclose(values, values[0], rtol=4 * rtol, atol=4 * atol).all()):
        return ""
    expected, got = expected.detach().to(_float64), got.detach().to(_float64)
    norm = float((expected * expected).sum())
    c = float((got * expected).sum()) / norm if norm else 1.0
    if abs(c - 1) <= 4 * rtol or not _allclose(got, c * expected, rtol=4 * rtol, atol=4 * atol):
        return ""
    if abs(c + 1) <= 4 * rtol:
        return " Its sign is flipped."
    return f" It is {c:.4g} times the right {what}" + (": a constant factor is off." if what == "gradient" else ".")


def _inputs_vary(inputs) -> bool:
    """Whether the float tensor inputs hold at least two different values between them."""
    values = [a.detach().flatten() for a in inputs.args if _is_float_tensor(a) and a.numel()]
    return any(bool((v != v[0]).any()) for v in values) or len({float(v[0]) for v in values}) > 1


def _broadcasts_to(shape, target) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == shape
    except RuntimeError:
        return False
