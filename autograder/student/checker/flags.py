"""How backward uses ``ctx.needs_input_grad``, read from its source, for the checker's messages.

A gradient computed under another input's flag, or used where its input needs none, shows up only
when some inputs do not require grad; the checker then points at the line (``_wrong_flag``,
``_explain_needs_input_grad_error``) and states the rule (``_FLAG_RULE``).
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap


_FLAG_RULE = (" ctx.needs_input_grad[i] says whether forward's input i (counting from 0, after ctx) needs a "
              "gradient: check that each `if ctx.needs_input_grad[...]` tests its own input's index.")


def _is_flag(node) -> bool:
    """``<ctx>.needs_input_grad[k]`` with a literal k."""
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "needs_input_grad" and isinstance(node.slice, ast.Constant)
            and type(node.slice.value) is int)


def _flag_branches(function) -> tuple[list, list]:
    """backward's ``if ctx.needs_input_grad[k]:`` branches and the names it returns, read from its source.

    A branch is an ``if`` statement or an assignment ``grad = ... if ctx.needs_input_grad[k] else
    None``. Returns ([(k, line, its first line, names assigned in it)], [returned name or None, by
    position]); ([], []) when the source cannot be read.
    """
    backward = inspect.unwrap(getattr(function.backward, "__func__", function.backward))
    if "needs_input_grad" not in getattr(getattr(backward, "__code__", None), "co_names", ()):
        return [], []  # reading the source is slow: only when backward reads the flags
    try:
        lines, first = inspect.getsourcelines(backward)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return [], []
    branches = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If):  # if ctx.needs_input_grad[k]: grad = ...
            test, body = node.test, node.body
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp):  # grad = ... if ... else None
            test, body = node.value.test, [node]
        else:
            continue
        flags = [f.slice.value for f in ast.walk(test) if _is_flag(f)]
        if len(flags) == 1:
            assigned = {n.id for stmt in body for n in ast.walk(stmt)
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            branches.append((flags[0], first + node.lineno - 1, lines[node.lineno - 1].strip(), assigned))
    returns = [n.value for n in ast.walk(tree) if isinstance(n, ast.Return) and n.value is not None]
    values = (returns[-1].elts if isinstance(returns[-1], ast.Tuple) else [returns[-1]]) if returns else []
    return branches, [v.id if isinstance(v, ast.Name) else None for v in values]


def _wrong_flag(flag_branches: tuple[list, list], i: int, names: list[str]) -> str:
    """' Line N: ...' when backward computes input i's gradient under another input's needs_input_grad flag.

    ``flag_branches``: what ``_flag_branches`` read in backward.
    """
    branches, returned = flag_branches
    variable = returned[i] if i < len(returned) else None
    guards = [(k, line, code) for k, line, code, assigned in branches if variable in assigned]
    if not guards or any(k == i for k, _, _ in guards):
        return ""
    k, line, code = guards[0]
    owner = f"`{names[k]}`'s" if 0 <= k < len(names) else f"input {k}'s"
    return (f" Line {line} computes `{variable}`, its gradient, under `{code}`, but needs_input_grad[{k}] "
            f"is {owner} flag; `{names[i]}`'s is needs_input_grad[{i}].")


def _explain_needs_input_grad_error(function, message: str, names: list[str]) -> str:
    """An error raised by backward when some inputs need no gradient, with the needs_input_grad rule it broke."""
    branches, _ = _flag_branches(function)
    unbound = re.search(r"local variable '(\w+)'", message)
    if unbound:
        variable = unbound[1]
        for k, line, code, assigned in branches:
            if variable in assigned:
                owner = f"`{names[k]}`" if 0 <= k < len(names) else f"input {k}"
                return (f"{message}. `{variable}` is computed only under `{code}` (line {line}), but used "
                        f"when {owner} needs no gradient: a gradient computed only under `if "
                        f"ctx.needs_input_grad[i]` may be used only there. Set `{variable} = None` first, so "
                        f"backward returns None for an input that needs no gradient.")
        return (f"{message}. A gradient computed only under `if ctx.needs_input_grad[i]` is used when "
                f"that input needs no gradient: set it to None first, and use it only under the `if`.")
    if "NoneType" in message and branches:
        return (f"{message}. A gradient left None because its input needs no gradient (ctx.needs_input_grad "
                f"is False) is used in a computation: use it only under its `if ctx.needs_input_grad[i]`.")
    return message
