"""Honest answers to 10 (Triton kernels), several styles each (see test_scan.py)."""

# %% bias_gelu_forward
@triton.jit
def bias_gelu_forward_kernel(x_ptr, bias_ptr, y_ptr, n_rows, n_columns,
                             BLOCK_ROWS: tl.constexpr, BLOCK_COLUMNS: tl.constexpr):
    pid_rows = tl.program_id(axis=0)
    pid_columns = tl.program_id(axis=1)
    rows = pid_rows * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    columns = pid_columns * BLOCK_COLUMNS + tl.arange(0, BLOCK_COLUMNS)
    row_mask = rows < n_rows
    column_mask = columns < n_columns
    mask = row_mask[:, None] & column_mask[None, :]
    offsets = rows[:, None] * n_columns + columns[None, :]
    x = at_least_float32(tl.load(x_ptr + offsets, mask=mask, other=0.0))  # float16 in, float32 arithmetic
    b = at_least_float32(tl.load(bias_ptr + columns, mask=column_mask, other=0.0))
    h = x + b[None, :]
    y = 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476))
    tl.store(y_ptr + offsets, y.to(y_ptr.dtype.element_ty), mask=mask)


def bias_gelu_forward(x, bias):
    x = x.contiguous()
    y = torch.empty_like(x)
    n_columns = bias.numel()
    n_rows = x.numel() // n_columns
    grid = (triton.cdiv(n_rows, FORWARD_TILE["BLOCK_ROWS"]), triton.cdiv(n_columns, FORWARD_TILE["BLOCK_COLUMNS"]))
    bias_gelu_forward_kernel[grid](x, bias, y, n_rows, n_columns, **FORWARD_TILE)
    return y

# %% bias_gelu_forward
@triton.jit
def bias_gelu_forward_kernel(x_ptr, bias_ptr, y_ptr, n_rows, n_columns,
                             BLOCK_ROWS: tl.constexpr, BLOCK_COLUMNS: tl.constexpr):
    r = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)[:, None]
    c = tl.program_id(1) * BLOCK_COLUMNS + tl.arange(0, BLOCK_COLUMNS)[None, :]
    inside = (r < n_rows) & (c < n_columns)
    h = at_least_float32(tl.load(x_ptr + r * n_columns + c, mask=inside)) + at_least_float32(tl.load(bias_ptr + c, mask=c < n_columns))
    cdf = 0.5 * (1 + tl.math.erf(h / 1.4142135623730951))
    tl.store(y_ptr + r * n_columns + c, h * cdf, mask=inside)


def bias_gelu_forward(x, bias):
    assert x.shape[-1] == bias.shape[0], f"bias has {bias.shape[0]} columns, x has {x.shape[-1]}"
    x = x.contiguous()
    out = torch.empty_like(x)
    n_columns = bias.shape[0]
    n_rows = x.numel() // n_columns

    def grid(meta):
        return triton.cdiv(n_rows, meta["BLOCK_ROWS"]), triton.cdiv(n_columns, meta["BLOCK_COLUMNS"])

    bias_gelu_forward_kernel[grid](x, bias, out, n_rows, n_columns, **FORWARD_TILE)
    return out

# %% bias_gelu_backward
@triton.jit
def bias_gelu_backward_kernel(x_ptr, bias_ptr, grad_output_ptr, grad_x_ptr, grad_bias_ptr, n_rows, n_columns,
                              BLOCK_ROWS: tl.constexpr, BLOCK_COLUMNS: tl.constexpr, ATOMIC: tl.constexpr):
    pid_r = tl.program_id(0)
    rows = pid_r * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1) * BLOCK_COLUMNS + tl.arange(0, BLOCK_COLUMNS)
    col_ok = cols < n_columns
    ok = (rows < n_rows)[:, None] & col_ok[None, :]
    idx = rows[:, None] * n_columns + cols[None, :]
    h = (at_least_float32(tl.load(x_ptr + idx, mask=ok, other=0.0))
         + at_least_float32(tl.load(bias_ptr + cols, mask=col_ok, other=0.0))[None, :])
    g = at_least_float32(tl.load(grad_output_ptr + idx, mask=ok, other=0.0))
    phi = tl.exp(-0.5 * h * h) * 0.3989422804014327
    Phi = 0.5 * (1.0 + tl.erf(h * 0.7071067811865476))
    grad_h = g * (Phi + h * phi)
    tl.store(grad_x_ptr + idx, grad_h, mask=ok)
    partial = tl.sum(tl.where(ok, grad_h, 0.0), axis=0)
    if ATOMIC:
        tl.atomic_add(grad_bias_ptr + cols, partial, mask=col_ok)
    else:
        tl.store(grad_bias_ptr + pid_r * n_columns + cols, partial, mask=col_ok)


def _launch_backward(x, bias, grad_output, atomic):
    x = x.contiguous()
    grad_output = grad_output.contiguous()
    n_columns = bias.numel()
    n_rows = x.numel() // n_columns
    grid = (triton.cdiv(n_rows, BACKWARD_TILE["BLOCK_ROWS"]), triton.cdiv(n_columns, BACKWARD_TILE["BLOCK_COLUMNS"]))
    grad_x = torch.empty_like(x)
    if atomic:
        grad_bias = torch.zeros_like(bias)
    else:
        grad_bias = torch.empty((grid[0], n_columns), dtype=x.dtype, device=x.device)
    bias_gelu_backward_kernel[grid](x, bias, grad_output, grad_x, grad_bias, n_rows, n_columns,
                                    ATOMIC=atomic, **BACKWARD_TILE)
    return grad_x, (grad_bias if atomic else grad_bias.sum(dim=0))


