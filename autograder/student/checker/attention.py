"""Diagnoses for assignment 11's attention kernels: which known mistake a wrong result is, and what the kernels did.

Attention here is ``softmax(q k^T / sqrt(d)) v`` per head, for ``q, k, v`` of shape (batch, heads, sequence, d), with
``lse``, the natural log-sum-exp of each row of scaled scores (batch, heads, sequence), as the statistic forward saves.

- ``check_attention_forward(launcher, q, k, v, causal)``: ``launcher(q, k, v, causal)`` returns ``(o, lse)``; when they
  are wrong, ``forward_problem`` says which mistake they are, by comparing them with what each known mistake gives,
  computed here in float64: the accumulator (or running sum) of the online softmax not rescaled when the maximum
  grows, the ``1/sqrt(d)`` scale forgotten or applied twice, the causal mask off by one (or missing, or reversed),
  key columns past the sequence's end not masked, the log-sum-exp saved without the maximum (or in base 2).
- ``check_attention(Function, q, k, v, causal)``: a record (``attention_record``) of what the Function's forward and
  backward did, made where it runs, and its judgement (``attention_problem``): the largest tensor each created (a
  sequence x sequence one is the whole probability matrix), two programs of a kernel writing one element (a race,
  as in a query gradient stored from every key tile), how many ``tl.dot`` a causal run takes against a full one (a
  causal kernel skips the tiles its mask removes whole), and the gradients against the known mistakes of backward:
  ``dS`` without subtracting ``D``, the scale forgotten or applied twice, the causal mask off by one, probabilities
  recomputed from a log-sum-exp saved without its maximum, NaN from lanes past the sequence's end.

As in ``diagnoses``, the record is plain data: in grading the referee asks the examinee for it and judges it itself.
"""

from __future__ import annotations

import math

import torch

from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from autograder.student.checker.diagnoses import float64_leaves
from autograder.student.kernels import watch_launches
from autograder.student.checker.harness import _copies, as_data
from autograder.student.checker.kernels import _error_hint, fresh_memory_is_nan, kernel_problem
from autograder.student.checker.references import _draw, _Generator, _isclose, _no_grad, _Tensor

TILES = (16, 32, 64, 128)  # key tiles a kernel may use, for the mistakes that depend on the tile
SKIPPED_SHARE = 0.85  # a causal run that skips the masked tiles runs at most this share of a full run's tl.dot
SKIPS_FROM = 64  # ... from this length on: two key tiles or more of the interpreter's 32 (one tile has none to skip)
MATCH_RTOL, MATCH_ATOL = 1e-4, 1e-6  # a result "is" a mistake's when this close to it (float32 kernels round)
VALUE_RTOL, VALUE_ATOL = 1e-5, 1e-7  # float64 results this close to attention's are right (kernels pass float32 scalars)

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
RAGGED_KEYS = ("the key columns past the sequence's end are counted: the last key tile sticks out, and its masked lanes "
               "(loaded as 0) got score 0, so exp(0 - m) went into the running sum. Set the scores of columns >= "
               "seq_len to -inf before the maximum and the exponential")
LSE_WITHOUT_MAX = ("the log-sum-exp is saved without the maximum: the running sum l was taken relative to exp(m), so "
                   "the row's log-sum-exp is m + log(l), not log(l)")
LSE_BASE_2 = ("the log-sum-exp is in base 2 (m + log2(l) with exp2 scores): multiply it by ln 2 to store the natural "
              "log-sum-exp")
WITHOUT_D = ("dS is computed without subtracting D: the softmax's backward is dS = P * (dP - D), with D = rowsum(dO * O) "
             "for each query row (the preprocessing kernel), so dS = P * dP is only its first term")
GRADIENT_NO_SCALE = ("the query and key gradients miss the scale: the scores are scale * q k^T, so dq = scale * dS @ k "
                     "and dk = scale * dS^T @ q")
