"""``check_kernel``: a function that launches Triton kernels gives what a torch reference gives (assignment 10),
and when it does not, what the kernel most likely got wrong.

The function is called on copies of the arguments with torch's deterministic mode on, whose
``fill_uninitialized_memory`` fills every new tensor with NaN (``torch.empty_like`` included): an
element no program writes then shows as NaN, not as whatever the memory held. It is called three
ways (``kernel_runs``): on the arguments as given; on copies whose matrices are not contiguous (a
slice of a wider tensor: rows further apart in memory than a row is long), since a kernel that
assumes contiguous rows reads the wrong elements of such a tensor and autograd hands backward
gradients of any layout; and on the first row alone, which shows a kernel that is right on one row
and wrong on the next (its row stride, or where its blocks start). A wrong result is explained
(``kernel_verdict``) by where it is wrong: only the last rows or columns (a grid that stops short of
the end, or blocks that overlap and leave the end to no program), NaN (never written), a bias
gradient of the wrong length or summed along the wrong axis of the tile, or holding one block's sum
only (programs that overwrote each other instead of adding). An access out of bounds is an error
raised by the kernel itself, under the interpreter's memory guard (``autograder.student.kernels``).
In grading the examinee makes the same runs (``kernel_runs``) and the referee explains them here.
"""

from __future__ import annotations

import contextlib
import inspect
import re

import torch

from autograder.student.checker.harness import _copies, as_data, same_data, short
from autograder.student.checker.launches import contract_problem, kernels_launched, trace_launcher
from autograder.student.checker.messages import _number
from autograder.student.checker.references import CheckFailure, _Tensor

TILE_SIDES = tuple(2 ** k for k in range(11))  # square tiles a kernel may use: 1 ... 1024
PADDING = 3  # the extra elements per row of check_kernel's non-contiguous copies
ONE_ROW, STRIDED = "one row", "strided"


def check_kernel(function, reference, *args, rtol: float = 1e-5, atol: float = 1e-5, strided: bool = True,
                 outputs: tuple = (), requires: str | None = None, finishing: tuple = (), mistakes=None) -> None:
    """Check that ``function(*args)`` (which launches kernels) gives what ``reference(*args)`` gives.

    Results are tensors, or tuples of them, named in messages by ``outputs`` (``("y", "mean", "rstd")``); tensors
    are compared within ``rtol`` and ``atol`` (float32 kernels round differently from torch). The function is also
    run on non-contiguous copies of its matrix arguments (unless ``strided=False``: a function meant for contiguous
    tensors only) and on their first row alone (``kernel_runs``). With ``requires`` (the exercise's requirement, in
    words), the run on the arguments as given is traced (``checker.launches``): its results must be written by a
    Triton kernel of the answer, the launcher running no torch computation but the ``finishing`` ones (``"sum"``).
    ``mistakes``: ``{what is wrong: a function of args giving the results that mistake gives}``, named when the
    results are one of them. Raises AssertionError saying what is wrong and, where the pattern shows it, which
    mistake: a forgotten tail, blocks that start in the wrong place, elements never written, a wrong row stride, a
    matrix assumed contiguous, a sum over the wrong axis, one block's partial sum where all of them should be added.
    """
    __tracebackhide__ = True  # noqa: F841 - IPython leaves the checker's frames out of a failing test's traceback
    name = getattr(function, "__name__", "your function")
    with fresh_memory_is_nan():
        runs = kernel_runs(function, args, strided)
    problem = kernel_verdict(name, runs, reference, args, rtol, atol, outputs=outputs, requires=requires,
                             finishing=finishing, mistakes=mistakes)
    error = runs["given"].get("error")
    if problem is None and isinstance(error, BaseException):
        raise error  # not a mistake the course can name: the student's own error, with its traceback
    unguarded = _unguarded()
    if problem:
        raise CheckFailure(problem + (f"\n(Note: {unguarded})" if unguarded else "")) from None
    if unguarded:
        print(f"check_kernel: {name} passes, but {unguarded}")