def bias_gelu_backward(x, bias, grad_output):
    return _launch_backward(x, bias, grad_output, atomic=False)


def bias_gelu_backward_atomic(x, bias, grad_output):
    return _launch_backward(x, bias, grad_output, atomic=True)

# %% bias_gelu_function
class BiasGELU(Function):
    @staticmethod
    def forward(ctx, x, bias):
        ctx.save_for_backward(x, bias)
        return bias_gelu_forward(x, bias)

    @staticmethod
    def backward(ctx, grad_output):
        x, bias = ctx.saved_tensors
        grad_x, grad_bias = bias_gelu_backward(x, bias, grad_output)
        return (grad_x if ctx.needs_input_grad[0] else None,
                grad_bias if ctx.needs_input_grad[1] else None)

# %% triton_softmax
@triton.jit
def softmax_backward_kernel(y_ptr, grad_output_ptr, grad_x_ptr, n_columns, BLOCK_SIZE: tl.constexpr):
    row_start = tl.program_id(0) * n_columns
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_columns
    y = tl.load(y_ptr + row_start + offsets, mask=mask, other=0.0)
    dy = tl.load(grad_output_ptr + row_start + offsets, mask=mask, other=0.0)
    dot = tl.sum(y * dy, axis=0)
    tl.store(grad_x_ptr + row_start + offsets, y * (dy - dot), mask=mask)


class TritonSoftmax(Function):
    @staticmethod
    def forward(ctx, x):
        y = softmax_forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        n_rows, n_columns = y.numel() // y.shape[-1], y.shape[-1]
        grad_x = torch.empty_like(y)
        softmax_backward_kernel[(n_rows,)](y, grad_output.contiguous(), grad_x, n_columns,
                                           BLOCK_SIZE=triton.next_power_of_2(n_columns))
        return grad_x

# %% triton_softmax
@triton.jit
def softmax_backward_kernel(y_ptr, grad_output_ptr, grad_x_ptr, n_columns, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    valid = cols < n_columns
    base = row * n_columns
    y = tl.load(y_ptr + base + cols, mask=valid, other=0.)
    g = tl.load(grad_output_ptr + base + cols, mask=valid, other=0.)
    tl.store(grad_x_ptr + base + cols, y * g - y * tl.sum(y * g, 0), mask=valid)


class TritonSoftmax(Function):
    @staticmethod
    def forward(ctx, x):
        out = softmax_forward(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (out,) = ctx.saved_tensors
        block = max(16, triton.next_power_of_2(out.shape[-1]))
        grad_x = torch.empty_like(out)
        softmax_backward_kernel[(out.numel() // out.shape[-1],)](out, grad_output.contiguous(), grad_x,
                                                                 out.shape[-1], BLOCK_SIZE=block)
        return grad_x

# %% bias_gelu_op
@torch.library.custom_op("course::bias_gelu", mutates_args=())
def bias_gelu_op(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return bias_gelu_forward(x, bias)


@bias_gelu_op.register_fake
def _(x, bias):
    return x.new_empty(x.shape)


@torch.library.custom_op("course::bias_gelu_backward", mutates_args=())
def bias_gelu_backward_op(x: torch.Tensor, bias: torch.Tensor,
                          grad_output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return bias_gelu_backward(x, bias, grad_output)


@bias_gelu_backward_op.register_fake
def _(x, bias, grad_output):
    return x.new_empty(x.shape), bias.new_empty(bias.shape)  # the launchers return contiguous tensors


def bias_gelu_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def bias_gelu_op_backward(ctx, grad_output):
    x, bias = ctx.saved_tensors
    return torch.ops.course.bias_gelu_backward(x, bias, grad_output)


torch.library.register_autograd("course::bias_gelu", bias_gelu_op_backward, setup_context=bias_gelu_setup_context)

# %% bias_gelu_op
from typing import Tuple


@torch.library.custom_op("course::bias_gelu", mutates_args=(), device_types=("cpu", "cuda"))
def bias_gelu_op(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return bias_gelu_forward(x, bias)


@torch.library.register_fake("course::bias_gelu")
def _bias_gelu_fake(x, bias):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op("course::bias_gelu_backward", mutates_args=())
def bias_gelu_backward_op(x: torch.Tensor, bias: torch.Tensor, grad_output: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    return bias_gelu_backward(x, bias, grad_output)


@torch.library.register_fake("course::bias_gelu_backward")
def _bias_gelu_backward_fake(x, bias, grad_output):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), torch.empty_like(bias)


def bias_gelu_setup_context(ctx, inputs, output):
    x, bias = inputs
    ctx.save_for_backward(x, bias)


def bias_gelu_op_backward(ctx, grad_output):
    return bias_gelu_backward_op(*ctx.saved_tensors, grad_output)


bias_gelu_op.register_autograd(bias_gelu_op_backward, setup_context=bias_gelu_setup_context)
