"""What backward must leave as it found it, and backward run a second time on the same graph.

A backward computes new tensors. It must not write over what it is handed or can reach: the tensors forward
received (the caller still holds them), forward's outputs, what forward saved for backward (``ctx.saved_tensors``)
and grad_output (autograd's, shared with other branches of the graph). ``watch`` records each of them before
backward runs (its version counter and a copy of its values), one record per tensor, so a tensor that is both an
input and saved is named once; ``overwritten`` says which of them backward changed, and how: in place (an
in-place operation bumps the version counter, which is what autograd checks when backward reads a saved tensor)
or through memory (the values changed and the counter did not: a Triton kernel's ``tl.store`` into the tensor's
pointer, or a write through ``.data``, which autograd never sees).

``second_backward`` calls the Function's graph node once more with the same upstream gradients: a second
backward through the same graph, as ``retain_graph=True`` allows and as ``torch.autograd.gradcheck`` runs to find a
backward that is "not reentrant". Its gradients must be right again. A second call that raises is not judged:
autograd frees a graph's saved tensors after one backward unless ``retain_graph=True`` ("Trying to backward through
the graph a second time"), nothing in ``torch.autograd.Function``'s documentation asks a backward to run twice, and
``@once_differentiable`` is about differentiating backward (``create_graph=True``), not calling it twice; so a
Function that frees what it kept, or raises on a second call, is not wrong for that. A second call that returns
None where the first gave a gradient is not judged either (it freed what it needed, and said so).

The same functions run in the student's process (``check_function``) and in the grader's examinee
(``autograder.grading.running.judging.answer``), and the same words say what they found in both
(``overwrite_problem``, ``second_problem``): the referee words the examinee's record, ``check_function`` its own.
"""

from __future__ import annotations

from autograder.student.checker.messages import _difference, _output_label
from autograder.student.checker.patterns import _tidied
from autograder.student.checker.references import _close, _equal, _no_grad, _Tensor

# What a record's roles are: ("input", i), ("output", k), ("saved", j), ("grad_output", k).
ROLES = ("input", "output", "saved", "grad_output")


def watch(inputs, outputs, node, upstream) -> list[dict]:
    """The tensors backward must leave alone, as they are now: forward's ``inputs`` (its arguments as it received
    them), its ``outputs``, what ``node`` (its graph node, or None) holds in ``saved_tensors``, and the ``upstream``
    gradients about to be handed to backward (None where there is none); one record per tensor, with every role
    it plays."""
    records: dict = {}
    for kind, values in (("input", inputs), ("output", outputs), ("saved", _saved(node)), ("grad_output", upstream)):
        for index, value in enumerate(values):
            if not isinstance(value, _Tensor):
                continue
            key = _identity(value)
            if key not in records:
                try:
                    copy = value.detach().clone()
                except Exception:  # noqa: BLE001 - a tensor that cannot be copied is not watched
                    continue
                records[key] = {"tensor": value, "version": _version(value), "copy": copy, "roles": []}
            records[key]["roles"].append([kind, index])
    return list(records.values())


def overwritten(watched: list[dict]) -> list[dict]:
    """Which of the ``watch``ed tensors changed since: ``[{"roles": [[kind, index], ...], "in_place": bool}]``."""
    found = []
    for record in watched:
        tensor = record["tensor"]
        in_place = _version(tensor) != record["version"]
        if in_place or not same_values(tensor, record["copy"]):
            found.append({"roles": [list(role) for role in record["roles"]], "in_place": in_place})
    return found


def second_backward(node, handed) -> dict:
    """The node's backward called again with copies of the gradients ``handed`` to it the first time:
    ``{"raw": what it returned, one entry per forward argument}``, or ``{"error": "Type: message"}``."""
    try:
        with _no_grad():
            raw = node.apply(*[g.clone() if isinstance(g, _Tensor) else g for g in handed])
    except Exception as error:  # noqa: BLE001 - a second call may fail: not judged (module docstring)
        return {"error": f"{type(error).__name__}: {str(error)[:300]}"}
    raw = raw if isinstance(raw, tuple) else (raw,)
    return {"raw": [r.detach() if isinstance(r, _Tensor) else r for r in raw]}


def _saved(node) -> tuple:
    """What the graph node holds for backward (its ``saved_tensors``), or nothing where that cannot be read (it
    saved nothing, or a saved tensor was already changed: backward will say so itself)."""
    try:
        saved = getattr(node, "saved_tensors", ()) if node is not None else ()
    except Exception:  # noqa: BLE001 - unreadable saved tensors: backward raises torch's own error on them
        return ()
    return tuple(saved) if isinstance(saved, (tuple, list)) else ()


def _identity(tensor) -> tuple:
    """The same memory seen the same way: an input and the saved copy of it, an output and its saved self."""
    try:
        return tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tuple(tensor.stride()), str(tensor.device)
    except Exception:  # noqa: BLE001 - a tensor without plain memory: itself
        return (id(tensor),)


def _version(tensor):
    try:
        return tensor._version
    except Exception:  # noqa: BLE001 - a tensor without a version counter (inference mode)
        return None


