"""What a student reads: torch's errors in course terms, and how far a wrong value is off.

``_run_student`` runs student code and turns any exception into a ``_StudentError`` whose message
explains it (``_TORCH_ERRORS`` maps torch's own messages to the course's words, with the line of
student code that raised). ``_difference`` shows where and by how much a result is off, and within
which tolerance it had to be. The mistakes a wrong gradient reveals are ``patterns``'s.

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
    _LIBRARY_DIRS, ATOL, DTYPE_TOLERANCES, RTOL, _float64, _HandedBackToAutograd, _Inputs, _isclose, NotDone,
    _StudentError,
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
    (r"data pointer on an invalid python storage|Cannot access data pointer of Tensor|"
     r"storage of a tensor on device \"meta\" to a storage on different device",
     lambda m, names: "torch.compile traced it with fake tensors (shapes and dtypes, no memory) and reached code "
                      "that needs memory: a kernel launched outside a custom operator. Launch kernels only inside "
                      "operators that have a fake, in backward too (call the backward operator, not the launcher)."),
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
    """Whether ``error`` is an exercise left as released: its bare ``raise NotImplementedError()``, the
    checker's own report of one (``NotDone``), or an error raised because of one (its cause or context, as
    ``torch.library.opcheck``'s OpCheckError wraps what the operator raised)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, NotImplementedError) and str(error) in ("", NOT_DONE):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def show_error(shell, etype, value, tb, tb_offset=None):
    """IPython's handler for errors in a cell (``shell.set_custom_exc((Exception,), show_error)``): an exercise
    left as released (``not_done``: its bare NotImplementedError, or an error it caused, such as
    ``torch.library.opcheck``'s OpCheckError) is one line, its message in the error's value too (``check`` and
    the feedback page read it there); any other error is shown as IPython shows it."""
    if not_done(value):
        shell._showtraceback(NotImplementedError, NotImplementedError(NOT_DONE), [f"NotImplementedError: {NOT_DONE}"])
    elif isinstance(value, SyntaxError):
        shell.showsyntaxerror()  # as IPython shows a cell that does not parse
    else:
        shell.showtraceback(running_compiled_code=True)  # IPython's own path for any other error (sys.exc_info())


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
    except Exception as err:  # noqa: BLE001 - any student error becomes an explanation
        if not_done(err):  # the exercise as released: the test cell says so, as for any call of it
            raise NotDone(NOT_DONE) from None
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
# Showing values


def _difference(expected, got, rtol: float, atol: float) -> str:
    """Where and by how much ``got`` differs from ``expected`` (shown from CPU float64 copies), and what the
    check allows: |yours - torch| <= atol + rtol * |torch|, the tolerances named."""
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
    """'rtol=1e-06, atol=1e-08, the checker's defaults in float64' (or the defaults of the dtype the code ran in, or
    the test's own)."""
    if rtol == atol == 0:
        return "integer values must match exactly"
    if (rtol, atol) == (RTOL, ATOL):
        whose = "the checker's defaults in float64"
    elif (rtol, atol) == DTYPE_TOLERANCES.get(dtype):
        whose = f"{_dtype_name(dtype)}'s defaults, as in torch.testing.assert_close"
    else:
        whose = "the check's own or the test's"
    return f"rtol={rtol:.3g}, atol={atol:.3g}, {whose}"  # (never advice to loosen them: the message may be a graded test's)


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
