"""A scan of a student's answer cells, before the grader runs them where its checks are answered.

The grader answers the referee's questions in an examinee process that runs only the notebook's given
cells and the student's answer cells (``autograder.grading.running.judging.examinee``). An answer that reaches
the interpreter, the grader's own objects or torch's internals could still make that process report
something untrue, so an answer cell using any of the constructs below is not run there at all: every
check of what it defines fails, with a message naming the construct and its line. The rule is about
the source alone (data whose truth does not depend on any process), and it is coarse on purpose:
what the course's answers need (torch, numpy, math, plain Python classes and functions) passes, and
``tests/grading/test_scan.py`` checks that no solution and no answer of the demo class is refused.

Refused (``problems``):

- importing anything but ``ALLOWED_IMPORTS`` and ``ALLOWED_SUBMODULES`` (and any private module,
  ``torch._C``); of ``sys``, anything but ``sys.stdout`` and ``sys.stderr``;
- the builtins that run or reach code by name (``eval``, ``exec``, ``compile``, ``__import__``,
  ``globals``, ``vars``, ``locals``, ``breakpoint``, ``input``), and ``getattr``, ``setattr``,
  ``delattr`` or ``hasattr`` unless called with a plain attribute name written out;
- names and attributes that reach the interpreter, files, processes or the autograd engine
  (``DENIED``: ``sys``, ``os``, ``gc``, ``inspect``, ``_getframe``, ``f_back``, ``_execution_engine``,
  ``run_backward``, ``torch.hub``, ``saved_tensors_hooks``, ...);
- dunder attributes and names other than ``__init__``, ``__name__`` and ``__doc__``; special methods
  other than ``SPECIAL_METHODS`` (``__torch_function__``, ``__reduce__``, ``__del__``, ``__eq__`` ...);
  a ``metaclass``;
- private attributes (``torch._C``, ``x._version``, ``Cube._backward_cls``) other than the answer's own
  (assigned in the answer cells, and not a name torch uses);
- changing what the answer did not make: assigning or deleting an attribute or item of a module or a
  name the answer cells did not bind (``torch.allclose = ...``, ``F.gelu = ...``, ``CONSTANTS["x"] = 1``).
"""

from __future__ import annotations

import ast
from functools import lru_cache

ALLOWED_IMPORTS = {"torch", "math", "numpy", "functools", "itertools", "typing", "dataclasses", "collections",
                   "triton", "warnings", "time", "random", "statistics", "copy", "matplotlib", "sys", "__future__"}
ALLOWED_SUBMODULES = ("IPython.display",)  # of a package not allowed whole
SYS_ALLOWED = {"stdout", "stderr"}  # of sys, only these: print(..., file=sys.stderr)
CALLS_BY_NAME = {"eval", "exec", "compile", "__import__", "globals", "vars", "locals", "breakpoint", "input"}
ATTRIBUTE_BUILTINS = {"getattr", "setattr", "delattr", "hasattr"}
DENIED = {
    # the interpreter, files, processes, serialised code
    "sys", "os", "gc", "inspect", "importlib", "builtins", "ctypes", "subprocess", "multiprocessing", "threading",
    "signal", "socket", "json", "pickle", "marshal", "io", "pathlib", "shutil", "tempfile", "weakref", "atexit",
    "traceback", "linecache", "runpy", "pkgutil", "site", "dis", "code", "codeop", "types", "copyreg",
    "modules", "_getframe", "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next",
    "gi_frame", "cr_frame", "ag_frame", "co_code", "load", "loads", "ctypeslib",
    # the autograd engine, torch's extension points and hooks that hide or rewrite what a Function does
    "_execution_engine", "run_backward", "_C", "hub", "cpp_extension", "load_inline", "load_library", "Library",
    "impl", "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks", "register_hook",
    "register_prehook", "register_multi_grad_hook", "register_full_backward_hook", "register_full_backward_pre_hook",
    "_profiler_enabled", "profiler", "overrides", "TorchFunctionMode", "TorchDispatchMode",
}
ALLOWED_DUNDERS = {"__init__", "__name__", "__doc__"}
# Triton's own loads (10): `tl.load` where `tl` is the given cells' `import triton.language as tl` (not a name
# the answer binds itself), or `triton.language.load`; every other `load` (torch.load, numpy.load: pickles) stays denied.
TRITON_LANGUAGE = {"load"}
SPECIAL_METHODS = {"__init__", "__call__", "__repr__", "__str__", "__post_init__"}


@lru_cache(maxsize=1)
def _torch_private_names() -> frozenset[str]:
    """Private names torch's classes use: an answer may not make them its own (``Cube._backward_cls = ...``)."""
    import torch
    from torch.autograd.function import BackwardCFunction, FunctionCtx

    owners = (torch, torch.Tensor, torch.nn.Module, torch.autograd.Function, FunctionCtx, BackwardCFunction,
              torch.nn.Parameter, torch.autograd, torch.nn.functional)
    return frozenset(name for owner in owners for name in dir(owner) if name.startswith("_"))


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _private(name: str) -> bool:
    return name.startswith("_") and not _dunder(name) and name != "_"


