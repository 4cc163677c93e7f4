"""Diagnoses for assignment 11's attention kernels: which known mistake a wrong result is, and what the kernels did.

Attention here is ``softmax(q k^T / sqrt(d)) v`` per head, for ``q, k, v`` of shape (batch, heads, sequence, d), with
``lse``, the natural log-sum-exp of each row of scaled scores (batch, heads, sequence), as the statistic forward saves.
Each check judges one exercise's kernels, whatever the others do:

- ``check_attention_forward(launcher, q, k, v, causal)`` (Exercises 4 and 7): ``launcher(q, k, v, causal)`` returns
  ``(o, lse)``. Wrong ones are named by comparing them with what each known mistake gives (``_forward``, in float64):
  the accumulator (or running sum) of the online softmax not rescaled, the ``1/sqrt(d)`` scale forgotten or applied
  twice, key columns past the sequence's end counted, the log-sum-exp saved without the maximum, without log l, or in
  base 2.
- ``check_attention_backward(launcher, q, k, v, o, lse, grad_output, causal)`` (Exercises 5 and 7): the launcher gets
  attention's own ``o`` and ``lse``, so forward's mistakes cost nothing here, and returns ``(dq, dk, dv)``; named:
  ``dS`` without ``D``, a wrong ``D`` (the ``D`` the gradients imply, found row by row), the scale forgotten or applied
  twice, ``dv`` or ``dk`` assigned in the loop instead of added, NaN from lanes past the end.
- With ``causal=True`` each also runs the launcher without the mask on the same inputs. The causal result is judged
  against what that unmasked run gives, with the mask applied: a kernel wrong without the mask in a known way
  (Exercise 4's or 5's mistake, charged there) is judged on its mask alone, and a mask off by one, missing or
  reversed, a key/value loop that starts a query tile late, a loop over key tiles that stops a tile early are named.
  Each kernel must skip the tiles its mask removes whole: its ``tl.dot`` count, causal, against its own unmasked run
  (``SKIPPED_SHARE``), kernel by kernel.

Every check also traces the launcher (``checker.launches``: with ``requires``, the results must be written by the
answer's kernels), looks for a tensor of sequence x sequence elements made outside the kernels (FlashAttention never
stores the probabilities) and for two programs of a kernel writing one element (a race: ``watch_launches``). As in
``checker.kernels``, what the launcher did is plain data: in grading the examinee runs it and the referee judges here.
"""

from __future__ import annotations

import torch

from autograder.student.checker.attention_math import (
    MATCH_ATOL, MATCH_RTOL, VALUE_ATOL, VALUE_RTOL, _backward, _forward, _implied_delta, _near, backward_reference,
    forward_reference,
)
from autograder.student.checker.kernels import _error_hint, error_text, fresh_memory_is_nan, kernel_problem, kernel_runs
from autograder.student.checker.launches import contract_problem, kernels_launched
from autograder.student.checker.references import CheckFailure, _isclose, _Tensor

TILES = (16, 32, 64, 128)  # key and query tiles a kernel may use, for the mistakes that depend on the tile
SKIPPED_SHARE = 0.85  # a causal run that skips the masked tiles runs at most this share of its kernel's unmasked tl.dot
SKIPS_FROM = 64  # ... from this length on: two tiles or more of the interpreter's 32 (one tile has none to skip)
UNMASKED = "without the mask"  # the name of a causal check's run with causal=False

ACCUMULATOR = ("the online softmax's accumulator is not rescaled when a row's running maximum grows. When a new key "
               "tile raises the maximum from m to m_new, what acc and the running sum l already hold was weighted by "
               "exp(s - m): multiply both by alpha = exp(m - m_new) before adding the new tile's p and p @ v")
RUNNING_SUM = ("the online softmax's running sum l is not rescaled when a row's running maximum grows (the accumulator "
               "is): l = l * alpha + sum(p), with alpha = exp(m - m_new), as for acc")
NO_SCALE = ("the scores are not scaled: attention uses softmax(q k^T / sqrt(d)), so multiply q k^T by "
            "scale = 1 / sqrt(d) (the launcher's scale) before the maximum and the exponential")
