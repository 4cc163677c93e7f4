"""``check_kernel``: a function that launches Triton kernels gives what a torch reference gives (assignment 10),
and when it does not, what the kernel most likely got wrong.

The function is called on copies of the arguments with torch's deterministic mode on, whose
``fill_uninitialized_memory`` fills every new tensor with NaN (``torch.empty_like`` included): an
element no program writes then shows as NaN, not as whatever the memory held. A wrong result is
explained (``kernel_problem``) by where it is wrong: only the last rows or columns (a grid that
stops short of the end: the tail), NaN (never written), a bias gradient of the wrong length or
summed along the wrong axis of the tile, or holding one block's sum only (programs that overwrote
each other instead of adding). An access out of bounds is an error raised by the kernel itself,
under the interpreter's memory guard (``autograder.student.kernels``). In grading the referee asks
the student's process for the results as data (``check_values``'s question) and explains them here.
"""

from __future__ import annotations

import contextlib

import torch

from autograder.student.checker.callables import argument_names
from autograder.student.checker.harness import _copies, as_data, same_data, short
from autograder.student.checker.layouts import stride_problem
from autograder.student.checker.messages import _difference, _number
from autograder.student.checker.references import CheckFailure, LAYOUTS, _Tensor, can_lay_out, laid_out

TILE_SIDES = tuple(2 ** k for k in range(11))  # square tiles a kernel may use: 1 ... 1024


def check_kernel(function, reference, *args, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Check that ``function(*args)`` (which launches kernels) gives what ``reference(*args)`` gives.

    Results are tensors, or tuples of them; tensors are compared within ``rtol`` and ``atol``
    (float32 kernels round differently from torch). Raises AssertionError saying what is wrong and,
    where the pattern shows it, which mistake: a forgotten tail, elements never written, a sum
    over the wrong axis, one block's partial sum where all of them should be added. Once the results
    are right, the function runs again on a slice and on a transposed view of its arguments of two or
    more dimensions (``layouts``): a stride mistake is named as one.
    """
    __tracebackhide__ = True  # noqa: F841 - IPython leaves the checker's frames out of a failing test's traceback
    name = getattr(function, "__name__", "your function")
    try:
        with fresh_memory_is_nan():
            got = as_data(function(*_copies(args)))
    except Exception as error:  # a Triton error the course can explain becomes its explanation
        if _error_hint(str(error)) is None:
            raise
        raise CheckFailure(kernel_problem(name, None, None, error=f"{type(error).__name__}: {error}")) from error
    want = as_data(reference(*_copies(args)))
    problem = kernel_problem(name, got, want, rtol, atol) or _on_layouts(name, function, args, want, rtol, atol)
    if problem:
        raise CheckFailure(problem)


def _on_layouts(name: str, function, args, want, rtol: float, atol: float) -> str | None:
    """What goes wrong when the arguments of two or more dimensions come as a slice, then as a transposed view
    (the same values: ``layouts``), said as a stride mistake; None if nothing does."""
    names = argument_names(function, len(args))
    for layout in LAYOUTS:
        which = [n for n, a in zip(names, args) if can_lay_out(a, layout)]
        if not which:
            continue
        try:
            with fresh_memory_is_nan():
                got = as_data(function(*[laid_out(a, layout, pad=0.0) for a in _copies(args)]))
        except Exception as error:  # noqa: BLE001 - what it raised on that layout is the finding
            problem = f"{name} raised {type(error).__name__}: {str(error)[:300]}"
        else:
            problem = _values_differ(name, got, want, rtol, atol)
        if problem:
            return f"{name} {stride_problem(layout, which, problem)}"
    return None


def _values_differ(name: str, got, want, rtol: float, atol: float) -> str | None:
    """Which result differs and by how much, without the contiguous run's patterns (a tail, NaN as never
    written: on a slice or a transposed view a stride mistake makes those too); else ``kernel_problem``'s word."""
    many = isinstance(want, (list, tuple)) and isinstance(got, (list, tuple)) and len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want) if many else [(got, want)]):
        if (isinstance(g, _Tensor) and isinstance(w, _Tensor) and g.shape == w.shape and g.dtype == w.dtype
                and w.is_floating_point() and not torch.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)):
            return f"{name}'s result{f' {k}' if many else ''} is wrong: {_difference(w, g, rtol, atol)}"
    return kernel_problem(name, got, want, rtol, atol)