def same_values(tensor, copy) -> bool:
    """Whether ``tensor`` still holds ``copy``'s values (NaN where NaN was); True where they cannot be compared (a
    sparse tensor, a subclass that refuses): nothing is said of what cannot be seen."""
    try:
        if tensor.shape != copy.shape or tensor.dtype != copy.dtype:
            return False
        if _equal(tensor, copy):
            return True
        return tensor.is_floating_point() and bool(((tensor == copy) | (tensor.isnan() & copy.isnan())).all())
    except Exception:  # noqa: BLE001 - values that cannot be compared: not judged
        return True


# --------------------------------------------------------------------------------------------
# What they found, in words


GRAD_OUTPUT = ("backward modified grad_output in place (for example grad_output[x < 0] = 0). grad_output belongs to "
               "autograd and may be used elsewhere in the graph: work on a copy (grad_output.clone()) or build a new "
               "tensor (grad_output * mask)")


def overwrite_problem(found: list[dict], names: list[str], outputs: int) -> str | None:
    """What backward wrote over (``overwritten``'s record), named: the inputs by ``names`` (forward's parameter
    names), the outputs among ``outputs`` by position; None if nothing."""
    if not found:
        return None
    if all(kind == "grad_output" for entry in found for kind, _ in entry["roles"]):
        return GRAD_OUTPUT + "."
    described = [_described(entry, names, outputs) for entry in found]
    in_place = any(entry["in_place"] for entry in found)
    through_memory = any(not entry["in_place"] for entry in found)
    how = []
    if in_place:
        how.append("in place (an in-place operation such as sqrt_, mul_ or x[...] = ...)")
    if through_memory:
        how.append("through memory (the values changed and autograd's version counter did not: a kernel stored "
                   "into the tensor's pointer with tl.store, or code wrote through .data)")
    fixes = (["compute new tensors (y.sqrt(), not y.sqrt_())"] if in_place else []) + (
        ["have the kernel store into new tensors (torch.empty_like(x)), not into the pointers of what it was "
         "given"] if through_memory else [])
    return (f"backward wrote over {' and '.join(described)}, {' and '.join(how)}. backward must leave what it is "
            f"given as it found it: the caller still holds forward's inputs and outputs, and a second backward "
            f"through the same graph (retain_graph=True, as torch.autograd.gradcheck runs) reads the saved tensors "
            f"again. To fix it, {' and '.join(fixes)}.")


def _described(entry: dict, names: list[str], outputs: int) -> str:
    """'`a` (the caller's input, which forward saved for backward)' and the like, for one overwritten tensor."""
    roles: dict = {}
    for kind, index in entry["roles"]:
        roles.setdefault(kind, index)
    saved = "saved" in roles
    if "input" in roles:
        i = roles["input"]
        name = f"`{names[i]}`" if 0 <= i < len(names) else f"input {i + 1}"
        return f"{name} (the caller's input{', which forward saved for backward' if saved else ''})"
    if "output" in roles:
        label = _output_label(roles["output"], outputs)
        return f"{label}{' (saved for backward)' if saved else ''}"
    if saved:
        return f"ctx.saved_tensors[{roles['saved']}] (a tensor forward saved for backward)"
    k = roles["grad_output"]
    return "grad_output" if outputs == 1 else f"grad_output of output {k}"


def second_problem(second: dict, expected: list, positions: list[int], names: list[str], rtol: float,
                   atol: float) -> str | None:
    """What is wrong with the gradients of a second backward through the same graph (``second_backward``'s
    record): ``expected`` holds the right gradient of each tensor input at ``positions`` (of forward's
    arguments, named by ``names``). None where they are right, where the second call raised or returned None."""
    raw = second.get("raw")
    if not isinstance(raw, (list, tuple)):
        return None  # the second call raised: not judged (module docstring)
    for i, want in zip(positions, expected):
        got = raw[i] if i < len(raw) else None
        if not isinstance(got, _Tensor):
            continue
        got = _tidied(got, want, want.dtype)
        if got.shape == want.shape and not _close(got, want, rtol, atol):
            name = names[i] if 0 <= i < len(names) else f"input {i + 1}"
            return (f"backward gives the right gradient for `{name}` the first time, and a wrong one when it runs "
                    f"again on the same graph (a second backward with retain_graph=True, as torch.autograd.gradcheck "
                    f"runs to find a backward that is \"not reentrant\"): backward changes something it reads, such as "
                    f"a tensor or a number kept on ctx (ctx.scale *= 2), so each call finds other values. Leave ctx "
                    f"as forward left it.\n{_difference(want, got, rtol, atol)}")
    return None


def read_overwritten(data, inputs: int, outputs: int) -> list[dict] | None:
    """``overwritten``'s record as another process sent it, checked (roles known, indices in range); None where it
    is not one."""
    if not isinstance(data, list) or len(data) > 2 * (inputs + outputs) + 64:
        return None
    limits = {"input": inputs, "output": outputs, "saved": 1024, "grad_output": outputs}
    found = []
    for entry in data:
        roles = entry.get("roles") if isinstance(entry, dict) else None
        if not (isinstance(roles, list) and 0 < len(roles) <= 16 and isinstance(entry.get("in_place"), bool)):
            return None
        if not all(isinstance(r, list) and len(r) == 2 and r[0] in limits and type(r[1]) is int
                   and 0 <= r[1] < limits[r[0]] for r in roles):
            return None
        found.append({"roles": [list(r) for r in roles], "in_place": entry["in_place"]})
    return found