SCALE_TWICE = ("the scores are scaled twice (by 1/d, not 1/sqrt(d)): multiply q k^T by scale = 1 / sqrt(d) once, "
               "either in the kernel or on q, not both")
CAUSAL_DIAGONAL = ("the causal mask is off by one: it removes the diagonal too. Query i sees keys 0 ... i, itself "
                   "included: keep the scores where key <= query (not key < query)")
CAUSAL_ONE_MORE = ("the causal mask is off by one: query i also sees key i + 1. Keep the scores where key <= query "
                   "(not key <= query + 1)")
CAUSAL_MISSING = ("the causal mask is missing: with causal=True, query i sees keys 0 ... i only. Set the scores where "
                  "key > query to -inf (and skip the key tiles that lie wholly above the diagonal)")
CAUSAL_REVERSED = ("the causal mask points the wrong way: each query sees the keys after it. Keep the scores where "
                   "key <= query")
LOOP_ENDS_EARLY = ("the causal loop over key tiles stops one tile early: query rows from start_m see keys up to their "
                   "own, so the loop runs to start_m + BLOCK_M (the tile the diagonal crosses included), not to start_m")
KV_LOOP_LATE = ("the key/value kernel's causal loop starts one query tile late: the keys from start_n are first seen "
                "by the query tile that holds query start_n, which starts at (start_n // BLOCK_M) * BLOCK_M, not the "
                "tile after it; dk and dv miss that tile's queries")
RAGGED_KEYS = ("the key columns past the sequence's end are counted: the last key tile sticks out, and its masked lanes "
               "(loaded as 0) got score 0, so exp(0 - m) went into the running sum. Set the scores of columns >= "
               "seq_len to -inf before the maximum and the exponential")
LSE_WITHOUT_MAX = ("the log-sum-exp is saved without the maximum: the running sum l was taken relative to exp(m), so "
                   "the row's log-sum-exp is m + log(l), not log(l)")
LSE_WITHOUT_SUM = ("the log-sum-exp is saved without log(l): m is only the row's largest score; the log-sum-exp of the "
                   "row is m + log(l), with l the running sum")
LSE_BASE_2 = ("the log-sum-exp is in base 2 (m + log2(l) with exp2 scores): multiply it by ln 2 to store the natural "
              "log-sum-exp")
WITHOUT_D = ("dS is computed without subtracting D: the softmax's backward is dS = P * (dP - D), with D = rowsum(dO * O) "
             "for each query row (the preprocessing kernel), so dS = P * dP is only its first term")
GRADIENT_NO_SCALE = ("the query and key gradients miss the scale: the scores are scale * q k^T, so dq = scale * dS @ k "
                     "and dk = scale * dS^T @ q")
GRADIENT_SCALE_TWICE = ("the query and key gradients are scaled twice: dq = scale * dS @ k and dk = scale * dS^T @ q, "
                        "once (if P is recomputed from already scaled scores, do not scale dS again)")
DV_ASSIGNED = ("dv holds the last query tile's term only: the loop over query tiles assigns dv = tl.dot(...) where it "
               "must add to it (dv += ...), from zeros made before the loop")
DK_ASSIGNED = ("dk holds the last query tile's term only: the loop over query tiles assigns dk = tl.dot(...) where it "
               "must add to it (dk += ...), from zeros made before the loop")
RAGGED_NAN = ("NaN: lanes past the sequence's end reached a tl.dot or a sum. A masked tl.load without other= holds NaN "
              "here (a GPU promises nothing there): load q, k, v, dO, lse and D with other=0.0, and set the "
              "probabilities of rows or columns >= seq_len to 0 (tl.where) before they are used")
NOT_SKIPPED = {  # per kernel: how its causal loop skips the tiles above the diagonal
    "forward": "for query rows from start_m, loop over the key tiles up to start_m + BLOCK_M only",
    "key/value": "start the loop over query tiles at the first tile that reaches the keys, (start_n // BLOCK_M) * BLOCK_M",
    "query": "for query rows from start_m, loop over the key tiles up to start_m + BLOCK_M only",
}


# --------------------------------------------------------------------------------------------
# The known mistakes, as parameters of attention_math's _forward and _backward


