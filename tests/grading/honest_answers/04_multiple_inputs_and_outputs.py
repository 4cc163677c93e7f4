"""Honest answers to 04 (several inputs and outputs), several styles each (see test_scan.py)."""

# %% scale_shift
class ScaleShift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return torch.addcmul(b, x, w)

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors

        def reduce_to(grad, shape):
            # sum over the dimensions broadcasting added
            while grad.dim() > len(shape):
                grad = grad.sum(0)
            for dim, size in enumerate(shape):
                if size == 1:
                    grad = grad.sum(dim, keepdim=True)
            return grad

        grad_x = grad_output * w if ctx.needs_input_grad[0] else None
        grad_w = reduce_to(grad_output * x, w.shape) if ctx.needs_input_grad[1] else None
        grad_b = reduce_to(grad_output, w.shape) if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b

# %% scale_shift
class ScaleShift(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        ctx.b_shape = b.shape
        return x * w + b

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return (grad_output * w,
                (grad_output * x).sum_to_size(w.shape),
                grad_output.sum_to_size(ctx.b_shape))

# %% premultiply_alpha
class PremultiplyAlpha(torch.autograd.Function):
    @staticmethod
    def forward(ctx, rgba):
        ctx.set_materialize_grads(False)
        rgb, alpha = rgba.split([3, 1], dim=0)
        ctx.save_for_backward(rgb, alpha)
        return rgb * alpha, alpha.squeeze(0).clone()

    @staticmethod
    def backward(ctx, grad_rgb, grad_alpha):
        rgb, alpha = ctx.saved_tensors
        grad = torch.zeros(rgb.shape[0] + 1, *rgb.shape[1:], dtype=rgb.dtype, device=rgb.device)
        if grad_rgb is not None:
            grad[:3] = grad_rgb * alpha
            grad[3] += (grad_rgb * rgb).sum(dim=0)
        if grad_alpha is not None:
            grad[3] += grad_alpha
        return grad

# %% cartesian_to_polar
class CartesianToPolar(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        r = torch.hypot(x, y)
        theta = torch.atan2(y, x)
        ctx.save_for_backward(x, y, r)
        return r, theta

    @staticmethod
    def backward(ctx, grad_r, grad_theta):
        x, y, r = ctx.saved_tensors
        cos, sin = x / r, y / r
        return (grad_r * cos - grad_theta * sin / r,
                grad_r * sin + grad_theta * cos / r)

# %% cartesian_to_polar
class CartesianToPolar(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        r = (x.pow(2) + y.pow(2)).sqrt()
        ctx.save_for_backward(x, y, r)
        return r, torch.atan2(y, x)

    @staticmethod
    def backward(ctx, grad_r, grad_theta):
        x, y, r = ctx.saved_tensors
        r_squared = r.square()
        dr_dx, dr_dy = x / r, y / r
        dtheta_dx, dtheta_dy = -y / r_squared, x / r_squared
        grad_x = grad_r * dr_dx + grad_theta * dtheta_dx
        grad_y = grad_r * dr_dy + grad_theta * dtheta_dy
        return grad_x, grad_y

# %% top_k
class TopK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        result = torch.topk(x, k, dim=-1)
        ctx.mark_non_differentiable(result.indices)
        ctx.save_for_backward(result.indices)
        ctx.x_shape = x.shape
        return result.values, result.indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        indices, = ctx.saved_tensors
        grad_x = grad_values.new_zeros(ctx.x_shape)
        grad_x.scatter_(-1, indices, grad_values)
        return grad_x, None

# %% top_k
class TopK(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        values, indices = x.topk(k)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.shape, ctx.dtype, ctx.device = x.shape, x.dtype, x.device
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, _grad_indices):
        (indices,) = ctx.saved_tensors
        grad_x = torch.zeros(ctx.shape, dtype=ctx.dtype, device=ctx.device)
        return grad_x.scatter_add(-1, indices, grad_values), None
