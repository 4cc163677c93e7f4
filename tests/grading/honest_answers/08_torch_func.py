"""Honest answers to 08 (torch.func), several styles each (see test_scan.py)."""

# %% huber
class Huber(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x, delta):
        small = x.abs() <= delta
        return torch.where(small, 0.5 * x.square(), delta * (x.abs() - 0.5 * delta))

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, delta = inputs
        ctx.save_for_backward(x)
        ctx.delta = delta

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * torch.clamp(x, -ctx.delta, ctx.delta), None

# %% huber
class Huber(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, delta: float) -> torch.Tensor:
        return F.huber_loss(x, torch.zeros_like(x), reduction="none", delta=delta)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.delta = inputs[1]

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        slope = torch.where(x.abs() <= ctx.delta, x, ctx.delta * x.sign())
        return slope * grad_output, None

# %% numpy_cumsum
class NumpyCumsum(Function):
    @staticmethod
    def forward(x):
        return torch.from_numpy(np.cumsum(x.detach().cpu().numpy(), axis=-1)).to(x.device)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_output):
        reversed_grad = torch.flip(grad_output, dims=(-1,))
        return torch.flip(torch.cumsum(reversed_grad, dim=-1), dims=(-1,))

    @staticmethod
    def vmap(info, in_dims, x):
        (x_bdim,) = in_dims
        if x_bdim is None:
            x = x.expand(info.batch_size, *x.shape)
        else:
            x = x.movedim(x_bdim, 0)
        return NumpyCumsum.apply(x), 0

# %% numpy_cumsum
class NumpyCumsum(Function):
    @staticmethod
    def forward(x):
        return torch.from_numpy(np.cumsum(x.detach().cpu().numpy(), axis=-1)).to(x.device)

    @staticmethod
    def setup_context(ctx, inputs, output):
        return None

    @staticmethod
    def backward(ctx, grad_output):
        total = grad_output.sum(-1, keepdim=True)
        return total - grad_output.cumsum(-1) + grad_output

    @staticmethod
    def vmap(info, in_dims, x):
        bdim = in_dims[0]
        moved = x.movedim(bdim, 0) if bdim is not None else x.unsqueeze(0).repeat(info.batch_size, *[1] * x.dim())
        return NumpyCumsum.apply(moved), 0

# %% log_sum_exp
class LogSumExp(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        m = x.amax(dim=-1, keepdim=True)
        return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).squeeze(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x, output)
        ctx.save_for_forward(x, output)

    @staticmethod
    def backward(ctx, grad_output):
        x, out = ctx.saved_tensors
        softmax = torch.exp(x - out[..., None])
        return grad_output[..., None] * softmax

    @staticmethod
    def jvp(ctx, x_tangent):
        x, out = ctx.saved_tensors
        return torch.sum(torch.exp(x - out[..., None]) * x_tangent, dim=-1)

# %% log_sum_exp
class LogSumExp(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.logsumexp(x, -1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs, output)
        ctx.save_for_forward(*inputs, output)

    @staticmethod
    def _softmax(ctx):
        x, output = ctx.saved_tensors
        return (x - output.unsqueeze(-1)).exp()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.unsqueeze(-1) * LogSumExp._softmax(ctx)

    @staticmethod
    def jvp(ctx, x_tangent):
        return torch.einsum("...i,...i->...", LogSumExp._softmax(ctx), x_tangent)