def _forward_mistakes(length: int):
    """(what is wrong, ``_forward``'s parameters) for each known mistake of forward, without the mask."""
    yield NO_SCALE, {"power": 0}
    yield SCALE_TWICE, {"power": 2}
    for tile in [t for t in TILES if t < length]:
        yield ACCUMULATOR, {"online": (tile, False, True)}
        yield ACCUMULATOR, {"online": (tile, False, False)}
        yield RUNNING_SUM, {"online": (tile, True, False)}
    for tile in [t for t in TILES if length % t]:
        yield RAGGED_KEYS, {"pad": tile}
    yield LSE_WITHOUT_MAX, {"lse": "without_max"}
    yield LSE_WITHOUT_SUM, {"lse": "max"}
    yield LSE_BASE_2, {"lse": "base2"}


def _causal_mistakes(length: int, tiles: bool = True):
    """(what is wrong, parameters) for each known mistake of the causal mask, in forward or backward."""
    yield CAUSAL_DIAGONAL, {"shift": -1}
    yield CAUSAL_ONE_MORE, {"shift": 1}
    yield CAUSAL_MISSING, {"causal": False}
    yield CAUSAL_REVERSED, {"reverse": True}
    for tile in [t for t in TILES if t < length] if tiles else []:
        yield LOOP_ENDS_EARLY, {"early": tile}


def _which(got, right, variants, compute) -> tuple[str, dict] | None:
    """The first (description, parameters) of ``variants`` whose result ``compute(**parameters)`` ``got`` is, among
    those whose result is not ``right``."""
    for description, parameters in variants:
        wrong = compute(**parameters)
        if not _near(wrong, right) and _near(got, wrong):
            return description, parameters
    return None


# --------------------------------------------------------------------------------------------
# Forward: a launcher's (o, lse)


def forward_problem(name: str, got, q, k, v, causal: bool = False, rtol: float = 1e-5, atol: float = 1e-5,
                    error: str | None = None, unmasked=None) -> str | None:
    """What is wrong with ``got``, the ``(o, lse)`` that ``name(q, k, v, causal)`` returned (or the ``error`` it
    raised instead); None if right. A causal call is judged against ``unmasked``, what ``name`` returned without the
    mask, where that is wrong in a known way."""
    want = forward_reference(q, k, v, causal)
    if error is not None:
        return kernel_problem(name, None, None, error=error)
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(g, _Tensor) for g in got)):
        return f"{name} should return two tensors, (o, lse); it returned {type(got).__name__}"
    for what, g, w in (("o", got[0], want[0]), ("lse", got[1], want[1])):
        if g.shape != w.shape or g.dtype != w.dtype:
            return (f"{name}'s {what} has shape {list(g.shape)} and dtype {g.dtype}, expected {list(w.shape)} and "
                    f"{w.dtype}" + (" (one log-sum-exp per query row: batch, heads, sequence)" if what == "lse" else ""))
    if all(bool(_isclose(g, w, rtol=rtol, atol=atol).all()) for g, w in zip(got, want)):
        return None
    length = q.shape[-2]
    if causal:
        return _causal_forward_problem(name, got, q, k, v, unmasked)
    right = _forward(q, k, v)
    found = _which(tuple(got), right, _forward_mistakes(length), lambda **p: _forward(q, k, v, **p))
    if found is None:  # two mistakes at once: name the output's, else the log-sum-exp's
        found = _which(got[0], right[0], _forward_mistakes(length), lambda **p: _forward(q, k, v, **p)[0])
        if found is None and _near(got[0], right[0], VALUE_RTOL, VALUE_ATOL * 100):
            found = _which(got[1], right[1], _forward_mistakes(length), lambda **p: _forward(q, k, v, **p)[1])
    if found:
        o_right = _near(got[0], right[0], rtol, atol)
        return f"{name}'s {'lse is wrong (o is right)' if o_right else 'o is wrong'}: {found[0]}"
    problem = kernel_problem(name, list(got), list(want), rtol, atol, outputs=("o", "lse"), blocks={"BLOCK_M"})
    return problem + (f". {RAGGED_NAN}" if any(bool(torch.isnan(g).any()) for g in got) else "")


