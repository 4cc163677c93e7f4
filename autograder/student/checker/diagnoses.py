"""Diagnoses for derived backwards (assignment 05): which known mistake a wrong gradient is, where inf/NaN
come from, whether backward builds a whole Jacobian, whether float32 stays float32.

Each check is split in two: a *record* made where the student's Function runs (plain data: what
backward returned, whether values are finite, the size of backward's largest tensor, dtypes), and a
*judgement* of that record. In the student's own process both run here; in grading the referee asks
the student's process for the record and judges it itself (``autograder.grading.running.judging.referee``).
``explain_known_mistakes`` and ``explain_non_finite`` only ever explain: a Function that matches no
mistake, or stays finite, passes them, and ``check_function`` decides its values.
"""

from __future__ import annotations

import inspect
import re

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from autograder.student.checker.references import CheckFailure, _as_float64, _draw


def float64_leaves(args) -> list:
    """Leaves in the checker's precision (float64; float32 on mps) for the float tensors of ``args``, on their
    device."""
    return [_as_float64(a).requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args]


def input_names(function) -> list[str]:
    return list(inspect.signature(function.forward).parameters)[1:]  # without ctx


def backward_record(function, args, seed: int) -> dict:
    """What ``function``'s backward node returns for a seeded random grad_output (or the error it raised)."""
    leaves = float64_leaves(args)
    record = {"names": input_names(function)}
    try:
        output = function.apply(*leaves)
        grad_output = _draw(output.shape, torch.Generator().manual_seed(seed), output.dtype, output.device)
        with torch.no_grad():
            returned = output.grad_fn.apply(grad_output)
    except Exception as error:
        return dict(record, error=f"{type(error).__name__}: {error}"[:1000])
    returned = returned if isinstance(returned, tuple) else (returned,)
    return dict(record, grad_output=grad_output, returned=[r.detach() if isinstance(r, torch.Tensor) else None
                                                            for r in returned])


def mistake_found(name: str, record: dict, args, mistakes: dict) -> str | None:
    """The explanation of the first known mistake the record matches (or of a sum_to_size error), else None."""
    names, leaves = record["names"], float64_leaves(args)
    if "error" in record:
        return _sum_to_size_problem(name, record["error"], names, leaves)
    inputs = [a.detach() if isinstance(a, torch.Tensor) else a for a in leaves]
    returned = record["returned"]
    for description, wrong in mistakes.items():
        for input_name, wrong_gradient in wrong(*inputs, record["grad_output"]).items():
            position = names.index(input_name) if input_name in names else len(returned)
            got = returned[position] if position < len(returned) else None
            if (isinstance(got, torch.Tensor) and got.shape == wrong_gradient.shape
                    and torch.allclose(got.to(torch.float64), wrong_gradient, rtol=1e-6, atol=1e-9)):
                return f"{name}: the gradient for `{input_name}` is wrong: {description}"
    return None


def _sum_to_size_problem(name: str, error: str, names: list[str], leaves) -> str | None:
    # sum_to_size fails with "size {[target]} is not expandable to size {[got]}": which input, and why?
    match = re.search(r"size \{\[([\d, ]*)\]\} is not expandable to size \{\[([\d, ]*)\]\}", error)
    if not match:
        return None
    target, got = ([int(n) for n in group.split(",") if n.strip()] for group in match.groups())
    owners = [n for n, a in zip(names, leaves) if isinstance(a, torch.Tensor) and list(a.shape) == target]
    whose = f"the gradient for `{owners[0]}`" if len(owners) == 1 else "a gradient"
    swapped = len(got) >= 2 and got[-2:] == target[-2:][::-1] and got[-2] != got[-1]
    why = "its last two dimensions are swapped: the matrix product is transposed. " if swapped else ""
    return (f"{name}: {whose} is wrong: backward computed shape {got}, which sum_to_size cannot reduce "
            f"to the input's shape {target}; {why}Write the shape next to each product (dimension analysis, Section 3).")


