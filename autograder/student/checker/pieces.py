"""``on_pieces``: judge an exercise built on earlier ones with the course's own pieces in place of the student's.

Assignments 10 and 11 build up: a Function (``BiasGELU``, ``TritonLayerNorm``, ``FlashAttention``) and custom
operators call the launchers of the exercises before them. Checked through the student's own launchers, one mistake in
a forward kernel would fail every exercise after it. In ``with on_pieces(FlashAttention, "attention_forward",
"attention_backward"):`` each named launcher is replaced, for the block, by the course's reference for it
(``REFERENCES``: torch code, no autograd, the same results and layouts a right launcher gives, a backward computed from
what forward saved, as a FlashAttention backward is): the checks inside then judge what that exercise asks (what the
Function saves, how it calls the launchers, what it returns, that it compiles) and nothing before it; the launchers are
judged in their own exercises.

In the notebook the launchers are replaced in the namespace the object was defined in (the notebook's). In grading,
the referee's ``on_pieces`` (``judges._OnPieces``) makes each check inside the block ask for the pieces, and, where
backward ran, that the student's object called every one of them; the examinee replaces them in the answers'
namespace while it answers (``replaced``), noting which were called.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings

import torch

from autograder.student.checker.attention_math import backward_from_saved as attention_backward
from autograder.student.checker.attention_math import forward_reference
from autograder.student.checker.layer_norm import course_layer_norm_backward, course_layer_norm_forward
from autograder.student.checker.references import _Function

# --------------------------------------------------------------------------------------------
# The course's pieces: what a right launcher returns, in torch


def _gelu_parts(x, bias):
    h = (x.to(torch.float64) + bias.to(torch.float64))
    cdf = 0.5 * (1 + torch.erf(h / math.sqrt(2)))
    return h, cdf


def course_bias_gelu_forward(x, bias):
    """``gelu(x + bias)`` in x's dtype, contiguous."""
    h, cdf = _gelu_parts(x, bias)
    return (h * cdf).to(x.dtype).contiguous()


def course_bias_gelu_backward(x, bias, grad_output):
    """(grad_x, grad_bias) of ``gelu(x + bias)``, derived (no autograd)."""
    h, cdf = _gelu_parts(x, bias)
    grad_h = grad_output.to(torch.float64) * (cdf + h * torch.exp(-0.5 * h * h) / math.sqrt(2 * math.pi))
    return grad_h.to(x.dtype).contiguous(), grad_h.reshape(-1, bias.numel()).sum(0).to(bias.dtype)


def course_attention_forward(q, k, v, causal: bool = False):
    """(o, lse) of attention, o in q's dtype, lse in float32 (float64 for float64 inputs)."""
    return tuple(t.contiguous() for t in forward_reference(q, k, v, causal))


# Each launcher of 10 and 11, by its name there. (The course's pieces are named apart from the answers: the
# students' edition defines no function of an answer's name.)
REFERENCES = {"bias_gelu_forward": course_bias_gelu_forward, "bias_gelu_backward": course_bias_gelu_backward,
              "bias_gelu_backward_atomic": course_bias_gelu_backward, "layer_norm_forward": course_layer_norm_forward,
              "layer_norm_backward": course_layer_norm_backward, "attention_forward": course_attention_forward,
              "attention_backward": attention_backward}


# --------------------------------------------------------------------------------------------
# Replacing the student's pieces


@contextlib.contextmanager
def replaced(namespace: dict, names, called: set | None = None):
    """Within the block, each of ``names`` in ``namespace`` is the course's piece of that name (put back after);
    the name of each piece called is added to ``called``."""
    known(names)
    missing = object()
    before = {n: namespace.get(n, missing) for n in names}

    def counted(name: str):
        piece = REFERENCES[name]

        @functools.wraps(piece)
        def call(*args, **kwargs):
            if called is not None:
                called.add(name)
            _needs_memory(name, args)
            return piece(*args, **kwargs)

        call.__name__ = call.__qualname__ = name  # named as the launcher it stands in for
        return call

    try:
        namespace.update({n: counted(n) for n in names})
        yield
    finally:
        for n, value in before.items():
            if value is missing:
                namespace.pop(n, None)
            else:
                namespace[n] = value


def _needs_memory(name: str, args) -> None:
    """Raise as a kernel launch does on tensors without memory (the fake tensors torch.compile and opcheck trace with):
    a piece stands in for a launcher, so a launch where an operator's body belongs is still found."""
    for tensor in args:
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    address = tensor.untyped_storage().data_ptr()
            except Exception:  # noqa: BLE001 - a tensor whose storage cannot be reached has none to launch on
                address = 0
            if not address or tensor.device.type == "meta":
                raise RuntimeError(f"Cannot access data pointer of a FakeTensor: {name} (the course's, in place of "
                                   f"yours) launches a kernel, which needs the tensors' memory")


def known(names) -> list[str]:
    """``names``, each a piece of the course's (else ValueError)."""
    unknown = [n for n in names if n not in REFERENCES]
    if unknown or not names:
        raise ValueError(f"no piece of the course is named {unknown[0]!r}" if unknown else "on_pieces needs a piece")
    return [str(n) for n in names]


def _home(target) -> dict:
    """The namespace ``target`` (a Function, a function, a custom operator) was defined in."""
    for found in (getattr(target, "forward", None), getattr(target, "_init_fn", None), target):
        names = getattr(found, "__globals__", None)
        if isinstance(names, dict):
            return names
    raise TypeError(f"on_pieces cannot find where {getattr(target, '__name__', target)!r} was defined")


def on_pieces(target, *names: str):
    """``with on_pieces(FlashAttention, "attention_forward", "attention_backward"):`` runs the checks inside the block
    with the course's pieces ``names`` in place of the student's launchers, in the namespace ``target`` (a Function,
    a function, a custom operator) was defined in. See the module's docstring."""
    return replaced(_home(target), tuple(known(names)))
