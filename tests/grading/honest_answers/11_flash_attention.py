"""Honest answers to 11 (LayerNorm and FlashAttention as Triton kernels), two styles each (see test_scan.py).

The styles of Triton's tutorials 05 (layer norm: pointers moved to the row, column blocks in a loop, a second
kernel that adds up the partial sums) and 06 (fused attention: block pointers and ``tl.advance``, ``exp2`` with
log2(e) folded into the scale, keys loaded transposed, helper ``@triton.jit`` functions), and their plain
alternatives: natural ``tl.exp``, masks on every tile, a fixed trip count with masked rows, ``once_differentiable``,
fakes registered by name with ``torch.empty``.
"""

# %% layer_norm_forward
@triton.jit
def layer_norm_forward_kernel(x_ptr, weight_ptr, bias_ptr, y_ptr, mean_ptr, rstd_ptr, n_columns, eps,
                              BLOCK_SIZE: tl.constexpr):
    # As Triton's tutorial 05: move the pointers to this program's row, then walk its columns block by block.
    row = tl.program_id(0)
    x_ptr += row * n_columns
    y_ptr += row * n_columns
    acc_type = tl.float64 if x_ptr.dtype.element_ty == tl.float64 else tl.float32
    _mean = tl.zeros([BLOCK_SIZE], dtype=acc_type)
    for off in range(0, n_columns, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(x_ptr + cols, mask=cols < n_columns, other=0.0).to(acc_type)
        _mean += a
    mean = tl.sum(_mean, axis=0) / n_columns
    _var = tl.zeros([BLOCK_SIZE], dtype=acc_type)
    for off in range(0, n_columns, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(x_ptr + cols, mask=cols < n_columns, other=0.0).to(acc_type)
        x = tl.where(cols < n_columns, x - mean, 0.0)
        _var += x * x
    var = tl.sum(_var, axis=0) / n_columns
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for off in range(0, n_columns, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < n_columns
        w = tl.load(weight_ptr + cols, mask=mask)
        b = tl.load(bias_ptr + cols, mask=mask)
        x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(acc_type)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(y_ptr + cols, y, mask=mask)


def layer_norm_forward(x, weight, bias):
    x = x.contiguous()
    N = x.shape[-1]
    M = x.numel() // N
    y = torch.empty_like(x)
    mean = torch.empty((M,), dtype=torch.promote_types(x.dtype, torch.float32), device=x.device)
    rstd = torch.empty((M,), dtype=torch.promote_types(x.dtype, torch.float32), device=x.device)
    BLOCK_SIZE = triton.next_power_of_2(N)
    layer_norm_forward_kernel[(M,)](x, weight, bias, y, mean, rstd, N, EPS, BLOCK_SIZE=BLOCK_SIZE)
    return y, mean, rstd

# %% layer_norm_forward
@triton.jit
def layer_norm_forward_kernel(x_ptr, weight_ptr, bias_ptr, y_ptr, mean_ptr, rstd_ptr, n_columns, eps,
                              BLOCK_SIZE: tl.constexpr):
    i = tl.program_id(axis=0).to(tl.int64)
    offs = tl.arange(0, BLOCK_SIZE)
    m = offs < n_columns
    x = at_least_float32(tl.load(x_ptr + i * n_columns + offs, mask=m, other=0.0))
    mu = tl.sum(x) / n_columns
    d = tl.where(m, x - mu, 0)
    r = tl.rsqrt(tl.sum(d * d) / n_columns + eps)
    y = d * r * tl.load(weight_ptr + offs, mask=m, other=1.0) + tl.load(bias_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + i * n_columns + offs, y, mask=m)
    tl.store(mean_ptr + i, mu)
    tl.store(rstd_ptr + i, r)


def layer_norm_forward(x, weight, bias):
    C = weight.numel()
    rows = x.reshape(-1, C).contiguous()
    y = torch.empty_like(rows)
    mean = rows.new_empty(rows.shape[0], dtype=torch.promote_types(x.dtype, torch.float32))
    rstd = rows.new_empty(rows.shape[0], dtype=torch.promote_types(x.dtype, torch.float32))
    layer_norm_forward_kernel[(rows.shape[0],)](rows, weight, bias, y, mean, rstd, C, EPS,
                                                BLOCK_SIZE=triton.next_power_of_2(C))
    return y.view(x.shape), mean, rstd

# %% layer_norm_backward
@triton.jit
def layer_norm_backward_kernel(x_ptr, weight_ptr, mean_ptr, rstd_ptr, grad_output_ptr, grad_x_ptr,
                               partial_weight_ptr, partial_bias_ptr, n_rows, n_columns,
                               ROWS_PER_PROGRAM: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_columns
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0)
    acc_type = tl.float64 if w.dtype == tl.float64 else tl.float32
    w = w.to(acc_type)
    dw = tl.zeros((BLOCK_SIZE,), dtype=acc_type)
    db = tl.zeros((BLOCK_SIZE,), dtype=acc_type)
    row_start = pid * ROWS_PER_PROGRAM
    row_end = tl.minimum(row_start + ROWS_PER_PROGRAM, n_rows)
    for row in range(row_start, row_end):
        x = tl.load(x_ptr + row * n_columns + cols, mask=mask, other=0).to(acc_type)
        dy = tl.load(grad_output_ptr + row * n_columns + cols, mask=mask, other=0).to(acc_type)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        # As Triton's tutorial 05: c1 and c2 are the two row means of the input gradient.
        xhat = (x - mean) * rstd
        wdy = w * dy
        xhat = tl.where(mask, xhat, 0.0)
        wdy = tl.where(mask, wdy, 0.0)
        c1 = tl.sum(xhat * wdy, axis=0) / n_columns
        c2 = tl.sum(wdy, axis=0) / n_columns
        dx = (wdy - (xhat * c1 + c2)) * rstd
        tl.store(grad_x_ptr + row * n_columns + cols, dx, mask=mask)
        dw += dy * xhat
        db += dy
    tl.store(partial_weight_ptr + pid * n_columns + cols, dw, mask=mask)
    tl.store(partial_bias_ptr + pid * n_columns + cols, db, mask=mask)


@triton.jit
def layer_norm_partial_sums_kernel(partial_ptr, total_ptr, n_parts, n_columns,
                                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Tutorial 05's _layer_norm_bwd_dwdb: each program adds up a band of columns over every row of partial sums.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=total_ptr.dtype.element_ty)
    for i in range(0, n_parts, BLOCK_M):
        rows = i + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < n_parts) & (cols[None, :] < n_columns)
        acc += tl.load(partial_ptr + rows[:, None] * n_columns + cols[None, :], mask=mask, other=0.0)
    tl.store(total_ptr + cols, tl.sum(acc, axis=0), mask=cols < n_columns)


def layer_norm_backward(x, weight, mean, rstd, grad_output):
    N = x.shape[-1]
    x_arg = x.reshape(-1, N).contiguous()
    dy = grad_output.reshape(-1, N).contiguous()
    M = x_arg.shape[0]
    programs = triton.cdiv(M, LAYER_NORM_ROWS)
    dx = torch.empty_like(x_arg)
    _dw = torch.empty((programs, N), dtype=x.dtype, device=x.device)
    _db = torch.empty((programs, N), dtype=x.dtype, device=x.device)
    layer_norm_backward_kernel[(programs,)](x_arg, weight, mean, rstd, dy, dx, _dw, _db, M, N,
                                            ROWS_PER_PROGRAM=LAYER_NORM_ROWS, BLOCK_SIZE=triton.next_power_of_2(N))
    dw = torch.empty_like(weight)
    db = torch.empty_like(weight)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]),)
    layer_norm_partial_sums_kernel[grid](_dw, dw, programs, N, BLOCK_M=32, BLOCK_N=128)
    layer_norm_partial_sums_kernel[grid](_db, db, programs, N, BLOCK_M=32, BLOCK_N=128)
    return dx.view(x.shape), dw, db

