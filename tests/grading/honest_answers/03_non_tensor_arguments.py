"""Honest answers to 03 (non-tensor arguments), several styles each (see test_scan.py)."""

# %% mul_constant
class MulConstant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, constant):
        # ctx is a context object that can be used to stash information for backward
        ctx.constant = constant
        return tensor * constant

    @staticmethod
    def backward(ctx, grad_output):
        # one gradient per forward input: None for the constant
        return grad_output * ctx.constant, None

# %% mul_constant
import numbers


class MulConstant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, constant: float):
        assert isinstance(constant, numbers.Real), "the constant must be a Python number"
        ctx.constant = float(constant)
        return x.mul(ctx.constant)

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.mul(ctx.constant), None

# %% linear
class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_input, grad_weight, grad_bias

# %% linear
class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias=None):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        out = torch.einsum("bi,oi->bo", x, weight)
        return out + bias if ctx.has_bias else out

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad  # two entries or three: bias may not have been passed
        grad_x = torch.einsum("bo,oi->bi", grad_output, weight) if needs[0] else None
        grad_w = torch.einsum("bo,bi->oi", grad_output, x) if needs[1] else None
        grad_b = grad_output.sum(dim=0) if ctx.has_bias and needs[2] else None
        return grad_x, grad_w, grad_b

# %% linear
class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias=None):
        ctx.save_for_backward(x, weight, bias)
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        x, weight, bias = ctx.saved_tensors
        grads = [None, None, None]
        if ctx.needs_input_grad[0]:
            grads[0] = grad_output @ weight
        if ctx.needs_input_grad[1]:
            grads[1] = grad_output.transpose(0, 1) @ x
        if bias is not None and ctx.needs_input_grad[2]:
            grads[2] = grad_output.sum(0)
        return tuple(grads)

# %% clamp
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, min, max):
        inside = (x >= min) & (x <= max)
        ctx.save_for_backward(inside)
        return torch.clamp(x, min=min, max=max)

    @staticmethod
    def backward(ctx, grad_output):
        (inside,) = ctx.saved_tensors
        return torch.where(inside, grad_output, torch.zeros_like(grad_output)), None, None

# %% clamp
class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        if lo > hi:
            raise ValueError("min ({}) must not exceed max ({})".format(lo, hi))
        ctx.save_for_backward(x)
        ctx.bounds = (lo, hi)
        return x.clamp(lo, hi)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        lo, hi = ctx.bounds
        return grad_output * x.ge(lo).logical_and(x.le(hi)), None, None

# %% linear_layer
import math


class LinearLayer(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return Linear.apply(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"

# %% linear_layer
class LinearLayer(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        k = in_features ** -0.5
        self.weight = nn.Parameter((torch.rand(out_features, in_features) * 2 - 1) * k)
        if bias:
            self.bias = nn.Parameter((torch.rand(out_features) * 2 - 1) * k)
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        return Linear.apply(x, self.weight, self.bias)

# %% linear_layer
import math


class LinearLayer(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))
        else:
            self.register_parameter("bias", None)

    def forward(self, x):
        return Linear.apply(x, self.weight, self.bias)


# a quick sanity check: a few SGD steps on y = 2x + 1 must lower the loss
layer = LinearLayer(1, 1)
opt = torch.optim.SGD(layer.parameters(), lr=0.1)
xs = torch.linspace(-1, 1, 16).unsqueeze(1)
losses = []
for _ in range(20):
    opt.zero_grad()
    loss = ((layer(xs) - (2 * xs + 1)) ** 2).mean()
    loss.backward()
    opt.step()
    losses.append(loss.item())
assert losses[-1] < losses[0], f"the loss did not go down: {losses[0]:.3f} -> {losses[-1]:.3f}"
