"""The student's side of the referee: runs in the student's process and answers the referee's requests.

A request names one of the notebook's objects and gives plain data (``wire``): apply this Function
(call this function, build this Module) on these tensors, backward with these upstream gradients,
and under these transforms; or record what it saves for backward. The reply is plain data too. The
student's code can replace this module, and lie: a lie must then match, on inputs it cannot
predict, what the referee computes with the reference, which needs the answer.
"""

from __future__ import annotations

import types

from autograder.grading.running.wire import Unsupported, decode, encode


def answer(request: dict, namespace: dict) -> dict:
    """Apply the student's Function as asked and send back its outputs and gradients (or the error)."""
    import torch

    from autograder.student.checker.callables import argument_names, graph_names

    try:
        run = _target(request, namespace)
        if isinstance(run, str):
            return {"error": run}
        if request["kind"] == "diagnosis":
            return _answer_diagnosis(namespace[request["target"]], request)
        if request["kind"] in ("values", "with"):
            return _answer_data(run, request, namespace)
        if request["kind"] == "saved":
            return _answer_saved(namespace[request["target"]], [decode(a) for a in request["args"]], request["grad"],
                                 bool(request["inplace"]))
        args = [decode(a) for a in request["args"]]
        leaves = [a.requires_grad_(True) if wanted else a for a, wanted in zip(args, request["grad"])]
        call = [a.clone() if wanted and request["inplace"] else a for a, wanted in zip(leaves, request["grad"])]
        with torch.enable_grad():
            outputs = run(*call)
        if isinstance(outputs, (types.GeneratorType, map, filter, zip)):  # an iterable result is read as a list
            outputs = list(outputs)
        outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
        reply = {"error": None, "outputs": [_encode_output(o) for o in outputs], "grads": None,
                 "returned_inputs": [next((i for i, a in enumerate(call) if o is a), None) for o in outputs],
                 "graph": graph_names(outputs), "names": argument_names(namespace[request["target"]], len(args))}
        upstream = request["upstream"]
        if upstream is not None and len(upstream) == len(outputs):
            used = [(o, decode(u)) for o, u in zip(outputs, upstream) if u is not None]
            wrt = [leaf for leaf, wanted in zip(leaves, request["grad"]) if wanted]
            kept = [u.clone() for _, u in used]
            grads = iter(torch.autograd.grad([o for o, _ in used], wrt, [u for _, u in used], allow_unused=True))
            reply["upstream_modified"] = any(not torch.equal(u, k) for (_, u), k in zip(used, kept))
            reply["grads"] = [_encode_output(next(grads)) if wanted else {"value": None} for wanted in request["grad"]]
        reply["transforms"] = [_answer_transform(run, request["args"], t) for t in request.get("transforms") or []]
        return reply
    except Exception as error:  # the student's code failed: the referee says so in the test cell
        return {"error": f"{type(error).__name__}: {str(error)[:300]}"}


def _answer_diagnosis(function, request: dict) -> dict:
    """A diagnosis record of the student's Function (``autograder.student.checker.diagnoses``), as data."""
    from autograder.student.checker import diagnoses

    args, what = [decode(a) for a in request["args"]], request["what"]
    if what == "backward":
        record = diagnoses.backward_record(function, args, int(request["seed"]))
    elif what == "finite":
        record = diagnoses.finite_record(function, args)
    elif what == "size":
        record = {"largest": diagnoses.largest_tensor_in_backward(function, *args)}
    elif what == "dtype":
        record = diagnoses.dtype_record(function, args)
    elif what == "device":
        from autograder.student.checker.devices import device_record

        record = device_record(function, args)
    else:
        return {"error": f"no diagnosis {what!r}"}
    return {"error": None, "record": encode(record)}


def _answer_data(run, request: dict, namespace: dict) -> dict:
    """A plain result: the student's function on these arguments, or the notebook's harness run with its object."""
    from autograder.student.checker.harness import as_data

    args = [decode(a) for a in request["args"]]
    if request["kind"] == "with":
        harness = namespace.get(str(request["harness"]))
        if not isinstance(harness, types.FunctionType):
            return {"error": f"NameError: no function {request['harness']} in your notebook (it is given: run its cell)"}
        result = as_data(harness(run, *args))
    else:
        result = as_data(run(*args))
    try:
        return {"error": None, "result": encode(result)}
    except Unsupported:
        return {"error": f"TypeError: the result is a {type(result).__name__}, not plain data"}


def _answer_transform(run, args: list, transform: dict) -> dict:
    """The student's results under one of the referee's transforms (``autograder.student.checker.transforms``)."""
    from autograder.student.checker.transforms import KINDS, fresh, run_transform

    try:
        if transform["kind"] not in KINDS:
            return {"error": f"no transform {transform['kind']!r}"}
        payload = {key: [decode(v) for v in values] for key, values in dict(transform["payload"]).items()}
        used = [int(k) for k in transform["used"]]
        results = run_transform(transform["kind"], run, fresh([decode(a) for a in args]), payload, used)
        return {"results": [_encode_output(r) for r in results]}
    except Exception as error:  # the student's code failed under the transform
        return {"error": f"{type(error).__name__}: {str(error)[:300]}"}


def _answer_saved(function, args: list, grad: list, inplace: bool) -> dict:
    """What the Function saved for backward (``autograder.check_saved``'s record), as data."""
    from autograder.student.checker.saved import saved_record

    leaves = [a.requires_grad_(True) if wanted else a for a, wanted in zip(args, grad)]
    _, saved, attributes = saved_record(function, [a * 1 if inplace and wanted else a for a, wanted in zip(leaves, grad)])
    return {"error": None, "saved": [_encode_output(t) for t in saved], "attributes": [str(a) for a in attributes]}


def _target(request: dict, namespace: dict):
    """What to call for ``request``: a Function's ``apply``, a callable, or a new instance of a Module
    class; or why there is none."""
    import torch

    name, found = request["target"], namespace.get(request["target"])
    is_function = isinstance(found, type) and issubclass(found, torch.autograd.Function)
    if request["kind"] == "with" and found is not None:
        return found
    if request["kind"] in ("apply", "saved", "diagnosis"):
        return found.apply if is_function else f"NameError: no torch.autograd.Function named {name} in your notebook"
    if isinstance(found, type) and issubclass(found, torch.nn.Module):
        return found()
    if callable(found) and not is_function and not isinstance(found, type):
        return found
    return f"NameError: no function or nn.Module class named {name} in your notebook"


def _encode_output(value) -> dict:
    try:
        return encode(value)
    except Unsupported:
        return {"other": type(value).__name__}


