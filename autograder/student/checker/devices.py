"""``check_device``: does a Function keep every tensor it makes on its inputs' device? Checked without a GPU.

``check_device(F, *args)`` runs forward and backward on copies of ``args`` on the ``meta`` device:
tensors with shapes and dtypes but no values, which PyTorch keeps apart from CPU tensors as it keeps
CUDA tensors apart. A Function that makes a tensor without ``device=`` (``torch.zeros(x.shape)`` in
backward) then mixes a CPU tensor with meta ones, or returns one, and fails here as it would on a
GPU, on a machine that has none. Meta tensors have no values, so this proves where tensors live,
not that the math is right (``check_function`` checks that). A Function whose code needs values
(``.item()``, ``if tensor.any():``, ``x[x > 0]``) cannot run on meta tensors: that says nothing
about devices, and the check passes.

``device_record`` is the measuring half, made where the Function runs (plain data); ``device_problem``
judges it. The grader's referee asks the student's process for the record and judges it itself
(``autograder.grading.running.judging.judges``), as here.
"""

from __future__ import annotations

from autograder.student.checker.messages import MET_THERE, _device_mistake, _student_line, _wrong_device
from autograder.student.checker.references import (
    _as_tuple, CheckFailure, _device, _enable_grad, _graph_node, _is_float_tensor, _no_grad, _ones_like, _Tensor,
)


def device_record(function, args, device="meta") -> dict:
    """Forward, then backward (the graph node called directly), on copies of ``args`` on ``device``.

    Returns plain data: the device, the stage that raised and what it raised (with the student's
    line), the devices of forward's tensor outputs and of the gradients backward returned.
    """
    call = [a.detach().to(device).requires_grad_(_is_float_tensor(a)) if isinstance(a, _Tensor) else a
            for a in args]
    device = next((a.device for a in call if isinstance(a, _Tensor)), _device(device))  # "cuda" as cuda:0
    record = {"device": str(device), "stage": None, "error": None, "line": "", "outputs": [], "gradients": []}
    stage = "forward"
    try:
        with _enable_grad():
            outputs = _as_tuple(function.apply(*call))
        record["outputs"] = [str(o.device) for o in outputs if isinstance(o, _Tensor)]
        node = _graph_node(outputs)
        if node is not None:
            stage = "backward"
            grads_in = [_ones_like(o, device=device) if isinstance(o, _Tensor) else None for o in outputs]
            with _no_grad():
                returned = node.apply(*grads_in)
            record["gradients"] = [str(g.device) if isinstance(g, _Tensor) else None for g in _as_tuple(returned)]
    except Exception as error:  # noqa: BLE001 - the student's code raised: the record says what
        record.update(stage=stage, error=f"{type(error).__name__}: {error}"[:600],
                      line=_student_line(error, MET_THERE))
    return record


def device_problem(name: str, record: dict, device="meta") -> str | None:
    """What ``name`` did wrong with devices in ``record`` (a ``device_record`` made on ``device``), or None."""
    device = _device(device)
    if record["error"]:
        made = _device_mistake(record["error"], device)
        return f"{name}: {_wrong_device(record['stage'], made, device)}{record['line']}" if made else None
    for stage, devices in (("forward", record["outputs"]), ("backward", record["gradients"])):
        stray = [d for d in devices if d is not None and not _same_device(_device(d), device)]
        if stray:
            return f"{name}: {_wrong_device(stage, stray[0], device, verb='returned')}"
    return None


def _same_device(made, device) -> bool:
    """Whether a tensor on ``made`` is on ``device`` ("cuda" stands for any CUDA device's index)."""
    return made.type == device.type and (made.index is None or device.index is None or made.index == device.index)


def check_device(function, *args, device="meta") -> None:
    """Fail if ``function`` (a Function class) makes a tensor off its inputs' device (see the module docstring).

    ``device``: where to run it; ``"meta"`` works on any machine, ``"cuda"`` on one with a GPU.
    """
    from autograder.student.checker.core import _check_is_function_class

    name = getattr(function, "__name__", repr(function))
    _check_is_function_class(function, name)
    problem = device_problem(name, device_record(function, args, device), device)
    if problem:
        raise CheckFailure(problem)
