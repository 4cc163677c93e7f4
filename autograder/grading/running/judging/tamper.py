"""Find and undo student code that replaces what the tests rely on (``torch.allclose`` and friends).

A submission that sets ``torch.allclose = lambda *a, **k: True`` would pass every test that
calls it. So before any student code runs, ``Guard`` records the genuine objects: the
attributes of torch's modules and classes that tests and the checker call, the checker's own
functions and captured references (every module of ``autograder.student.checker``, read from
outside, so the checker needs no changes), builtins such as ``isinstance``, and the code and
defaults of every Python function among them. After every cell it compares, puts the genuine objects back, and reports
what it found as an error in that cell: ``tampering found: torch.allclose was changed
(restored)``. So tests always run with the genuine functions, and a test cell during which
tampering happened scores 0 (nbgrader scores any cell with an error 0).

Names the tests use in the notebook's namespace are watched too: rebinding ``torch``, ``nn`` or
``check_function`` to something else, or defining a function called ``isinstance`` (or another
builtin the tests check with), counts as tampering and is undone.

The grader's own modules that answer the referee's questions (``answer``, ``wire``, ``examinee``, ...) are
watched the same way: replacing ``answer.answer`` or its ``__code__`` is found and undone.

The grader (``autograder.grading.running.warm``) and every kernel nbgrader starts (``autograder.grading.running.kernel``)
install a guard before the first cell; the examinee checks after every answer cell and every batch of
the referee's questions. It is a defence against the obvious tricks, not a
sandbox: code that replaces a function and puts it back within one cell, or that goes looking
for the grader's own objects, is not caught here. In ``grade``, the referee
(``autograder.grading.running.judging.referee``) decides the tests' value checks where student code cannot reach.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import pkgutil
import types
from itertools import repeat
from operator import is_

# The checker's package and every module in it: their functions, captured references, classes and tables.
_CHECKER = importlib.import_module("autograder.student.checker")
CHECKER_MODULES = [_CHECKER.__name__] + [f"{_CHECKER.__name__}.{m.name}"
                                         for m in pkgutil.iter_modules(_CHECKER.__path__)]
# The grader's own modules that answer the referee in the examinee (autograder.grading.running.judging.examinee),
# and those that confine it: their functions, and their classes as the checker's.
GRADER_MODULES = [name for name in ("autograder.grading.running.judging.answer", "autograder.grading.running.judging.autograd_use",
                                     "autograder.grading.running.messages.wire", "autograder.grading.running.judging.examinee",
                                     "autograder.grading.running.messages.protocol", "autograder.grading.running.judging.tamper",
                                     "autograder.grading.running.confinement.audit",
                                     "autograder.grading.running.confinement.one_thread")
                  if importlib.util.find_spec(name) is not None]  # (a student edition may ship fewer)
# Modules whose attributes tests and the checker look up when they run.
MODULES = ["torch", "torch.autograd", "torch.autograd.gradcheck", "torch.autograd.function",
           "torch.autograd.forward_ad", "torch.autograd.graph", "torch.func",
           "torch.testing", "torch.testing._comparison", "json", "base64", "autograder", *CHECKER_MODULES,
           *GRADER_MODULES]
# Classes whose methods tests call; new attributes count too (they override inherited ones).
CLASSES = ["torch.Tensor", "torch.autograd.Function", "torch.autograd.function.FunctionCtx", "torch.nn.Module",
           "torch.autograd.function.BackwardCFunction", "torch.autograd.profiler.profile"]
# Changed by torch itself: torch.compile (torch._dynamo) wraps torch.manual_seed and nn.Module.__init__.
CHANGED_BY_TORCH = {("torch", "manual_seed"), ("torch.nn.Module", "__init__"), ("torch.nn.Module", "__setstate__"),
                    ("torch.nn.Module", "___needs_generation_tag_patch")}
# Builtins that kernels swap during a cell (ipykernel forwards input() to the notebook).
CHANGED_BY_KERNEL = {"input"}
# Names the tests use in the notebook: once bound to these objects, no cell may rebind them.
WATCHED_NAMES = {"torch": "torch", "nn": "torch.nn", "check_function": "autograder.check_function",
                 "check_forward": "autograder.check_forward", "check_callable": "autograder.check_callable",
                 "check_saved": "autograder.check_saved", "check_values": "autograder.check_values",
                 "check_with": "autograder.check_with", "check_device": "autograder.check_device",
                 "check_kernel": "autograder.check_kernel", "check_custom_op": "autograder.check_custom_op",
                 "check_built_on": "autograder.check_built_on",
                 "check_attention_backward": "autograder.student.checker.attention.check_attention_backward",
                 "check_attention_forward": "autograder.student.checker.attention.check_attention_forward",
                 "check_backward_kernel": "autograder.student.checker.kernels.check_backward_kernel",
                 "on_pieces": "autograder.student.checker.pieces.on_pieces",
                 "autograder": "autograder", "__builtins__": "builtins"}
# Builtins that tests use to check answers: a notebook may not define functions by these names.
WATCHED_BUILTINS = ["isinstance", "issubclass", "len", "type", "hasattr", "callable", "bool"]

_MISSING = object()


class TamperingFound(Exception):
    """Reported in the cell after which the grader found (and undid) tampering."""


def _resolve(dotted: str):
    """The module, or the attribute of a module, named ``dotted``."""
    try:
        return importlib.import_module(dotted)
    except ImportError:
        module, _, name = dotted.rpartition(".")
        return getattr(importlib.import_module(module), name)


def _function_state(function: types.FunctionType) -> tuple:
    """What a function does: its code and defaults (``f.__code__ = ...`` keeps f's identity)."""
    return function.__code__, function.__defaults__, function.__kwdefaults__


def _same(a, b) -> bool:
    """Whether two lists or dicts hold the very same objects (never calls student code's ``==``), at C speed."""
    if isinstance(a, dict):
        return len(a) == len(b) and all(map(is_, a, b)) and all(map(is_, a.values(), b.values()))
    return len(a) == len(b) and all(map(is_, a, b))


class Guard:
    """The genuine objects, captured now; ``check()`` restores them and says what was replaced."""

    def __init__(self, user_ns: dict | None = None) -> None:
        self.user_ns = user_ns if user_ns is not None else {}
        self.names = {name: _resolve(target) for name, target in WATCHED_NAMES.items()}  # (loads lazy ones first)
        self.namespaces: list[tuple[str, object, dict, bool]] = []  # (label, owner, saved items, is a class)
        for name in MODULES:
            module = importlib.import_module(name)
            saved = {k: v for k, v in vars(module).items() if not k.startswith("__")
                     and (name, k) not in CHANGED_BY_TORCH}
            self.namespaces.append((name, module, saved, False))
        for name in CLASSES + [f"{module}.{k}" for module in CHECKER_MODULES + GRADER_MODULES
                               for k, v in vars(_resolve(module)).items() if isinstance(v, type) and v.__module__ == module]:
            cls = _resolve(name)
            saved = {k: v for k, v in vars(cls).items() if (name, k) not in CHANGED_BY_TORCH}
            self.namespaces.append((name, cls, saved, True))
        genuine_builtins = {k: v for k, v in vars(builtins).items() if not k.startswith("_")
                            and k not in CHANGED_BY_KERNEL and isinstance(v, (types.BuiltinFunctionType, type))}
        self.namespaces.append(("builtins", builtins, genuine_builtins, False))
        # Code and defaults of the Python functions among them.
        self.functions = {}
        for _, _, saved, _ in self.namespaces:
            for value in saved.values():
                function = getattr(value, "__func__", value)  # staticmethod, classmethod
                if isinstance(function, types.FunctionType):
                    self.functions[function] = _function_state(function)
        # And each namespace's names and genuine objects as tuples, compared at C speed first (``check``).
        self.namespaces = tuple((label, owner, saved, is_class, tuple(saved), tuple(saved.values()))
                                for label, owner, saved, is_class in self.namespaces)
        # The checker's own lists and dicts (its table of torch error messages), and the functions' keyword defaults
        # (a dict, changed in place without any audit event).
        self.containers = {f"{module}.{k}": (v, type(v)(v)) for module in CHECKER_MODULES
                           for k, v in vars(_resolve(module)).items()
                           if type(v) in (list, dict) and not k.startswith("__")}
        self.containers.update({f"{f.__module__}.{f.__qualname__}'s keyword defaults": (kwdefaults, dict(kwdefaults))
                                for f, (_, _, kwdefaults) in self.functions.items() if kwdefaults})
        self.bound: set[str] = set()
        self.instances: list[tuple[object, dict]] = []  # (an object the examinee relies on, its attributes)

    def watch(self, instance: object) -> None:
        """Watch ``instance``'s attributes from now on, as a class's: replaced, added or deleted ones are put back."""
        self.instances.append((instance, dict(vars(instance))))

    def check(self, functions: bool = True) -> list[str]:
        """Put back every genuine object that was replaced; return what was replaced (empty: nothing).

        Without ``functions``, which functions' code and defaults are is not compared (their keyword defaults' contents
        are): each read raises an audit event (~2,000 a check), and the examinee's audit hook refuses replacing a
        function's code or defaults as it happens (``autograder.grading.running.confinement.audit``)."""
        replaced = []
        for instance, saved in self.instances:
            current = vars(instance)
            for name in [k for k in current if k not in saved]:
                replaced.append(f"{type(instance).__name__}.{name}")
                del current[name]
            for name, genuine in saved.items():
                if current.get(name, _MISSING) is not genuine:
                    replaced.append(f"{type(instance).__name__}.{name}")
                    current[name] = genuine
        for label, owner, saved, is_class, names, genuine_objects in self.namespaces:
            current = vars(owner)
            if all(map(is_, map(current.get, names, repeat(_MISSING)), genuine_objects)) and (
                    not is_class or len(current) == len(names)):
                continue  # (the loop below finds what, where anything was replaced or added)
            for name, genuine in saved.items():
                if current.get(name, _MISSING) is not genuine:
                    replaced.append(f"{label}.{name}")
                    setattr(owner, name, genuine)
            if is_class:
                for name in [k for k in current if k not in saved and (label, k) not in CHANGED_BY_TORCH]:
                    replaced.append(f"{label}.{name}")
                    delattr(owner, name)
        for function, (code, defaults, kwdefaults) in self.functions.items() if functions else ():
            if (function.__code__ is not code or function.__defaults__ is not defaults
                    or function.__kwdefaults__ is not kwdefaults):
                replaced.append(f"{function.__module__}.{function.__qualname__}")
                function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
        for name, (container, contents) in self.containers.items():
            if not _same(container, contents):
                replaced.append(name)
                if isinstance(container, list):
                    container[:] = contents
                else:
                    container.clear()
                    container.update(contents)
        return replaced + self._check_names()

    def _check_names(self) -> list[str]:
        """Rebound names the tests use (``torch = ...``), and functions named like builtins they use."""
        replaced = []
        for name, genuine in self.names.items():
            value = self.user_ns.get(name, _MISSING)
            if value is genuine:
                self.bound.add(name)
            elif name in self.bound:
                replaced.append(f"the name {name}")
                self.user_ns[name] = genuine
        for name in WATCHED_BUILTINS:
            if callable(self.user_ns.get(name)):
                replaced.append(f"the builtin {name}")
                del self.user_ns[name]
        return replaced

    def after_cell(self, shell) -> None:
        """IPython ``post_run_cell`` hook: restore, and report tampering as an error in the cell."""
        replaced = self.check()
        if replaced:
            shown = ", ".join(replaced[:8]) + (f" and {len(replaced) - 8} more" if len(replaced) > 8 else "")
            found = TamperingFound(
                f"tampering found: {shown} {'was' if len(replaced) == 1 else 'were'} changed (restored). "
                "Tests always run with the genuine functions; a test cell in which this happens scores 0.")
            shell.showtraceback(exc_tuple=(TamperingFound, found, None))


_RECORDED: list[Guard] = []


def genuine() -> Guard:
    """The record of the genuine objects, taken once per process by its first caller: the warm process, at
    import, where no student code has run, so every child forked from it checks against the same record
    (taking it in each child cost ~8 ms)."""
    if not _RECORDED:
        _RECORDED.append(Guard())
    return _RECORDED[0]


def handed_over() -> Guard:
    """The record, for the examinee alone: from now on no module of this process holds it, so code that reaches
    the grader's modules does not reach the guard."""
    guard = genuine()
    _RECORDED.clear()
    return guard


def install(shell, guard: Guard | None = None) -> Guard:
    """Check after every cell of ``shell`` (an IPython shell) against ``guard``'s genuine objects,
    captured now if no guard is given (the grader captures them once, in its warm process)."""
    guard = guard if guard is not None else Guard()
    guard.user_ns = shell.user_ns
    shell.events.register("post_run_cell", lambda result: guard.after_cell(shell))
    return guard