def _causal_forward_problem(name: str, got, q, k, v, unmasked) -> str | None:
    """A causal (o, lse) judged on its mask: against attention with the mask, done as the unmasked run does it."""
    length = q.shape[-2]
    base = _base_mistake(unmasked, _forward(q, k, v), _forward_mistakes(length), lambda **p: _forward(q, k, v, **p))
    if base is None:
        return (f"{name} is wrong without the mask too (causal=False) in a way the checker cannot name, so its causal "
                f"mask cannot be judged apart from that: make it right without the mask first (Exercise 4)")
    description, parameters = base
    expected = _forward(q, k, v, True, **parameters)
    if _near(tuple(got), expected, *((VALUE_RTOL, VALUE_ATOL * 100) if not description else (MATCH_RTOL, MATCH_ATOL))):
        return None
    on_top = f" (and, as without the mask, {description})" if description else ""
    for mistake, more in _causal_mistakes(length):
        wrong = _forward(q, k, v, **({"causal": True} | parameters | more))
        if not _near(wrong, expected) and _near(got[0], wrong[0]):
            return f"{name}'s o is wrong with causal=True: {mistake}{on_top}"
    which = "o" if not _near(got[0], expected[0]) else "lse"
    index = 0 if which == "o" else 1
    return _difference(f"{name}'s {which} with causal=True", got[index], expected[index],
                       "attention's with the causal mask" + (", done as your kernel does it without the mask"
                                                             if description else ""))


def _base_mistake(unmasked, right, variants, compute) -> tuple[str, dict] | None:
    """What the unmasked run is: ("", {}) when right (or not run), (description, parameters) of a known mistake, or
    None when it is wrong in another way."""
    if unmasked is None or "result" not in unmasked:
        return "", {}
    got = unmasked["result"]
    if not (isinstance(got, (tuple, list)) and all(isinstance(g, _Tensor) for g in got)):
        return None
    got = tuple(got)
    if _near(got, right, VALUE_RTOL * 10, VALUE_ATOL * 100):
        return "", {}
    return _which(got, right, variants, compute)


def check_attention_forward(function, q, k, v, causal: bool = False, rtol: float = 1e-5, atol: float = 1e-5,
                            requires: str | None = None) -> None:
    """Check that ``function(q, k, v, causal)`` (an attention forward that launches kernels) returns attention's
    ``(o, lse)``, its results written by its kernels (with ``requires``, the exercise's requirement), no sequence x
    sequence tensor made, and, when causal, the tiles above the diagonal skipped; when wrong, say which known
    mistake it made (``forward_verdict``). New tensors hold NaN meanwhile, as in ``check_kernel``."""
    __tracebackhide__ = True  # noqa: F841
    name = getattr(function, "__name__", "your function")
    with fresh_memory_is_nan():
        runs = kernel_runs(function, (q, k, v, causal), strided=False, rows=False, watch=True,
                           also={UNMASKED: (q, k, v, False)} if causal else None)
    problem = forward_verdict(name, runs, q, k, v, causal, rtol, atol, requires)
    if problem:
        raise CheckFailure(problem) from None
    if "error" in runs["given"] and isinstance(runs["given"]["error"], BaseException):
        raise runs["given"]["error"]


def forward_verdict(name: str, runs: dict, q, k, v, causal: bool = False, rtol: float = 1e-5, atol: float = 1e-5,
                    requires: str | None = None) -> str | None:
    """The judgement of ``kernel_runs`` of an attention forward launcher (see the module's docstring)."""
    given = runs["given"]
    if "error" in given:
        text = error_text(given["error"])
        return forward_problem(name, None, q, k, v, causal, error=text) if _error_hint(text) is not None else None
    problem = _launches_problem(name, runs, requires, ("o", "lse"), q, causal)
    return problem or forward_problem(name, given["result"], q, k, v, causal, rtol, atol, unmasked=runs.get(UNMASKED))


# --------------------------------------------------------------------------------------------
# Backward: a launcher's (dq, dk, dv), from attention's own o and lse


