"""Honest Triton and torch.library code in styles the assignments' answers do not use: a matmul kernel with
``tl.dot`` and ``triton.autotune``, a fused linear operator, a LayerNorm and a row-wise attention kernel of
their own, a dataclass of tile settings.

These cells belong to no assignment's notebook: they are scanned with the course's usual imports
(``bindings.COURSE_IMPORTS``).
"""

# %% matmul_kernel
@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=2),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=3),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_M"]), triton.cdiv(N, META["BLOCK_N"]))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1))
    return c

# %% fused_linear_op
@torch.library.custom_op("course11::fused_linear", mutates_args=())
def fused_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return matmul(x, weight.t().contiguous()) + bias


@torch.library.register_fake("course11::fused_linear")
def _(x, weight, bias):
    return x.new_empty((x.shape[0], weight.shape[0]))


def _fused_linear_setup(ctx, inputs, output):
    x, weight, bias = inputs
    ctx.save_for_backward(x, weight)


def _fused_linear_backward(ctx, grad_output):
    x, weight = ctx.saved_tensors
    grad_x = matmul(grad_output.contiguous(), weight.contiguous()) if ctx.needs_input_grad[0] else None
    grad_w = matmul(grad_output.t().contiguous(), x.contiguous()) if ctx.needs_input_grad[1] else None
    grad_b = grad_output.sum(0) if ctx.needs_input_grad[2] else None
    return grad_x, grad_w, grad_b


torch.library.register_autograd("course11::fused_linear", _fused_linear_backward, setup_context=_fused_linear_setup)

# %% layer_norm_kernel
@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, rstd_ptr, n_columns, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_columns
    x = tl.load(x_ptr + row * n_columns + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_columns
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / n_columns
    rstd = 1.0 / tl.sqrt(var + eps)
    tl.store(rstd_ptr + row, rstd)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * n_columns + cols, centred * rstd * w + b, mask=mask)


class TritonLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps=1e-5):
        x2d = x.reshape(-1, x.shape[-1]).contiguous()
        y = torch.empty_like(x2d)
        rstd = torch.empty(x2d.shape[0], dtype=torch.float32, device=x.device)
        layer_norm_kernel[(x2d.shape[0],)](x2d, weight, bias, y, rstd, x2d.shape[1], eps,
                                           BLOCK=triton.next_power_of_2(x2d.shape[1]))
        ctx.save_for_backward(x2d, weight, rstd)
        ctx.shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, grad_output):
        x2d, weight, rstd = ctx.saved_tensors
        xhat = (x2d - x2d.mean(-1, keepdim=True)) * rstd[:, None]
        g = grad_output.reshape(x2d.shape) * weight
        grad_x = rstd[:, None] * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        flat = grad_output.reshape(x2d.shape)
        return grad_x.view(ctx.shape), (flat * xhat).sum(0), flat.sum(0), None

# %% attention_rows
@triton.jit
def attention_row_kernel(q_ptr, k_ptr, v_ptr, o_ptr, n_keys, scale,
                         D: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + row * D + dims)
    m = -float("inf")
    total = 0.0
    acc = tl.zeros((D,), dtype=tl.float32)
    for start in tl.range(0, n_keys, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        valid = keys < n_keys
        k = tl.load(k_ptr + keys[:, None] * D + dims[None, :], mask=valid[:, None], other=0.0)
        v = tl.load(v_ptr + keys[:, None] * D + dims[None, :], mask=valid[:, None], other=0.0)
        s = tl.where(valid, tl.sum(k * q[None, :], axis=1) * scale, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        correction = tl.exp(m - m_new)
        total = total * correction + tl.sum(p, axis=0)
        acc = acc * correction + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(o_ptr + row * D + dims, acc / total)

# %% kernel_config
import dataclasses
from typing import Literal, NamedTuple


@dataclasses.dataclass(frozen=True)
class TileConfig:
    block_rows: int = 8
    block_columns: int = 128
    num_warps: int = 4

    def as_kwargs(self) -> dict:
        return {"BLOCK_ROWS": self.block_rows, "BLOCK_COLUMNS": self.block_columns, "num_warps": self.num_warps}


class Checked(NamedTuple):
    max_error: float
    passed: bool


def check_against(reference, candidate, mode: Literal["abs", "rel"] = "abs", tolerance: float = 1e-5) -> Checked:
    diff = (reference - candidate).abs()
    match mode:
        case "abs":
            error = diff.max().item()
        case "rel":
            error = (diff / reference.abs().clamp_min(torch.finfo(reference.dtype).eps)).max().item()
        case _:
            raise ValueError(f"unknown mode {mode!r}")
    result = Checked(max_error=error, passed=error <= tolerance)
    return result._replace(passed=bool(result.passed))
