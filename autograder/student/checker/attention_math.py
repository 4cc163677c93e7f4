"""Attention right and wrong, in float64 (assignment 11): what a FlashAttention forward and backward give, and what
each known mistake makes them give, for ``checker.attention`` to compare a kernel's results with.

``_forward`` gives ``(o, lse)`` with the forward's mistakes as parameters (the scale applied ``power`` times, an online
softmax that forgets to rescale, the log-sum-exp saved without its maximum or without log l or in base 2, keys padded
with zeros, the causal mask shifted or reversed, a loop over key tiles that stops a tile early); ``_backward`` gives
``(dq, dk, dv)`` from attention's own ``o`` and ``lse`` with the backward's (D left out or replaced, the scale, dv or
dk assigned in the loop, the key/value loop starting a tile late); ``_implied_delta`` finds the ``D`` a backward's
``dq`` implies. ``backward_from_saved`` is FlashAttention's backward computed from what forward saved: the course's
piece for ``attention_backward`` (``checker.pieces``).
"""

from __future__ import annotations

import math

import torch

from autograder.student.checker.references import _isclose, _Tensor

MATCH_RTOL, MATCH_ATOL = 2e-4, 2e-5  # a result "is" a mistake's when this close to it (float32 kernels round)
VALUE_RTOL, VALUE_ATOL = 1e-5, 1e-7  # float64 results this close to attention's are right (kernels pass float32 scalars)


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



