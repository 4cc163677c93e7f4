"""The answers to the referee's requests: run in the examinee (``autograder.grading.running.judging.examinee``).

A request names one of the student's objects and gives plain data (``wire``): apply this Function
(call this function, build this Module) on these tensors, backward with these upstream gradients,
and under these transforms; record what it saves for backward; make a diagnosis record. The reply
is a dict of plain data, so a caller may add keys to it without breaking the referee, which reads
only the keys it knows. Every fact in a reply is measured here, with functions bound when the warm
process imported this module, before any student code ran: the checker's record makers
(``saved_record``, ``graph_names``, ``substituted``, the diagnoses, the transforms) and torch's autograd; a Function
class is used only if ``Function.apply`` is torch's own (no class of its own defines ``apply``, no
metaclass of its own, its graph node the one torch made for it). The tamper guard
watches this module's names and its functions' code (``autograder.grading.running.judging.tamper``), and in the
examinee it also looks at each checkpoint (``CHECKPOINT``): where an answer's code has returned and before
anything it did is read. So code that replaces what the grader then calls (``Watch.found``), and would put it
back on that first call, is found before it is called. The checkpoint is ``sys.audit`` of the event's name, both
bound as default arguments (a tuple no code can change in place; replacing it is refused by the examinee's
audit hook).
"""

from __future__ import annotations

import contextlib
import sys
import types

import torch

from autograder.grading.running.confinement.audit import CHECKPOINT
from autograder.grading.running.judging.autograd_use import Watch, graph_nodes
from autograder.grading.running.messages.wire import Unsupported, decode, encode
from autograder.student.checker import diagnoses
from autograder.student.checker.built_on import CHANGES, substituted
from autograder.student.checker.callables import argument_names, graph_names
from autograder.student.checker.devices import device_record
from autograder.student.checker.harness import as_data
from autograder.student.checker.kernels import backward_of, error_text, kernel_runs
from autograder.student.checker.messages import NOT_DONE, _student_line, not_done
from autograder.student.checker.overwrites import overwritten, second_backward, watch
from autograder.student.checker.pieces import replaced
from autograder.student.checker.references import _autograd_grad, _enable_grad, _Function, _Module, _Tensor, _zeros_like
from autograder.student.checker.saved import saved_record
from autograder.student.checker.transforms import KINDS, fresh, run_transform

_FUNCTION_TYPE = type(torch.autograd.Function)  # FunctionMeta: a class of it finds apply as torch defines it
_BACKWARD_CLASS = torch.autograd.function.BackwardCFunction
_DIAGNOSES = {"backward": lambda f, args, seed: diagnoses.backward_record(f, args, seed),
              "finite": lambda f, args, seed: diagnoses.finite_record(f, args),
              "size": lambda f, args, seed: {"largest": diagnoses.largest_tensor_in_backward(f, *args)},
              "dtype": lambda f, args, seed: diagnoses.dtype_record(f, args),
              "device": lambda f, args, seed: device_record(f, args)}


def answer(request: dict, namespace: dict, harnesses: dict | None = None) -> dict:
    """Apply the student's Function as asked and send back its outputs and gradients (or the error).

    ``namespace`` holds the student's objects; ``harnesses`` the instructor's functions ``check_with``
    runs them with (the same namespace when not given). A request with ``built_on`` is answered with the
    student's Functions it names replaced by another function of the same inputs
    (``autograder.student.checker.built_on``); one with ``pieces``, with the course's pieces in place of the
    student's launchers (``autograder.student.checker.pieces``)."""
    pieces = request.get("pieces") if isinstance(request, dict) else None
    if pieces is not None:  # the course's pieces in place of the student's launchers (checker.pieces.on_pieces)
        called: set = set()
        try:
            with replaced(namespace, [str(n) for n in list(pieces)[:8]], called):
                reply = answer({k: v for k, v in request.items() if k != "pieces"}, namespace, harnesses)
        except ValueError as error:
            return {"error": f"could not be checked: {error}"}
        return dict(reply, pieces_called=sorted(called)) if isinstance(reply, dict) else reply
    order = request.get("built_on") if isinstance(request, dict) else None
    if order is None:
        return _answer(request, namespace, harnesses)
    try:
        pieces = [namespace.get(name) for name in order["pieces"]]
        for name, piece in zip(order["pieces"], pieces):
            if not (isinstance(piece, type) and issubclass(piece, _Function)):
                return {"error": f"NameError: no torch.autograd.Function named {name} in your notebook"}
            if _not_genuine(piece):
                return {"error": _not_genuine(piece)}
        changes = substituted(pieces, (str(order["kind"]) if order.get("kind") in CHANGES else "values",
                                       int(order["seed"])))
    except (KeyError, TypeError, ValueError) as error:
        return {"error": f"could not be checked: a malformed request ({type(error).__name__})"}
    with changes:
        return _answer(request, namespace, harnesses)


