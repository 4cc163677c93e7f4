"""What a wrong kernel result's pattern says (assignments 10 and 11), for ``checker.kernels``: only the last rows or
columns wrong (a grid that stops short of the end, or blocks that overlap and leave the end to no program), NaN (never
written), a bias gradient of the wrong length or summed along the wrong axis of the tile, holding one block's sum only,
a sum over the rows that holds some rows' terms only, right on one row and wrong on the next (the row stride). Each
speaks of a kernel's blocks only where the kernel has them (``blocks``: its upper-case parameters, ``BLOCK_ROWS``,
``ROWS_PER_PROGRAM``, ``BLOCK_SIZE``): 10's tile diagnoses never name ``BLOCK_ROWS`` in a kernel that has none.
"""

from __future__ import annotations

import torch

from autograder.student.checker.harness import _copies, as_data
from autograder.student.checker.messages import _number
from autograder.student.checker.references import _Tensor

TILE_SIDES = tuple(2 ** k for k in range(11))  # square tiles a kernel may use: 1 ... 1024


def _shape_problem(what: str, got, want, wants) -> str:
    said = f"{what} has shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dim() == want.dim() == 1 and any(isinstance(t, _Tensor) and t.dim() >= 2 and t.shape[-1] == want.numel()
                                            for t in wants):
        return (f"{said}: summed over the wrong axis? The bias is added to every row, so its gradient is the sum "
                f"of grad_h over the rows (axis 0): one value per column")
    return said



def _value_problem(what: str, got, want, wrong, wants, k: int, rtol: float, atol: float,
                   blocks=frozenset()) -> str | None:
    """A wrong result's pattern, named (the tail, the bias gradient's reductions, nothing written); None if none."""
    unwritten = torch.isnan(got) & ~torch.isnan(want)
    tails = _tails(wrong)
    if tails:
        never = bool(unwritten[wrong].all())
        where = " and ".join(f"the last {size - start:,} {axis} (of {size:,})" for axis, start, size in tails)
        said = f"{what} is {'never written' if never else 'wrong'} in {where}, and right everywhere else"
        nan = " (new tensors hold NaN here, so NaN means never written)" if never else ""
        overlapping = [(axis, start) for axis, start, size in tails if not _grid_stops_there(start, size)]
        if overlapping:
            axis, start = overlapping[0]
            return (f"{said}{nan}. That is not a grid that stops short (it leaves less than one block, from a multiple "
                    f"of the block size on; {start:,} is neither): the blocks overlap, so no program reaches the end. "
                    f"{_block_start(axis, blocks)}")
        return f"{said}: the grid stops short of the end{nan}. {_grid_advice(blocks)}"
    if _a_gradient_and_its_column_sums(wants) and k == 1 and (not blocks or "BLOCK_ROWS" in blocks):
        explained = _bias_gradient_problem(what, got, wants[0].reshape(-1, wants[1].numel()), rtol, atol)
        if explained:
            return explained
    if bool(unwritten.all()) and got.numel():
        return (f"{what} is NaN everywhere: no program wrote it (new tensors hold NaN here). Is the grid empty "
                f"(n // BLOCK is 0 when n < BLOCK: round up with triton.cdiv)? Or, for a sum of tl.atomic_add, did "
                f"it start from torch.empty? Atomics add to what is there: start from torch.zeros")
    return None



def _anywhere(what: str, got, want, wrong, rtol: float, atol: float) -> str:
    """A wrong result without a pattern: how many elements, where the first is, NaN or a wrong number."""
    unwritten = torch.isnan(got) & ~torch.isnan(want)
    first = tuple(int(i) for i in wrong.nonzero()[0])
    if unwritten.any():
        return (f"{what} holds NaN at {int(unwritten.sum()):,} of {got.numel():,} elements (the first at index "
                f"{list(first)}): elements no program wrote (new tensors hold NaN here), or a NaN read through a "
                f"masked tl.load without other=0 that was not masked out again")
    have, right = float(got[first]), float(want[first])
    allowed = atol + rtol * abs(right)
    return (f"{what} is wrong at {int(wrong.sum()):,} of {got.numel():,} elements, the first at index {list(first)}: "
            f"{_number(have, right)} where {_number(right, have)} is right, a difference of {abs(have - right):.3g} "
            f"where {allowed:.3g} is allowed ({_times(abs(have - right), allowed)} the tolerance: rtol={rtol:.3g}, "
            f"atol={atol:.3g})")