def _backward_mistakes(length: int):
    """(what is wrong, ``_backward``'s parameters) for each known mistake of backward, without the mask."""
    yield WITHOUT_D, {"subtract_d": False}
    yield GRADIENT_NO_SCALE, {"power": 0}
    yield GRADIENT_SCALE_TWICE, {"power": 2}
    for tile in [t for t in TILES if t < length]:
        yield DV_ASSIGNED, {"dv_last": tile}
        yield DK_ASSIGNED, {"dk_last": tile}


def backward_problem(name: str, got, q, k, v, grad_output, causal: bool = False, rtol: float = 1e-5,
                     atol: float = 1e-5, unmasked=None) -> str | None:
    """What is wrong with ``got``, the ``(dq, dk, dv)`` a backward launcher returned for attention's own o and lse;
    None if right. A causal call is judged against ``unmasked``, what it returned without the mask."""
    want = backward_reference(q, k, v, None, None, grad_output, causal)
    if not (isinstance(got, (tuple, list)) and len(got) == 3 and all(isinstance(g, _Tensor) for g in got)):
        return f"{name} should return three tensors, (dq, dk, dv); it returned {type(got).__name__}"
    for what, g, w in zip(("dq", "dk", "dv"), got, want):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"{name}'s {what} has shape {list(g.shape)} and dtype {g.dtype}, expected {list(w.shape)} and {w.dtype}"
    if all(bool(_isclose(g, w, rtol=rtol, atol=atol).all()) for g, w in zip(got, want)):
        return None
    got = tuple(got)
    if any(bool(torch.isnan(g).any()) for g in got):
        which = [n for n, g in zip(("dq", "dk", "dv"), got) if bool(torch.isnan(g).any())]
        return f"{name}'s {' and '.join(which)} hold{'s' if len(which) == 1 else ''} {RAGGED_NAN}"
    length = q.shape[-2]
    compute = lambda causal=causal, **p: _backward(q, k, v, grad_output, causal, **p)  # noqa: E731
    if causal:
        return _causal_backward_problem(name, got, q, k, v, grad_output, unmasked)
    right = _backward(q, k, v, grad_output)
    found = _which(got, right, _backward_mistakes(length), compute)
    if found:
        return f"{name}'s {_differing(got, right)} wrong: {found[0]}"
    implied = _implied_delta(q, k, v, grad_output, got, False)
    if implied is not None:
        return _wrong_delta(name, q, k, v, grad_output, implied[0], got, right)
    problem = kernel_problem(name, list(got), list(want), rtol, atol, outputs=("dq", "dk", "dv"), blocks={"BLOCK_M"})
    return problem


def _differing(got, right) -> str:
    """'dq and dk are' (the gradients of ``got`` that differ from ``right``)."""
    which = [n for n, g, r in zip(("dq", "dk", "dv"), got, right) if not _near(g, r)]
    return f"{' and '.join(which)} {'is' if len(which) == 1 else 'are'}"


def _wrong_delta(name: str, q, k, v, grad_output, delta, got, right) -> str:
    o, _ = _forward(q, k, v)
    d = (grad_output.to(torch.float64) * o).sum(-1)
    if bool((delta.abs() < 1e-6 * (1 + d.abs())).all()):
        return f"{name}'s {_differing(got, right)} wrong: {WITHOUT_D}"
    flat = int((delta - d).abs().argmax())
    index = [int(i) for i in torch.unravel_index(torch.tensor(flat), d.shape)]
    return (f"{name}'s {_differing(got, right)} wrong: D is wrong. The gradients are those of dS = P * (dP - D) with a "
            f"D of {float(delta.flatten()[flat]):.6g} at query row {index} where rowsum(dO * O) is "
            f"{float(d.flatten()[flat]):.6g}: D is the sum over the row of dO times O, elementwise (the preprocessing "
            f"kernel: tl.sum(o * do, 1), in float32), one number per query row, dv is right")