def explain_known_mistakes(function, args, mistakes, seed=0) -> None:
    """Fail with the mistake's explanation if backward returns what a known wrong derivation gives.

    ``mistakes``: {description: wrong(*inputs, grad_output) -> {input name: that wrong gradient}}."""
    problem = mistake_found(function.__name__, backward_record(function, args, seed), args, mistakes)
    if problem:
        raise CheckFailure(problem)


def finite_record(function, args) -> dict:
    """Whether forward's output, and each gradient (for a random grad_output), is finite."""
    names, leaves = input_names(function), float64_leaves(args)
    output = function.apply(*leaves)
    record = {"output": bool(torch.isfinite(output).all()), "gradients": {}}
    if record["output"]:
        wanted = [(n, a) for n, a in zip(names, leaves) if isinstance(a, torch.Tensor) and a.requires_grad]
        grads = torch.autograd.grad(output, [a for _, a in wanted], torch.randn_like(output), allow_unused=True)
        record["gradients"] = {n: bool(g is None or torch.isfinite(g).all()) for (n, _), g in zip(wanted, grads)}
    return record


def non_finite_problem(name: str, record: dict, situation: str, forward_advice: str, backward_advice: str) -> str | None:
    if not record["output"]:
        return f"{name}'s forward gives inf or NaN {situation}. {forward_advice}"
    for input_name, finite in record["gradients"].items():
        if not finite:
            return f"{name}'s backward gives inf or NaN in the gradient for `{input_name}` {situation}. {backward_advice}"
    return None


def explain_non_finite(function, args, situation, forward_advice, backward_advice) -> None:
    """Fail, saying whether forward or backward made it, if the Function gives inf or NaN on ``args``."""
    problem = non_finite_problem(function.__name__, finite_record(function, args), situation, forward_advice,
                                 backward_advice)
    if problem:
        raise CheckFailure(problem)


class _LargestTensor(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in tree_flatten(out)[0]:
            if isinstance(o, torch.Tensor):
                self.numel = max(self.numel, o.numel())
        return out


def largest_tensor_in_backward(function, *args) -> int:
    """The number of elements of the largest tensor backward creates, for a random grad_output."""
    output = function.apply(*float64_leaves(args))
    grad_output = torch.randn_like(output)
    with _LargestTensor() as log, torch.no_grad():
        output.grad_fn.apply(grad_output)
    return log.numel


def backward_size_problem(name: str, largest: int, below: int) -> str | None:
    if largest < below:
        return None
    return (f"{name}'s backward creates a tensor of {largest:,} elements (the limit here is {below:,}): it builds a "
            f"whole Jacobian. Compute the vector-Jacobian product directly, with a row sum.")


def check_backward_size(function, *args, below: int) -> None:
    """Fail if backward creates a tensor of ``below`` elements or more (a Jacobian, where a VJP will do)."""
    problem = backward_size_problem(function.__name__, largest_tensor_in_backward(function, *args), below)
    if problem:
        raise CheckFailure(problem)


def dtype_record(function, args) -> dict:
    """The dtypes of forward's float outputs and of the float inputs' gradients, for float inputs as given."""
    leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
              for a in args]
    outputs = function.apply(*leaves)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    floats = [o for o in outputs if isinstance(o, torch.Tensor) and o.is_floating_point()]
    wanted = [a for a in leaves if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = torch.autograd.grad([o for o in floats if o.requires_grad], wanted,
                                [torch.randn_like(o) for o in floats if o.requires_grad], allow_unused=True)
    return {"outputs": [str(o.dtype) for o in floats], "gradients": [str(g.dtype) for g in grads if g is not None]}


def dtype_problem(name: str, record: dict, args) -> str | None:
    dtypes = {str(a.dtype) for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()}
    changed = [d for d in record["outputs"] + record["gradients"] if d not in dtypes]
    if not changed:
        return None
    return (f"{name} should keep {' and '.join(sorted(dtypes))} inputs in that dtype: an output or gradient is "
            f"{changed[0]}. Make new tensors with the input's dtype (torch.zeros_like, x.new_tensor).")


def check_keeps_dtype(function, *args) -> None:
    """Fail if float inputs of one dtype (float32, say) give outputs or gradients of another."""
    problem = dtype_problem(function.__name__, dtype_record(function, args), args)
    if problem:
        raise CheckFailure(problem)
