"""``check_values`` and ``check_with``: plain results compared with the reference's.

``check_values(f, reference, *args)``: a plain function of plain data (numbers, lists, tensors that
need no gradient) gives what the reference gives. ``check_with(harness, F, reference, *args)``: the
test's own ``harness`` (a function of the notebook's visible cells: a training loop, a scripted
clock) run with the student's object gives what it gives with the reference. Results are data:
numbers, strings, None, tensors, and lists and dicts of them; numbers and tensors are compared
within ``rtol``/``atol``. The grader's referee asks the student's process for the student's side as
data and computes the reference's side itself (``autograder.grading.running.referee``).
"""

from __future__ import annotations

import math

from autograder.student.checker.references import _close, _equal, _Tensor


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
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _copies(args) -> list:
    return [a.detach().clone() if isinstance(a, _Tensor) else list(a) if isinstance(a, list) else a for a in args]


def check_values(function, reference, *args, rtol: float = 1e-9, atol: float = 0.0) -> None:
    """Check a plain function's result against the reference's on the same arguments (see the module docstring)."""
    got, want = as_data(function(*_copies(args))), as_data(reference(*_copies(args)))
    if not same_data(got, want, rtol, atol):
        name = getattr(function, "__name__", "the function")
        raise AssertionError(f"{name}{tuple(short(a) for a in args)} gives {short(got)}, expected {short(want)}")


def check_with(harness, function, reference, *args, rtol: float = 1e-9, atol: float = 0.0) -> None:
    """Check that ``harness(function, *args)`` gives what ``harness(reference, *args)`` gives."""
    got, want = as_data(harness(function, *_copies(args))), as_data(harness(reference, *_copies(args)))
    if not same_data(got, want, rtol, atol):
        raise AssertionError(with_message(harness.__name__, getattr(function, "__name__", "yours"), got, want))


def with_message(harness: str, name: str, got, want) -> str:
    return f"{harness} with your {name} gives {short(got)}; with a right {name} it gives {short(want)}"
