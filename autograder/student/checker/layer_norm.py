"""LayerNorm's kernels (assignment 11, Exercises 1 and 2): the known mistakes, as what each gives.

``check_kernel(..., mistakes=layer_norm_forward_mistakes(EPS))`` names a forward whose ``(y, mean, rstd)`` is one of
these (``checker.kernels``): the variance taken over the masked lanes too (Section 1's warning: a lane past the row,
loaded as 0, has ``x - mean = -mean`` and adds ``mean^2``), the mean or the variance divided by the block's
``BLOCK_SIZE`` lanes instead of the row's ``n_columns`` numbers, the variance divided by ``n - 1``, the standard
deviation stored where its reciprocal belongs. ``layer_norm_backward_mistakes(EPS)``: the input gradient without the
mean's term, the variance's term or both, without the weight, the weight and bias gradients swapped. (A weight or bias
gradient that holds only some rows' terms is found from its pattern, ``checker.kernels._rows_sum_problem``.)
"""

from __future__ import annotations

import torch

EPS = 1e-5  # the notebook's epsilon
MASKED_VARIANCE = ("the variance counts the masked lanes: past n_columns a lane loads 0 (other=0.0), so x - mean is "
                   "-mean there, and its square, mean^2, goes into the sum. Set the centred row to 0 in the masked "
                   "lanes before squaring it: tl.where(inside, x - mean, 0.0)")
MEAN_OVER_BLOCK = ("the mean divides the row's sum by BLOCK_SIZE, the block's lanes; the row has n_columns numbers: "
                   "divide by n_columns")
VARIANCE_OVER_BLOCK = ("the variance divides by BLOCK_SIZE, the block's lanes; the row has n_columns numbers: divide "
                       "the sum of squares by n_columns")
UNBIASED = ("the variance divides by n_columns - 1 (an unbiased estimate); LayerNorm divides by n_columns")
STD_STORED = "rstd holds the standard deviation, sqrt(var + eps); rstd is its reciprocal, 1 / sqrt(var + eps)"
NO_MEAN_TERM = ("it drops the mean's term: mu depends on every x of the row, so grad_x needs -sum(grad_xhat) / C over "
                "the row")
NO_VARIANCE_TERM = ("it drops the variance's term: rstd depends on x too, which adds -xhat * sum(grad_xhat * xhat) / C "
                    "over the row")
CONSTANT_STATISTICS = ("it treats the mean and rstd as constants (rstd * grad_output * weight): both depend on every x "
                       "of the row")
NO_WEIGHT = "grad_xhat misses the weight: y = xhat * weight + bias, so grad_xhat = grad_output * weight"
SWAPPED = ("the weight and bias gradients are swapped: the weight's is the sum over the rows of grad_output * xhat, "
           "the bias's the sum of grad_output")


def _block(columns: int) -> int:
    return 1 << max(columns - 1, 0).bit_length()  # triton.next_power_of_2


def _forward(x, weight, bias, eps: float, mean_lanes=None, variance_lanes=None, extra_lanes: bool = False,
             std: bool = False):
    """(y, mean, rstd) with the mean divided by ``mean_lanes``, the variance by ``variance_lanes`` (default: the row's
    numbers), the masked lanes' mean^2 counted (``extra_lanes``), the standard deviation stored (``std``)."""
    rows = x.to(torch.float64).reshape(-1, x.shape[-1])
    columns = rows.shape[-1]
    mean = rows.sum(-1) / (mean_lanes or columns)
    centred = rows - mean[:, None]
    squares = (centred ** 2).sum(-1) + ((_block(columns) - columns) * mean ** 2 if extra_lanes else 0)
    rstd = (squares / (variance_lanes or columns) + eps).rsqrt()
    y = centred * rstd[:, None] * weight.to(torch.float64) + bias.to(torch.float64)
    statistics = torch.promote_types(x.dtype, torch.float32)  # float32 for 16-bit x, as 11's kernels keep them
    return y.reshape(x.shape).to(x.dtype), mean.to(statistics), (1 / rstd if std else rstd).to(statistics)


def layer_norm_forward_mistakes(eps: float) -> dict:
    """{what is wrong: a function of (x, weight, bias) giving the (y, mean, rstd) that mistake gives}."""
    return {
        MASKED_VARIANCE: lambda x, w, b: _forward(x, w, b, eps, extra_lanes=True),
        MEAN_OVER_BLOCK: lambda x, w, b: _forward(x, w, b, eps, mean_lanes=_block(x.shape[-1])),
        VARIANCE_OVER_BLOCK: lambda x, w, b: _forward(x, w, b, eps, variance_lanes=_block(x.shape[-1])),
        UNBIASED: lambda x, w, b: _forward(x, w, b, eps, variance_lanes=max(x.shape[-1] - 1, 1)),
        STD_STORED: lambda x, w, b: _forward(x, w, b, eps, std=True),
    }


def _backward(x, weight, grad_output, eps: float, mean_term: bool = True, variance_term: bool = True,
              with_weight: bool = True, swapped: bool = False, statistics=None):
    """(grad_x, grad_weight, grad_bias) of LayerNorm, with the known mistakes; from the saved ``statistics`` (mean,
    rstd) where given, else from x."""
    rows = x.to(torch.float64).reshape(-1, x.shape[-1])
    g = grad_output.to(torch.float64).reshape(rows.shape)
    if statistics is None:
        mean = rows.mean(-1, keepdim=True)
        rstd = (((rows - mean) ** 2).mean(-1, keepdim=True) + eps).rsqrt()
    else:
        mean, rstd = (t.to(torch.float64).reshape(-1, 1) for t in statistics)
    xhat = (rows - mean) * rstd
    grad_xhat = g * weight.to(torch.float64) if with_weight else g
    grad = grad_xhat - grad_xhat.mean(-1, keepdim=True) if mean_term else grad_xhat
    if variance_term:
        grad = grad - xhat * (grad_xhat * xhat).mean(-1, keepdim=True)
    weights, biases = (g * xhat).sum(0), g.sum(0)
    if swapped:
        weights, biases = biases, weights
    return ((rstd * grad).reshape(x.shape).to(x.dtype), weights.to(weight.dtype), biases.to(weight.dtype))


def layer_norm_backward_mistakes(eps: float) -> dict:
    """{what is wrong: a function of (x, weight, mean, rstd, grad_output) giving (grad_x, grad_weight, grad_bias)}."""
    return {
        NO_MEAN_TERM: lambda x, w, m, r, g: _backward(x, w, g, eps, mean_term=False),
        NO_VARIANCE_TERM: lambda x, w, m, r, g: _backward(x, w, g, eps, variance_term=False),
        CONSTANT_STATISTICS: lambda x, w, m, r, g: _backward(x, w, g, eps, mean_term=False, variance_term=False),
        NO_WEIGHT: lambda x, w, m, r, g: _backward(x, w, g, eps, with_weight=False),
        SWAPPED: lambda x, w, m, r, g: _backward(x, w, g, eps, swapped=True),
    }


def course_layer_norm_forward(x, weight, bias, eps: float = EPS):
    """(y, mean, rstd) of LayerNorm over the last dimension: y in x's dtype, the statistics 1-D (one per row), in
    float32 (float64 for float64 x)."""
    return _forward(x, weight, bias, eps)


def course_layer_norm_backward(x, weight, mean, rstd, grad_output):
    """(grad_x, grad_weight, grad_bias) of LayerNorm from x and the saved statistics, derived (no autograd)."""
    return _backward(x, weight, grad_output, EPS, statistics=(mean, rstd))
