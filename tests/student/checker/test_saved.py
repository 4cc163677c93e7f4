"""check_saved: what a Function keeps for backward, in the student's own process (autograder.student.checker.saved)."""

from __future__ import annotations

import pytest
import torch

from autograder import check_saved
from conftest import sqrt_keeping


def _relu(save):
    class ReLUMask(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            save(ctx, x)
            return x.clamp(min=0)

        @staticmethod
        def backward(ctx, g):
            return g * (ctx.saved_tensors[0] > 0) if ctx.saved_tensors else g

    return ReLUMask


MASK = [("the mask x > 0", lambda x: x > 0)]


def test_the_right_tensor_passes():
    check_saved(_relu(lambda ctx, x: ctx.save_for_backward(x > 0)), torch.relu, torch.randn(4, 5), saves=MASK)


@pytest.mark.parametrize("save, message", [
    (lambda ctx, x: ctx.save_for_backward(x), "saved tensor 1 should be the mask x > 0 (a bool tensor of shape [4, 5]); "
                                              "it is a float64 tensor of shape [4, 5]"),
    (lambda ctx, x: ctx.save_for_backward(x > 0, x), "should save 1 tensor for backward (the mask x > 0); it saved 2"),
    (lambda ctx, x: setattr(ctx, "mask", x > 0), "keeps a tensor (made in forward: bool, shape [4, 5]) in `ctx.mask`, "
                                                 "outside save_for_backward"),
])
def test_a_wrong_saved_tensor_is_named(save, message):
    with pytest.raises(AssertionError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        check_saved(_relu(save), torch.relu, torch.randn(4, 5), saves=MASK)


def test_max_saved_bounds_count_and_size():
    check_saved(_relu(lambda ctx, x: ctx.save_for_backward(x > 0)), torch.relu, torch.randn(6), max_saved=1)
    with pytest.raises(AssertionError, match="at most 1 tensor"):
        check_saved(_relu(lambda ctx, x: ctx.save_for_backward(x, x > 0)), torch.relu, torch.randn(6), max_saved=1)


def test_saves_or_max_saved_not_both():
    with pytest.raises(TypeError):
        check_saved(_relu(lambda ctx, x: None), torch.relu, torch.randn(3), saves=[], max_saved=1)


# How a Sqrt that saves its output keeps its input some other way (``conftest.sqrt_keeping``), and what the message
# must say of where it is kept.
HIDING = {
    "a module-level dict keyed by id(ctx)": (dict(before="_cache = {}", keep="_cache[id(ctx)] = x",
                                                  get="_cache.pop(id(ctx))"), "the input `x`) in the module-level dict `_cache`"),
    "a tuple on ctx": (dict(keep="ctx.inputs = (x,)", get="ctx.inputs[0]"), "the input `x`) in `ctx.inputs[0]`"),
    "a dict on ctx": (dict(keep="ctx.store = {'x': x}", get="ctx.store['x']"), "the input `x`) in `ctx.store['x']`"),
    "a nested dataclass on ctx": (dict(
        before="@dataclasses.dataclass\nclass Inner:\n    x: object\n\n@dataclasses.dataclass\nclass State:\n    inner: Inner",
        keep="ctx.state = State(Inner(x))", get="ctx.state.inner.x"), "the input `x`) in `ctx.state.inner.x`"),
    "a class attribute list": (dict(class_body="kept = []", keep="Sqrt.kept.append(x)", get="Sqrt.kept.pop()"),
                               "the input `x`) in the class attribute `Sqrt.kept`"),
    "a list's own method": (dict(before="def _make():\n    store = []\n    return store.append, store.pop\nput, take = _make()",
                       keep="put(x)", get="take()"), "the input `x`) in the module-level name `put`"),
    "a closure cell": (dict(before="def _make():\n    store = []\n    def put(t):\n        store.append(t)\n"
                                   "    def take():\n        return store.pop()\n    return put, take\n"
                                   "put, take = _make()", keep="put(x)", get="take()"),
                       "the input `x`) in a closure of put"),
    "a mutable default argument": (dict(extra=", _memo={}", keep="_memo['x'] = x",
                                        get="Sqrt.forward.__defaults__[0]['x']"), "in a default argument of forward"),
    "a function attribute": (dict(before="def helper():\n    pass", keep="helper.cache = x", get="helper.cache"),
                             "the input `x`) in the function attribute `helper.cache`"),
    "a global list of clones": (dict(before="_clones = []", keep="_clones.append(x.clone())", get="_clones.pop()"),
                                "a copy of the input `x`) in the module-level list `_clones`"),
    "a detached view on ctx": (dict(keep="ctx.d = x.detach()", get="ctx.d"), "a view of the input `x`) in `ctx.d`"),
    "x.data in a global list": (dict(before="_v = []", keep="_v.append(x.data)", get="_v.pop()"),
                                "a view of the input `x`) in the module-level list `_v`"),
    "x * 1 in a global dict": (dict(before="_v = {}", keep="_v[0] = x * 1", get="_v[0]"),
                               "a copy of the input `x`) in the module-level dict `_v`"),
    "a numpy array of it": (dict(before="_v = []", keep="_v.append(x.detach().numpy())", get="torch.from_numpy(_v.pop())"),
                            "its values, as a numpy array) in the module-level list `_v`"),
    "an attribute of another module": (dict(before="import math", keep="math.kept_by_sqrt = [x]",
                                            get="math.kept_by_sqrt.pop()"),
                                       "the input `x`) in the attribute `kept_by_sqrt` of the module `math` (in a container"),
    "a lambda on ctx": (dict(keep="ctx.f = lambda: x", get="ctx.f()"), "the input `x`) in a closure of a lambda"),
    "a tensor used as a dict key": (dict(before="_k = {}", keep="_k[x] = 1", get="_k.popitem()[0]"),
                                    "the input `x`) in the module-level dict `_k`"),
    # Not a tensor at all (issue 45): the values of the call, in whatever form, are found where they are kept.
    "its values as Python numbers": (dict(before="_v = []", keep="_v.append(x.tolist())",
                                          get="torch.tensor(_v[-1], dtype=result.dtype)"),
                                     "Sqrt keeps the values of the input `x` (as Python floats) in the module-level "
                                     "list `_v`"),
    # Used only where they agree with the saved output, so that backward computes from the saved output when given
    # other tensors in its place: only where they are kept shows it.
    "Python floats on ctx, used where they agree": (dict(
        keep="ctx.values = x.tolist()",
        get="(torch.tensor(ctx.values, dtype=result.dtype).reshape(result.shape) if torch.allclose("
            "torch.tensor(ctx.values, dtype=result.dtype).reshape(result.shape).sqrt(), result) else result ** 2)"),
        "Sqrt keeps the values of the input `x` (as Python floats) in `ctx.values`"),
    "its bytes in a closure": (dict(before="import numpy as np\n\ndef _make():\n    box = []\n    def put(b):\n        box.append(b)\n"
                                           "    def take():\n        return box.pop()\n    return put, take\n"
                                           "put, take = _make()", keep="put(x.detach().numpy().tobytes())",
                                    get="torch.tensor(np.frombuffer(take(), dtype=np.float64).copy())"),
                               "the values of the input `x` (as bytes) in a closure of put"),
    "a string of it in a module-level dict": (dict(before="_s = {}", keep="_s['x'] = str(x.tolist())",
                                                   get="torch.tensor([float(v) for v in _s['x'][1:-1].split(',')])"),
                                              "the values of the input `x` (written in a string) in the module-level "
                                              "dict `_s`"),
    "numpy scalars in a module-level dict": (dict(before="import numpy as np\n_s = {}", keep="_s['x'] = [np.float64(v) for v in x.tolist()]",
                                                  get="torch.tensor([float(v) for v in _s['x']])"),
                                             "the values of the input `x` (as numpy numbers) in the module-level dict `_s`"),
    "float.hex on ctx": (dict(keep="ctx.h = [v.hex() for v in x.tolist()]",
                              get="torch.tensor([float.fromhex(v) for v in ctx.h])"),
                         "the values of the input `x` (written in a string) in `ctx.h`"),
    "a cache of a function": (dict(before="import functools\n\n@functools.lru_cache\ndef _seen(values):\n"
                                          "    return values", keep="_seen(tuple(x.tolist()))", get="result ** 2"),
                              "the values of the input `x` (as Python floats)"),
    "the output's values on ctx": (dict(keep="ctx.y = result.tolist()", get="result ** 2"),
                                   "the values of the output (as Python floats) in `ctx.y`"),
    # In an encoding of its own (the numbers times 3): not recognised where it is kept, but backward computes from it,
    # which backward given other tensors in place of what forward saved shows.
    "its values in an encoding of its own": (dict(before="_v = []", keep="_v.append([3 * v for v in x.tolist()])",
                                                  get="torch.tensor(_v[-1], dtype=result.dtype) / 3"),
                                             "backward does not compute from what forward saved: given the tensors a "
                                             "right Function saves for other inputs (same shapes, other values), "
                                             "backward should return the gradients at those inputs, and its gradient "
                                             "for `x` is another"),
}


def _sqrt(module_name: str, **parts) -> type:
    """Sqrt written into a module of its own, as a notebook's cell defines it in ``__main__``."""
    import sys
    import types

    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    exec(sqrt_keeping(**parts), module.__dict__)
    return module.__dict__["Sqrt"]


@pytest.mark.parametrize("how", sorted(HIDING))
def test_a_tensor_kept_anywhere_but_save_for_backward_fails_saying_where(how):
    parts, says = HIDING[how]
    Sqrt = _sqrt(f"hides_{len(how)}_{abs(hash(how))}", **parts)
    for _ in range(2):  # (the second time its input is among the garbage collector's youngest objects)
        with pytest.raises(AssertionError) as failure:
            check_saved(Sqrt, torch.sqrt, torch.rand(5) + 0.5, saves=["output"])
        assert says in str(failure.value), str(failure.value)
        assert str(failure.value).startswith("Sqrt"), str(failure.value)


@pytest.mark.parametrize("keep", ["ctx.shape = x.shape; ctx.n = x.numel(); ctx.flag = True; ctx.dtype = x.dtype",
                                  "ctx.size = int(x.detach().numpy().size)", "ctx.scale = 2.0",
                                  "ctx.names = ['x', 'y']; ctx.note = 'saved the output, 12 elements'",
                                  "ctx.mean = float(x.mean())"])
def test_numbers_flags_and_shapes_on_ctx_pass(keep):
    Sqrt = _sqrt(f"honest_{abs(hash(keep))}", keep=keep, get="result ** 2")
    for _ in range(2):
        check_saved(Sqrt, torch.sqrt, torch.rand(3, 4) + 0.5, saves=["output"])


def test_forward_that_runs_the_garbage_collector_cannot_hide_what_it_keeps():
    Sqrt = _sqrt("collects", before="import gc\nimport types\n_kept = types.SimpleNamespace()",
                 keep="_kept.x = x * 1; gc.collect()", get="result ** 2")
    with pytest.raises(AssertionError, match="forward ran Python's garbage collector"):
        check_saved(Sqrt, torch.sqrt, torch.rand(5) + 0.5, saves=["output"])
