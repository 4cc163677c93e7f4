"""What an exercise requires beyond right values, stated once beside its tests: ``requires``.

A test cell names the requirement of its exercise before the checks, in words a student reads::

    requires(Cube, "a backward you derive: no autograd while your answer cells or Cube run, and "
                   "gradients equal to torch's to rounding in float64", autograd=False, exact=True)

The grader's referee holds it (``autograder.grading.running.judging.judges``) and judges every later check of
``Cube`` by it, from what the code does: with ``autograd=False`` the examinee runs each answer cell, and each of
``Cube``'s runs in a value check, under torch's profiler, and any graph node, forward-mode AD or derivative kernel
that ran fails the check; with ``exact=True`` the gradients, in float64, must equal torch's within what rounding
explains (``inexact``); ``check_saved`` and ``check_built_on`` say what they find in its words. A broken
requirement reads "This exercise requires <the requirement>, but <what the code did>" (``broken``).

In the student's own process ``requires`` only records the requirement, which ``check_saved`` and
``check_built_on`` quote there too; what the grader observes (answer cells under the profiler, the bound on
rounding) needs the examinee.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from autograder.student.checker.references import _as_tuple, _autograd_grad, _enable_grad, _Tensor

ROUNDING = torch.finfo(torch.float64).eps  # 2.2e-16
# A gradient is exact when it is within FLOOR roundings of its size (or the upstream gradient's), or within NOISE
# times how far torch's own gradients move when the inputs move by a few roundings (``rounding_noise``): the
# measured figures are in guarantees.md.
FLOOR = 1000
NOISE = 100
NUDGE = 4  # roundings by which ``rounding_noise`` moves each input element


@dataclass(frozen=True)
class Contract:
    """An exercise's requirement: the words a message quotes, and what the grader checks of it."""

    requirement: str
    autograd: bool = True   # False: no autograd while the answer cells or the object run
    exact: bool = False     # gradients equal to torch's to rounding, in float64


class _Requirements:
    """The requirements a notebook's test cells stated, by the name of the object (the student's process)."""

    def __init__(self) -> None:
        self.by_name: dict[str, Contract] = {}


REQUIREMENTS = _Requirements()


def contracts_of(objects, requirement, autograd: bool = True, exact: bool = False) -> list[tuple[str, Contract]]:
    """(name, contract) for the student's object ``objects`` (or each of a tuple of them, one exercise's; or their
    names) that has a name: what ``requires`` records."""
    if not (isinstance(requirement, str) and requirement.strip()):
        raise TypeError("requires(obj, requirement, ...) needs the requirement in words")
    contract = Contract(" ".join(requirement.split()), bool(autograd), bool(exact))
    named = [obj if isinstance(obj, str) else getattr(obj, "__name__", None)
             for obj in (objects if isinstance(objects, (tuple, list)) else (objects,))]
    return [(name, contract) for name in named if isinstance(name, str)]  # (a custom op has no name to quote it by)


def requires(objects, requirement: str, autograd: bool = True, exact: bool = False) -> None:
    """State what the exercise of ``objects`` (one of the student's objects, or a tuple of them) requires (see the
    module docstring); the checks after it quote it."""
    REQUIREMENTS.by_name.update(contracts_of(objects, requirement, autograd, exact))


def requirement_of(obj) -> str | None:
    """The requirement stated for ``obj`` in this process, if any."""
    found = REQUIREMENTS.by_name.get(getattr(obj, "__name__", None))
    return found.requirement if found else None


def broken(requirement: str | None, but: str) -> str:
    """A broken requirement, as the student reads it (``but`` alone where none was stated)."""
    if requirement is None:
        return but
    return f"This exercise requires {requirement.rstrip('.')}, but {but}"


def reference_gradients(reference, leaves: list, grad: list, upstream: list) -> list:
    """torch autograd's gradients of ``reference`` at ``leaves`` for ``upstream``, one per input in ``grad``."""
    call = [a.detach().clone().requires_grad_(wanted) if isinstance(a, _Tensor) and a.is_floating_point() else a
            for a, wanted in zip(leaves, grad)]
    wrt = [a for a, wanted in zip(call, grad) if wanted]
    with _enable_grad():
        used = [(o, u) for o, u in zip(_as_tuple(reference(*call)), upstream) if u is not None]
        found = _autograd_grad([o for o, _ in used], wrt, [u for _, u in used], allow_unused=True)
    return [torch.zeros_like(a) if g is None else g.detach() for a, g in zip(wrt, found)]


def rounding_noise(reference, leaves: list, grad: list, upstream: list, draws: int = 2) -> list:
    """How far torch's own float64 gradients move when every floating-point input element moves by ``NUDGE``
    roundings (random signs, ``draws`` times): the rounding the computation itself carries, large where the
    function is ill-conditioned (rows of nearly equal values, values around 1e4), tiny elsewhere."""
    base = reference_gradients(reference, leaves, grad, upstream)
    noise = [torch.zeros_like(b) for b in base]
    generator = torch.Generator().manual_seed(20251202)
    for _ in range(draws):
        nudged = [a.detach() * (1 + NUDGE * ROUNDING * (2 * torch.randint(0, 2, a.shape, generator=generator) - 1)
                                .to(a.dtype)) if isinstance(a, _Tensor) and a.is_floating_point() else a
                  for a in leaves]
        moved = reference_gradients(reference, nudged, grad, upstream)
        noise = [torch.maximum(n, (m - b).abs()) for n, m, b in zip(noise, moved, base)]
    return noise


def inexact(got: list, want: list, noise: list, upstream: list, inputs: list) -> tuple[float, float] | None:
    """(how far the gradients ``got`` are from torch's ``want``, how far rounding explains) where they are further
    than rounding explains, else None. Each a list of float64 tensors, one per input that needs a gradient;
    ``upstream``: the gradients backward was given; ``inputs``: the call's floating-point inputs.

    Rounding explains ``FLOOR`` roundings of the larger of the gradients and the upstream gradients times the
    inputs' size (at least 1): a derivation may round its terms differently from torch's, and its terms are that
    large where they cancel (a cross-entropy whose probabilities are all but one-hot, logits around 1000 subtracted
    from their logsumexp). Or ``NOISE`` times ``noise``, where torch's own gradients move that much."""
    pairs = [(g, w) for g, w in zip(got, want) if isinstance(g, _Tensor) and g.dtype == torch.float64
             and g.shape == w.shape and w.numel()]
    if not pairs:
        return None
    size = max(_largest([w for _, w in pairs]), _largest(upstream) * max(1.0, _largest(inputs)))
    off = max(float((g - w).abs().max()) for g, w in pairs)
    allowed = max(FLOOR * ROUNDING * size, NOISE * _largest(noise))
    return (off, allowed) if off > allowed else None


def _largest(tensors: list) -> float:
    """The largest magnitude among ``tensors``' elements (0 for none)."""
    return max((float(t.detach().abs().max()) for t in tensors if isinstance(t, _Tensor) and t.numel()), default=0.0)


def inexact_message(off: float, allowed: float) -> str:
    """What ``inexact`` found, in words."""
    return (f"its gradients differ from torch's by {off:.1e} in float64, where rounding explains {allowed:.1e}: a "
            f"numerical approximation (finite differences, a fit) or a float32 step is not a derivation")
