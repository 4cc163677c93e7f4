"""``check_saved``: what a Function keeps for backward, compared with what it should keep.

``check_saved(F, reference, *args, saves=("output",))`` applies ``F`` to fresh float64 copies of
``args`` while torch's saved-tensor hooks record every tensor it saves, and compares them, in order,
with what ``saves`` names: ``"output"`` (or ``"output k"``), ``"input i"``, or a function of the
inputs giving the tensor (``lambda x: x > 0``), optionally as ``(words, function)`` for the message.
``max_saved=n`` instead allows at most ``n`` tensors, none larger than the largest input. Either
way no tensor may hide in a ctx attribute (it must go through ``ctx.save_for_backward``).

``saved_record`` is the measuring half: the grader's referee asks the student's process for it and
judges the record itself (``autograder.grading.running.judging.referee``), with ``saved_problem``, as here.
"""

from __future__ import annotations

import torch

from autograder.student.checker.references import (
    _as_float64, _as_tuple, CheckFailure, _close, _enable_grad, _equal, _is_float_tensor, _Tensor, _tolerances,
)

_saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks  # captured before student code runs


def saved_record(function, call: list) -> tuple[tuple, list, list[str]]:
    """(outputs, the tensors saved for backward in order, names of ctx attributes holding tensors)."""
    seen = []
    with _enable_grad(), _saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        outputs = _as_tuple(function.apply(*call))
    node = next((o.grad_fn for o in outputs if isinstance(o, _Tensor) and o.grad_fn is not None), None)
    attributes = sorted(k for k, v in vars(node).items() if isinstance(v, _Tensor)) if node is not None else []
    return outputs, [t.detach() for t in seen], attributes


def expected_saved(saves, leaves: list, outputs: tuple, names: list[str] | None) -> list[tuple[str, _Tensor]]:
    """(words, tensor) for each item of ``saves``, on the call's inputs ``leaves`` and the reference's ``outputs``."""
    expected = []
    for item in saves:
        words, what = item if isinstance(item, tuple) else (None, item)
        if isinstance(what, str) and what.split()[0] in ("output", "input"):
            kind, _, number = what.partition(" ")
            k = int(number or 0)
            tensor = (outputs if kind == "output" else leaves)[k]
            words = words or (("the output" if len(outputs) == 1 else f"output {k}") if kind == "output"
                              else f"the input `{names[k]}`" if names else f"input {k + 1}")
        else:
            tensor = what(*[a.detach() if isinstance(a, _Tensor) else a for a in leaves])
            words = words or "the tensor the reference saves"
        expected.append((words, tensor.detach()))
    return expected


def saved_problem(name: str, saved: list, attributes: list[str], expected, max_saved, largest: int,
                  rtol: float, atol: float) -> str | None:
    """What is wrong with what ``name`` saved, or None."""
    if attributes:
        return (f"{name} keeps tensors in ctx attributes ({', '.join('ctx.' + a for a in attributes)}): save "
                f"tensors with ctx.save_for_backward, so autograd can check and free them")
    if max_saved is not None:
        big = [t for t in saved if t.numel() > largest]
        if len(saved) > max_saved or big:
            return (f"{name} should keep at most {max_saved} tensor{'s' * (max_saved != 1)} for backward, none "
                    f"larger than its input; it saved {len(saved)} ({', '.join(_describe(t) for t in saved)})")
        return None
    if len(saved) != len(expected):
        wanted = " and ".join(words for words, _ in expected) or "nothing"
        return (f"{name} should save {len(expected)} tensor{'s' * (len(expected) != 1)} for backward ({wanted}); "
                f"it saved {len(saved)}" + (f" ({', '.join(_describe(t) for t in saved)})" if saved else ""))
    for i, (got, (words, want)) in enumerate(zip(saved, expected)):
        alike = (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device)
        if not (alike and (_close(got, want, rtol, atol) if want.is_floating_point() else _equal(got, want))):
            return (f"{name}'s saved tensor {i + 1} should be {words} ({_describe(want)}); it is "
                    f"{_describe(got)}" + (" with other values" if alike else ""))
    return None


def _describe(tensor) -> str:
    where = "" if tensor.device.type == "cpu" else f" on {tensor.device}"
    return f"a {str(tensor.dtype).removeprefix('torch.')} tensor of shape {list(tensor.shape)}{where}"


def check_saved(function, reference, *args, saves=None, max_saved: int | None = None, inplace: bool = False,
                rtol: float = 1e-6, atol: float = 1e-8) -> None:
    """Check what the Function ``function`` saves for backward (see the module docstring); ``inplace``: it
    modifies its inputs in place, so it gets copies (autograd forbids that on leaves)."""
    from autograder.student.checker.core import _input_names

    name = getattr(function, "__name__", repr(function))
    if (saves is None) == (max_saved is None):
        raise TypeError("check_saved needs saves=... or max_saved=..., not both")
    rtol, atol = _tolerances("check_saved", args, rtol, atol)
    leaves = [_as_float64(a).requires_grad_(True) if _is_float_tensor(a) else a for a in args]
    _, saved, attributes = saved_record(function, [a * 1 if inplace and isinstance(a, _Tensor) else a for a in leaves])
    expected = []
    if saves is not None:
        with _enable_grad():
            outputs = _as_tuple(reference(*[a.detach().clone().requires_grad_(True) if _is_float_tensor(a) else a
                                            for a in leaves]))
        expected = expected_saved(saves, leaves, outputs, _input_names(function, len(args)))
    largest = max((a.numel() for a in leaves if isinstance(a, _Tensor)), default=0)
    problem = saved_problem(name, saved, attributes, expected, max_saved, largest, rtol, atol)
    if problem:
        raise CheckFailure(problem)
