"""What a student reads: torch's errors in course terms, and the mistakes a wrong gradient reveals.

``_run_student`` runs student code and turns any exception into a ``_StudentError`` whose message
explains it (``_TORCH_ERRORS`` maps torch's own messages to the course's words, with the line of
student code that raised). The ``_diagnose`` functions name the likely mistake behind a wrong
gradient or tangent (forgotten grad_output, swapped order, transposed, a constant factor, a
flipped sign); ``_difference`` shows where and by how much a result is off.

How a test cell fails is said here once, for every place that finds it (the checks in the notebook,
the grading kernels, the grader's referee), so that the notebook, ``check`` and the feedback page say
the same: an exercise left as released is ``NOT_DONE`` (``not_done``); what the student's code did in
the grader's own check, ``student_error``; a wrong output or gradient, ``wrong_output`` and
``wrong_gradient``, naming the input by its name in ``forward``.
"""

from __future__ import annotations

import re
import traceback

import torch

from autograder.student.checker.references import (
    _LIBRARY_DIRS, ATOL, DTYPE_TOLERANCES, RTOL, _allclose, _close, _float64, _HandedBackToAutograd, _Inputs, _isclose,
    _is_float_tensor, _ones_like, _StudentError, _Tensor, _zeros_like,
)

# --------------------------------------------------------------------------------------------
# Torch's errors in course terms

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
    (r"a leaf Variable that requires grad (?:is being|has been) used in an in-place operation",
     lambda m, names: "forward modified its input in place, and the check hands it a leaf tensor that requires "
                      "grad, which autograd forbids to change: an in-place Function (with ctx.mark_dirty) is "
                      "checked with check_function(..., inplace=True), which hands it a copy; any other forward "
                      "computes a new tensor (x * 2, not x.mul_(2))."),
    (r"An input that has been returned as-is as output is being saved for backward",
     lambda m, names: "forward returned one of its inputs as it is, and setup_context saved it for backward. "
                      "Torch refuses that unless forward changed the input in place and setup_context marked it "
                      "with ctx.mark_dirty(input) (an in-place Function must), and under torch.func (vmap, grad) "
                      "even then: otherwise return, and save, a new tensor (x.clone()) or a view (x.view_as(x))."),
    (r"does not require grad and does not have a grad_fn",
     lambda m, names: "an output of forward is not connected to the inputs: return new tensors "
                      "computed in forward, not detached copies."),
]


# --------------------------------------------------------------------------------------------
# How a test cell fails, said once

NOT_DONE = "not done yet (replace `raise NotImplementedError()` with your code)"


def not_done(error: BaseException) -> bool:
    """Whether ``error`` is an exercise left as released: its bare ``raise NotImplementedError()``, or
    the checker's own report of one (``NotImplementedError(NOT_DONE)``)."""
    return isinstance(error, NotImplementedError) and str(error) in ("", NOT_DONE)


def student_error(error: str) -> str:
    """What the student's code did, from its error as the grader's process reports it (``Type: message``)."""
    if error.strip() in ("NotImplementedError:", f"NotImplementedError: {NOT_DONE}"):
        return NOT_DONE
    if error.startswith("TimeoutError: "):
        return error.removeprefix("TimeoutError: ")
    return f"raised {error}"


def wrong_output(label: str, who: str, expected, got, rtol: float, atol: float) -> str:
    """A floating-point output of ``who`` (forward, or a function's name) that differs from the reference's."""
    return (f"{label} is wrong, so the gradients cannot be right either; fix {who} first.\n"
            f"{_difference(expected, got, rtol, atol)}")


def wrong_gradient(name: str, expected, got, rtol: float, atol: float, when: str = "", hint: str = "") -> str:
    """The gradient for the input called ``name`` differs from torch autograd's on the reference."""
    return (f"the gradient for `{name}` is wrong{when}.{hint}\nFor a random grad_output, compared with torch "
            f"autograd on the reference: {_difference(expected, got, rtol, atol)}")


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
            "operations: that is the point of writing it. (A Function that calls autograd on purpose, "
            "as gradient checkpointing does when it recomputes forward under torch.enable_grad, is "
            "checked with check_function(..., autograd_in_backward=True).)"
        ) from None
    except NotImplementedError as err:
        if not_done(err):  # the exercise as released: the test cell says so, as for any call of it
            raise NotImplementedError(NOT_DONE) from None
        raise _StudentError(_explain(err, stage, inputs.names)) from None
    except Exception as err:  # noqa: BLE001 - any student error becomes an explanation
        made = _device_mistake(str(err), inputs.device)
        if made:
            raise _StudentError(_wrong_device(stage, made, inputs.device) + _student_line(err, MET_THERE)) from None
        legacy = _legacy_style(err, inputs.undecorated)
        message = _explain(err, stage, inputs.names)
        raise _StudentError(message.rstrip(".") + legacy if legacy else message) from None