GRADIENT_SCALE_TWICE = ("the query and key gradients are scaled twice: dq = scale * dS @ k and dk = scale * dS^T @ q, "
                        "once (if P is recomputed from already scaled scores, do not scale dS again)")
GRADIENT_LSE = ("backward recomputes P from a log-sum-exp saved without the row maximum: P = exp(scale * q k^T - lse) "
                "needs lse = m + log(l)")
RAGGED_NAN = ("NaN: lanes past the sequence's end reached a tl.dot or a sum. A masked tl.load without other= holds NaN "
              "here (a GPU promises nothing there): load q, k, v, dO, lse and D with other=0.0, and set the "
              "probabilities of rows or columns >= seq_len to 0 (tl.where) before they are used")


# --------------------------------------------------------------------------------------------
# Attention, right and wrong, in float64


def _keep(rows: int, columns: int, causal: bool, shift: int = 0, reverse: bool = False, device=None):
    """Which scores of a rows x columns matrix a query row keeps: all, or keys <= query + shift (keys >= query when
    ``reverse``)."""
    query = torch.arange(rows, device=device)[:, None]
    key = torch.arange(columns, device=device)[None, :]
    if not causal:
        return torch.ones(rows, columns, dtype=torch.bool, device=device)
    return key >= query if reverse else key <= query + shift


def _scores(q, k, power: float = 1.0):
    return (q @ k.transpose(-1, -2)) * q.shape[-1] ** (-0.5 * power)


def attended(q, k, v, causal: bool = False, power: float = 1.0, shift: int = 0, reverse: bool = False):
    """(o, lse) of attention in float64, the scale 1/sqrt(d) applied ``power`` times, the causal mask shifted or
    reversed as the mistakes have it (a row that keeps nothing gives NaN and -inf)."""
    q, k, v = (t.detach().to(torch.float64) for t in (q, k, v))
    keep = _keep(q.shape[-2], k.shape[-2], causal, shift, reverse, q.device)
    scores = _scores(q, k, power).masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(scores, -1)
    return torch.softmax(scores, -1) @ v, lse


def forward_reference(q, k, v, causal: bool = False):
    """(o, lse) in the inputs' dtype: what an attention forward launcher returns."""
    o, lse = attended(q, k, v, causal)
    return o.to(q.dtype), lse.to(q.dtype)


def _online(q, k, v, causal: bool, tile: int, rescale_accumulator: bool, rescale_sum: bool):
    """o of an online softmax over key tiles of ``tile`` columns that forgets to rescale the accumulator or the sum."""
    q, k, v = (t.detach().to(torch.float64) for t in (q, k, v))
    scores = _scores(q, k).masked_fill(~_keep(q.shape[-2], k.shape[-2], causal, device=q.device), -math.inf)
    m = torch.full(scores.shape[:-1], -math.inf, dtype=torch.float64, device=q.device)
    total, accumulator = torch.zeros_like(m), torch.zeros_like(q)
    for start in range(0, scores.shape[-1], tile):
        block = scores[..., start:start + tile]
        m_new = torch.maximum(m, block.amax(-1))
        alpha = torch.exp(m - m_new).nan_to_num(1.0)  # (-inf - -inf: a row that has seen nothing yet)
        p = torch.exp(block - m_new[..., None]).nan_to_num(0.0)
        total = (total * alpha if rescale_sum else total) + p.sum(-1)
        accumulator = (accumulator * alpha[..., None] if rescale_accumulator else accumulator) + p @ v[..., start:start + tile, :]
        m = m_new
    return accumulator / total[..., None]


def _padded_keys(q, k, v, tile: int):
    """o when the last key tile's lanes past the sequence's end count with score 0 (their k and v loaded as 0)."""
    length = k.shape[-2]
    extra = -length % tile
    pad = q.new_zeros(*k.shape[:-2], extra, k.shape[-1])
    return attended(q, torch.cat([k, pad], -2), torch.cat([v, pad], -2))[0]


