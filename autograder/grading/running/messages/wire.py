"""Values on the wire between the referee and the student's process: tensors and plain data as JSON.

Both sides encode what they send and decode (and check) what they receive; nothing is ever
unpickled. A tensor travels as its dtype, shape and raw bytes (base64); numbers, strings, None,
lists of these and named functions (``autograder.student.checker.named``) travel as themselves.
"""

from __future__ import annotations

import base64

DTYPES = ("float16", "bfloat16", "float32", "float64", "uint8", "int8", "int16", "int32", "int64", "bool")
MAX_ELEMENTS = 4_000_000        # per tensor a student's process may send back
MAX_ITEMS = 100_000             # per list


class Unsupported(Exception):
    """What cannot travel as data, or a statement the referee cannot run without the student's objects."""


def encode(value):
    """A tensor or a JSON scalar as plain data; anything else raises Unsupported."""
    import torch

    if isinstance(value, torch.Tensor):
        if type(value) not in (torch.Tensor, torch.nn.Parameter):  # a subclass runs its own code in .detach()
            return {"other": f"a {type(value).__name__} (a tensor subclass)"}
        tensor = value.detach().cpu().contiguous()
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in DTYPES or tensor.numel() > MAX_ELEMENTS or tensor.is_sparse or tensor.is_quantized:
            return {"other": f"a {dtype} tensor of {tensor.numel()} elements"}
        raw = tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        return {"tensor": dtype, "shape": list(tensor.shape), "data": base64.b64encode(raw).decode()}
    if value is None or type(value) in (bool, int, float, str):
        return {"value": value}
    if isinstance(value, (list, tuple)) and len(value) <= MAX_ITEMS:
        return {"list": [encode(v) for v in value]}
    if isinstance(value, dict) and len(value) <= 100 and all(type(k) is str for k in value):
        return {"dict": {k: encode(v) for k, v in value.items()}}
    from autograder.student.checker.named import Named  # here: importing the checker imports torch

    if isinstance(value, Named):
        return {"function": value.name, "args": [encode(a) for a in value.args]}
    raise Unsupported(f"a {type(value).__name__} argument")


def decode(data, depth: int = 0):
    """The value ``encode`` made, checked: a malformed or oversized tensor raises ValueError."""
    import torch

    if not isinstance(data, dict) or depth > 8:
        raise ValueError("not an encoded value")
    if set(data) == {"value"} and (data["value"] is None or type(data["value"]) in (bool, int, float)
                                   or type(data["value"]) is str and len(data["value"]) <= 1000):
        return data["value"]
    if set(data) == {"list"} and isinstance(data["list"], list) and len(data["list"]) <= MAX_ITEMS:
        return [decode(v, depth + 1) for v in data["list"]]
    if set(data) == {"dict"} and isinstance(data["dict"], dict) and len(data["dict"]) <= 100:
        return {str(k): decode(v, depth + 1) for k, v in data["dict"].items()}
    if set(data) == {"function", "args"} and isinstance(data["args"], list):
        from autograder.student.checker.named import FUNCTIONS, Named

        if data["function"] in FUNCTIONS:
            return Named(data["function"], *[decode(a, depth + 1) for a in data["args"][:8]])
    if set(data) != {"tensor", "shape", "data"} or data["tensor"] not in DTYPES:
        raise ValueError("not an encoded tensor")
    shape = data["shape"]
    if not (isinstance(shape, list) and len(shape) <= 16 and all(type(n) is int and 0 <= n <= MAX_ELEMENTS for n in shape)):
        raise ValueError("a bad tensor shape")
    count = 1
    for n in shape:
        count *= n
    dtype = getattr(torch, data["tensor"])
    if count > MAX_ELEMENTS or not isinstance(data["data"], str):
        raise ValueError("a tensor too large")
    raw = base64.b64decode(data["data"], validate=True)
    if len(raw) != count * torch.empty((), dtype=dtype).element_size():
        raise ValueError("a tensor whose bytes do not match its shape")
    if not count:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape).clone()


