"""Honest answers to 09 (production PyTorch), several styles each (see test_scan.py)."""

# %% safe_sqrt
class SafeSqrt(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.sqrt()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        denominator = torch.where(y > 0, 2 * y, torch.ones_like(y))
        return torch.where(y > 0, grad_output / denominator, torch.zeros_like(grad_output))

# %% pairwise_distance
@torch.library.custom_op("course::pairwise_distance", mutates_args=())
def pairwise_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    xn, yn = x.detach().cpu().numpy(), y.detach().cpu().numpy()
    distances = np.sqrt(np.square(xn[:, None, :] - yn[None, :, :]).sum(-1))
    return torch.from_numpy(distances).to(x.device)


@torch.library.register_fake("course::pairwise_distance")
def _pairwise_distance_fake(x, y):
    return torch.empty(x.shape[0], y.shape[0], dtype=x.dtype, device=x.device)


def _setup(ctx, inputs, output):
    x, y = inputs
    ctx.save_for_backward(x, y, output)


def _backward(ctx, grad_output):
    x, y, d = ctx.saved_tensors
    diff = x.unsqueeze(1) - y.unsqueeze(0)
    w = (grad_output / d).unsqueeze(-1) * diff
    return w.sum(dim=1), -w.sum(dim=0)


torch.library.register_autograd("course::pairwise_distance", _backward, setup_context=_setup)

# %% pairwise_distance
@torch.library.custom_op("course::pairwise_distance", mutates_args=())
def pairwise_distance(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    xn, yn = x.detach().cpu().numpy(), y.detach().cpu().numpy()
    distances = np.sqrt(np.square(xn[:, None, :] - yn[None, :, :]).sum(-1))
    return torch.from_numpy(distances).to(x.device)


@pairwise_distance.register_fake
def _(x, y):
    return x.new_empty((x.size(0), y.size(0)))


def pairwise_distance_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs, output)


def pairwise_distance_backward(ctx, grad_output):
    x, y, distances = ctx.saved_tensors
    scaled = grad_output / distances
    grad_x = torch.einsum("ij,ijk->ik", scaled, x[:, None, :] - y[None, :, :])
    grad_y = -torch.einsum("ij,ijk->jk", scaled, x[:, None, :] - y[None, :, :])
    return grad_x, grad_y


pairwise_distance.register_autograd(pairwise_distance_backward, setup_context=pairwise_distance_setup_context)

# %% numpy_clip
@torch.library.custom_op("course::numpy_clip_", mutates_args={"x"}, device_types="cpu")
def numpy_clip_(x: torch.Tensor, bound: float) -> None:
    np.clip(x.numpy(), -bound, bound, out=x.numpy())

# %% quantize_ste
class QuantizeSTE(Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(w, levels):
        return (w.clamp(-1.0, 1.0) * levels).round() / levels

    @staticmethod
    def setup_context(ctx, inputs, output):
        w, _ = inputs
        ctx.save_for_backward(w)

    @staticmethod
    def backward(ctx, grad_output):
        (w,) = ctx.saved_tensors
        return grad_output.masked_fill(w.abs() > 1, 0), None

# %% quantize_ste
class QuantizeSTE(Function):
    """Straight-through: the gradient passes where the weight was not clipped."""

    generate_vmap_rule = True

    @staticmethod
    def forward(w, levels: int):
        clipped = torch.clamp(w, min=-1, max=1)
        return torch.round(clipped * levels) / levels

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad_output):
        w, = ctx.saved_tensors
        inside = (w >= -1) & (w <= 1)
        return grad_output * inside.type_as(grad_output), None

# %% checkpointed_mlp
class CheckpointedMLP(Function):
    @staticmethod
    def forward(ctx, x, w1, w2):
        ctx.save_for_backward(x, w1, w2)
        with torch.no_grad():
            return F.gelu(x @ w1) @ w2

    @staticmethod
    def backward(ctx, grad_output):
        x, w1, w2 = (t.detach().requires_grad_(t.requires_grad) for t in ctx.saved_tensors)
        with torch.enable_grad():
            out = F.gelu(x @ w1) @ w2
        inputs = [t for t in (x, w1, w2) if t.requires_grad]
        grads = iter(torch.autograd.grad(out, inputs, grad_output))
        return tuple(next(grads) if t.requires_grad else None for t in (x, w1, w2))

# %% checkpointed_mlp
class CheckpointedMLP(Function):
    @staticmethod
    @custom_fwd(device_type="cuda")
    def forward(ctx, x, w1, w2):
        ctx.save_for_backward(x, w1, w2)
        h = x @ w1
        return F.gelu(h) @ w2

    @staticmethod
    @custom_bwd(device_type="cuda")
    def backward(ctx, grad_output):
        saved = ctx.saved_tensors
        detached = [t.detach().requires_grad_() for t in saved]
        with torch.enable_grad():
            recomputed = F.gelu(detached[0] @ detached[1]) @ detached[2]
            recomputed.backward(grad_output)
        return tuple(t.grad for t in detached)
