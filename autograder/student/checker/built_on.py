"""``check_built_on``: a function or Module built on the student's Function follows whatever that Function is.

``check_built_on(Net, reference, *args, on={"PolyFunction": poly_reference})`` runs three checks. First
``check_callable``'s (with ``harness=``, ``check_with``'s) against ``reference(*stand_ins)``: each stand-in a
Function named as the student's piece (so graphs and ``grad_fn`` names look alike) that computes the piece's
torch reference (``poly_reference``); the output's graph must hold each piece's node. Then the same twice with
each piece of the student's replaced for the call (``substituted``), and the stand-ins replaced alike
(``stand_in`` with a change):

- ``"values"``: the piece becomes another function of the same inputs (``other``: every floating-point output a
  smooth nonlinear function of every floating-point input, drawn from a seed), values and gradients;
- ``"gradients"``: the piece keeps its own forward, so its values are the student's to the last bit, and its
  backward becomes that other function's.

So ``Net``'s value must come from ``PolyFunction.apply``'s output and its gradients from ``PolyFunction``'s
backward. A ``Net`` that computes its result another way and adds ``0 * PolyFunction.apply(...)``, applies it to a
detached copy, discards it, uses it only on some shapes, or computes the gradient itself, does not follow; nor
does one that corrects a wrong backward of its own ``PolyFunction`` (calling it twice on half-detached inputs to
double a gradient path), which is found where the values give it no way to tell the change (``"gradients"``).
``reference`` is a function of the stand-ins (in the order of ``on``) that returns the reference:
``lambda poly: lambda x1, x2: poly(x1, x2).sum()``, or a Module class for a harness.

The grader's referee builds the stand-ins itself and asks the examinee to answer with the student's pieces
substituted (``autograder.grading.running.judging.answer``), with the same ``substituted`` and ``other``, so
both sides change alike.
"""

from __future__ import annotations

import contextlib
import functools
import sys

from autograder.student.checker.contracts import broken, requirement_of
from autograder.student.checker.references import (
    _as_tuple, _autograd_grad, _enable_grad, _Function, _Generator, _rand, _randn, _Tensor,
)

_MISSING = object()
_DEFAULT_VJP = _Function.vjp
CHANGES = ("values", "gradients")
SAID = {"values": "replaced by another function of the same inputs (values and gradients)",
        "gradients": "keeping its forward but given the backward of another function of the same inputs"}


def _floating(value) -> bool:
    return isinstance(value, _Tensor) and value.is_floating_point()


def _drawn(generator, like, low: float, width: float):
    """A tensor of ``like``'s shape, dtype and device, uniform in [low, low + width), from ``generator``."""
    return (low + width * _rand(like.shape, generator=generator, dtype=like.dtype)).to(like.device)


def other(seed: int, args: tuple, like: tuple) -> tuple:
    """Another function of the same inputs: for each floating-point output of ``like`` (the piece's own outputs, for
    their shapes), ``c + sum_i m_i``, where ``m_i = a * sin(b * x_i + phase)`` is reshaped to the output's shape when
    ``x_i`` has as many elements, else summed with weights and spread by a random tensor of the output's shape;
    each number drawn from ``seed`` alone, so that two processes draw the same. Other outputs are ``like``'s.
    Differentiable torch code: its gradients are autograd's."""
    inputs = [a for a in args if _floating(a)]
    found = []
    for k, out in enumerate(like):
        if not _floating(out):
            found.append(out)
            continue
        generator = _Generator().manual_seed(int(seed) * 64 + k)
        total = _randn(out.shape, generator=generator, dtype=out.dtype).to(out.device)
        for x in inputs:
            x = x.to(out.dtype)
            m = _drawn(generator, x, 0.3, 0.7) * (_drawn(generator, x, 0.5, 1.0) * x + _drawn(generator, x, 0.0, 6.3)).sin()
            if m.numel() == out.numel():
                total = total + m.reshape(out.shape)
            else:
                total = total + (m * _drawn(generator, x, -1.0, 2.0)).sum() * _drawn(generator, out, -1.0, 2.0)
        found.append(total)
    return tuple(found)


def _other_gradients(seed: int, args: tuple, like: tuple, needs: tuple, grads: tuple) -> tuple:
    """The gradients ``other`` gives the inputs in ``needs`` for the upstream ``grads``, None for the others."""
    leaves = [a.detach().requires_grad_(bool(wanted) and _floating(a)) if isinstance(a, _Tensor) else a
              for a, wanted in zip(args, needs)]
    wanted = [a for a in leaves if isinstance(a, _Tensor) and a.requires_grad]
    with _enable_grad():
        outputs = other(seed, tuple(leaves), like)
    used = [(o, g) for o, g in zip(outputs, grads)
            if isinstance(o, _Tensor) and o.requires_grad and isinstance(g, _Tensor)]
    found = iter(_autograd_grad([o for o, _ in used], wanted, [g for _, g in used], allow_unused=True)
                 if used and wanted else [None] * len(wanted))
    return tuple(next(found) if isinstance(a, _Tensor) and a.requires_grad else None for a in leaves)