def _forward(q, k, v, causal: bool = False, power: float = 1.0, shift: int = 0, reverse: bool = False,
             online: tuple | None = None, lse: str = "natural", pad: int = 0, early: int = 0):
    """(o, lse) of attention in float64, with the mistakes: the scale applied ``power`` times; the causal mask shifted
    or reversed; an ``online`` softmax over key tiles, (tile, accumulator rescaled?, sum rescaled?); the log-sum-exp
    saved ``"without_max"`` (log l), as ``"max"`` (m alone) or in ``"base2"``; keys padded with zeros to a multiple of
    ``pad`` (counted with score 0); a causal loop over key tiles of ``early`` that stops before the diagonal's tile.
    A row that keeps nothing gives NaN and -inf."""
    q, k, v = (t.detach().to(torch.float64) for t in (q, k, v))
    if pad and k.shape[-2] % pad:
        zeros = k.new_zeros(*k.shape[:-2], -k.shape[-2] % pad, k.shape[-1])
        k, v = torch.cat([k, zeros], -2), torch.cat([v, zeros], -2)
    rows, columns = q.shape[-2], k.shape[-2]
    keep = _keep(rows, columns, causal, shift, reverse, q.device)
    if early:
        keep = keep & (torch.arange(columns, device=q.device)[None, :]
                       < torch.arange(rows, device=q.device)[:, None] // early * early)
    scores = _scores(q, k, power).masked_fill(~keep, -math.inf)
    m = scores.amax(-1)
    if online is None:
        natural, o = torch.logsumexp(scores, -1), torch.softmax(scores, -1) @ v
    else:
        o, m, total = _online(scores, v, *online)
        natural = m + torch.log(total)
    return o, {"natural": natural, "without_max": natural - m, "max": m, "base2": natural / math.log(2)}[lse]



def _online(scores, v, tile: int, rescale_accumulator: bool, rescale_sum: bool):
    """(o, m, l) of an online softmax over key tiles of ``tile`` columns, the accumulator or the sum perhaps not
    rescaled when the maximum grows."""
    m = torch.full(scores.shape[:-1], -math.inf, dtype=torch.float64, device=scores.device)
    total, accumulator = torch.zeros_like(m), scores.new_zeros(*scores.shape[:-1], v.shape[-1])
    for start in range(0, scores.shape[-1], tile):
        block = scores[..., start:start + tile]
        m_new = torch.maximum(m, block.amax(-1))
        alpha = torch.exp(m - m_new).nan_to_num(1.0)  # (-inf - -inf: a row that has seen nothing yet)
        p = torch.exp(block - m_new[..., None]).nan_to_num(0.0)
        total = (total * alpha if rescale_sum else total) + p.sum(-1)
        accumulator = (accumulator * alpha[..., None] if rescale_accumulator else accumulator) + p @ v[..., start:start + tile, :]
        m = m_new
    return accumulator / total[..., None], m, total



def forward_reference(q, k, v, causal: bool = False):
    """(o, lse) as an attention forward launcher returns them: o in the inputs' dtype, lse in float32 (float64 for
    float64 inputs)."""
    o, lse = _forward(q, k, v, causal)
    return o.to(q.dtype), lse.to(torch.promote_types(q.dtype, torch.float32))



def _near(a, b, rtol: float = MATCH_RTOL, atol: float = MATCH_ATOL) -> bool:
    """Whether the tensors (or tuples of them) ``a`` and ``b`` agree, NaN where both are NaN."""
    pairs = list(zip(a, b)) if isinstance(a, (tuple, list)) else [(a, b)]
    return all(isinstance(x, _Tensor) and x.shape == y.shape
               and bool(_isclose(x.to(torch.float64), y.to(torch.float64), rtol=rtol, atol=atol, equal_nan=True).all())
               for x, y in pairs)



def _backward(q, k, v, grad_output, causal: bool = False, power: float = 1.0, subtract_d: bool = True,
              shift: int = 0, reverse: bool = False, early: int = 0, kv_late: int = 0, dv_last: int = 0,
              dk_last: int = 0, delta=None):
    """(dq, dk, dv) in float64 as a FlashAttention backward computes them from attention's (o, lse), with the
    mistakes: the final scale applied ``power`` times, D not subtracted (or ``delta`` in its place), the mask shifted
    or reversed, the query kernel's loop over key tiles of ``early`` stopping before the diagonal's tile, the key/value
    kernel's loop starting a query tile of ``kv_late`` late, dv or dk holding the last query tile's term only."""
    q, k, v, grad_output = (t.detach().to(torch.float64) for t in (q, k, v, grad_output))
    o, lse = _forward(q, k, v, causal)
    length, device = q.shape[-2], q.device
    query, key = torch.arange(length, device=device)[:, None], torch.arange(length, device=device)[None, :]
    keep = _keep(length, length, causal, shift, reverse, device)
    keep_q = keep & (key < query // early * early) if early else keep
    keep_kv = keep & (query >= (key // kv_late + 1) * kv_late) if kv_late else keep
    p = torch.exp(_scores(q, k) - lse[..., None]).nan_to_num(0.0)
    dp = grad_output @ v.transpose(-1, -2)
    d = (grad_output * o).sum(-1, keepdim=True) if delta is None else delta[..., None]
    ds = p * (dp - d) if subtract_d else p * dp
    factor = q.shape[-1] ** (-0.5 * power)
    kv_rows = torch.ones(length, 1, dtype=torch.bool, device=device)
    dq = (ds * keep_q) @ k * factor
    dk_rows = query >= (length - 1) // dk_last * dk_last if dk_last else kv_rows
    dv_rows = query >= (length - 1) // dv_last * dv_last if dv_last else kv_rows
    dk = (ds * keep_kv * dk_rows).transpose(-1, -2) @ q * factor
    dv = (p * keep_kv * dv_rows).transpose(-1, -2) @ grad_output
    return dq, dk, dv



def backward_reference(q, k, v, o, lse, grad_output, causal: bool = False):
    """(dq, dk, dv) in the inputs' dtype: what an attention backward launcher returns (``o`` and ``lse`` unused)."""
    return tuple(g.to(q.dtype) for g in _backward(q, k, v, grad_output, causal))



def backward_from_saved(q, k, v, o, lse, grad_output, causal: bool = False):
    """(dq, dk, dv) of attention as FlashAttention's backward computes them: from the saved o and lse (P recomputed
    as exp(scale * q k^T - lse), D = rowsum(dO * O)), derived (no autograd), in q's dtype."""
    q64, k64, v64, o64, g64 = (t.detach().to(torch.float64) for t in (q, k, v, o, grad_output))
    length = q.shape[-2]
    p = torch.exp(_scores(q64, k64) - lse.to(torch.float64)[..., None]) * _keep(length, length, causal, device=q.device)
    ds = p * (g64 @ v64.transpose(-1, -2) - (g64 * o64).sum(-1, keepdim=True))
    scale = q.shape[-1] ** -0.5
    return tuple(t.to(q.dtype).contiguous() for t in (ds @ k64 * scale, ds.transpose(-1, -2) @ q64 * scale,
                                                      p.transpose(-1, -2) @ g64))



def _implied_delta(q, k, v, grad_output, got, causal: bool):
    """The D, one per query row, that the student's dq implies if dq = scale * (P * (dP - D)) @ k, with its dq, dk
    and dv recomputed from it; None where no single D per row explains them."""
    q64, k64, v64, g64 = (t.detach().to(torch.float64) for t in (q, k, v, grad_output))
    _, lse = _forward(q64, k64, v64, causal)
    keep = _keep(q.shape[-2], q.shape[-2], causal, device=q.device)
    p = torch.exp(_scores(q64, k64) - lse[..., None]).nan_to_num(0.0) * keep
    scale = q.shape[-1] ** -0.5
    a = (p * (g64 @ v64.transpose(-1, -2))) @ k64 * scale
    b = p @ k64 * scale
    dq = got[0].to(torch.float64)
    delta = ((a - dq) * b).sum(-1) / (b * b).sum(-1).clamp_min(1e-30)
    implied = _backward(q, k, v, grad_output, causal, delta=delta)
    return (delta, implied) if _near(tuple(got), implied) else None