def _times(difference: float, allowed: float) -> str:
    """How many times ``allowed`` ``difference`` is, in words ("12 times", "1.5 times")."""
    ratio = difference / allowed if allowed else float("inf")
    return f"{ratio:,.0f} times" if ratio >= 10 else f"{ratio:.3g} times"



def _block_start(axis: str, blocks) -> str:
    """Where program i's block starts along ``axis``, in the terms of the kernel's own blocks."""
    block, program = {"rows": ("BLOCK_ROWS", 0), "columns": ("BLOCK_COLUMNS", 1)}.get(axis, ("BLOCK", 0))
    if block in blocks:
        return (f"Program i's {axis} start at i * {block} (tl.program_id({program}) * {block}), each block right "
                f"after the last")
    return "Program i's block starts at i times the block's size, each block right after the last"



def _grid_advice(blocks) -> str:
    """How to launch enough programs, for the kernel's kind of blocks."""
    if "ROWS_PER_PROGRAM" in blocks:
        return ("Launch triton.cdiv(n_rows, ROWS_PER_PROGRAM) programs (rounding up), and stop the last program's "
                "loop at n_rows")
    if "BLOCK_SIZE" in blocks and not {"BLOCK_ROWS", "BLOCK_COLUMNS"} & set(blocks):
        return "Launch one program per row: n_rows = x.numel() // n_columns of them"
    return "Launch triton.cdiv(n, BLOCK) programs along each axis (rounding up), and mask the last, partial block"



def _tails(wrong) -> list[tuple[str, int, int]]:
    """[(axis, first wrong index, size)] if exactly the last rows and/or columns (or elements) are wrong, else []."""
    if wrong.dim() >= 2:
        grid = wrong.reshape(-1, wrong.shape[-1])
        rows, columns = grid.shape
        first_row, first_column = _trailing_run(grid.all(1)), _trailing_run(grid.all(0))
        expected = torch.zeros_like(grid)
        expected[first_row:] = True
        expected[:, first_column:] = True
        if (first_row, first_column) != (0, 0) and torch.equal(expected, grid):
            return ([("rows", first_row, rows)] if first_row < rows else []) + (
                [("columns", first_column, columns)] if first_column < columns else [])
    flat = wrong.reshape(-1)
    start = _trailing_run(flat)
    if 0 < start < flat.numel() and not bool(flat[:start].any()):
        return [("elements", start, flat.numel())]
    return []



def _grid_stops_there(start: int, size: int) -> bool:
    """Whether a grid of ``size // BLOCK`` programs (rounded down), for a block of some power of two, leaves
    exactly the elements from ``start`` on: ``start`` is a multiple of BLOCK and less than one block from the end."""
    return any(start % block == 0 and size - start < block for block in (2 ** k for k in range(31)))



def _trailing_run(flags) -> int:
    """Where the last run of True in the 1-D ``flags`` begins (its length if the last flag is False)."""
    run = int(flags.flip(0).to(torch.int64).cumprod(0).sum())
    return len(flags) - run



def _a_gradient_and_its_column_sums(wants) -> bool:
    """Whether the expected results are (grad_h, the bias gradient): a tensor, then its sums over every axis but the last."""
    if not (len(wants) == 2 and all(isinstance(w, _Tensor) for w in wants) and wants[1].dim() == 1
            and wants[0].dim() >= 1 and wants[0].shape[-1] == wants[1].numel()):
        return False
    return bool(torch.allclose(wants[0].reshape(-1, wants[1].numel()).sum(0), wants[1], rtol=1e-4, atol=1e-5))



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



