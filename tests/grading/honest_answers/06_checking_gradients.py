"""Honest answers to 06 (checking gradients), several styles each (see test_scan.py)."""

# %% softplus_and_sigmoid
class SoftplusAndSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        sigmoid = torch.sigmoid(x)
        ctx.save_for_backward(sigmoid)
        softplus = torch.nn.functional.softplus(x)
        return softplus, sigmoid

    @staticmethod
    def backward(ctx, grad_softplus, grad_sigmoid):
        (s,) = ctx.saved_tensors
        return grad_softplus * s + grad_sigmoid * s * (1 - s)


def softplus_keeping_sigmoid(x):
    softplus, _ = SoftplusAndSigmoid.apply(x)
    return softplus

# %% fixed_functions
class FixedSoftplus(BrokenSoftplus):
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output / (1 + torch.exp(-x))


class FixedMulSquare(BrokenMulSquare):
    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        grad_x = grad_output * y * y if ctx.needs_input_grad[0] else None
        grad_y = 2 * grad_output * x * y if ctx.needs_input_grad[1] else None
        return grad_x, grad_y


class FixedCos(BrokenCos):
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * -torch.sin(x)


class FixedPow(BrokenPow):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * ctx.p * torch.pow(x, ctx.p - 1), None


class FixedClip(BrokenClip):
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return torch.where(x.abs() <= 1, grad_output, torch.zeros_like(grad_output))

# %% numerical_jacobian
def numerical_jacobian(f, x, eps=1e-6):
    """Central differences, one column per input element."""
    flat = x.detach().reshape(-1).clone()
    columns = []
    with torch.no_grad():
        for j in range(flat.numel()):
            step = torch.zeros_like(flat)
            step[j] = eps
            up = f((flat + step).view_as(x)).reshape(-1)
            down = f((flat - step).view_as(x)).reshape(-1)
            columns.append((up - down) / (2 * eps))
    return torch.stack(columns, dim=1)

# %% numerical_jacobian
import itertools


def numerical_jacobian(f, x, eps=1e-6):
    x = x.detach()
    out_shape = f(x).shape
    J = x.new_zeros(math.prod(out_shape), x.numel())
    for j, index in enumerate(itertools.product(*[range(s) for s in x.shape])):
        plus, minus = x.clone(), x.clone()
        plus[index] += eps
        minus[index] -= eps
        J[:, j] = ((f(plus) - f(minus)) / (2 * eps)).flatten()
    return J

# %% numerical_jacobian
def numerical_jacobian(f, x, eps=1e-6):
    base = x.detach().cpu().numpy().astype(np.float64).ravel()
    evaluate = lambda a: f(torch.from_numpy(a.reshape(x.shape)).to(x.dtype)).detach().cpu().numpy().ravel()
    rows = []
    for j in range(base.size):
        e = np.zeros_like(base)
        e[j] = eps
        rows.append((evaluate(base + e) - evaluate(base - e)) / (2 * eps))
    return torch.from_numpy(np.stack(rows, axis=1)).to(x.dtype)
