"""``check_saved``: what a Function keeps for backward, compared with what it should keep.

``check_saved(F, reference, *args, saves=("output",))`` applies ``F`` to fresh float64 copies of
``args`` while torch's saved-tensor hooks record every tensor it saves, and compares them, in order,
with what ``saves`` names: ``"output"`` (or ``"output k"``), ``"input i"``, or a function of the
inputs giving the tensor (``lambda x: x > 0``), optionally as ``(words, function)`` for the message.
``max_saved=n`` instead allows at most ``n`` tensors, none larger than the largest input. Either
way the Function may keep no tensor of the call anywhere else (``autograder.student.checker.kept``:
on ctx, in a module-level or class-level container, a closure, a default argument, a function
attribute; the message says where). With ``saves``, backward must also compute from what forward
saved: given in its place the tensors a right Function saves for other inputs (the same ones with
their values moved round), which forward never saw, it must return the gradients at those inputs.

``saved_record`` is the measuring half: the grader's referee asks the student's process for it and
judges the record itself (``autograder.grading.running.judging.referee``), with ``saved_problem``, as here.
"""

from __future__ import annotations

import torch

from autograder.student.checker.contracts import broken, requirement_of
from autograder.student.checker.kept import ForwardWatch, kept_places
from autograder.student.checker.references import (
    _as_float64, _as_tuple, _autograd_grad, CheckFailure, _close, _enable_grad, _equal, _is_float_tensor, _randn,
    _Tensor, _tolerances, _zeros_like,
)

_saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks  # captured before student code runs


class _Saving:
    """The tensors one call saves for backward (saved-tensor hooks); backward reads them from ``source``, which a
    swap points at another call's."""

    def __init__(self) -> None:
        self.tensors: list = []
        self.source = self.tensors

    def pack(self, tensor) -> int:
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def unpack(self, index: int):
        return self.source[index]


def saved_record(function, leaves: list, inplace: bool = False, swap_in: list | None = None,
                 upstream: list | None = None) -> dict:
    """What ``function.apply`` keeps for backward on ``leaves`` (copies of them if it works ``inplace``):
    ``saved``, the tensors it saved in order; ``kept``, (what, where) for each tensor of the call kept another
    way; ``swap``, backward's gradients for ``upstream`` (one per output, None where unused) with what forward
    saved and then with ``swap_in`` in its place (``swap_plan``; None without them); ``names``, the names of the
    inputs those gradients are for."""
    from autograder.student.checker.core import _input_names

    call = [a * 1 if inplace and isinstance(a, _Tensor) and a.requires_grad else a for a in leaves]
    first = _Saving()
    with _enable_grad(), _saved_tensors_hooks(first.pack, first.unpack):
        with ForwardWatch(call) as watch:
            outputs = _as_tuple(function.apply(*call))
    node = next((o.grad_fn for o in outputs if isinstance(o, _Tensor) and o.grad_fn is not None), None)
    names = _input_names(function, len(leaves))
    kept = kept_places(function, node, call, names, outputs, first.tensors, watch)
    del watch, call
    wrt = [a for a in leaves if isinstance(a, _Tensor) and a.requires_grad]
    swap = None if swap_in is None or upstream is None else _backward_twice(outputs, wrt, first, swap_in, upstream)
    wanted = [n for n, a in zip(names, leaves) if isinstance(a, _Tensor) and a.requires_grad]
    return {"saved": [t.detach() for t in first.tensors], "kept": kept, "swap": swap, "names": wanted}


def _backward_twice(outputs: tuple, wrt: list, first: _Saving, swap_in: list, upstream: list) -> dict | None:
    """Backward's gradients with what forward saved (``own``), then with ``swap_in`` in its place (``swapped``); None
    where there is nothing to swap or backward fails on its own (``check_function`` says why)."""
    used = [(o, u) for o, u in zip(outputs, upstream) if u is not None and isinstance(o, _Tensor) and o.requires_grad]
    if not (used and wrt and swap_in) or len(swap_in) != len(first.tensors):
        return None
    try:
        own = _autograd_grad([o for o, _ in used], wrt, [u.clone() for _, u in used], allow_unused=True,
                             retain_graph=True)
    except Exception:  # noqa: BLE001 (the student's backward fails on its own: other checks say why)
        return None
    first.source = list(swap_in)
    try:
        swapped = _autograd_grad([o for o, _ in used], wrt, [u.clone() for _, u in used], allow_unused=True)
    except Exception as error:  # noqa: BLE001 (it fails only with the other tensors: that is the finding)
        return {"error": f"{type(error).__name__}: {str(error)[:200]}"}
    finally:
        first.source = first.tensors
    detached = lambda grads: [None if g is None else g.detach() for g in grads]  # noqa: E731
    return {"own": detached(own), "swapped": detached(swapped)}