# Torch's words for tensors on two devices in one operation (CUDA, mps, meta; torch 2.11 to 2.13).
_MIXED_DEVICES = re.compile(r"same device|expected device|is not on the expected device|on the same device as")
_DEVICE_NAME = re.compile(r"\b(cpu|cuda(?::\d+)?|mps(?::\d+)?|meta|xpu(?::\d+)?)\b")
_DEVICE_RULE = ("pass device=x.device where you make a tensor (torch.zeros(shape, device=x.device)), or use "
                "torch.zeros_like(x) / x.new_zeros(shape), which follow x.")


def _device_mistake(text: str, device) -> str | None:
    """The other device, when ``text`` is torch's error for tensors on two devices and one of them is
    not ``device`` (the inputs'), else None."""
    if not _MIXED_DEVICES.search(text):
        return None
    named = [d for d in dict.fromkeys(_DEVICE_NAME.findall(text)) if d.split(":")[0] != device.type]
    return named[0] if named else None


def _wrong_device(stage: str, made: str, device, verb: str = "made") -> str:
    """A tensor the student made (or returned) on ``made`` while the inputs are on ``device``: what to do."""
    where = {"forward": "your forward", "backward": "your backward"}.get(stage, stage)
    what = _a_tensor_on(made)
    meta = (" (the check runs your Function on `meta` tensors, which have shapes and no values: they stand "
            "for a GPU, so a tensor made without device= shows up on a machine without one)"
            if device.type == "meta" else "")
    return f"{where} {verb} {what}; the input is on {device}{meta}: {_DEVICE_RULE}"


def _a_tensor_on(device) -> str:
    """'a CPU tensor', or 'a tensor on cuda:0'."""
    return "a CPU tensor" if str(device) == "cpu" else f"a tensor on {device}"


def _explain(err: Exception, stage: str, names: list[str]) -> str:
    text = str(err)
    for pattern, explain in _TORCH_ERRORS:
        match = re.search(pattern, text)
        if match:
            return explain(match, names) + _student_line(err)
    return f"{stage} raised {type(err).__name__}: {text}{_student_line(err)}"


# A device mistake's line is where the stray tensor met the inputs' tensors, not always where it was made.
MET_THERE = "the tensors met in"


