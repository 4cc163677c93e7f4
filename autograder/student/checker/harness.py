"""``check_values`` and ``check_with``: plain results compared with the reference's.

``check_values(f, reference, *args)``: a plain function of plain data (numbers, lists, tensors that
need no gradient) gives what the reference gives. ``check_with(harness, F, reference, *args)``: the
test's own ``harness`` (a function of the notebook's visible cells: a training loop, a scripted
clock) run with the student's object gives what it gives with the reference. Results are data:
numbers, strings, None, tensors, and lists and dicts of them; numbers and tensors are compared
within ``rtol``/``atol``. The grader's referee asks the student's process for the student's side as
data and computes the reference's side itself (``autograder.grading.running.judging.referee``).
"""

from __future__ import annotations

import math

from autograder.student.checker.references import CheckFailure, _close, _equal, _Tensor


def same_data(got, want, rtol: float, atol: float) -> bool:
    """Whether two results are the same data, numbers and float tensors within the tolerances."""
    if isinstance(want, dict):
        return (isinstance(got, dict) and set(got) == set(want)
                and all(same_data(got[k], want[k], rtol, atol) for k in want))
    if isinstance(want, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(want)
                and all(same_data(g, w, rtol, atol) for g, w in zip(got, want)))
    if isinstance(want, _Tensor):
        return (isinstance(got, _Tensor) and got.shape == want.shape and got.dtype == want.dtype
                and (_close(got, want, rtol, atol) if want.is_floating_point() else _equal(got, want)))
    if isinstance(want, bool) or want is None or isinstance(want, str):
        return type(got) is type(want) and got == want
    if isinstance(want, (int, float)):
        return (type(got) in (int, float) and math.isclose(got, want, rel_tol=rtol, abs_tol=atol))
    return got == want


def as_data(value):
    """A result as data: an iterator (a generator, map) becomes a list."""
    return list(value) if hasattr(value, "__next__") else value


def short(value) -> str:
    """``value``'s repr on one line (a tensor's rows joined), cut to 120 characters."""
    return _cut(repr(value))


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 120 else text[:117] + "..."


def first_difference(got, want, rtol: float, atol: float, where: str = "") -> tuple[str, object, object]:
    """Where two results that differ first differ: a path of keys and indices (``['gradients'][0]``, or ``""``
    where their shapes of data differ at the top), and the two values there."""
    if isinstance(want, dict) and isinstance(got, dict) and set(got) == set(want):
        pairs = [(f"[{key!r}]", got[key], want[key]) for key in want]
    elif isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)) and len(got) == len(want):
        pairs = [(f"[{i}]", g, w) for i, (g, w) in enumerate(zip(got, want))]
    else:
        return where, got, want
    for step, g, w in pairs:
        if not same_data(g, w, rtol, atol):
            return first_difference(g, w, rtol, atol, where + step)
    return where, got, want


def _copies(args) -> list:
    return [a.detach().clone() if isinstance(a, _Tensor) else list(a) if isinstance(a, list) else a for a in args]


def check_values(function, reference, *args, rtol: float = 1e-9, atol: float = 0.0) -> None:
    """Check a plain function's result against the reference's on the same arguments (see the module docstring)."""
    got, want = as_data(function(*_copies(args))), as_data(reference(*_copies(args)))
    if not same_data(got, want, rtol, atol):
        name = getattr(function, "__name__", "the function")
        raise CheckFailure(f"{name}{tuple(short(a) for a in args)} gives {short(got)}, expected {short(want)}")


def check_with(harness, function, reference, *args, rtol: float = 1e-9, atol: float = 0.0) -> None:
    """Check that ``harness(function, *args)`` gives what ``harness(reference, *args)`` gives."""
    got, want = as_data(harness(function, *_copies(args))), as_data(harness(reference, *_copies(args)))
    if not same_data(got, want, rtol, atol):
        raise CheckFailure(with_message(harness.__name__, getattr(function, "__name__", "yours"), got, want,
                                          rtol, atol))


def with_message(harness: str, name: str, got, want, rtol: float, atol: float) -> str:
    """What differs between ``harness``'s result with the student's ``name`` and with a right one: the first
    entry that differs, named by its keys and indices, not the whole result (a report of several tensors)."""
    where, got, want = first_difference(got, want, rtol, atol)
    same_shape = isinstance(got, _Tensor) and isinstance(want, _Tensor) and got.shape == want.shape
    got, want = (short(got), short(want)) if same_shape else (_brief(got), _brief(want))
    if not where:
        return f"{harness} with your {name} gives {got}; with a right {name} it gives {want}"
    return f"{harness}(...){where} with your {name} is {got}; with a right {name} it is {want}"


def _brief(value) -> str:
    """``value`` with each tensor in it as its shape: where shapes differ (or a tensor stands for None), the values
    do not matter."""
    if isinstance(value, _Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return _cut(f"[{', '.join(_brief(v) for v in value)}]")
    return short(value)