def check_backward_kernel(function, reference, *args, outputs: int = 1, rtol: float = 1e-5, atol: float = 1e-5,
                          names: tuple = (), requires: str | None = None) -> None:
    """Check a Function whose backward launches kernels as ``check_kernel`` checks a launcher: ``args`` are its
    inputs followed by one upstream gradient per output (``outputs`` of them), ``reference(*args)`` gives the
    gradients of its float inputs, named by ``names`` (``("grad_x",)``); with ``requires``, backward is traced
    (``backward_of``): the gradients must be written by a kernel of the answer's."""
    __tracebackhide__ = True  # noqa: F841
    name = f"{getattr(function, '__name__', 'your Function')}.backward"
    with fresh_memory_is_nan():
        runs = kernel_runs(backward_of(function, outputs), args, strided=False, rows=False)
    problem = kernel_verdict(name, runs, reference, args, rtol, atol, outputs=tuple(names), requires=requires)
    if problem:
        raise CheckFailure(problem) from None
    if isinstance(runs["given"].get("error"), BaseException):
        raise runs["given"]["error"]


def backward_of(function, outputs: int = 1):
    """A launcher of ``function``'s backward: called with the Function's inputs and an upstream gradient per output,
    it runs forward, then the backward node on those gradients, and returns the gradients of the float inputs."""
    def backward(*args):
        inputs, upstream = args[:len(args) - outputs], args[len(args) - outputs:]
        leaves = [a.detach().requires_grad_() if isinstance(a, _Tensor) and a.is_floating_point() else a for a in inputs]
        with torch.enable_grad():
            results = function.apply(*leaves)
        results = results if isinstance(results, (tuple, list)) else (results,)
        node = next(r.grad_fn for r in results if isinstance(r, _Tensor) and r.grad_fn is not None)
        with torch.no_grad():
            returned = node.apply(*upstream)
        returned = returned if isinstance(returned, (tuple, list)) else (returned,)
        return [g for g, a in zip(returned, inputs) if isinstance(a, _Tensor) and a.is_floating_point()]

    backward.__name__ = f"{getattr(function, '__name__', 'the Function')}.backward"
    return backward


def kernel_runs(function, args, strided: bool = True, rows: bool = True, also: dict | None = None,
                watch: bool = False) -> dict:
    """What ``check_kernel`` judges, run where ``function`` lives (the notebook, or the grader's examinee): its
    outcome (``{"result": ...}`` or ``{"error": exception}``) on copies of ``args`` ("given", with its ``record``:
    ``checker.launches.trace_launcher``'s); with ``strided``, on copies whose matrices are not contiguous
    ("strided"; and "strided k" for matrix k alone where that differs from "given"); with ``rows``, on their first
    row alone ("one row", where the first matrix has several rows); and on each of ``also``'s other arguments, by
    its name (attention's run without the causal mask). With ``watch``, the given run and ``also``'s carry their
    ``launches`` (``autograder.student.kernels.watch_launches``: tl.dot counts, races)."""
    with _watching(watch) as seen:
        record, result = trace_launcher(function, _copies(args))
    runs = {"given": {"error": result} if isinstance(result, Exception) else {"result": as_data(result)}}
    runs["given"]["record"] = record
    if watch:
        runs["given"]["launches"] = seen.launches
    matrices = [i for i, a in enumerate(args) if isinstance(a, _Tensor) and a.dim() >= 2 and a.numel() > 1]
    if strided and matrices and "result" in runs["given"]:
        runs[STRIDED] = _outcome(function, not_contiguous(args, matrices))
        if len(matrices) > 1 and not _same_outcome(runs[STRIDED], runs["given"]):
            runs.update({f"{STRIDED} {i}": _outcome(function, not_contiguous(args, [i])) for i in matrices})
    row = one_row(args) if rows else None
    if row is not None:
        runs[ONE_ROW] = _outcome(function, row)
    for key, other in (also or {}).items():
        with _watching(watch) as seen:
            runs[key] = _outcome(function, _copies(other))
        if watch:
            runs[key]["launches"] = seen.launches
    return runs


@contextlib.contextmanager
def _watching(watch: bool):
    """``watch_launches()`` where asked, else nothing."""
    if not watch:
        yield None
        return
    from autograder.student.kernels import watch_launches

    with watch_launches() as seen:
        yield seen