def _causal_backward_problem(name: str, got, q, k, v, grad_output, unmasked) -> str | None:
    """Causal (dq, dk, dv) judged on the mask: against attention's with the mask, done as the unmasked run does it."""
    length = q.shape[-2]
    compute = lambda causal=True, **p: _backward(q, k, v, grad_output, causal, **p)  # noqa: E731
    base = None
    if unmasked is not None and "result" in unmasked and isinstance(unmasked["result"], (tuple, list)):
        implied = _implied_delta(q, k, v, grad_output, tuple(unmasked["result"]), False)
        if implied is not None and not _near(tuple(unmasked["result"]), _backward(q, k, v, grad_output)):
            base = ("D is wrong", {"delta": "implied"})
    if base is None:
        base = _base_mistake(unmasked, _backward(q, k, v, grad_output), _backward_mistakes(length),
                             lambda **p: _backward(q, k, v, grad_output, False, **p))
    if base is None:
        return (f"{name} is wrong without the mask too (causal=False) in a way the checker cannot name, so its causal "
                f"mask cannot be judged apart from that: make it right without the mask first (Exercise 5)")
    description, parameters = base
    if parameters.get("delta") == "implied":
        if _implied_delta(q, k, v, grad_output, got, True) is not None:
            return None  # right with the mask, for the D it computes (Exercise 5's mistake)
        parameters = {}
    expected = compute(**parameters)
    if _near(got, expected, *((VALUE_RTOL, VALUE_ATOL * 100) if not description else (MATCH_RTOL, MATCH_ATOL))):
        return None
    on_top = f" (and, as without the mask, {description})" if description else ""
    mistakes = list(_causal_mistakes(length)) + [(KV_LOOP_LATE, {"kv_late": t}) for t in TILES if t < length]
    for mistake, more in mistakes:
        wrong = compute(**(parameters | more))
        if not _near(wrong, expected) and _near(got, wrong):
            return f"{name}'s {_differing(got, expected)} wrong with causal=True: {mistake}{on_top}"
    which = next(i for i, (g, e) in enumerate(zip(got, expected)) if not _near(g, e))
    return _difference(f"{name}'s {'dq dk dv'.split()[which]} with causal=True", got[which], expected[which],
                       "attention's with the causal mask")


def check_attention_backward(function, q, k, v, o, lse, grad_output, causal: bool = False, rtol: float = 1e-5,
                             atol: float = 1e-5, requires: str | None = None) -> None:
    """Check that ``function(q, k, v, o, lse, grad_output, causal)`` (an attention backward that launches kernels)
    returns attention's ``(dq, dk, dv)``, written by its kernels (with ``requires``), with no race, no sequence x
    sequence tensor and, when causal, the tiles above the diagonal skipped; when wrong, say which known mistake it
    made (``backward_verdict``)."""
    __tracebackhide__ = True  # noqa: F841
    name = getattr(function, "__name__", "your function")
    with fresh_memory_is_nan():
        runs = kernel_runs(function, (q, k, v, o, lse, grad_output, causal), strided=False, rows=False, watch=True,
                           also=_unmasked_backward(q, k, v, grad_output) if causal else None)
    problem = backward_verdict(name, runs, q, k, v, o, lse, grad_output, causal, rtol, atol, requires)
    if problem:
        raise CheckFailure(problem) from None
    if "error" in runs["given"] and isinstance(runs["given"]["error"], BaseException):
        raise runs["given"]["error"]


def _unmasked_backward(q, k, v, grad_output) -> dict:
    """The unmasked run of a causal backward check: the same q, k, v and dO with attention's own unmasked o and lse."""
    o, lse = forward_reference(q, k, v, False)
    return {UNMASKED: (q, k, v, o, lse, grad_output, False)}


def backward_verdict(name: str, runs: dict, q, k, v, o, lse, grad_output, causal: bool = False, rtol: float = 1e-5,
                     atol: float = 1e-5, requires: str | None = None) -> str | None:
    """The judgement of ``kernel_runs`` of an attention backward launcher (see the module's docstring)."""
    given = runs["given"]
    if "error" in given:
        text = error_text(given["error"])
        return kernel_problem(name, None, None, error=text) if _error_hint(text) is not None else None
    problem = _launches_problem(name, runs, requires, ("dq", "dk", "dv"), q, causal)
    return problem or backward_problem(name, given["result"], q, k, v, grad_output, causal, rtol, atol,
                                       unmasked=runs.get(UNMASKED))


# --------------------------------------------------------------------------------------------
# What the kernels did: the contract, memory, races, skipped tiles