def _answer(request: dict, namespace: dict, harnesses: dict | None, _audit=sys.audit, _checkpoint=CHECKPOINT) -> dict:
    """``answer`` itself, with the student's Functions as they are."""
    stage = None  # "forward" or "backward" while the student's Function runs, as check_function says it
    try:
        if request["kind"] == "kernel" and request.get("backward"):
            return _answer_backward_kernel(namespace.get(request["target"]), request)
        run = _target(request, namespace)
        if isinstance(run, str):
            return {"error": run}
        if request["kind"] == "diagnosis":
            return _answer_diagnosis(namespace[request["target"]], request)
        if request["kind"] in ("values", "with"):
            return _answer_data(run, request, namespace if harnesses is None else harnesses)
        if request["kind"] == "kernel":
            also = {str(k): [decode(a) for a in v] for k, v in dict(request.get("also") or {}).items()}
            return _answer_kernel(run, [decode(a) for a in request["args"]], request.get("strided") is not False,
                                  request.get("rows") is not False, also, request.get("watch") is True)
        if request["kind"] == "saved":
            return _answer_saved(namespace[request["target"]], [decode(a) for a in request["args"]], request["grad"],
                                 bool(request["inplace"]), request.get("swap"))
        leaves, call = _arguments(request)
        watching = bool(request.get("forbid_autograd"))
        stage = "forward"
        with _enable_grad(), (Watch() if watching else contextlib.nullcontext()) as in_forward:
            outputs = run(*call)
            _audit(_checkpoint)
        if isinstance(outputs, (types.GeneratorType, map, filter, zip)):  # an iterable result is read as a list
            outputs = list(outputs)
        outputs = tuple(outputs) if isinstance(outputs, (tuple, list)) else (outputs,)
        reply = {"error": None, "outputs": [_encode_output(o) for o in outputs], "grads": None,
                 "returned_inputs": [next((i for i, a in enumerate(call) if o is a), None) for o in outputs],
                 "graph": graph_names(outputs), "names": argument_names(namespace[request["target"]], len(call))}
        if watching:
            reply["autograd_in_backward"] = in_forward.found(graph_nodes(()))
        upstream = request["upstream"]
        if upstream is not None and len(upstream) == len(outputs):
            handed = [None if u is None else decode(u) for u in upstream]
            used = [(o, u) for o, u in zip(outputs, handed) if u is not None]
            wrt = [leaf for leaf, wanted in zip(leaves, request["grad"]) if wanted]
            # A Function's backward must leave its inputs, outputs, saved tensors and grad_output as they were, and
            # give the same gradients again on the same graph (checker.overwrites); any other answer, grad_output.
            node = _node_of(namespace[request["target"]], outputs) if request["kind"] == "apply" else None
            watched = watch(call, outputs, node, handed) if node is not None else watch((), (), None, handed)
            stage = "backward"
            with Watch() if watching else contextlib.nullcontext() as in_backward:
                grads = iter(_autograd_grad([o for o, _ in used], wrt, [u for _, u in used], allow_unused=True,
                                            retain_graph=node is not None))
                _audit(_checkpoint)
            if watching and not reply["autograd_in_backward"]:
                reply["autograd_in_backward"] = in_backward.found(graph_nodes(outputs))
            reply["overwritten"] = overwritten(watched)
            reply["grads"] = [_encode_output(next(grads)) if wanted else {"value": None} for wanted in request["grad"]]
            if request["kind"] == "apply" and not reply["overwritten"]:
                reply.update(_again(run, namespace[request["target"]], request, node, outputs, handed))
        stage = None
        reply["transforms"] = [_answer_transform(run, request["args"], t) for t in request.get("transforms") or []]
        return reply
    except Exception as error:  # the student's code failed: the referee says so in the test cell
        said = (NotImplementedError.__name__, NOT_DONE) if not_done(error) else (type(error).__name__, str(error)[:300])
        failed = {"error": f"{said[0]}: {said[1]}"}  # an exercise left as released, however wrapped: not done yet
        if stage is not None:  # where, as the notebook's own check_function says it
            failed.update(stage=stage, line=_student_line(error)[:300])
        return failed