def kernel_verdict(name: str, runs: dict, reference, args, rtol: float = 1e-5, atol: float = 1e-5,
                   outputs: tuple = (), requires: str | None = None, finishing: tuple = (), mistakes=None) -> str | None:
    """What is wrong with ``runs`` (``kernel_runs``'s, errors as exceptions or as their text) against
    ``reference`` on ``args``, in a kernel's terms; None if right, or if the function raised an error the
    course cannot explain (``check_kernel`` then shows that error itself). With ``requires``, a broken contract
    (``checker.launches.contract_problem``) comes first."""
    want = as_data(reference(*_copies(args)))
    given = runs["given"]
    record = given.get("record") if isinstance(given.get("record"), dict) else {}
    if requires and "result" in given:
        broken = contract_problem(name, record, requires, outputs, finishing)
        if broken:
            return broken
    blocks = {str(b) for launch in kernels_launched(record) if launch.get("answer") for b in launch.get("blocks", [])}
    right_on_one_row = _right_on_one_row(runs.get(ONE_ROW), reference, args, rtol, atol)
    if "error" in given:
        text = error_text(given["error"])
        if right_on_one_row:
            return _row_step(name, args, _fails(text), blocks)
        return kernel_problem(name, None, want, rtol, atol, error=text) if _error_hint(text) is not None else None
    got = given.get("result")
    if not same_data(got, want, rtol, atol):
        named = _known_mistake(name, got, want, mistakes, args, outputs)
        if named:
            return named
    problem = kernel_problem(name, got, want, rtol, atol, right_on_one_row=right_on_one_row, args=args,
                             outputs=outputs, blocks=blocks, reference=reference)
    return problem or _layout_problem(name, runs, want, reference, args, rtol, atol)


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


def kernel_problem(name: str, got, want, rtol: float = 1e-5, atol: float = 1e-5, error: str | None = None,
                   right_on_one_row: bool = False, args=(), outputs: tuple = (), blocks=frozenset(),
                   reference=None) -> str | None:
    """What is wrong with the results ``got`` of ``name`` against ``want``, in a kernel's terms; None if they
    agree. With ``error`` (what ``name`` raised instead), that error, explained where the course can.
    ``right_on_one_row``: ``name`` gives the right results on the first row of ``args`` alone. ``outputs`` name
    the results; ``blocks`` are the upper-case parameters of the answer's kernels (``BLOCK_ROWS``,
    ``ROWS_PER_PROGRAM``): a diagnosis speaks of a kernel's blocks only where it has them."""
    if error is not None:
        hint = _error_hint(error)
        return f"{name} failed ({_clipped(error, 1000)})" + (f": {hint}" if hint else "")
    if same_data(got, want, rtol, atol):
        return None
    many = isinstance(want, (list, tuple))
    gots, wants = (list(got), list(want)) if many and isinstance(got, (list, tuple)) else ([got], [want])
    if many and not isinstance(got, (list, tuple)) or len(gots) != len(wants):
        count = len(got) if isinstance(got, (list, tuple)) else 1
        named = f" ({', '.join(outputs)})" if outputs else ""
        return f"{name} returns {count} result{'s' * (count != 1)}, expected {len(wants)}{named}"
    for k, (g, w) in enumerate(zip(gots, wants)):
        what = f"{name}'s {output_label(k, len(wants), outputs)}"
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
            found = (_value_problem(what, g, w, wrong, wants, k, rtol, atol, blocks)
                     or _rows_sum_problem(what, g, k, reference, args, rtol, atol, blocks))
            if found is None:
                return (_row_step(name, args, "is wrong", blocks) if right_on_one_row
                        else _anywhere(what, g, w, wrong, rtol, atol))
            return found
    return None


def output_label(k: int, count: int, outputs: tuple) -> str:
    """What to call result ``k`` of ``count``: its name from ``outputs``, else "result" or "result k + 1"."""
    if k < len(outputs):
        return str(outputs[k])
    return "result" if count == 1 else f"result {k + 1}"