def _student_line(err: BaseException, lead: str = "in") -> str:
    """' (in backward, line N: code)' for the last traceback frame outside torch and this package."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not f.filename.startswith(_LIBRARY_DIRS)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" ({lead} {frame.name}, line {frame.lineno}: {frame.line.strip() if frame.line else '?'})"


def _legacy_style(err: Exception, undecorated: tuple) -> str:
    """What to do about methods without @staticmethod, when calling them failed the way the legacy style does.

    ``Function.apply`` calls forward, backward and setup_context on the class with ctx first, so
    such a method works as long as its first parameter is ctx; written for an instance (``self``
    first, then ctx, or state set in ``__init__``), it fails.
    """
    text = str(err)
    if not undecorated or not ((isinstance(err, TypeError) and "positional argument" in text)
                               or (isinstance(err, AttributeError) and "Backward' object" in text)):
        return ""
    methods = " and ".join(undecorated)
    defs = " and ".join(f"'def {m}'" for m in undecorated)
    has, is_ = ("has", "is") if len(undecorated) == 1 else ("have", "are")
    return (f". {methods} {has} no @staticmethod and {is_} written for an instance, as in PyTorch's legacy "
            f"style. PyTorch calls them on the class, with ctx as the first argument and no self: put "
            f"@staticmethod on the line above {defs}, take ctx first, and pass settings as arguments of "
            f"apply (kept on ctx).")


def _run_reference(reference, args):
    try:
        return reference(*args)
    except Exception as err:
        raise RuntimeError(f"the reference raised {type(err).__name__}: {err} "
                           f"(this is a problem with the test, not with your Function)") from err


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
    elif "failed to bind arguments" in text:
        hint = (" On this torch, torch.compile cannot trace a forward or backward written as a classmethod: "
                "if yours are, make them staticmethods.")
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


# --------------------------------------------------------------------------------------------
# Mistake patterns


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


# --------------------------------------------------------------------------------------------
# Showing values


def _difference(expected, got, rtol: float, atol: float) -> str:
    """Where and by how much ``got`` differs from ``expected`` (shown from CPU float64 copies), and what the
    check allows: |yours - torch| <= atol + rtol * |torch|, the tolerances named, and how to change them."""
    if got.device != expected.device:
        return f"It is on {got.device}, expected on {expected.device}."
    dtype = got.dtype
    expected = expected.detach().cpu().to(_float64)
    got = got.detach().cpu().to(_float64)
    error = (got - expected).abs()
    wrong = ~_isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    excess = (error - rtol * expected.abs()).nan_to_num(float("inf"))
    flat = int(excess.argmax()) if error.numel() else 0
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), expected.shape)) if expected.dim() else ()
    at = f" at index {list(index)}" if index else ""
    want, have = float(expected.flatten()[flat]), float(got.flatten()[flat])
    lines = [f"{int(wrong.sum())} of {expected.numel()} elements differ by more than the tolerance; the worst is"
             f"{at}: torch {_number(want, have)}, yours {_number(have, want)}, a difference of "
             f"{abs(have - want):.3g} where {atol + rtol * abs(want):.3g} is allowed "
             f"(atol + rtol * |torch|, {_tolerance_words(rtol, atol, dtype)})."]
    if expected.numel() <= 8:
        lines.append(f"torch: {_values(expected)}\nyours: {_values(got)}")
    return "\n".join(lines)


def _number(value: float, other: float) -> str:
    """``value`` with as many significant digits as it takes to tell it from ``other`` (6 to 17)."""
    for digits in range(6, 18):
        if f"{value:.{digits}g}" != f"{other:.{digits}g}":
            return f"{value:.{digits}g}"
    return f"{value:.17g}"


def _tolerance_words(rtol: float, atol: float, dtype) -> str:
    """'rtol=1e-06, atol=1e-08, the checker's defaults in float64; pass rtol= and atol= to the check to change
    them' (or the defaults of the dtype the code ran in, or the test's own)."""
    if rtol == atol == 0:
        return "integer values must match exactly"
    if (rtol, atol) == (RTOL, ATOL):
        whose = "the checker's defaults in float64"
    elif (rtol, atol) == DTYPE_TOLERANCES.get(dtype):
        whose = f"{_dtype_name(dtype)}'s defaults, as in torch.testing.assert_close"
    else:
        whose = "the check's own or the test's"
    return f"rtol={rtol:.3g}, atol={atol:.3g}, {whose}; pass rtol= and atol= to the check to change them"


def _values(t) -> str:
    return "[" + ", ".join(f"{float(v):.4g}" for v in t.flatten()) + "]"


def _shape(t) -> str:
    return str(list(t.shape))


def _dtype(t) -> str:
    return _dtype_name(t.dtype)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _output_label(k: int, count: int, what: str = "forward's output") -> str:
    return what if count == 1 else f"{what} {k}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _a_value_of_type(value) -> str:
    """'None', 'an int', 'a float', 'a tuple': what a non-tensor argument is, in words."""
    if value is None:
        return "None"
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _same_value(got, want) -> bool:
    """Whether a non-tensor output is the reference's (a NumPy array: same shape, values within 1e-6)."""
    if type(want).__module__ == "numpy" and hasattr(want, "shape"):
        import numpy

        return (type(got) is type(want) and got.shape == want.shape
                and bool(numpy.allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True)))
    try:
        return type(got) is type(want) and bool(got == want)
    except Exception:  # noqa: BLE001 - a comparison that fails is no match
        return False


def _short(value) -> str:
    """A value's repr on one line, cut to 80 characters (a type name for a tensor)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."
