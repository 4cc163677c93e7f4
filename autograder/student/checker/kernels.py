"""``check_kernel``: a function that launches Triton kernels gives what a torch reference gives (assignments 10 and
11), its results written by a kernel of the answer's, and when it does not, what the kernel most likely got wrong.

The function is called on copies of the arguments with torch's deterministic mode on, whose
``fill_uninitialized_memory`` fills every new tensor with NaN (``torch.empty_like`` included): an
element no program writes then shows as NaN, not as whatever the memory held. It is called three
ways (``kernel_runs``): on the arguments as given, traced (``checker.launches``: the kernels launched, what they
wrote, the torch operations outside them), so that the exercise's requirement (``requires=``) is checked by what
the launcher did, first; on copies whose matrices are not contiguous (a slice of a wider tensor: rows further apart
in memory than a row is long), since a kernel that assumes contiguous rows reads the wrong elements of such a tensor
and autograd hands backward gradients of any layout; and on the first row alone, which shows a kernel that is right
on one row and wrong on the next (its row stride, or where its blocks start). A wrong result is named by the known
mistakes the test gives (``mistakes=``: what each makes the results), else explained by its pattern
(``checker.kernel_patterns``: the last rows or columns, NaN, a bias gradient's reductions, a sum over the rows that
holds some rows only), in the terms of the launched kernel's own blocks; results are named as the test names them
(``outputs=``: ``y``, ``grad_bias``), and a wrong value says how many times the tolerance it is off. An access out of
bounds is an error raised by the kernel itself, under the interpreter's memory guard (``autograder.student.kernels``).
``check_backward_kernel`` checks a Function's backward that launches kernels the same way (``backward_of``). In
grading the examinee makes the same runs (``kernel_runs``) and the referee judges them here.
"""

from __future__ import annotations

import contextlib
import inspect
import re

import torch

from autograder.student.checker.harness import _copies, as_data, same_data, short
from autograder.student.checker.kernel_patterns import (
    _anywhere, _row_of, _row_step, _rows_sum_problem, _shape_problem, _value_problem,
)
from autograder.student.checker.launches import contract_problem, kernels_launched, trace_launcher
from autograder.student.checker.overwrites import same_values
from autograder.student.checker.references import CheckFailure, _Tensor

PADDING = 3  # the extra elements per row of check_kernel's non-contiguous copies
ONE_ROW, STRIDED = "one row", "strided"
WRITTEN = "written over"  # not a run: the arguments the launcher wrote over in the given run (``written_over``)


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
    matrix assumed contiguous, a sum over the wrong axis, one block's partial sum where all of them should be added; and a
    launcher that wrote over an argument it was given (its kernel stored into the argument's pointer), named by its
    parameter name.
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
    its name (attention's run without the causal mask); and the tensor arguments the given run wrote over ("written
    over", where there are any). With ``watch``, the given run and ``also``'s carry their
    ``launches`` (``autograder.student.kernels.watch_launches``: tl.dot counts, races)."""
    with _watching(watch) as seen:
        given = _copies(args)
        record, result = trace_launcher(function, given)
    runs = {"given": {"error": result} if isinstance(result, Exception) else {"result": as_data(result)}}
    runs["given"]["record"] = record
    if watch:
        runs["given"]["launches"] = seen.launches
    written = written_over(function, args, given)
    if written:
        runs[WRITTEN] = {"result": written}
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
    return (problem or _layout_problem(name, runs, want, reference, args, rtol, atol)
            or written_problem(name, runs.get(WRITTEN)))


def written_over(function, args, copies) -> list:
    """``[[position, name], ...]`` of the tensor arguments that ``function``, called on ``copies`` of ``args``,
    wrote over (their values changed), named by its own parameter names."""
    names = _parameter_names(function, len(args))
    return [[i, names[i]] for i, (a, c) in enumerate(zip(args, copies))
            if isinstance(a, _Tensor) and isinstance(c, _Tensor) and not same_values(c, a)]


def written_problem(name: str, written) -> str | None:
    """What ``written_over`` found, in words (from either process: what the names are is checked here)."""
    found = written.get("result") if isinstance(written, dict) else None
    found = [e for e in found[:8] if isinstance(e, list) and len(e) == 2 and type(e[0]) is int] \
        if isinstance(found, list) else []
    if not found:
        return None
    said = [f"`{n}`" if isinstance(n, str) and n.isidentifier() and len(n) <= 60 else f"argument {i + 1}"
            for i, n in found]
    them = "it" if len(said) == 1 else "them"
    return (f"{name} wrote over {' and '.join(said)}, which it was given: the caller still holds {them} and may "
            f"use {them} again (a backward reads forward's inputs again, a second call reads the same ones). Have the "
            f"kernels store into new tensors (torch.empty_like(x)), never into the pointers of the arguments")


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
