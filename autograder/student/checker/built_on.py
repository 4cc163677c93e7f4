"""``check_built_on``: a function or Module built on the student's Function follows what that Function does.

``check_built_on(Net, reference, *args, on={"PolyFunction": poly_reference})`` runs two checks. First
``check_callable``'s (with ``harness=``, ``check_with``'s) against ``reference(*stand_ins)``: each
stand-in a Function named as the student's piece (so graphs and ``grad_fn`` names look alike) that
computes the piece's torch reference (``poly_reference``); the output's graph must hold each piece's
node. Then the same with each piece of the student's changed for the call (``substituted``): its
forward's outputs shifted by known amounts, the gradients its backward receives scaled by known
weights, and the stand-ins changed the same way (``stand_in`` with a seed). A ``Net`` built on
``PolyFunction.apply`` follows; one that computes its result another way and adds
``0 * PolyFunction.apply(...)``, applies it to a detached copy, discards it, or uses it only on some
shapes, does not. ``reference`` is a function of the stand-ins (in the order of ``on``) that returns
the reference: ``lambda poly: lambda x1, x2: poly(x1, x2).sum()``, or a Module class for a harness.

The grader's referee builds the stand-ins itself and asks the examinee to answer with the student's
pieces substituted (``autograder.grading.running.judging.answer``), with the same ``substituted`` and
``perturbation``, so both sides change by the same amounts.
"""

from __future__ import annotations

import contextlib
import functools
import sys

from autograder.student.checker.references import (
    _as_tuple, _autograd_grad, _enable_grad, _Function, _Generator, _randn, _Tensor,
)

_MISSING = object()
_DEFAULT_VJP = _Function.vjp


def perturbation(seed: int, index: int, like):
    """(shift, scale) for output ``index`` of a piece: known random tensors of ``like``'s shape, dtype and device,
    the same wherever they are drawn; ``scale`` lies in [0.5, 1.5)."""
    generator = _Generator().manual_seed(int(seed) * 64 + index)
    shift = _randn(like.shape, generator=generator, dtype=like.dtype if like.is_floating_point() else None)
    scale = 0.5 + _randn(like.shape, generator=generator, dtype=shift.dtype).sigmoid()
    return shift.to(like.device), scale.to(like.device)


def _shifted(outputs, seed: int | None, keep: tuple = ()):
    """``outputs`` (one or a tuple) with each floating-point tensor moved by its known shift; those in ``keep``
    (inputs returned as outputs, modified in place) are left as they are."""
    if seed is None:
        return outputs
    moved = [o + perturbation(seed, k, o)[0] if isinstance(o, _Tensor) and o.is_floating_point()
             and not any(o is a for a in keep) else o for k, o in enumerate(_as_tuple(outputs))]
    return tuple(moved) if isinstance(outputs, (tuple, list)) else moved[0]


def _scaled(grads: tuple, seed: int | None) -> list:
    """The gradients a piece's backward receives, each times its known scale."""
    if seed is None:
        return list(grads)
    return [g * perturbation(seed, k, g)[1] if isinstance(g, _Tensor) and g.is_floating_point() else g
            for k, g in enumerate(grads)]


def stand_in(name: str, piece, seed: int | None = None) -> type:
    """A Function named ``name`` that computes the torch function ``piece``; with a ``seed``, changed as
    ``substituted`` changes the student's: outputs shifted, the gradients its backward receives scaled."""
    def forward(ctx, *args):
        ctx.args = args
        return _shifted(piece(*[a.detach() if isinstance(a, _Tensor) else a for a in args]), seed)

    def backward(ctx, *grads):
        leaves = [a.detach().requires_grad_(wanted) if isinstance(a, _Tensor) else a
                  for a, wanted in zip(ctx.args, ctx.needs_input_grad)]
        wanted = [a for a in leaves if isinstance(a, _Tensor) and a.requires_grad]
        with _enable_grad():
            outputs = _as_tuple(piece(*leaves))
        used = [(o, g) for o, g in zip(outputs, _scaled(grads, seed))
                if isinstance(o, _Tensor) and o.requires_grad and g is not None]
        found = iter(_autograd_grad([o for o, _ in used], wanted, [g for _, g in used], allow_unused=True)
                     if used and wanted else [None] * len(wanted))
        return tuple(next(found) if isinstance(a, _Tensor) and a.requires_grad else None for a in leaves)

    return type(name, (_Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward),
                                     "__module__": __name__})


