"""``check_custom_op``: ``torch.library.opcheck`` on a custom operator, its failures said in the course's words.

``opcheck`` tests an operator's registrations against each other (its schema, its autograd formula, its
fake, AOT dispatch with dynamic shapes) and, when one fails, raises ``OpCheckError``: "opcheck(op, ...):
test_faketensor failed with ... (scroll up for stack trace)", where the cause is on the exception's
``__cause__`` and nothing is printed above it to scroll to. Here the cause is read instead: an operator
whose body still raises ``NotImplementedError()`` is an exercise not done yet (``messages.NOT_DONE``); a
fake whose output differs from the operator's in shape, dtype or strides is said as such (torch's
``compare_tensor_meta`` names the real output's first, then the fake's); and a kernel launched on the
fake tensors of a compiled backward (a backward formula that calls the launcher, not the backward
operator) is named as that. Anything else keeps opcheck's own words, with the test that failed.
"""

from __future__ import annotations

import re

from autograder.student.checker.messages import NOT_DONE, not_done

_METADATA = re.compile(r"(Shapes|Dtypes|Strides) (?:are )?(.+?) and (.+?)(?: are not equal| \(mismatched at \d+\))!")
_OUTPUT = re.compile(r"for output\[(\d+)\]")
# Torch's and Triton's words when code that needs a tensor's memory meets a fake tensor (torch 2.13, triton 3.7).
_NO_MEMORY = ("data pointer", "Cannot access data pointer", 'storage of a tensor on device "meta"', "FakeTensor")


def check_custom_op(op, *args) -> None:
    """Check a custom operator (``torch.library.custom_op``) with ``torch.library.opcheck(op, args)``.

    Every test opcheck runs must pass. A failure raises AssertionError saying which registration is wrong
    and how, in the course's words; an operator (or a fake) that still raises ``NotImplementedError()``
    raises ``NotImplementedError`` saying the exercise is not done yet.
    """
    import torch

    name = _op_name(op)
    try:
        result = torch.library.opcheck(op, args)
    except Exception as error:  # noqa: BLE001 - opcheck's failure becomes the course's explanation
        cause = _root_cause(error)
        if not_done(cause):
            raise NotImplementedError(NOT_DONE) from None
        raise AssertionError(custom_op_problem(name, str(error), cause, args)) from None
    failed = {test: outcome for test, outcome in result.items() if outcome != "SUCCESS"}
    if failed:
        raise AssertionError(f"{name} does not pass opcheck: {failed}")


def custom_op_problem(name: str, message: str, cause: BaseException, args) -> str:
    """What opcheck's failure ``message`` (with its root ``cause``) says about operator ``name``."""
    test = re.search(r"(test_\w+) failed", message)
    test = test[1] if test else "a test"
    said = f"{type(cause).__name__}: {cause}".strip()
    metadata = _METADATA.search(said)
    if metadata:
        what, real, fake = (re.sub(r"torch\.Size\((\[.*?\])\)", r"\1", group) for group in metadata.groups())
        output = _OUTPUT.search(message)
        which = f"output {output[1]}" if output else "its output"
        layouts = ", ".join(f"{list(a.shape)} with strides {a.stride()}" for a in args if hasattr(a, "stride"))
        advice = {"Strides": ("The operator returns what your launcher returns, a new contiguous tensor whatever "
                              "the inputs' layout; so the fake must make one too, with new_empty (x.new_empty(x.shape)), "
                              "not torch.empty_like(x), which copies the strides of x (here not contiguous)"),
                  "Shapes": "A fake returns a tensor of the shape the operator returns: make it from that shape",
                  "Dtypes": "A fake returns a tensor of the dtype the operator returns: make it like that input"}[what]
        noun = {"Shapes": "shape", "Dtypes": "dtype", "Strides": "strides"}[what]
        return (f"{name}'s fake (register_fake) does not match the operator: for {which}, the operator returns "
                f"{noun} {real}, its fake {fake} (inputs: {layouts}). {advice}.")
    if any(words in said for words in _NO_MEMORY):
        return (f"{name} fails opcheck's {test}: a kernel was launched on a fake tensor (shapes, no memory: "
                f"{_first_line(said)}). torch.compile traces forward and backward with fake tensors, calling each "
                f"operator's fake instead of its body; so a launch outside an operator's body is reached. Is it in "
                f"the backward formula given to register_autograd? It must call the backward operator, not the "
                f"launcher.")
    return f"{name} fails opcheck's {test}: {_first_line(said)}"


def _root_cause(error: BaseException) -> BaseException:
    """The innermost exception behind ``error`` (its ``__cause__``, else its ``__context__``), cycles cut."""
    seen = {id(error)}
    while (error.__cause__ or error.__context__) is not None and id(error.__cause__ or error.__context__) not in seen:
        error = error.__cause__ or error.__context__
        seen.add(id(error))
    return error


def _op_name(op) -> str:
    """``course::bias_gelu`` for a custom operator, else the object's name."""
    qualified = getattr(op, "_qualname", None)
    return qualified if isinstance(qualified, str) else getattr(op, "__name__", type(op).__name__)


def _first_line(text: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), text)
    return line if len(line) <= 300 else line[:297] + "..."