def _arguments(request: dict) -> tuple[list, list]:
    """(the leaves, the arguments to call with) for an "apply" or "call" request: its tensors decoded, those it
    asks gradients for requiring grad, and copies of them in the call for an in-place Function."""
    args = [decode(a) for a in request["args"]]
    leaves = [a.requires_grad_(True) if wanted else a for a, wanted in zip(args, request["grad"])]
    return leaves, [a.clone() if wanted and request["inplace"] else a for a, wanted in zip(leaves, request["grad"])]


def _node_of(function, outputs):
    """The graph node ``function.apply`` made for ``outputs`` (of the class torch made for it), or None."""
    node = next((o.grad_fn for o in outputs if isinstance(o, _Tensor) and o.grad_fn is not None), None)
    return node if type(node) is vars(function).get("_backward_cls") else None


def _handed_in(outputs, handed) -> list:
    """The gradients backward gets, one per output, as autograd hands them: the upstream gradient of each output
    that has one, zeros for another tensor output, None for what is not a tensor."""
    return [u if u is not None else _zeros_like(o) if isinstance(o, _Tensor) else None for o, u in zip(outputs, handed)]


def _again(run, function, request: dict, node, outputs, handed, _audit=sys.audit, _checkpoint=CHECKPOINT) -> dict:
    """The Function's backward called again on the same graph (``overwrites.second_backward``), and what it
    returned as it returned it ("raw", before autograd casts or drops anything: its dtypes, a gradient for an integer
    tensor), from that call, or from a call on a graph of its own where the second call failed (a Function that
    frees what it kept: not judged, ``overwrites``' docstring)."""
    second = {"error": "no graph node of its own"} if node is None else second_backward(node, _handed_in(outputs, handed))
    raw = second.get("raw")
    if raw is None:
        try:
            _, call = _arguments(request)
            with _enable_grad():
                again = run(*call)
            again = tuple(again) if isinstance(again, (tuple, list)) else (again,)
            node = _node_of(function, again)
            raw = None if node is None else second_backward(node, _handed_in(again, handed)).get("raw")
        except Exception:  # noqa: BLE001 - forward failed this time: no record of what backward returns
            raw = None
    _audit(_checkpoint)
    encoded = lambda values: None if values is None else [_encode_output(r) for r in values]  # noqa: E731
    return {"second": {"raw": encoded(second["raw"])} if "raw" in second else {"error": str(second["error"])},
            "raw": encoded(raw)}


def _answer_diagnosis(function, request: dict, _audit=sys.audit, _checkpoint=CHECKPOINT) -> dict:
    """A diagnosis record of the student's Function (``autograder.student.checker.diagnoses``), as data."""
    make = _DIAGNOSES.get(request["what"])
    if make is None:
        return {"error": f"no diagnosis {request['what']!r}"}
    record = make(function, [decode(a) for a in request["args"]], int(request["seed"]))
    _audit(_checkpoint)
    return {"error": None, "record": encode(record)}


def _answer_data(run, request: dict, harnesses: dict, _audit=sys.audit, _checkpoint=CHECKPOINT) -> dict:
    """A plain result: the student's function on these arguments, or the notebook's harness run with its object.
    Where the exercise forbids autograd (``forbid_autograd``), the function runs under the profiler (a harness may use
    autograd itself: it does not)."""
    args = [decode(a) for a in request["args"]]
    watching = request["kind"] != "with" and bool(request.get("forbid_autograd"))
    if request["kind"] == "with":
        harness = harnesses.get(str(request["harness"]))
        if not isinstance(harness, types.FunctionType):
            return {"error": f"NameError: no function {request['harness']} in your notebook (it is given: run its cell)"}
        result = as_data(harness(run, *args))
    else:
        with Watch() if watching else contextlib.nullcontext() as watch:
            result = as_data(run(*args))
            _audit(_checkpoint)
    _audit(_checkpoint)
    try:
        reply = {"error": None, "result": encode(result)}
    except Unsupported:
        return {"error": f"TypeError: the result is a {type(result).__name__}, not plain data"}
    if watching:
        reply["autograd_in_backward"] = watch.found(graph_nodes(()))
    return reply


def _answer_kernel(run, args: list, strided: bool, rows: bool = True, also: dict | None = None, watch: bool = False,
                   _audit=sys.audit, _checkpoint=CHECKPOINT) -> dict:
    """check_kernel's runs of the student's launcher (``checker.kernels.kernel_runs``), as data: each a result or
    an error's text, the run on the arguments as given with its trace (``checker.launches``: the kernels launched,
    what they wrote, the torch operations outside them)."""
    runs = {}
    done = kernel_runs(run, args, strided, rows, also, watch)
    _audit(_checkpoint)
    for key, outcome in done.items():
        if "error" in outcome:
            runs[key] = {"error": error_text(outcome["error"])}
        else:
            try:
                runs[key] = {"result": encode(outcome["result"])}
            except Unsupported:
                runs[key] = {"error": f"TypeError: the result is a {type(outcome['result']).__name__}, not plain data"}
        for part in ("record", "launches"):
            if part in outcome:
                runs[key][part] = encode(outcome[part])
    return {"error": None, "runs": runs}