def swap_plan(saves, reference, leaves: list, names: list[str] | None) -> dict | None:
    """What the swap needs, computed from the reference: other inputs (each tensor's values moved one place round),
    the tensors a right Function saves for them (``swap_in``: forward never saw them), a random ``upstream``
    gradient per output, and the right gradients for it at these inputs and at the others (``right``, ``right_there``).
    None where nothing is saved or no input changes (one element)."""
    wanted = [a for a in leaves if isinstance(a, _Tensor) and a.requires_grad]
    others = [a.detach().reshape(-1).roll(1).reshape(a.shape).requires_grad_(True) if any(a is w for w in wanted)
              else a for a in leaves]
    if not saves or all(_equal(a.detach(), b.detach()) for a, b in zip(wanted, others) if isinstance(b, _Tensor)):
        return None
    here, there = _reference_outputs(reference, leaves), _reference_outputs(reference, others)
    upstream = [_randn(o.shape, dtype=o.dtype).to(o.device) if isinstance(o, _Tensor) and o.requires_grad else None
                for o in here]
    return {"swap_in": [t for _, t in expected_saved(saves, others, there, names)], "upstream": upstream,
            "right": _gradients(reference, leaves, upstream), "right_there": _gradients(reference, others, upstream)}


def _reference_outputs(reference, leaves: list) -> tuple:
    with _enable_grad():
        return _as_tuple(reference(*[a.detach().clone().requires_grad_(True) if isinstance(a, _Tensor)
                                     and a.requires_grad else a for a in leaves]))


def _gradients(reference, leaves: list, upstream: list) -> list:
    """torch autograd's gradients of the reference at ``leaves`` for ``upstream``, one per input that needs one."""
    call = [a.detach().clone().requires_grad_(True) if isinstance(a, _Tensor) and a.requires_grad else a
            for a in leaves]
    wanted = [a for a in call if isinstance(a, _Tensor) and a.requires_grad]
    with _enable_grad():
        used = [(o, u) for o, u in zip(_as_tuple(reference(*call)), upstream) if u is not None]
        grads = _autograd_grad([o for o, _ in used], wanted, [u for _, u in used], allow_unused=True)
    return [_zeros_like(a) if g is None else g.detach() for a, g in zip(wanted, grads)]


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


def saved_problem(name: str, saved: list, kept: list, expected, max_saved, largest: int, rtol: float,
                  atol: float) -> str | None:
    """What is wrong with what ``name`` saved (``saved_record``'s record), or None."""
    if kept:
        (what, where), more = kept[0], len(kept) - 1
        kept_what = what if what.startswith("the values of ") else f"a tensor ({what})"
        return (f"{name} keeps {kept_what} in {where}, outside save_for_backward"
                f"{f' (and {more} more)' if more else ''}: keep what backward needs with ctx.save_for_backward only "
                f"(autograd checks those tensors and frees them after backward), and on ctx only numbers that are not "
                f"the tensors' values (a constant, a shape)")
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


def swap_problem(name: str, swap: dict | None, plan: dict, names: list[str] | None, rtol: float,
                 atol: float) -> str | None:
    """What the swap says (``saved_record`` with ``swap_plan``): backward computes from something besides what
    forward saved, or None (also where backward is wrong anyway: ``check_function`` says how)."""
    if swap is None:
        return None
    rule = ("given the tensors a right Function saves for other inputs (same shapes, other values), backward "
            "should return the gradients at those inputs")
    if swap.get("error") is not None:
        return (f"{name}'s backward raised {swap['error']} when given the tensors a right Function saves for other "
                f"inputs (same shapes, other values): it should compute from what forward saved, and nothing else")
    if any(not _same(g, w, rtol, atol) for g, w in zip(swap["own"], plan["right"])):
        return None
    for i, (got, want) in enumerate(zip(swap["swapped"], plan["right_there"])):
        if not _same(got, want, rtol, atol):
            label = names[i] if names and i < len(names) else f"input {i + 1}"
            return (f"{name}'s backward does not compute from what forward saved: {rule}, and its gradient for "
                    f"`{label}` is another: it uses something forward kept another way (a tensor, its values as "
                    f"Python numbers). Keep what backward needs with ctx.save_for_backward only")
    return None


def _same(got, want, rtol: float, atol: float) -> bool:
    got = _zeros_like(want) if got is None else got
    return isinstance(got, _Tensor) and got.shape == want.shape and _close(got, want, rtol, atol)


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
    names = _input_names(function, len(args))
    expected = [] if saves is None else expected_saved(saves, leaves, _reference_outputs(reference, leaves), names)
    plan = None if saves is None else swap_plan(saves, reference, leaves, names)
    record = saved_record(function, leaves, inplace, *((plan["swap_in"], plan["upstream"]) if plan else ()))
    largest = max((a.numel() for a in leaves if isinstance(a, _Tensor)), default=0)
    problem = (saved_problem(name, record["saved"], record["kept"], expected, max_saved, largest, rtol, atol)
               or (plan and swap_problem(name, record["swap"], plan, record["names"], rtol, atol)))
    if problem:
        raise CheckFailure(broken(requirement_of(function), problem))