@contextlib.contextmanager
def substituted(classes: list, seed: int):
    """Each Function class of ``classes`` changed while the block runs, wherever it is used (the class itself
    changes, so an alias such as ``poly = PolyFunction.apply`` follows too): forward's outputs shifted by known
    amounts, the gradients backward (or ``vjp``) receives scaled by known weights; put back afterwards."""
    patched = []
    try:
        for cls in classes:
            patched.append((cls, {name: vars(cls).get(name, _MISSING) for name in
                                  ("forward", "backward", "vjp", "setup_context")}))
            _change(cls, seed)
        yield
    finally:
        for cls, originals in reversed(patched):
            for name, value in originals.items():
                if value is not _MISSING:
                    setattr(cls, name, value)
                elif name in vars(cls):
                    delattr(cls, name)


def _change(cls, seed: int) -> None:
    forward, unshifted = cls.forward, {}
    split = cls.setup_context is not _Function.setup_context  # forward(*args) and setup_context(ctx, inputs, output)

    @functools.wraps(forward)  # (its signature too: apply binds default arguments from it with setup_context)
    def shifted_forward(*args, **kwargs):
        outputs = forward(*args, **kwargs)
        moved = _shifted(outputs, seed, keep=args)
        if split:
            unshifted[id(moved)] = (moved, outputs)
        return moved

    cls.forward = staticmethod(shifted_forward)
    if split:
        setup = cls.setup_context

        def setup_context(ctx, inputs, output):  # it sees forward's own outputs, as without the change
            moved, original = unshifted.pop(id(output), (None, output))
            return setup(ctx, inputs, original if moved is output else output)

        cls.setup_context = staticmethod(setup_context)
    name = "vjp" if cls.vjp is not _DEFAULT_VJP else "backward"
    backward = getattr(cls, name)
    setattr(cls, name, staticmethod(lambda ctx, *grads: backward(ctx, *_scaled(grads, seed))))


def follows_problem(name: str, pieces: list[str], problem: str) -> str:
    """Why ``name`` is not built on ``pieces``, from what differed with them changed."""
    them = " and ".join(pieces)
    return (f"{name} does not follow {them}: with {them} changed by the check (its outputs shifted by known "
            f"amounts, the gradients its backward receives scaled), {name}'s results should change as they do "
            f"when {name} computes them with {them}.apply, and they do not: {problem}")


def home(function) -> dict:
    """The names of the module ``function`` (a function, or a class and its ``forward``) was written in."""
    target = getattr(function, "forward", function)
    names = getattr(target, "__globals__", None)
    if isinstance(names, dict):
        return names
    module = sys.modules.get(getattr(function, "__module__", ""))
    return vars(module) if module is not None else {}


def check_built_on(function, reference, *args, on: dict, harness=None, rtol: float | None = None,
                   atol: float | None = None) -> None:
    """Check that ``function`` is built on the student's Functions named in ``on`` (see the module docstring)."""
    from autograder.student.checker.callables import check_callable
    from autograder.student.checker.harness import check_with

    name = getattr(function, "__name__", "the function")
    names, pieces = list(on), list(on.values())
    found = [home(function).get(n) for n in names]
    missing = [n for n, f in zip(names, found) if not (isinstance(f, type) and issubclass(f, _Function))]
    if missing:
        raise AssertionError(f"{name} should be built on {' and '.join(missing)}, but your notebook has no "
                             f"torch.autograd.Function named {missing[0]}.")
    tolerance = {k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None}
    seed = int(_randn(()).abs().mul(1e6))
    for changed in (None, seed):
        built = reference(*[stand_in(n, p, changed).apply for n, p in zip(names, pieces)])
        try:
            with substituted(found, changed) if changed is not None else contextlib.nullcontext():
                if harness is not None:
                    check_with(harness, function, built, *args, **tolerance)
                else:
                    check_callable(function, built, *args, uses=tuple(names) if changed is None else (), **tolerance)
        except AssertionError as error:
            if changed is None:
                raise
            raise AssertionError(follows_problem(name, names, str(error))) from None
