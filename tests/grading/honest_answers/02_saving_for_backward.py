"""Honest answers to 02 (saving for backward), several styles each (see test_scan.py)."""

# %% softplus
import torch.nn.functional as F


class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = F.softplus(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        return grad_output * (1 - torch.exp(-y))

# %% softplus
class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.where(x > 20, x, torch.log1p(torch.exp(x)))  # stable for large x
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (out,) = ctx.saved_tensors
        sigmoid = -torch.expm1(-out)
        return grad_output * sigmoid

# %% my_relu
class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        grad_input[input == 0] = 0
        return grad_input

# %% my_relu
class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.maximum(x, torch.zeros_like(x))

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, grad_output, grad_output.new_zeros(()))

# %% relu_mask
class ReLUMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        positive = x.gt(0)
        ctx.save_for_backward(positive)  # one byte per element instead of four
        return x * positive

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        positive, = ctx.saved_tensors
        return grad_output.masked_fill(~positive, 0.0)

# %% seeded_dropout
class SeededDropout(torch.autograd.Function):
    @staticmethod
    def _mask(shape, p, seed, device):
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
        return torch.rand(shape, generator=generator, device=device) >= p

    @staticmethod
    def forward(ctx, x, p, seed):
        if not 0 <= p < 1:
            raise ValueError(f"p must be in [0, 1), got {p}")
        ctx.p, ctx.seed, ctx.shape = p, seed, x.shape
        return x * SeededDropout._mask(x.shape, p, seed, x.device) / (1 - p)

    @staticmethod
    def backward(ctx, grad_output):
        keep = SeededDropout._mask(ctx.shape, ctx.p, ctx.seed, grad_output.device)
        return grad_output * keep / (1 - ctx.p), None, None

# %% seeded_dropout
def draw_mask(shape, p, seed, device):
    gen = torch.Generator(device).manual_seed(seed)
    return (torch.rand(shape, generator=gen, device=device) >= p).float()


class SeededDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p, seed):
        ctx.p = p
        ctx.seed = seed
        ctx.shape = tuple(x.shape)
        scale = 1.0 / (1.0 - p)
        return x * draw_mask(x.shape, p, seed, x.device) * scale

    @staticmethod
    def backward(ctx, grad_output):
        mask = draw_mask(ctx.shape, ctx.p, ctx.seed, grad_output.device)
        return grad_output * mask / (1.0 - ctx.p), None, None

# %% silu
class SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, i):
        result = i * torch.sigmoid(i)
        ctx.save_for_backward(i)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        i = ctx.saved_tensors[0]
        sigmoid_i = torch.sigmoid(i)
        return grad_output * (sigmoid_i * (1 + i * (1 - sigmoid_i)))

# %% silu
import torch.nn.functional as F


class SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.silu(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        s = x.sigmoid()
        return grad_output.mul(s).mul(1 + x.mul(1 - s))

# %% silu
class SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)  # only x: the sigmoid is cheap to compute again
        return x / (1 + torch.exp(-x))

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        s = 1 / (1 + torch.exp(-x))
        derivative = s + x * s * (1 - s)
        return derivative * grad_output

# %% relu_inplace
class ReLU_(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.relu_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad_output):
        out, = ctx.saved_tensors
        return grad_output * out.gt(0).to(grad_output.dtype)