# %% layer_norm_backward
@triton.jit
def layer_norm_backward_kernel(x_ptr, weight_ptr, mean_ptr, rstd_ptr, grad_output_ptr, grad_x_ptr,
                               partial_weight_ptr, partial_bias_ptr, n_rows, n_columns,
                               ROWS_PER_PROGRAM: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    p = tl.program_id(0)
    c = tl.arange(0, BLOCK_SIZE)
    in_row = c < n_columns
    w = tl.load(weight_ptr + c, mask=in_row, other=0.0)
    sum_type = tl.float64 if w.dtype == tl.float64 else tl.float32
    sum_dw = tl.zeros([BLOCK_SIZE], dtype=sum_type)
    sum_db = tl.zeros([BLOCK_SIZE], dtype=sum_type)
    # A fixed number of rows a program; those past n_rows are masked off (the last program has fewer).
    for i in tl.range(0, ROWS_PER_PROGRAM):
        row = p * ROWS_PER_PROGRAM + i
        live = row < n_rows
        m = in_row & live
        off = row.to(tl.int64) * n_columns + c
        x = tl.load(x_ptr + off, mask=m, other=0.0)
        g = tl.load(grad_output_ptr + off, mask=m, other=0.0)
        mu = tl.load(mean_ptr + row, mask=live, other=0.0)
        r = tl.load(rstd_ptr + row, mask=live, other=0.0)
        xhat = tl.where(m, (x - mu) * r, 0.0)
        gxhat = g * w
        mean_g = tl.sum(gxhat, axis=0) / n_columns
        mean_gx = tl.sum(gxhat * xhat, axis=0) / n_columns
        tl.store(grad_x_ptr + off, r * (gxhat - mean_g - xhat * mean_gx), mask=m)
        sum_dw += g * xhat
        sum_db += g
    tl.store(partial_weight_ptr + p * n_columns + c, sum_dw, mask=in_row)
    tl.store(partial_bias_ptr + p * n_columns + c, sum_db, mask=in_row)


def layer_norm_backward(x, weight, mean, rstd, grad_output):
    shape = x.shape
    x = x.contiguous().view(-1, shape[-1])
    dy = grad_output.contiguous().view(-1, shape[-1])
    rows, cols = x.shape
    n_programs = triton.cdiv(rows, LAYER_NORM_ROWS)
    dx = torch.empty_like(x)
    partial_w = x.new_empty((n_programs, cols))
    partial_b = torch.empty_like(partial_w)
    layer_norm_backward_kernel[(n_programs,)](x, weight, mean, rstd, dy, dx, partial_w, partial_b, rows, cols,
                                              ROWS_PER_PROGRAM=LAYER_NORM_ROWS,
                                              BLOCK_SIZE=triton.next_power_of_2(cols))
    return dx.view(shape), partial_w.sum(dim=0).to(weight.dtype), partial_b.sum(dim=0).to(weight.dtype)

# %% layer_norm_function
class TritonLayerNorm(Function):
    @staticmethod
    def forward(ctx, input, weight, bias):
        output, mean, rstd = layer_norm_forward(input, weight, bias)
        ctx.save_for_backward(input, weight, mean, rstd)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, mean, rstd = ctx.saved_tensors
        grad_input, grad_weight, grad_bias = layer_norm_backward(input, weight, mean, rstd, grad_output)
        if not ctx.needs_input_grad[0]:
            grad_input = None
        if not ctx.needs_input_grad[1]:
            grad_weight = None
        if not ctx.needs_input_grad[2]:
            grad_bias = None
        return grad_input, grad_weight, grad_bias

# %% layer_norm_function
from torch.autograd.function import once_differentiable


class TritonLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        y, *statistics = layer_norm_forward(x, weight, bias)
        ctx.save_for_backward(x, weight, *statistics)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        return layer_norm_backward(*ctx.saved_tensors, dy.contiguous())

# %% attention_forward
@triton.jit
def attention_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, seq_len, scale, HEAD_DIM: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    # Block pointers, as Triton's tutorial 06 (fused attention) wrote them; K is read transposed (order=(0, 1)).
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    qvk_offset = off_hz.to(tl.int64) * seq_len * HEAD_DIM
    Q_block_ptr = tl.make_block_ptr(base=q_ptr + qvk_offset, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1),
                                    offsets=(start_m * BLOCK_M, 0), block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    K_block_ptr = tl.make_block_ptr(base=k_ptr + qvk_offset, shape=(HEAD_DIM, seq_len), strides=(1, HEAD_DIM),
                                    offsets=(0, 0), block_shape=(HEAD_DIM, BLOCK_N), order=(0, 1))
    V_block_ptr = tl.make_block_ptr(base=v_ptr + qvk_offset, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1),
                                    offsets=(0, 0), block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    O_block_ptr = tl.make_block_ptr(base=o_ptr + qvk_offset, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1),
                                    offsets=(start_m * BLOCK_M, 0), block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(Q_block_ptr, boundary_check=(0,), padding_option="zero")
    acc_type = tl.float64 if q.dtype == tl.float64 else tl.float32
    m_i = tl.zeros([BLOCK_M], dtype=acc_type) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=acc_type)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=acc_type)
    hi = tl.minimum((start_m + 1) * BLOCK_M, seq_len) if CAUSAL else seq_len
    for start_n in range(0, hi, BLOCK_N):
        k = tl.load(K_block_ptr, boundary_check=(1,), padding_option="zero")
        v = tl.load(V_block_ptr, boundary_check=(0,), padding_option="zero")
        # log2(e) folded in, for exp2; multiplied into the float64 scores, not into the float32 `scale` first
        qk = tl.dot(q, k) * scale * 1.4426950408889634
        mask = (start_n + offs_n[None, :]) < seq_len
        if CAUSAL:
            mask = mask & (offs_m[:, None] >= start_n + offs_n[None, :])
        qk = tl.where(mask, qk, -float("inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc, out_dtype=acc_type)  # acc += p @ v
        m_i = m_ij
        V_block_ptr = tl.advance(V_block_ptr, (BLOCK_N, 0))
        K_block_ptr = tl.advance(K_block_ptr, (0, BLOCK_N))
    acc = acc / l_i[:, None]
    tl.store(O_block_ptr, acc.to(o_ptr.dtype.element_ty), boundary_check=(0,))
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453  # back from base 2
    tl.store(lse_ptr + off_hz.to(tl.int64) * seq_len + offs_m, lse, mask=offs_m < seq_len)


def attention_forward(q, k, v, causal=False):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    BATCH, N_HEAD, N_CTX, HEAD_DIM = q.shape
    assert k.shape == q.shape and v.shape == q.shape
    o = torch.empty_like(q)
    lse = torch.empty((BATCH, N_HEAD, N_CTX), device=q.device, dtype=torch.promote_types(q.dtype, torch.float32))
    sm_scale = 1.0 / math.sqrt(HEAD_DIM)
    grid = lambda args: (triton.cdiv(N_CTX, args["BLOCK_M"]), BATCH * N_HEAD)
    attention_forward_kernel[grid](q, k, v, o, lse, N_CTX, sm_scale, HEAD_DIM=HEAD_DIM, CAUSAL=causal,
                                   **ATTENTION_TILE)
    return o, lse

# %% attention_forward
@triton.jit
def attention_forward_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, seq_len, scale, HEAD_DIM: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    base = pid_bh.to(tl.int64) * seq_len * HEAD_DIM
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_mask = offs_m[:, None] < seq_len
    q = tl.load(q_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=q_mask, other=0.0)
    q = (q * scale).to(q_ptr.dtype.element_ty)  # scaled once here, not every tile of scores
    if q.dtype == tl.float64:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float64)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float64)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float64)
    else:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    n_tiles = tl.cdiv(seq_len, BLOCK_N)
    if CAUSAL:  # key tiles past this query tile's last row hold only masked scores: not visited
        n_tiles = tl.cdiv(tl.minimum(seq_len, (pid_m + 1) * BLOCK_M), BLOCK_N)
    for t in range(0, n_tiles):
        offs_k = t * BLOCK_N + offs_n
        kv_mask = offs_k[:, None] < seq_len
        k = tl.load(k_ptr + base + offs_k[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + base + offs_k[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k))
        valid = offs_k[None, :] < seq_len
        if CAUSAL:
            valid = valid & (offs_k[None, :] <= offs_m[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = alpha * l_i + tl.sum(p, axis=1)
        acc = alpha[:, None] * acc + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * HEAD_DIM + offs_d[None, :], o.to(o_ptr.dtype.element_ty), mask=q_mask)
    tl.store(lse_ptr + pid_bh.to(tl.int64) * seq_len + offs_m, m_i + tl.log(l_i), mask=offs_m < seq_len)


def attention_forward(q, k, v, causal=False):
    B, H, N, D = q.shape
    q, k, v = [t.contiguous() for t in (q, k, v)]
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float64 if q.dtype == torch.float64 else torch.float32)

    def grid(META):
        return (triton.cdiv(N, META["BLOCK_M"]), B * H)

    attention_forward_kernel[grid](q, k, v, o, lse, N, 1.0 / math.sqrt(D), HEAD_DIM=D, CAUSAL=causal,
                                   **ATTENTION_TILE)
    return o, lse

# %% attention_backward
@triton.jit
def attention_backward_preprocess_kernel(o_ptr, grad_output_ptr, delta_ptr, seq_len, HEAD_DIM: tl.constexpr,
                                         BLOCK_M: tl.constexpr):
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_hz = tl.program_id(1).to(tl.int64)
    off_n = tl.arange(0, HEAD_DIM)
    row_ok = off_m < seq_len
    base = off_hz * seq_len
    o = tl.load(o_ptr + (base + off_m[:, None]) * HEAD_DIM + off_n[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(grad_output_ptr + (base + off_m[:, None]) * HEAD_DIM + off_n[None, :], mask=row_ok[:, None],
                 other=0.0)
    delta = tl.sum(o.to(delta_ptr.dtype.element_ty) * do.to(delta_ptr.dtype.element_ty), axis=1)
    tl.store(delta_ptr + base + off_m, delta, mask=row_ok)


@triton.jit
def _attn_bwd_dkdv(dk, dv, k, v, q_ptr, do_ptr, lse_ptr, delta_ptr, offs_n, start_m, seq_len, scale,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    # As tutorial 06's _attn_bwd_dkdv: q is read transposed (qT), so P^T comes from one tl.dot(k, qT).
    offs_d = tl.arange(0, HEAD_DIM)
    for curr_m in range(start_m, seq_len, BLOCK_M):
        offs_m = curr_m + tl.arange(0, BLOCK_M)
        in_seq = offs_m < seq_len
        qT = tl.load(q_ptr + offs_m[None, :] * HEAD_DIM + offs_d[:, None], mask=in_seq[None, :], other=0.0)
        do = tl.load(do_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=in_seq[:, None], other=0.0)
        m = tl.load(lse_ptr + offs_m, mask=in_seq, other=0.0)
        Di = tl.load(delta_ptr + offs_m, mask=in_seq, other=0.0)
        qkT = tl.dot(k, qT)
        pT = tl.math.exp2((qkT * scale - m[None, :]) * 1.4426950408889634)  # e^x as 2^(x log2 e)
        keep = in_seq[None, :]
        if CAUSAL:
            keep = keep & (offs_m[None, :] >= offs_n[:, None])
        pT = tl.where(keep, pT, 0.0)
        dv += tl.dot(pT.to(do.dtype), do)
        dpT = tl.dot(v, tl.trans(do))
        dsT = pT * (dpT - Di[None, :])
        dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT))
    return dk, dv


@triton.jit
def attention_backward_kv_kernel(q_ptr, k_ptr, v_ptr, grad_output_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, seq_len,
                                 scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 CAUSAL: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1).to(tl.int64)
    q_ptr += bh * seq_len * HEAD_DIM
    k_ptr += bh * seq_len * HEAD_DIM
    v_ptr += bh * seq_len * HEAD_DIM
    grad_output_ptr += bh * seq_len * HEAD_DIM
    dk_ptr += bh * seq_len * HEAD_DIM
    dv_ptr += bh * seq_len * HEAD_DIM
    lse_ptr += bh * seq_len
    delta_ptr += bh * seq_len
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_mask = offs_n[:, None] < seq_len
    k = tl.load(k_ptr + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(v_ptr + offs_n[:, None] * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
    acc_type = tl.float64 if k.dtype == tl.float64 else tl.float32
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=acc_type)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=acc_type)
    start_m = 0
    if CAUSAL:  # the query tiles wholly before these keys see none of them
        start_m = (start_n // BLOCK_M) * BLOCK_M
    dk, dv = _attn_bwd_dkdv(dk, dv, k, v, q_ptr, grad_output_ptr, lse_ptr, delta_ptr, offs_n, start_m, seq_len,
                            scale, HEAD_DIM, BLOCK_M, CAUSAL)
    tl.store(dk_ptr + offs_n[:, None] * HEAD_DIM + offs_d[None, :], (dk * scale).to(dk_ptr.dtype.element_ty),
             mask=kv_mask)
    tl.store(dv_ptr + offs_n[:, None] * HEAD_DIM + offs_d[None, :], dv.to(dv_ptr.dtype.element_ty), mask=kv_mask)


@triton.jit
def attention_backward_q_kernel(q_ptr, k_ptr, v_ptr, grad_output_ptr, lse_ptr, delta_ptr, dq_ptr, seq_len, scale,
                                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                CAUSAL: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    off = tl.program_id(1).to(tl.int64) * seq_len
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    in_seq = offs_m < seq_len
    q = tl.load(q_ptr + (off + offs_m[:, None]) * HEAD_DIM + offs_d[None, :], mask=in_seq[:, None], other=0.0)
    do = tl.load(grad_output_ptr + (off + offs_m[:, None]) * HEAD_DIM + offs_d[None, :], mask=in_seq[:, None],
                 other=0.0)
    m = tl.load(lse_ptr + off + offs_m, mask=in_seq, other=0.0)
    Di = tl.load(delta_ptr + off + offs_m, mask=in_seq, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float64 if q.dtype == tl.float64 else tl.float32)
    end_n = seq_len
    if CAUSAL:
        end_n = tl.minimum(start_m + BLOCK_M, seq_len)
    for start_n in range(0, end_n, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kT = tl.load(k_ptr + (off + offs_n[None, :]) * HEAD_DIM + offs_d[:, None], mask=offs_n[None, :] < seq_len,
                     other=0.0)
        vT = tl.load(v_ptr + (off + offs_n[None, :]) * HEAD_DIM + offs_d[:, None], mask=offs_n[None, :] < seq_len,
                     other=0.0)
        qk = tl.dot(q, kT)
        p = tl.math.exp2((qk * scale - m[:, None]) * 1.4426950408889634)
        keep = offs_n[None, :] < seq_len
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])
        p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, vT)
        ds = p * (dp - Di[:, None])
        dq += tl.dot(ds.to(kT.dtype), tl.trans(kT))
    tl.store(dq_ptr + (off + offs_m[:, None]) * HEAD_DIM + offs_d[None, :], (dq * scale).to(dq_ptr.dtype.element_ty),
             mask=in_seq[:, None])


def attention_backward(q, k, v, o, lse, grad_output, causal=False):
    q, k, v, o, do = q.contiguous(), k.contiguous(), v.contiguous(), o.contiguous(), grad_output.contiguous()
    lse = lse.contiguous()
    BATCH, N_HEAD, N_CTX, HEAD_DIM = q.shape
    BLOCK_M, BLOCK_N = ATTENTION_TILE["BLOCK_M"], ATTENTION_TILE["BLOCK_N"]
    sm_scale = HEAD_DIM ** -0.5
    delta = torch.empty_like(lse)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    attention_backward_preprocess_kernel[(triton.cdiv(N_CTX, BLOCK_M), BATCH * N_HEAD)](
        o, do, delta, N_CTX, HEAD_DIM=HEAD_DIM, BLOCK_M=BLOCK_M)
    attention_backward_kv_kernel[(triton.cdiv(N_CTX, BLOCK_N), BATCH * N_HEAD)](
        q, k, v, do, lse, delta, dk, dv, N_CTX, sm_scale, HEAD_DIM=HEAD_DIM, CAUSAL=causal, **ATTENTION_TILE)
    attention_backward_q_kernel[(triton.cdiv(N_CTX, BLOCK_M), BATCH * N_HEAD)](
        q, k, v, do, lse, delta, dq, N_CTX, sm_scale, HEAD_DIM=HEAD_DIM, CAUSAL=causal, **ATTENTION_TILE)
    return dq, dk, dv

# %% attention_backward
@triton.jit
def attention_backward_preprocess_kernel(o_ptr, grad_output_ptr, delta_ptr, seq_len, HEAD_DIM: tl.constexpr,
                                         BLOCK_M: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    o_block = tl.make_block_ptr(o_ptr + bh * seq_len * HEAD_DIM, (seq_len, HEAD_DIM), (HEAD_DIM, 1),
                                (pid_m * BLOCK_M, 0), (BLOCK_M, HEAD_DIM), (1, 0))
    do_block = tl.make_block_ptr(grad_output_ptr + bh * seq_len * HEAD_DIM, (seq_len, HEAD_DIM), (HEAD_DIM, 1),
                                 (pid_m * BLOCK_M, 0), (BLOCK_M, HEAD_DIM), (1, 0))
    o = tl.load(o_block, boundary_check=(0,), padding_option="zero").to(delta_ptr.dtype.element_ty)
    do = tl.load(do_block, boundary_check=(0,), padding_option="zero").to(delta_ptr.dtype.element_ty)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tl.store(delta_ptr + bh * seq_len + rows, tl.sum(o * do, axis=1), mask=rows < seq_len)


@triton.jit
def attention_backward_kv_kernel(q_ptr, k_ptr, v_ptr, grad_output_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, seq_len,
                                 scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 CAUSAL: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    bh = tl.program_id(1).to(tl.int64)
    head = bh * seq_len * HEAD_DIM
    k_block = tl.make_block_ptr(k_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(start_n, 0),
                                block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    v_block = tl.make_block_ptr(v_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(start_n, 0),
                                block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    k = tl.load(k_block, boundary_check=(0,), padding_option="zero")
    v = tl.load(v_block, boundary_check=(0,), padding_option="zero")
    keys = start_n + tl.arange(0, BLOCK_N)
    lo = 0
    if CAUSAL:
        lo = start_n // BLOCK_M * BLOCK_M
    q_block = tl.make_block_ptr(q_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(lo, 0),
                                block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    do_block = tl.make_block_ptr(grad_output_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1),
                                 offsets=(lo, 0), block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float64 if k.dtype == tl.float64 else tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float64 if k.dtype == tl.float64 else tl.float32)
    for start_m in range(lo, seq_len, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q = tl.load(q_block, boundary_check=(0,), padding_option="zero")
        do = tl.load(do_block, boundary_check=(0,), padding_option="zero")
        lse = tl.load(lse_ptr + bh * seq_len + rows, mask=rows < seq_len, other=0.0)
        delta = tl.load(delta_ptr + bh * seq_len + rows, mask=rows < seq_len, other=0.0)
        p_t = tl.exp(tl.dot(k, tl.trans(q)) * scale - lse[None, :])  # P^T: keys down, queries across
        valid = rows[None, :] < seq_len
        if CAUSAL:
            valid = valid & (keys[:, None] <= rows[None, :])
        p_t = tl.where(valid, p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)
        ds_t = p_t * (tl.dot(v, tl.trans(do)) - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q)
        q_block = tl.advance(q_block, (BLOCK_M, 0))
        do_block = tl.advance(do_block, (BLOCK_M, 0))
    dk_block = tl.make_block_ptr(dk_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(start_n, 0),
                                 block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    dv_block = tl.make_block_ptr(dv_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(start_n, 0),
                                 block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    tl.store(dk_block, (dk * scale).to(dk_ptr.dtype.element_ty), boundary_check=(0,))
    tl.store(dv_block, dv.to(dv_ptr.dtype.element_ty), boundary_check=(0,))


@triton.jit
def attention_backward_q_kernel(q_ptr, k_ptr, v_ptr, grad_output_ptr, lse_ptr, delta_ptr, dq_ptr, seq_len, scale,
                                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                CAUSAL: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    head = bh * seq_len * HEAD_DIM
    q_block = tl.make_block_ptr(q_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(start_m, 0),
                                block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    do_block = tl.make_block_ptr(grad_output_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1),
                                 offsets=(start_m, 0), block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    k_block = tl.make_block_ptr(k_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(0, 0),
                                block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    v_block = tl.make_block_ptr(v_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(0, 0),
                                block_shape=(BLOCK_N, HEAD_DIM), order=(1, 0))
    q = tl.load(q_block, boundary_check=(0,), padding_option="zero")
    do = tl.load(do_block, boundary_check=(0,), padding_option="zero")
    rows = start_m + tl.arange(0, BLOCK_M)
    lse = tl.load(lse_ptr + bh * seq_len + rows, mask=rows < seq_len, other=0.0)
    delta = tl.load(delta_ptr + bh * seq_len + rows, mask=rows < seq_len, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float64 if q.dtype == tl.float64 else tl.float32)
    hi = seq_len
    if CAUSAL:
        hi = tl.minimum(seq_len, start_m + BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_block, boundary_check=(0,), padding_option="zero")
        v = tl.load(v_block, boundary_check=(0,), padding_option="zero")
        p = tl.exp(tl.dot(q, tl.trans(k)) * scale - lse[:, None])
        valid = keys[None, :] < seq_len
        if CAUSAL:
            valid = valid & (keys[None, :] <= rows[:, None])
        p = tl.where(valid, p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
        k_block = tl.advance(k_block, (BLOCK_N, 0))
        v_block = tl.advance(v_block, (BLOCK_N, 0))
    dq_block = tl.make_block_ptr(dq_ptr + head, shape=(seq_len, HEAD_DIM), strides=(HEAD_DIM, 1), offsets=(start_m, 0),
                                 block_shape=(BLOCK_M, HEAD_DIM), order=(1, 0))
    tl.store(dq_block, (dq * scale).to(dq_ptr.dtype.element_ty), boundary_check=(0,))


def attention_backward(q, k, v, o, lse, grad_output, causal=False):
    q, k, v, o, grad_output = [t.contiguous() for t in (q, k, v, o, grad_output)]
    B, H, N, D = q.shape
    delta = torch.empty_like(lse)
    dq = torch.empty_like(q)
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    scale = 1.0 / math.sqrt(D)
    attention_backward_preprocess_kernel[lambda META: (triton.cdiv(N, META["BLOCK_M"]), B * H)](
        o, grad_output, delta, N, HEAD_DIM=D, BLOCK_M=ATTENTION_TILE["BLOCK_M"])
    attention_backward_kv_kernel[lambda META: (triton.cdiv(N, META["BLOCK_N"]), B * H)](
        q, k, v, grad_output, lse, delta, dk, dv, N, scale, HEAD_DIM=D, CAUSAL=causal, **ATTENTION_TILE)
    attention_backward_q_kernel[lambda META: (triton.cdiv(N, META["BLOCK_M"]), B * H)](
        q, k, v, grad_output, lse, delta, dq, N, scale, HEAD_DIM=D, CAUSAL=causal, **ATTENTION_TILE)
    return dq, dk, dv

# %% flash_attention_function
class FlashAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, lse = attention_forward(q, k, v, causal=causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(q, k, v, o, lse, do.contiguous(), causal=ctx.causal)
        return dq, dk, dv, None

# %% flash_attention_function
from torch.autograd.function import once_differentiable


class FlashAttention(Function):
    @staticmethod
    def forward(ctx, query, key, value, causal=False):
        out, softmax_lse = attention_forward(query, key, value, causal)
        ctx.save_for_backward(query, key, value, out, softmax_lse)
        ctx.is_causal = bool(causal)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        query, key, value, out, softmax_lse = ctx.saved_tensors
        grads = attention_backward(query, key, value, out, softmax_lse, grad_out, ctx.is_causal)
        return tuple(g if needed else None for g, needed in zip(grads, ctx.needs_input_grad)) + (None,)

# %% flash_attention_op
@torch.library.custom_op("course::flash_attention_forward", mutates_args=())
def flash_attention_forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    o, lse = attention_forward(q, k, v, causal)
    return o, lse


@torch.library.register_fake("course::flash_attention_forward")
def _flash_attention_forward_fake(q, k, v, causal):
    B, H, N, D = q.shape
    lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    return (torch.empty((B, H, N, D), dtype=q.dtype, device=q.device),
            torch.empty((B, H, N), dtype=lse_dtype, device=q.device))


@torch.library.custom_op("course::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                                grad_output: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv = attention_backward(q, k, v, o, lse, grad_output, causal)
    return dq, dk, dv


@torch.library.register_fake("course::flash_attention_backward")
def _flash_attention_backward_fake(q, k, v, o, lse, grad_output, causal):
    return (torch.empty(q.shape, dtype=q.dtype, device=q.device),
            torch.empty(k.shape, dtype=k.dtype, device=k.device),
            torch.empty(v.shape, dtype=v.dtype, device=v.device))


def _setup_context(ctx, inputs, output):
    q, k, v, causal = inputs
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal = causal


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = flash_attention_backward_op(q, k, v, o, lse, grad_o.contiguous(), ctx.causal)
    return dq, dk, dv, None


torch.library.register_autograd("course::flash_attention_forward", _backward, setup_context=_setup_context)


def flash_attention_op(q, k, v, causal=False):
    o, _ = flash_attention_forward_op(q, k, v, causal)
    return o

# %% flash_attention_op
@torch.library.custom_op("course::flash_attention_forward", mutates_args=())
def flash_attention_forward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return attention_forward(q, k, v, causal)


@flash_attention_forward_op.register_fake
def _(q, k, v, causal):
    o = torch.empty_like(q, memory_format=torch.contiguous_format)  # the launcher's o is contiguous, whatever q is
    lse = q.new_empty(q.shape[:-1], dtype=torch.promote_types(q.dtype, torch.float32))
    return o, lse


@torch.library.custom_op("course::flash_attention_backward", mutates_args=())
def flash_attention_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
                                grad_output: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return attention_backward(q, k, v, o, lse, grad_output, causal)


@flash_attention_backward_op.register_fake
def _(q, k, v, o, lse, grad_output, causal):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def flash_attention_setup_context(ctx, inputs, output):
    ctx.causal = inputs[-1]
    ctx.save_for_backward(*inputs[:3], *output)
    ctx.mark_non_differentiable(output[1])


def flash_attention_op_backward(ctx, grad_o, grad_lse):
    return (*flash_attention_backward_op(*ctx.saved_tensors, grad_o, ctx.causal), None)


flash_attention_forward_op.register_autograd(flash_attention_op_backward, setup_context=flash_attention_setup_context)


def flash_attention_op(q, k, v, causal=False):
    return flash_attention_forward_op(q, k, v, causal)[0]
