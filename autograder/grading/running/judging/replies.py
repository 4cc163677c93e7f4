"""How the judges read the examinee's replies and word what they found (``judges``): why a reply holds no answer,
the names it gives the inputs, a kernel run's outcome, and a failure as the student reads it."""

from __future__ import annotations

import re

from autograder.grading.running.messages.wire import decode


def autograd_problem(reply: dict) -> str | None:
    """What the examinee saw of autograd while the Function's forward and backward ran, if anything."""
    used = reply.get("autograd_in_backward", "no record of it came back")
    if used is None:
        return None
    return (f"backward calls autograd ({str(used)[:200]}: torch.autograd.grad, .backward(), torch.func, "
            f"Variable._execution_engine or forward-mode AD, here or in forward): derive the gradient instead")


def unanswered(reply) -> str | None:
    """Why ``reply`` holds no answer to judge (none came, or the student's code failed: said as the
    notebook says it, ``messages.student_error``), or None."""
    if not isinstance(reply, dict):
        return "could not be checked: the grader's run of your answers sent no answer"
    if isinstance(reply.get("gone"), str) and set(reply) == {"gone"}:  # (the examinee stopped: why, in one line)
        return f"could not be checked: the grader's run of your answers stopped ({plain(reply['gone'])})"
    if reply.get("error") is not None:
        from autograder.student.checker.messages import student_error

        said = student_error(str(reply["error"])[:300])
        stage, line = reply.get("stage"), reply.get("line")
        if said.startswith("raised ") and stage in ("forward", "backward") and isinstance(line, str):
            return f"{stage} {said}{line[:300]}"  # as check_function says it: "backward raised ... (in backward, line N: ...)"
        return said
    return None


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,60}(\[\d{1,4}\])?|input \d{1,4}")


def input_names(reply: dict, count: int) -> list[str]:
    """The names the student's process gives the inputs (``forward``'s parameters: ``callables.argument_names``),
    where they are plain names; else ``input 1``, ``input 2``, ..."""
    names = reply.get("names")
    if (isinstance(names, list) and len(names) == count
            and all(isinstance(n, str) and NAME.fullmatch(n) for n in names)):
        return names
    return [f"input {i + 1}" for i in range(count)]


def raw_gradients(data, count: int) -> list | None:
    """What backward returned, one entry per forward argument, as the examinee sent it (``answer._again``): a tensor,
    None, a plain value, or the type name of what cannot travel; None where there is no record. Raises ValueError
    where it is malformed."""
    if data is None:
        return None
    if not isinstance(data, list) or len(data) > count + 64:
        raise ValueError("not a list of gradients")
    return [entry["other"] if isinstance(entry, dict) and isinstance(entry.get("other"), str) else decode(entry)
            for entry in data]


def plain(text) -> str:
    """A short string of the examinee's, printable, for a message (where a student's names may appear)."""
    return "".join(c for c in str(text)[:200] if c.isprintable())


def run_outcome(run) -> dict:
    """One run of ``kernel_runs`` as the student's process sent it: ``{"result": value}`` or ``{"error": text}``."""
    if isinstance(run, dict) and isinstance(run.get("error"), str):
        return {"error": run["error"][:4000]}
    return {"result": decode(run["result"])}


def as_found(name: str, problem: str, named: bool = False) -> str:
    """A referee's failure as the student reads it: what is wrong, that the grader's own check found it, then
    the details (the values that differ) on the lines after."""
    head, _, details = problem.partition("\n")
    return (f"{'' if named else name + ': '}{head.rstrip('.')} (found by the grader's own check, which runs this "
            f"cell's checks outside your notebook's process){chr(10) if details else ''}"
            f"{details}")


