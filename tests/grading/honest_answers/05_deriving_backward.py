"""Honest answers to 05 (deriving backward), several styles each (see test_scan.py)."""

# %% softmax
class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        shifted = x - x.max(dim=-1, keepdim=True).values
        exp = shifted.exp()
        y = exp / exp.sum(-1, keepdim=True)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        dot = torch.einsum("...i,...i->...", grad_output, y).unsqueeze(-1)
        return y * (grad_output - dot)

# %% softmax
class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, dim=-1)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        (y,) = ctx.saved_tensors
        # J = diag(y) - y y^T, applied row by row without building it
        return y * grad_output - y * (y * grad_output).sum(dim=-1, keepdim=True)

# %% softmax
class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        m = x.amax(-1, keepdim=True)
        e = torch.exp(x - m)
        out = e / e.sum(-1, keepdim=True)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        out, = ctx.saved_tensors
        inner = (g * out).sum(-1, keepdim=True)
        return out * (g - inner)

# %% log_softmax_nll
class LogSoftmaxNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target):
        log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
        ctx.save_for_backward(log_probs, target)
        picked = log_probs.gather(1, target.unsqueeze(1)).squeeze(1)
        return -picked.mean()

    @staticmethod
    def backward(ctx, grad_output):
        log_probs, target = ctx.saved_tensors
        n = log_probs.size(0)
        grad = log_probs.exp()
        grad[torch.arange(n, device=grad.device), target] -= 1
        return grad * grad_output / n, None

# %% log_softmax_nll
class LogSoftmaxNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target):
        log_p = F.log_softmax(logits, dim=-1)
        ctx.save_for_backward(log_p, target)
        return F.nll_loss(log_p, target)

    @staticmethod
    def backward(ctx, grad_output):
        log_p, target = ctx.saved_tensors
        batch, classes = log_p.shape
        p = torch.exp(log_p)
        one_hot = torch.zeros_like(p).scatter_(1, target.view(-1, 1), 1.0)
        return grad_output * (p - one_hot) / batch, None

# %% layer_norm
class LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, unbiased=False, keepdim=True)
        rstd = 1.0 / torch.sqrt(var + eps)
        xhat = (x - mean) * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return weight * xhat + bias

    @staticmethod
    def backward(ctx, grad_output):
        xhat, rstd, weight = ctx.saved_tensors
        n = xhat.shape[-1]
        dxhat = grad_output * weight
        grad_x = rstd / n * (n * dxhat - dxhat.sum(-1, keepdim=True)
                             - xhat * (dxhat * xhat).sum(-1, keepdim=True))
        grad_weight = (grad_output * xhat).sum_to_size(weight.shape)
        grad_bias = grad_output.sum_to_size(weight.shape)
        return grad_x, grad_weight, grad_bias, None

# %% layer_norm
class LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        mu = x.mean(-1, keepdim=True)
        sigma = torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps)
        xhat = (x - mu) / sigma
        ctx.save_for_backward(xhat, sigma, weight)
        return xhat * weight + bias

    @staticmethod
    def backward(ctx, grad_output):
        xhat, sigma, weight = ctx.saved_tensors
        g = grad_output * weight
        grad_x = (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True)) / sigma
        return (grad_x, (grad_output * xhat).sum_to_size(weight.shape),
                grad_output.sum_to_size(weight.shape), None)

# %% attention
import math


class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        scale = 1.0 / math.sqrt(q.size(-1))
        scores = torch.einsum("...qd,...kd->...qk", q, k) * scale
        p = torch.softmax(scores, dim=-1)
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return torch.einsum("...qk,...kd->...qd", p, v)

    @staticmethod
    def backward(ctx, grad_output):
        q, k, v, p = ctx.saved_tensors
        grad_v = torch.einsum("...qk,...qd->...kd", p, grad_output)
        grad_p = torch.einsum("...qd,...kd->...qk", grad_output, v)
        grad_s = p * (grad_p - (grad_p * p).sum(-1, keepdim=True)) * ctx.scale
        grad_q = torch.einsum("...qk,...kd->...qd", grad_s, k)
        grad_k = torch.einsum("...qk,...qd->...kd", grad_s, q)
        return grad_q.sum_to_size(q.shape), grad_k.sum_to_size(k.shape), grad_v.sum_to_size(v.shape)

# %% attention
class Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        d = q.shape[-1]
        attn = (q @ k.transpose(-2, -1) / d ** 0.5).softmax(dim=-1)
        ctx.save_for_backward(q, k, v, attn)
        return attn @ v

    @staticmethod
    def backward(ctx, dout):
        q, k, v, attn = ctx.saved_tensors
        d = q.shape[-1]
        dv = attn.transpose(-2, -1) @ dout
        dattn = dout @ v.transpose(-2, -1)
        dscores = attn * (dattn - (dattn * attn).sum(dim=-1, keepdim=True)) / d ** 0.5
        dq = dscores @ k
        dk = dscores.transpose(-2, -1) @ q
        return dq.sum_to_size(q.shape), dk.sum_to_size(k.shape), dv.sum_to_size(v.shape)

# %% batch_norm_train
class BatchNormTrain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        mean = x.mean(dim=0)
        var = x.var(dim=0, correction=0)
        inv_std = torch.rsqrt(var + eps)
        xhat = (x - mean) * inv_std
        ctx.save_for_backward(xhat, inv_std, weight)
        return xhat * weight + bias

    @staticmethod
    def backward(ctx, grad_output):
        xhat, inv_std, weight = ctx.saved_tensors
        n = grad_output.size(0)
        grad_bias = grad_output.sum(dim=0)
        grad_weight = torch.sum(grad_output * xhat, dim=0)
        grad_x = (weight * inv_std / n) * (n * grad_output - grad_bias - xhat * grad_weight)
        return grad_x, grad_weight, grad_bias, None

# %% batch_norm_layer
class BatchNormLayer(nn.Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1):
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                n = x.shape[0]
                self.running_mean.lerp_(x.mean(0), self.momentum)
                self.running_var.lerp_(x.var(0, unbiased=False) * n / (n - 1), self.momentum)
            return BatchNormTrain.apply(x, self.weight, self.bias, self.eps)
        xhat = (x - self.running_mean) / torch.sqrt(self.running_var + self.eps)
        return xhat * self.weight + self.bias

    def extra_repr(self) -> str:
        return "{}, eps={}, momentum={}".format(self.num_features, self.eps, self.momentum)