def _base(node: ast.AST) -> ast.AST:
    """The expression an attribute or item chain starts from: ``torch`` in ``torch.nn.functional.gelu``."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _bound_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """(names the source binds itself: assignments, loop and ``with`` targets, parameters, functions and classes;
    attribute names it assigns: ``self._cache = ...``)."""
    names, attributes = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            attributes.add(node.attr)
    return names, attributes


def _attribute_name_problem(name: str, own: set[str]) -> str | None:
    if name in DENIED:
        return f"`{name}`"
    if _dunder(name) and name not in ALLOWED_DUNDERS:
        return f"the special attribute `{name}`"
    if _private(name) and (name not in own or name in _torch_private_names()):
        return f"the private attribute `{name}`"
    return None


def problems(source: str) -> list[str]:
    """What in ``source`` (an answer cell's code) the grader refuses to run: ``line N: what``, in order."""
    from autograder.grading.running.judging.referee import ipython_python

    try:
        tree = ast.parse(source)
    except SyntaxError:
        try:
            tree = ast.parse(ipython_python(source))  # magics: what IPython (and the examinee) would run
        except SyntaxError:
            return []  # it fails when run, with its own error
    names, own_attributes = _bound_names(tree)
    found: list[tuple[int, str]] = []

    def flag(node: ast.AST, what: str) -> None:
        found.append((getattr(node, "lineno", 0), what))

    allowed_calls = set()  # getattr(x, "plain") and friends, sys.stderr: their Name node is allowed
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "sys" \
                and node.attr in SYS_ALLOWED:
            allowed_calls.add(id(node.value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_BUILTINS:
            literal = (len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                       and isinstance(node.args[1].value, str))
            if literal and _attribute_name_problem(node.args[1].value, own_attributes) is None:
                allowed_calls.add(id(node.func))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _check_module(alias.name, node, flag)
                if alias.name == "sys" and alias.asname:
                    flag(node, "importing `sys` under another name")
        elif isinstance(node, ast.ImportFrom):
            _check_module("." * node.level + (node.module or ""), node, flag)
            for alias in node.names:
                if (alias.name in DENIED or _private(alias.name) or _dunder(alias.name)
                        or node.module == "sys" and alias.name not in SYS_ALLOWED):
                    flag(node, f"importing `{alias.name}`")
        elif isinstance(node, ast.Name):
            if node.id in CALLS_BY_NAME:
                flag(node, f"`{node.id}`")
            elif node.id in ATTRIBUTE_BUILTINS and id(node) not in allowed_calls:
                flag(node, f"`{node.id}` with an attribute name that is not written out (or not allowed)")
            elif node.id in DENIED and node.id not in names and id(node) not in allowed_calls:
                flag(node, f"`{node.id}`" + (" (other than sys.stdout and sys.stderr)" if node.id == "sys" else ""))
            elif _dunder(node.id) and node.id not in ALLOWED_DUNDERS:
                flag(node, f"the special name `{node.id}`")
        elif isinstance(node, ast.Attribute):
            problem = _attribute_name_problem(node.attr, own_attributes)
            if problem and not (node.attr in TRITON_LANGUAGE and _triton_language(node.value, names)):
                flag(node, problem)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if _dunder(node.name) and node.name not in SPECIAL_METHODS:
                flag(node, f"the special method `{node.name}`")
        elif isinstance(node, ast.ClassDef):
            if any(k.arg == "metaclass" for k in node.keywords):
                flag(node, "a metaclass")
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, (ast.Store, ast.Del)):
            base = _base(node)
            if not (isinstance(base, ast.Name) and base.id in names):
                what = ast.unparse(node)
                flag(node, f"changing `{what[:60]}`, which the answer did not make")
    return [f"line {line}: {what}" for line, what in sorted(set(found))]


def _triton_language(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` is triton's language module as the course's notebooks name it: the given ``tl``
    (not rebound by the answer), or ``triton.language``."""
    if isinstance(node, ast.Name):
        return node.id == "tl" and node.id not in names
    return (isinstance(node, ast.Attribute) and node.attr == "language" and isinstance(node.value, ast.Name)
            and node.value.id == "triton" and "triton" not in names)


def _check_module(name: str, node: ast.AST, flag) -> None:
    parts = name.split(".")
    allowed = parts[0] in ALLOWED_IMPORTS or any(name == m or name.startswith(m + ".") for m in ALLOWED_SUBMODULES)
    if name.startswith(".") or not allowed:
        flag(node, f"importing `{name}` (answers may import "
                   f"{', '.join(sorted(ALLOWED_IMPORTS - {'__future__', 'sys'}) + list(ALLOWED_SUBMODULES))}, "
                   f"and sys for sys.stdout and sys.stderr)")
    elif any(_private(p) or p in DENIED for p in parts[1:]):
        flag(node, f"importing `{name}`")


def refusal(grade_id: str, found: list[str]) -> str:
    """What a student reads for every check of an answer cell the grader refused to run."""
    shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    return (f"the grader did not run your answer cell '{grade_id}': it uses {shown}. Answers may use torch, numpy, "
            f"math and plain Python, but nothing that reaches the interpreter, the grader or torch's internals "
            f"(see the course's grading rules)")