def _launches_problem(name: str, runs: dict, requires, outputs: tuple, q, causal: bool) -> str | None:
    """The contract (``requires``), a sequence x sequence tensor made outside the kernels, two programs writing one
    element, and, when causal, a kernel that runs as many tl.dot as without the mask."""
    given = runs["given"]
    record = given.get("record") if isinstance(given.get("record"), dict) else {}
    if requires:
        broken = contract_problem(name, record, requires, outputs)
        if broken:
            return broken
    length = q.shape[-2]
    largest = int(record.get("largest", 0))
    unmasked = runs.get(UNMASKED) or {}
    # Memory, and a race the unmasked run has too, are the unmasked exercise's (4 or 5): a causal check judges the mask.
    raced_there = causal and any(launch.get("race") for launch in unmasked.get("launches") or [])
    if not causal and largest >= length * length and largest > q.numel():  # (q, k, v, o, gradients: q.numel() each)
        return (f"{name} creates a tensor of {largest:,} elements, as many as the {length} x {length} attention matrix "
                f"of one head or more: FlashAttention never stores the probabilities. Forward keeps o and one "
                f"log-sum-exp per row; backward recomputes P tile by tile from q, k and lse, so memory grows with the "
                f"sequence, not with its square")
    for launch in [] if raced_there else given.get("launches") or []:
        race = launch.get("race")
        if race:
            return (f"two programs of {str(launch['kernel'])[:60]} write element {int(race['element']):,} of "
                    f"`{str(race['tensor'])[:40]}`, one of them with a plain tl.store (a race: on a GPU the programs "
                    f"run at the same time, so one's sum is lost; Triton's interpreter runs them one after another, "
                    f"and the last write wins). Each query's gradient adds up a term from every key tile: compute dq "
                    f"in a pass of its own, one program per query tile looping over the key tiles, or add into a "
                    f"zeroed dq with tl.atomic_add")
    if causal and length >= SKIPS_FROM and UNMASKED in runs:
        skipped = _not_skipped(name, given.get("launches") or [], runs[UNMASKED].get("launches") or [],
                               kernels_launched(record))
        return skipped and (f"This exercise requires {requires}, but {skipped}" if requires else skipped)
    return None


def _not_skipped(name: str, causal_launches: list, full_launches: list, traced: list) -> str | None:
    """The first kernel whose causal run took more than ``SKIPPED_SHARE`` of its unmasked run's tl.dot, or none at
    all; each kernel's loop named by what it computes (its parameters: ``dq_ptr``, ``dk_ptr``, else forward's)."""
    if not causal_launches:
        return f"{name} launches no Triton kernel with causal=True: the causal tiles are skipped in your kernels"
    for k, (causal, full) in enumerate(zip(causal_launches, full_launches)):
        kernel, dots, all_dots = str(causal.get("kernel"))[:60], int(causal.get("dots", 0)), int(full.get("dots", 0))
        if all_dots and dots > SKIPPED_SHARE * all_dots:
            parameters = {str(p) for p in (traced[k].get("parameters") or [])} if k < len(traced) else set()
            role = ("query" if "dq_ptr" in parameters else "key/value" if {"dk_ptr", "dv_ptr"} & parameters
                    else "forward")
            return (f"{kernel} runs {dots} tl.dot with causal=True against {all_dots} without the mask: a causal kernel "
                    f"skips the tiles that lie wholly above the diagonal ({NOT_SKIPPED[role]}), it does not load them "
                    f"and mask every score")
    return None


def _difference(what: str, got, want, whose: str = "attention's (softmax(q k^T / sqrt(d)) v, in float64)") -> str:
    wrong = ~_isclose(got.to(torch.float64), want, rtol=VALUE_RTOL, atol=VALUE_ATOL, equal_nan=True)
    first = tuple(int(i) for i in wrong.nonzero()[0])
    have, right = got[first].item(), want[first].item()
    allowed = VALUE_ATOL + VALUE_RTOL * abs(right)
    return (f"{what} differs from {whose} at {int(wrong.sum()):,} of {wrong.numel():,} elements, the first at index "
            f"{list(first)}: {have:.6g} where {right:.6g} is right, a difference of {abs(have - right):.3g} where "
            f"{allowed:.3g} is allowed ({abs(have - right) / allowed:,.0f} times the tolerance)")