def stand_in(name: str, piece, change: tuple | None = None) -> type:
    """A Function named ``name`` that computes the torch function ``piece``; with a ``change`` (``(kind, seed)``,
    kind one of ``CHANGES``), changed as ``substituted`` changes the student's."""
    kind, seed = change if change is not None else (None, None)

    def forward(ctx, *args):
        ctx.args = args
        outputs = piece(*[a.detach() if isinstance(a, _Tensor) else a for a in args])
        ctx.like = tuple(o.detach() if isinstance(o, _Tensor) else o for o in _as_tuple(outputs))
        if kind != "values":
            return outputs
        changed = other(seed, args, ctx.like)
        return changed if isinstance(outputs, (tuple, list)) else changed[0]

    def backward(ctx, *grads):
        if kind is not None:
            return _other_gradients(seed, ctx.args, ctx.like, ctx.needs_input_grad, grads)
        leaves = [a.detach().requires_grad_(wanted) if isinstance(a, _Tensor) else a
                  for a, wanted in zip(ctx.args, ctx.needs_input_grad)]
        wanted = [a for a in leaves if isinstance(a, _Tensor) and a.requires_grad]
        with _enable_grad():
            outputs = _as_tuple(piece(*leaves))
        used = [(o, g) for o, g in zip(outputs, grads) if isinstance(o, _Tensor) and o.requires_grad and g is not None]
        found = iter(_autograd_grad([o for o, _ in used], wanted, [g for _, g in used], allow_unused=True)
                     if used and wanted else [None] * len(wanted))
        return tuple(next(found) if isinstance(a, _Tensor) and a.requires_grad else None for a in leaves)

    return type(name, (_Function,), {"forward": staticmethod(forward), "backward": staticmethod(backward),
                                     "__module__": __name__})


@contextlib.contextmanager
def substituted(classes: list, change: tuple):
    """Each Function class of ``classes`` changed while the block runs, wherever it is used (the class itself
    changes, so an alias such as ``poly = PolyFunction.apply`` follows too), as ``change`` (``(kind, seed)``) says:
    with ``"values"`` forward returns ``other``'s outputs for its inputs, with ``"gradients"`` its own; either way
    backward (or ``vjp``) returns ``other``'s gradients. Put back afterwards."""
    kind, seed = change
    patched, calls = [], {}
    try:
        for cls in classes:
            patched.append((cls, {name: vars(cls).get(name, _MISSING) for name in
                                  ("forward", "backward", "vjp", "setup_context")}))
            _change(cls, kind, int(seed), calls)
        yield
    finally:
        calls.clear()
        for cls, originals in reversed(patched):
            for name, value in originals.items():
                if value is not _MISSING:
                    setattr(cls, name, value)
                elif name in vars(cls):
                    delattr(cls, name)


def _change(cls, kind: str, seed: int, calls: dict) -> None:
    """Change ``cls`` as ``substituted`` says; ``calls`` holds each call's inputs and own outputs by ``id(ctx)``."""
    forward = cls.forward
    split = cls.setup_context is not _Function.setup_context  # forward(*args) and setup_context(ctx, inputs, output)

    def result(args: tuple, outputs):
        """What the changed forward returns: its own ``outputs``, or ``other``'s in their place."""
        if kind != "values":
            return outputs
        changed = other(seed, args, tuple(_as_tuple(outputs)))
        return changed if isinstance(outputs, (tuple, list)) else changed[0]

    if split:
        made = {}  # id(returned) -> (returned, forward's own outputs), for setup_context

        @functools.wraps(forward)  # (its signature too: apply binds default arguments from it with setup_context)
        def changed_forward(*args, **kwargs):
            outputs = forward(*args, **kwargs)
            returned = result(args, outputs)
            made[id(returned)] = (returned, outputs)
            return returned

        setup = cls.setup_context

        def setup_context(ctx, inputs, output):  # it sees forward's own outputs, as without the change
            returned, outputs = made.pop(id(output), (None, output))
            own = outputs if returned is output else output
            calls[id(ctx)] = (tuple(inputs), tuple(_as_tuple(own)))
            return setup(ctx, inputs, own)

        cls.setup_context = staticmethod(setup_context)
    else:
        @functools.wraps(forward)
        def changed_forward(ctx, *args, **kwargs):
            outputs = forward(ctx, *args, **kwargs)
            calls[id(ctx)] = (args, tuple(_as_tuple(outputs)))
            return result(args, outputs)

    cls.forward = staticmethod(changed_forward)

    def changed_backward(ctx, *grads):
        args, like = calls[id(ctx)]
        return _other_gradients(seed, args, like, ctx.needs_input_grad, grads)

    setattr(cls, "vjp" if cls.vjp is not _DEFAULT_VJP else "backward", staticmethod(changed_backward))


def follows_problem(name: str, pieces: list[str], problem: str, kind: str = "values",
                    requirement: str | None = None) -> str:
    """Why ``name`` is not built on ``pieces``, from what differed with them changed (``kind``), in the words of the
    exercise's ``requirement`` where one is stated."""
    them = " and ".join(pieces)
    return broken(requirement, f"{name} does not follow {them}: with {them} {SAID[kind]}, {name}'s results should be "
                               f"what they are when {name} computes them with {them}.apply, and they are not: {problem}")


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
    for change in (None, *((kind, seed) for kind in CHANGES)):
        built = reference(*[stand_in(n, p, change).apply for n, p in zip(names, pieces)])
        try:
            with substituted(found, change) if change is not None else contextlib.nullcontext():
                if harness is not None:
                    check_with(harness, function, built, *args, **tolerance)
                else:
                    check_callable(function, built, *args, uses=tuple(names) if change is None else (), **tolerance)
        except AssertionError as error:
            if change is None:
                raise
            raise AssertionError(follows_problem(name, names, str(error), change[0], requirement_of(function))) from None