def _known_mistake(name: str, got, want, mistakes, args, outputs: tuple) -> str | None:
    """The first of ``mistakes`` (``{what is wrong: a function of args giving its results}``) whose results ``got``
    are, among those whose results are not the right ones, said with the outputs it makes wrong."""
    if not mistakes:
        return None
    gots = list(got) if isinstance(got, (list, tuple)) else [got]
    wants = list(want) if isinstance(want, (list, tuple)) else [want]
    for description, wrong in mistakes.items():
        try:
            results = as_data(wrong(*_copies(args)))
        except Exception:  # noqa: BLE001 - a mistake that does not apply to these arguments
            continue
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        if len(results) != len(gots) or not all(isinstance(g, _Tensor) and isinstance(r, _Tensor)
                                                and g.shape == r.shape for g, r in zip(gots, results)):
            continue
        differs = [k for k, (r, w) in enumerate(zip(results, wants)) if not _close(r, w)]
        if differs and all(_close(g, r) for g, r in zip(gots, results)):
            labels = [output_label(k, len(wants), outputs) for k in differs]
            return f"{name}'s {' and '.join(labels)} {'is' if len(labels) == 1 else 'are'} wrong: {description}"
    return None


def _close(got, want) -> bool:
    """Whether ``got`` is ``want`` as a float32 kernel computes it (a mistake's results, computed by torch)."""
    return bool(torch.isclose(got.to(torch.float64), want.to(torch.float64), rtol=1e-4, atol=1e-5,
                              equal_nan=True).all())


def _error_hint(error: str) -> str | None:
    """What a Triton error most likely means in these kernels ("" when it says so itself), or None."""
    if "OutOfBounds" in error:
        return ""  # the memory guard's message names the kernel, the tensor and the element
    if any(words in error for words in ("make_shape_compatible", "incompatible dimensions", "Cannot broadcast")):
        return ("two blocks of different shapes meet (a store, a mask, or arithmetic). A sum over the wrong axis "
                "does that: tl.sum(tile, axis=1) gives one value per row of the tile, where the columns need one each "
                "(axis=0)")
    if "Expected dtype ['fp32', 'fp64']" in error:
        return ("tl.math.erf and tl.exp take float32 or float64 only. Load in the input's dtype, convert to float32 "
                "(x.to(tl.float32)) and compute in float32; store converts back to the output's dtype")
    return None


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
            f"where {allowed:.3g} is allowed ({_times(abs(have - right), allowed)} the tolerance, rtol={rtol:.3g} and "
            f"atol={atol:.3g}: more than a float32 kernel's rounding)")


def _times(difference: float, allowed: float) -> str:
    """How many times ``allowed`` ``difference`` is, in words ("12 times", "1.5 times")."""
    ratio = difference / allowed if allowed else float("inf")
    return f"{ratio:,.0f} times" if ratio >= 10 else f"{ratio:.2g} times"


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


# --------------------------------------------------------------------------------------------
# The runs: the arguments as given, non-contiguous, and the first row alone


def _outcome(function, args) -> dict:
    """``{"result": function(*args)}``, or ``{"error": the exception}`` it raised."""
    try:
        return {"result": as_data(function(*args))}
    except Exception as error:  # noqa: BLE001 - the student's code failed: the verdict says how, or shows it
        return {"error": error}


def _same_outcome(one: dict, other: dict) -> bool:
    return "result" in one and "result" in other and same_data(one["result"], other["result"], 1e-6, 1e-6)


def not_contiguous(args, positions) -> list:
    """Copies of ``args`` in which the tensors at ``positions`` have the same values but are not contiguous: a
    slice of a tensor ``PADDING`` elements wider, whose rows lie further apart in memory than a row is long."""
    copies = _copies(args)
    for i in positions:
        a = copies[i]
        fill = float("nan") if a.is_floating_point() else 0
        wider = torch.full((*a.shape[:-1], a.shape[-1] + PADDING), fill, dtype=a.dtype, device=a.device)
        copies[i] = wider[..., :a.shape[-1]]
        copies[i].copy_(a)
    return copies


def one_row(args) -> list | None:
    """Copies of ``args`` in which every tensor of the first matrix's shape keeps only its first row (the others
    stay whole); None where the first matrix has one row, or there is none."""
    first = next((a for a in args if isinstance(a, _Tensor) and a.dim() >= 2), None)
    if first is None or not first.numel() or first.numel() // first.shape[-1] < 2:
        return None
    return _row_of(args, 0)