def _output_mistakes(q, k, v, causal: bool):
    """(what is wrong, the o it gives) for each known mistake of forward's output, lazily."""
    length = q.shape[-2]
    yield NO_SCALE, lambda: attended(q, k, v, causal, power=0)[0]
    yield SCALE_TWICE, lambda: attended(q, k, v, causal, power=2)[0]
    if causal:
        yield CAUSAL_DIAGONAL, lambda: attended(q, k, v, True, shift=-1)[0]
        yield CAUSAL_ONE_MORE, lambda: attended(q, k, v, True, shift=1)[0]
        yield CAUSAL_MISSING, lambda: attended(q, k, v, False)[0]
        yield CAUSAL_REVERSED, lambda: attended(q, k, v, True, reverse=True)[0]
    for tile in [t for t in TILES if t < length]:
        yield ACCUMULATOR, lambda t=tile: _online(q, k, v, causal, t, False, True)
        yield ACCUMULATOR, lambda t=tile: _online(q, k, v, causal, t, False, False)
        yield RUNNING_SUM, lambda t=tile: _online(q, k, v, causal, t, True, False)
    if not causal:
        for tile in [t for t in TILES if length % t]:
            yield RAGGED_KEYS, lambda t=tile: _padded_keys(q, k, v, t)


def _lse_mistakes(q, k, v, causal: bool):
    """(what is wrong, the lse it gives) for each known mistake of the saved log-sum-exp, lazily."""
    def without_max():
        q64, k64 = q.detach().to(torch.float64), k.detach().to(torch.float64)
        scores = _scores(q64, k64).masked_fill(~_keep(q.shape[-2], k.shape[-2], causal, device=q.device), -math.inf)
        return attended(q, k, v, causal)[1] - scores.amax(-1)

    yield LSE_WITHOUT_MAX, without_max
    yield LSE_BASE_2, lambda: attended(q, k, v, causal)[1] / math.log(2)
    yield NO_SCALE, lambda: attended(q, k, v, causal, power=0)[1]
    yield SCALE_TWICE, lambda: attended(q, k, v, causal, power=2)[1]


def _first_match(got, right, mistakes) -> str | None:
    """The first mistake whose result ``got`` is, among those whose result is not the right one."""
    if not isinstance(got, _Tensor) or got.shape != right.shape:
        return None
    got = got.detach().to(torch.float64)
    for description, result in mistakes:
        wrong = result()
        if wrong.shape == got.shape and not _near(wrong, right) and _near(got, wrong):
            return description
    return None


def _near(a, b) -> bool:
    return bool(_isclose(a, b.to(a.dtype), rtol=MATCH_RTOL, atol=MATCH_ATOL, equal_nan=True).all())


# --------------------------------------------------------------------------------------------
# Forward: a launcher's (o, lse)


def forward_problem(name: str, got, q, k, v, causal: bool = False, rtol: float = 1e-5, atol: float = 1e-5,
                    error: str | None = None) -> str | None:
    """What is wrong with ``got``, the ``(o, lse)`` that ``name(q, k, v, causal)`` returned (or the ``error`` it
    raised instead); None if right."""
    want = forward_reference(q, k, v, causal)
    if error is not None:
        return kernel_problem(name, None, None, error=error)
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and all(isinstance(g, _Tensor) for g in got)):
        return f"{name} should return two tensors, (o, lse); it returned {type(got).__name__}"
    for what, g, w in (("o", got[0], want[0]), ("lse", got[1], want[1])):
        if g.shape != w.shape or g.dtype != w.dtype:
            return (f"{name}'s {what} has shape {list(g.shape)} and dtype {g.dtype}, expected {list(w.shape)} and "
                    f"{w.dtype}" + (" (one log-sum-exp per query row: batch, heads, sequence)" if what == "lse" else ""))
    o_right, lse_right = (bool(_isclose(g, w, rtol=rtol, atol=atol).all()) for g, w in zip(got, want))
    if o_right and lse_right:
        return None
    right = attended(q, k, v, causal)
    if not o_right:
        named = _first_match(got[0], right[0], _output_mistakes(q, k, v, causal))
        if named:
            return f"{name}'s o is wrong: {named}"
    else:
        named = _first_match(got[1], right[1], _lse_mistakes(q, k, v, causal))
        if named:
            return f"{name}'s lse is wrong (o is right): {named}"
    problem = kernel_problem(name, list(got), list(want), rtol, atol)
    return problem + (f". {RAGGED_NAN}" if any(bool(torch.isnan(g).any()) for g in got) else "")