def _answer_backward_kernel(function, request: dict) -> dict:
    """check_backward_kernel's run: the student's Function's backward, traced (``checker.kernels.backward_of``)."""
    if not (isinstance(function, type) and issubclass(function, _Function)):
        return {"error": f"NameError: no torch.autograd.Function named {request['target']} in your notebook"}
    if _not_genuine(function):
        return {"error": _not_genuine(function)}
    return _answer_kernel(backward_of(function, int(request["backward"])), [decode(a) for a in request["args"]],
                          False, False)


def _answer_transform(run, args: list, transform: dict, _audit=sys.audit, _checkpoint=CHECKPOINT) -> dict:
    """The student's results under one of the referee's transforms (``autograder.student.checker.transforms``)."""
    try:
        if transform["kind"] not in KINDS:
            return {"error": f"no transform {transform['kind']!r}"}
        payload = {key: [decode(v) for v in values] for key, values in dict(transform["payload"]).items()}
        used = [int(k) for k in transform["used"]]
        results = run_transform(transform["kind"], run, fresh([decode(a) for a in args]), payload, used)
        _audit(_checkpoint)
        return {"results": [_encode_output(r) for r in results]}
    except Exception as error:  # the student's code failed under the transform
        return {"error": f"{type(error).__name__}: {str(error)[:300]}"}


def _answer_saved(function, args: list, grad: list, inplace: bool, swap: dict | None,
                  _audit=sys.audit, _checkpoint=CHECKPOINT) -> dict:
    """What the Function saved for backward, what it keeps elsewhere and, given ``swap`` (other tensors in place of
    what it saved, an upstream gradient), what its backward computes (``autograder.check_saved``'s record), as data."""
    leaves = [a.requires_grad_(True) if wanted else a for a, wanted in zip(args, grad)]
    swap_in = upstream = None
    if swap is not None:
        swap_in = [decode(t) for t in swap["saved"]]
        upstream = [None if u is None else decode(u) for u in swap["upstream"]]
    record = saved_record(function, leaves, inplace, swap_in, upstream)
    _audit(_checkpoint)
    found = record["swap"]
    if found is not None and found.get("error") is None:
        found = {key: [None if g is None else _encode_output(g) for g in found[key]] for key in ("own", "swapped")}
    return {"error": None, "saved": [_encode_output(t) for t in record["saved"]],
            "kept": [[str(what), str(where)] for what, where in record["kept"]], "swap": found,
            "names": [str(n) for n in record["names"]]}


def _target(request: dict, namespace: dict):
    """What to call for ``request``: a Function's ``apply``, a callable, or a new instance of a Module
    class; or why there is none."""
    name, found = request["target"], namespace.get(request["target"])
    is_function = isinstance(found, type) and issubclass(found, _Function)
    if request["kind"] == "with" and found is not None:
        return found
    if request["kind"] in ("apply", "saved", "diagnosis"):
        if not is_function:
            return f"NameError: no torch.autograd.Function named {name} in your notebook"
        return _not_genuine(found) or found.apply
    if isinstance(found, type) and issubclass(found, _Module):
        return found()
    if callable(found) and not is_function and not isinstance(found, type):
        return found
    return f"NameError: no function or nn.Module class named {name} in your notebook"


def _not_genuine(function: type) -> str | None:
    """Why torch would not run ``function`` as a Function (another metaclass, its own ``apply``, a graph node
    that is not the one torch made for it), or None: then ``function.apply`` is torch's own."""
    if type(function) is not _FUNCTION_TYPE:
        return f"TypeError: {function.__name__} is not made by torch.autograd.Function's own metaclass"
    for owner in function.__mro__:
        if "apply" in vars(owner) and not owner.__module__.startswith("torch"):
            return (f"TypeError: {function.__name__} defines its own apply; a Function is used through "
                    f"torch.autograd.Function.apply, which calls forward and backward")
    node = vars(function).get("_backward_cls")
    if not (isinstance(node, type) and issubclass(node, _BACKWARD_CLASS) and vars(node).get("_forward_cls") is function):
        return f"TypeError: {function.__name__}'s graph node is not the one torch made for it"
    return None


def _encode_output(value) -> dict:
    try:
        return encode(value)
    except Unsupported:
        return {"other": type(value).__name__}