def _row_step(name: str, args, how: str, blocks=frozenset()) -> str:
    """Right on one row, wrong on several: the row stride, or where each program's rows start, in the kernel's terms."""
    first = next(a for a in args if isinstance(a, _Tensor) and a.dim() >= 2)
    rows, columns = first.numel() // first.shape[-1], first.shape[-1]
    if "ROWS_PER_PROGRAM" in blocks:
        where = ("the row term of the offsets (row * n_columns), and where each program's rows start (its program "
                 "id times ROWS_PER_PROGRAM)")
    elif "BLOCK_ROWS" in blocks or not blocks:
        where = ("the row term of the offsets (rows[:, None] * n_columns), and where each program's rows start "
                 "(tl.program_id(0) * BLOCK_ROWS)")
    else:
        where = "the row term of the offsets: program i's row starts at i * n_columns (tl.program_id(0) * n_columns)"
    return (f"{name} is right on one row of {columns:,} columns, but {how} on {rows:,} rows: the rows after the first "
            f"are reached in the wrong place. In a contiguous matrix row r starts r * n_columns elements after row "
            f"0 (its row stride), whatever the block's width: check {where}")



def _rows_sum_problem(what: str, got, k: int, reference, args, rtol: float, atol: float, blocks) -> str | None:
    """For a kernel whose programs each loop over ``ROWS_PER_PROGRAM`` rows: is result ``k`` a sum over the rows
    (LayerNorm's weight and bias gradients) that holds only some rows' terms: one row a program (the loop assigns
    where it should add), one program's rows, the last row?"""
    if "ROWS_PER_PROGRAM" not in blocks or reference is None or got.dim() != 1:
        return None
    first = next((a for a in args if isinstance(a, _Tensor) and a.dim() >= 2), None)
    if first is None:
        return None
    n = first.numel() // first.shape[-1]
    try:
        terms = [as_data(reference(*_row_of(args, r)))[k] for r in range(n)]
        total = as_data(reference(*_copies(args)))[k]
    except Exception:  # noqa: BLE001 - a reference that takes no single row, or whose results are not per row
        return None
    if n < 2 or not all(isinstance(t, _Tensor) and t.shape == got.shape for t in terms):
        return None
    terms = torch.stack([t.to(torch.float64) for t in terms])
    if not torch.allclose(terms.sum(0), total.to(torch.float64), rtol=1e-4, atol=1e-5):
        return None  # not a sum over the rows

    def close(candidate) -> bool:
        return bool(torch.allclose(got.to(torch.float64), candidate, rtol=rtol, atol=atol * n ** 0.5))

    right = terms.sum(0)
    for per in [2 ** j for j in range(11) if 2 ** j < n]:
        lasts = [min(start + per, n) - 1 for start in range(0, n, per)]
        if close(terms[lasts].sum(0)) and not close(right):
            return (f"{what} holds one row's term per program (the last of each program's {per} rows), not the sum "
                    f"over all rows: the loop assigns (grad = ...) where it must add (grad += ...), from zeros made "
                    f"before the loop")
        if close(terms[:per].sum(0)):
            return (f"{what} holds the first {per} rows' sum only: the other programs' partial sums are not added "
                    f"(the launcher adds up every row of the partial sums, .sum(0))")
        last = (n - 1) // per * per
        if 0 < last and close(terms[last:].sum(0)):
            return (f"{what} holds the last {n - last} rows' sum only: the programs wrote their sums over each other; "
                    f"program p stores its own row of the partial sums (at p * n_columns), and the launcher adds them")
    if close(terms[-1]) or close(terms[0]):
        return f"{what} holds one row's term only, not the sum over the rows"
    return None



def _row_of(args, r: int) -> list:
    """Copies of ``args`` in which every tensor of the first matrix's shape keeps only row ``r``."""
    first = next(a for a in args if isinstance(a, _Tensor) and a.dim() >= 2)
    shape, columns = first.shape, first.shape[-1]
    return [a.reshape(-1, columns)[r:r + 1].reshape((1,) * (len(shape) - 1) + (columns,)).clone()
            if isinstance(a, _Tensor) and a.shape == shape else c for a, c in zip(args, _copies(args))]