def _right_on_one_row(outcome: dict | None, reference, args, rtol: float, atol: float) -> bool:
    """Whether the function was right on the first row alone, where the reference treats rows one by one (its
    results of the matrices' shape, cut to their first row, are its results on that row alone)."""
    row = one_row(args)
    if outcome is None or "result" not in outcome or row is None:
        return False
    try:
        whole, alone = as_data(reference(*_copies(args))), as_data(reference(*row))
    except Exception:  # noqa: BLE001 - a reference that takes no single row: no evidence either way
        return False
    shape = next(a.shape for a in args if isinstance(a, _Tensor) and a.dim() >= 2)
    pairs = list(zip(whole, alone)) if isinstance(whole, (list, tuple)) and isinstance(alone, (list, tuple)) else [
        (whole, alone)]
    rowwise = [(w, a) for w, a in pairs if isinstance(w, _Tensor) and w.shape == shape]
    return bool(rowwise) and all(same_data(w.reshape(-1, shape[-1])[:1], a.reshape(-1, shape[-1]), rtol, atol)
                                 for w, a in rowwise) and same_data(outcome["result"], alone, rtol, atol)


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


def _layout_problem(name: str, runs: dict, want, reference, args, rtol: float, atol: float) -> str | None:
    """Right on the arguments as given: is it still right when its matrices are not contiguous?"""
    strided = runs.get(STRIDED)
    if strided is None or _right(strided, want, rtol, atol):
        return None
    matrices = [i for i, a in enumerate(args) if isinstance(a, _Tensor) and a.dim() >= 2 and a.numel() > 1]
    culprits = [i for i in matrices if f"{STRIDED} {i}" in runs and not _right(runs[f"{STRIDED} {i}"], want, rtol,
                                                                                 atol)] or matrices
    names = _parameter_names(reference, len(args))
    which = " and ".join(f"`{names[i]}`" for i in culprits)
    columns = args[culprits[0]].shape[-1]
    how = _fails(error_text(strided["error"])) if "error" in strided else "gives wrong values"
    fix = "; ".join(f"{names[i]} = {names[i]}.contiguous()" for i in culprits)
    return (f"{name} is right on contiguous tensors, but {how} when {which} {'is' if len(culprits) == 1 else 'are'} "
            f"not contiguous (here a slice of a wider tensor: its rows lie {columns + PADDING:,} elements apart in "
            f"memory, not {columns:,}). The kernel walks memory as if each row followed the last: make "
            f"{'it' if len(culprits) == 1 else 'them'} contiguous in the launcher ({fix}), as autograd may hand "
            f"backward a gradient of any layout (expanded by .sum(), transposed by a matrix product)")


def _right(outcome: dict, want, rtol: float, atol: float) -> bool:
    return "result" in outcome and same_data(outcome["result"], want, rtol, atol)


def _parameter_names(function, count: int) -> list[str]:
    """The names of ``function``'s first ``count`` parameters ('argument k' where it has fewer, or none to read)."""
    try:
        names = [p.name for p in inspect.signature(function).parameters.values()][:count]
    except (TypeError, ValueError):
        names = []
    return names + [f"argument {k}" for k in range(len(names), count)]


def error_text(error) -> str:
    """An error (or its text) as 'Type: message', its start and its end kept where it is long (Triton's
    compilation errors put the source first and the reason last)."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return _clipped(text, 2000)


def _clipped(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its start and its end."""
    if len(text) <= limit:
        return text
    half = limit // 2 - 3
    return f"{text[:half]} ... {text[-half:]}"


def _fails(error: str) -> str:
    """How a run failed, in a few words: out of bounds (where), or the error's start."""
    where = re.search(r"out of bounds: (.*?\([\d,]+ elements\))", error)
    if "OutOfBounds" in error:
        return f"goes out of bounds ({where[1]})" if where else "goes out of bounds"
    return f"raises {_clipped(' '.join(error.split()), 200)}"


def _unguarded() -> str | None:
    """What to say where kernels are interpreted but their memory accesses are not checked, else None."""
    from autograder.student.kernels import UNGUARDED, interpreted, memory_guarded

    return UNGUARDED if interpreted() and not memory_guarded() else None
