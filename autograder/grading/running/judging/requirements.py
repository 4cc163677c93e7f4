"""How the referee judges a check by its exercise's requirement (``requires``; ``judges.Judges._queue``).

A requirement (``autograder.student.checker.contracts.Contract``) adds to a check's request what the examinee must
observe, and to its verdict what that observation means: with ``autograd=False`` the examinee reports what autograd
ran while the answer cells that share state with the object ran (``autograd_in_cells``) and, but for a harness's
run, while the check ran the object (``autograd_in_backward``); with ``exact=True`` the gradients must equal torch's
to rounding (``contracts.inexact``), the reference's gradients and their rounding measured here before any reply.
A broken requirement reads "This exercise requires <its words>, but <what the code did>".
"""

from __future__ import annotations

from autograder.grading.running.judging.replies import as_found, unanswered
from autograder.grading.running.messages.wire import decode


def judged_by(name: str, contract, request: dict, compare, exact: tuple | None):
    """``compare`` (what judges ``request``'s reply) judged by ``contract`` too; ``request`` is amended with what
    the examinee must observe. ``exact``: (reference, leaves, grad, upstream) where the check compares gradients."""
    import torch

    from autograder.student.checker.contracts import (broken, inexact, inexact_message, reference_gradients,
                                                      rounding_noise)

    if not contract.autograd:
        request["autograd_cells"] = True
        if request["kind"] != "with":  # (a harness may run autograd itself: only the cells are watched)
            request["forbid_autograd"] = True
    reference, leaves, grad, upstream = exact if exact is not None else (None, [], [], [])
    used = [u for u in upstream if u is not None]
    exactly = contract.exact and bool(used)
    if exactly:
        want = reference_gradients(reference, leaves, grad, upstream)
        noise = rounding_noise(reference, leaves, grad, upstream)
        inputs = [a for a in leaves if isinstance(a, torch.Tensor) and a.is_floating_point()]

    def judged(reply) -> str | None:
        said = _autograd_seen(name, contract, request, reply)
        if said:
            return as_found(name, broken(contract.requirement, said), named=True)
        problem = compare(reply)
        if problem is None and exactly:
            try:
                got = [decode(g) for g, wanted in zip(reply["grads"], grad) if wanted]
            except (KeyError, TypeError, ValueError, AttributeError) as error:
                return as_found(name, f"could not be checked: a malformed answer ({type(error).__name__})")
            found = inexact([g if isinstance(g, torch.Tensor) else torch.zeros_like(w) for g, w in zip(got, want)],
                            want, noise, used, inputs)
            if found:
                problem = as_found(name, broken(contract.requirement, inexact_message(*found)), named=True)
        return problem

    return judged


def _autograd_seen(name: str, contract, request: dict, reply) -> str | None:
    """What the examinee saw of autograd that ``contract`` (``autograd=False``) forbids: while it ran the answer cells,
    or while this check ran ``name``; None where it saw none (or the reply holds no answer: the check says why)."""
    if contract.autograd or not isinstance(reply, dict):
        return None
    answered = reply.get("error") is None
    cells = reply.get("autograd_in_cells")  # (the examinee's answers to a request that asks for it: Answers.reply)
    if cells:
        return _printable(cells)
    if not (answered and request.get("forbid_autograd")) or unanswered(reply):
        return None
    used = reply.get("autograd_in_backward", "no record of it came back")
    return used and f"when the grader's check ran {name}, {_printable(used)}"


def _printable(text, size: int = 500) -> str:
    """A string of the examinee's, printable and at most ``size`` characters, for a message."""
    return "".join(c for c in str(text)[:size] if c.isprintable())