@contextlib.contextmanager
def fresh_memory_is_nan():
    """Within the block, new tensors hold NaN (torch's deterministic mode fills uninitialized memory)."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=before[1])
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.utils.deterministic.fill_uninitialized_memory = fill


def kernel_problem(name: str, got, want, rtol: float = 1e-5, atol: float = 1e-5, error: str | None = None) -> str | None:
    """What is wrong with the results ``got`` of ``name`` against ``want``, in a kernel's terms; None if they
    agree. With ``error`` (what ``name`` raised instead), that error, explained where the course can."""
    if error is not None:
        hint = _error_hint(error)
        return f"{name} failed ({error[:300]})" + (f": {hint}" if hint else "")
    if same_data(got, want, rtol, atol):
        return None
    many = isinstance(want, (list, tuple))
    gots, wants = (list(got), list(want)) if many and isinstance(got, (list, tuple)) else ([got], [want])
    if many and not isinstance(got, (list, tuple)) or len(gots) != len(wants):
        count = len(got) if isinstance(got, (list, tuple)) else 1
        return f"{name} returns {count} result{'s' * (count != 1)}, expected {len(wants)}"
    for k, (g, w) in enumerate(zip(gots, wants)):
        what = f"{name}'s result {k}" if many else f"{name}'s result"
        if not isinstance(w, _Tensor):
            if not same_data(g, w, rtol, atol):
                return f"{what} is {short(g)}, expected {short(w)}"
            continue
        if not isinstance(g, _Tensor):
            return f"{what} is not a tensor ({short(g)})"
        if g.shape != w.shape:
            return _shape_problem(what, g, w, wants)
        if g.dtype != w.dtype:
            return f"{what} is {g.dtype}, expected {w.dtype} (the input's dtype: make new tensors like the input)"
        wrong = ~torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        if wrong.any():
            return _value_problem(what, g, w, wrong, wants, k, rtol, atol)
    return None


def _error_hint(error: str) -> str | None:
    """What a Triton error most likely means in these kernels ("" when it says so itself), or None."""
    if "OutOfBounds" in error:
        return ""  # the memory guard's message names the kernel, the tensor and the element
    if "make_shape_compatible" in error or "incompatible dimensions" in error:
        return ("two blocks of different shapes meet (a store, or arithmetic). A sum over the wrong axis does that: "
                "tl.sum(tile, axis=1) gives one value per row of the tile, where the columns need one each (axis=0)")
    return None


def _shape_problem(what: str, got, want, wants) -> str:
    said = f"{what} has shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dim() == want.dim() == 1 and any(isinstance(t, _Tensor) and t.dim() >= 2 and t.shape[-1] == want.numel()
                                            for t in wants):
        return (f"{said}: summed over the wrong axis? The bias is added to every row, so its gradient is the sum "
                f"of grad_h over the rows (axis 0): one value per column")
    return said


def _value_problem(what: str, got, want, wrong, wants, k: int, rtol: float, atol: float) -> str:
    unwritten = torch.isnan(got) & ~torch.isnan(want)
    tail = _tail(wrong)
    if tail:
        never = bool(unwritten[wrong].all())
        return (f"{what} is {'never written' if never else 'wrong'} in {tail}, and right everywhere else: the grid "
                f"stops short of the end. Launch triton.cdiv(n, BLOCK) programs along each axis (rounding up), "
                f"and mask the last, partial block" + (" (new tensors hold NaN here, so NaN means never written)"
                                                        if never else ""))
    if _a_gradient_and_its_column_sums(wants) and k == 1:
        explained = _bias_gradient_problem(what, got, wants[0].reshape(-1, wants[1].numel()), rtol, atol)
        if explained:
            return explained
    first = tuple(int(i) for i in wrong.nonzero()[0])
    if bool(unwritten.all()) and got.numel():
        return (f"{what} is NaN everywhere: no program wrote it (new tensors hold NaN here). Is the grid empty "
                f"(n // BLOCK is 0 when n < BLOCK: round up with triton.cdiv)? Or, for a sum of tl.atomic_add, did "
                f"it start from torch.empty? Atomics add to what is there: start from torch.zeros")
    if unwritten.any():
        return (f"{what} holds NaN at {int(unwritten.sum()):,} of {got.numel():,} elements (the first at index "
                f"{list(first)}): elements no program wrote (new tensors hold NaN here), or a NaN read through a "
                f"masked tl.load without other=0 that was not masked out again")
    have, right = float(got[first]), float(want[first])
    return (f"{what} is wrong at {int(wrong.sum()):,} of {got.numel():,} elements, the first at index {list(first)}: "
            f"{_number(have, right)} where {_number(right, have)} is right, a difference of {abs(have - right):.3g} "
            f"where {atol + rtol * abs(right):.3g} is allowed (rtol={rtol:.3g}, atol={atol:.3g}; pass rtol= and atol= "
            f"to change them)")


def _a_gradient_and_its_column_sums(wants) -> bool:
    """Whether the expected results are (grad_h, the bias gradient): a tensor, then its sums over every axis but the last."""
    if not (len(wants) == 2 and all(isinstance(w, _Tensor) for w in wants) and wants[1].dim() == 1
            and wants[0].dim() >= 1 and wants[0].shape[-1] == wants[1].numel()):
        return False
    return bool(torch.allclose(wants[0].reshape(-1, wants[1].numel()).sum(0), wants[1], rtol=1e-4, atol=1e-5))


def _tail(wrong) -> str | None:
    """'the last 3 rows' (or columns, or elements) if exactly those are wrong, else None."""
    if wrong.dim() >= 2:
        grid = wrong.reshape(-1, wrong.shape[-1])
        rows, columns = grid.shape
        first_row, first_column = _trailing_run(grid.all(1)), _trailing_run(grid.all(0))
        expected = torch.zeros_like(grid)
        expected[first_row:] = True
        expected[:, first_column:] = True
        if (first_row, first_column) != (0, 0) and torch.equal(expected, grid):
            return " and ".join(([f"the last {rows - first_row} rows (of {rows})"] if first_row < rows else []) + (
                [f"the last {columns - first_column} columns (of {columns})"] if first_column < columns else []))
    flat = wrong.reshape(-1)
    start = _trailing_run(flat)
    if 0 < start < flat.numel() and not bool(flat[:start].any()):
        return f"the last {flat.numel() - start:,} elements (of {flat.numel():,})"
    return None


def _trailing_run(flags) -> int:
    """Where the last run of True in the 1-D ``flags`` begins (its length if the last flag is False)."""
    run = int(flags.flip(0).to(torch.int64).cumprod(0).sum())
    return len(flags) - run


def _bias_gradient_problem(what: str, got, grad_h, rtol: float, atol: float) -> str | None:
    """Which known wrong reduction a bias gradient ``got`` is, given grad_h (rows, columns); None if none."""
    rows, columns = grad_h.shape
    if bool(torch.isnan(got).all()):
        return (f"{what} is NaN everywhere. Either the sums took in masked lanes (a masked tl.load without other= "
                f"holds NaN here, and nothing on a GPU: tl.where(mask, value, 0.0) before tl.sum), or tl.atomic_add "
                f"added into a tensor that was not zero (new tensors, torch.empty, hold NaN here: start from "
                f"torch.zeros)")

    def close(candidate) -> bool:
        return bool(torch.allclose(got, candidate, rtol=rtol, atol=atol * max(1, rows) ** 0.5))

    if close(2 * grad_h.sum(0)):
        return f"{what} is twice the right value: every block's sum was added twice"
    for side in TILE_SIDES:
        if side >= rows and side >= columns:
            break
        blocks = -(-rows // side)
        last = (blocks - 1) * side
        if 0 < last and close(grad_h[last:].sum(0)):
            return (f"{what} holds only the last {rows - last} rows' sum: the programs along the rows overwrote "
                    f"each other's sums (tl.store) instead of adding them (tl.atomic_add), or the partial sums were "
                    f"not added up")
        if side < rows and close(grad_h[:side].sum(0)):
            return (f"{what} holds only the first {side} rows' sum: the other row blocks' partial sums were not "
                    f"added up")
        if side < columns and close(_row_sums_in_tiles(grad_h, side)):
            return (f"{what} is summed over the wrong axis of each tile: tl.sum(..., axis=1) adds up a row of the "
                    f"tile; the bias gradient adds up each column over the rows (axis=0)")
    return None


def _row_sums_in_tiles(grad_h, side: int):
    """What square side x side tiles give when each tile's row sums are stored where its column sums belong."""
    rows, columns = grad_h.shape
    padded = grad_h.new_zeros(-(-rows // side) * side, -(-columns // side) * side)
    padded[:rows, :columns] = grad_h
    tiles = padded.reshape(padded.shape[0] // side, side, padded.shape[1] // side, side)
    return tiles.sum(dim=(0, 3)).transpose(0, 1).reshape(-1)[:columns]