def check_attention_forward(function, q, k, v, causal: bool = False, rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """Check that ``function(q, k, v, causal)`` (an attention forward that launches kernels) returns attention's
    ``(o, lse)``; when it does not, say which known mistake it made (``forward_problem``). New tensors hold NaN
    meanwhile, as in ``check_kernel``."""
    name = getattr(function, "__name__", "your function")
    try:
        with fresh_memory_is_nan():
            got = as_data(function(*_copies((q, k, v, causal))))
    except Exception as error:  # a Triton error the course can explain becomes its explanation
        if _error_hint(str(error)) is None:
            raise
        raise AssertionError(forward_problem(name, None, q, k, v, causal, error=f"{type(error).__name__}: {error}"))
    problem = forward_problem(name, got, q, k, v, causal, rtol, atol)
    if problem:
        raise AssertionError(problem)


# --------------------------------------------------------------------------------------------
# The Function: forward and backward, and what their kernels did


class _LargestNewTensor(TorchDispatchMode):
    """The number of elements of the largest tensor that torch operations create in the block. Operations that write
    into tensors that exist (in place, ``out=``, such as the copies back that Triton's interpreter makes after a
    launch) create none; the kernels' own tiles are NumPy arrays, not torch tensors."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func._schema.is_mutable:
            for o in tree_flatten(out)[0]:
                if isinstance(o, _Tensor):
                    self.numel = max(self.numel, o.numel())
        return out


def attention_record(function, args, seed: int = 0) -> dict:
    """What ``function.apply(q, k, v, causal)`` does on float64 copies of ``args``: its output, the gradients its
    backward returns for a seeded random grad_output, the largest tensor forward and backward each created, the
    kernel launches of each (``autograder.student.kernels.watch_launches``: tl.dot counts, races), and for a causal
    call the same launches of a full (non-causal) one, to compare. What the Function raises goes through (in grading,
    the examinee's reply says it)."""
    leaves = float64_leaves(args)
    with watch_launches() as forward_launches, _LargestNewTensor() as forward_largest:
        output = function.apply(*leaves)
    grad_output = _draw(output.shape, _Generator().manual_seed(seed), output.dtype, output.device)
    with watch_launches() as backward_launches, _LargestNewTensor() as backward_largest, _no_grad():
        returned = output.grad_fn.apply(grad_output)
    full = []
    if len(args) > 3 and args[3] is True:
        with watch_launches() as full_launches:
            again = function.apply(*float64_leaves(list(args[:3]) + [False] + list(args[4:])))
            with _no_grad():
                again.grad_fn.apply(grad_output)
        full = full_launches.launches
    returned = returned if isinstance(returned, tuple) else (returned,)
    return {"output": output.detach(), "grad_output": grad_output, "watched": forward_launches.watching,
            "returned": [r.detach() if isinstance(r, _Tensor) else None for r in returned],
            "largest": [forward_largest.numel, backward_largest.numel],
            "launches": [forward_launches.launches, backward_launches.launches], "full": full}


def _gradients(q, k, v, grad_output, causal: bool, power: float = 1.0, subtract_d: bool = True, shift: int = 0,
               reverse: bool = False, lse_without_max: bool = False):
    """(dq, dk, dv) of attention as a FlashAttention backward computes them from the right forward (o, lse), with
    the known mistakes: the final scale applied ``power`` times, D not subtracted, the mask shifted or reversed, P
    recomputed from a log-sum-exp without the maximum."""
    q, k, v, grad_output = (t.detach().to(torch.float64) for t in (q, k, v, grad_output))
    o, lse = attended(q, k, v, causal)
    scores = _scores(q, k)
    keep = _keep(q.shape[-2], k.shape[-2], causal, shift, reverse, q.device)
    if lse_without_max:
        lse = lse - scores.masked_fill(~_keep(q.shape[-2], k.shape[-2], causal, device=q.device), -math.inf).amax(-1)
    p = torch.exp(scores - lse[..., None]) * keep
    dp = grad_output @ v.transpose(-1, -2)
    d = (grad_output * o).sum(-1, keepdim=True)
    ds = p * (dp - d) if subtract_d else p * dp
    factor = q.shape[-1] ** (-0.5 * power)
    return ds @ k * factor, ds.transpose(-1, -2) @ q * factor, p.transpose(-1, -2) @ grad_output


def _gradient_mistakes(q, k, v, grad_output, causal: bool):
    yield WITHOUT_D, lambda: _gradients(q, k, v, grad_output, causal, subtract_d=False)
    yield GRADIENT_NO_SCALE, lambda: _gradients(q, k, v, grad_output, causal, power=0)
    yield GRADIENT_SCALE_TWICE, lambda: _gradients(q, k, v, grad_output, causal, power=2)
    yield GRADIENT_LSE, lambda: _gradients(q, k, v, grad_output, causal, lse_without_max=True)
    if causal:
        yield CAUSAL_DIAGONAL, lambda: _gradients(q, k, v, grad_output, True, shift=-1)
        yield CAUSAL_ONE_MORE, lambda: _gradients(q, k, v, grad_output, True, shift=1)
        yield CAUSAL_MISSING, lambda: _gradients(q, k, v, grad_output, False)
        yield CAUSAL_REVERSED, lambda: _gradients(q, k, v, grad_output, True, reverse=True)


def attention_problem(name: str, record: dict, args) -> str | None:
    """The judgement of an ``attention_record``: the first thing it shows wrong (the whole matrix stored, a race,
    tl.dot not skipped in a causal run, a known mistake of forward or backward, else where forward's output or a
    gradient differs from attention's), or None."""
    q, k, v = args[:3]
    causal = bool(args[3]) if len(args) > 3 else False
    length = q.shape[-2]
    largest = [int(n) for n in record["largest"]]
    for stage, count in zip(("forward", "backward"), largest):
        if count >= length * length and count > q.numel():  # (q, k, v, o and the gradients have q.numel() elements)
            return (f"{name}'s {stage} creates a tensor of {count:,} elements, as many as the {length} x {length} "
                    f"attention matrix of one head or more: FlashAttention never stores the probabilities. Forward keeps "
                    f"o and one log-sum-exp per row; backward recomputes P tile by tile from q, k and lse, so memory "
                    f"grows with the sequence, not with its square")
    for stage, launches in zip(("forward", "backward"), record["launches"]):
        for launch in launches:
            race = launch.get("race")
            if race:
                return (f"{name}'s {stage}: two programs of {str(launch['kernel'])[:60]} write element "
                        f"{int(race['element']):,} of `{str(race['tensor'])[:40]}`, one of them with a plain tl.store "
                        f"(a race: on a GPU the programs run at the same time, so one's sum is lost; Triton's "
                        f"interpreter runs them one after another, and the last write wins). Each query's gradient adds "
                        f"up a term from every key tile: compute dq in a pass of its own, one program per query tile "
                        f"looping over the key tiles, or add into a zeroed dq with tl.atomic_add")
    if causal and length >= SKIPS_FROM and record.get("watched") and record.get("full"):
        causal_dots = sum(int(launch["dots"]) for launches in record["launches"] for launch in launches)
        full_dots = sum(int(launch["dots"]) for launch in record["full"])
        if full_dots and causal_dots > SKIPPED_SHARE * full_dots:
            return (f"{name} runs {causal_dots} tl.dot causal against {full_dots} without the mask: a causal kernel "
                    f"should skip the key tiles that lie wholly above the diagonal (for query rows from start_m, loop "
                    f"over keys up to start_m + BLOCK_M only; in the key/value kernel, start at the first query tile "
                    f"that reaches the key tile), not load them and mask every score")
    output = record["output"]
    o, _ = attended(q, k, v, causal)
    if not (isinstance(output, _Tensor) and output.shape == o.shape):
        return f"{name}'s forward returns {_described(output)}; attention's output has shape {list(o.shape)}"
    if not _right(output, o):
        named = _first_match(output, o, _output_mistakes(q, k, v, causal))
        return f"{name}'s forward output is wrong: {named}" if named else _difference(f"{name}'s forward output", output, o)
    got = (list(record["returned"]) + [None] * 3)[:3]
    right = _gradients(q, k, v, record["grad_output"], causal)
    for which, g, r in zip("qkv", got, right):
        if not (isinstance(g, _Tensor) and g.shape == r.shape):
            return f"{name}'s backward returns {_described(g)} for `{which}`, whose gradient has shape {list(r.shape)}"
    if all(_right(g, r) for g, r in zip(got, right)):
        return None
    if any(bool(torch.isnan(g).any()) for g in got):
        return f"{name}'s backward returns a gradient with {RAGGED_NAN}"
    for description, result in _gradient_mistakes(q, k, v, record["grad_output"], causal):
        wrong = result()
        differs = [i for i, (w, r) in enumerate(zip(wrong, right)) if not _near(w, r)]
        if differs and all(_near(got[i].to(torch.float64), wrong[i]) for i in differs):
            return f"{name}'s backward is wrong ({', '.join('d' + 'qkv'[i] for i in differs)}): {description}"
    which = next(i for i, (g, r) in enumerate(zip(got, right)) if not _right(g, r))
    return _difference(f"{name}'s backward: the gradient for `{'qkv'[which]}`", got[which], right[which])


def _right(got, want) -> bool:
    return bool(_isclose(got.to(torch.float64), want, rtol=VALUE_RTOL, atol=VALUE_ATOL).all())


def _described(value) -> str:
    return f"a tensor of shape {list(value.shape)}" if isinstance(value, _Tensor) else f"a {type(value).__name__}"


def _difference(what: str, got, want) -> str:
    wrong = ~_isclose(got.to(torch.float64), want, rtol=VALUE_RTOL, atol=VALUE_ATOL, equal_nan=True)
    first = tuple(int(i) for i in wrong.nonzero()[0])
    return (f"{what} differs from attention's (softmax(q k^T / sqrt(d)) v, in float64) at {int(wrong.sum()):,} of "
            f"{wrong.numel():,} elements, the first at index {list(first)}: {got[first].item():.6g} where "
            f"{want[first].item():.6g} is right")


def check_attention(function, q, k, v, causal: bool = False, seed: int = 0) -> None:
    """Fail, naming the mistake, if the attention Function ``function`` (``function.apply(q, k, v, causal)``) stores
    a sequence x sequence tensor, races, runs a causal call without skipping masked tiles, or gives a wrong output
    or gradient for a seeded random upstream gradient (named when a known mistake gives it: ``attention_problem``).
    One forward and backward (two when causal): ``check_function`` adds what it checks of any Function."""
    problem = attention_problem(function.__name__, attention_record(function, (q, k, v, causal), seed), (q, k, v, causal))
    if problem:
        raise AssertionError(problem)
