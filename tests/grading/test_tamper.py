"""The tamper guard covers the whole checker package: every module's references, functions, classes and tables.

The grading battery (test_robustness.py) proves the guard end to end in real notebooks; this
checks, quickly and in-process, that no module of ``autograder.student.checker`` escapes it.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch
from torch.autograd import Function

import autograder.student.checker as checker
from autograder import check_function
from autograder.grading.running.judging.tamper import Guard

CHECKER_MODULES = [checker] + [importlib.import_module(f"{checker.__name__}.{m.name}")
                               for m in pkgutil.iter_modules(checker.__path__)]


class DoubleSignFlipped(Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad_output):
        return -2 * grad_output


def _own_classes(module) -> list[type]:
    return [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]


def test_the_checker_has_the_modules_the_guard_expects():
    names = {m.__name__.rpartition(".")[2] for m in CHECKER_MODULES[1:]}
    assert names == {"references", "messages", "core", "optional", "callables", "saved", "harness", "named",
                     "transforms", "diagnoses", "devices", "kernels", "flags", "kept", "built_on", "attention", "operators", "layouts", "patterns",
                     "overwrites", "launches", "kernel_patterns", "attention_math", "layer_norm", "pieces", "contracts", "values"}


@pytest.mark.parametrize("module", CHECKER_MODULES, ids=lambda m: m.__name__)
def test_everything_replaced_in_a_checker_module_is_reported_and_restored(module):
    guard = Guard()
    genuine = {k: v for k, v in vars(module).items() if not k.startswith("__")}
    fake = object()
    for name in genuine:
        setattr(module, name, fake)
    methods = {cls: {k: v for k, v in vars(cls).items() if callable(v) and not k.startswith("__")}
               for cls in _own_classes(module)}
    for cls, saved in methods.items():
        for name in saved:
            setattr(cls, name, fake)
    tables = [v for v in genuine.values() if type(v) in (list, dict)]
    for table in tables:
        table.clear()

    replaced = guard.check()

    expected = {f"{module.__name__}.{k}" for k in genuine}
    expected |= {f"{module.__name__}.{cls.__name__}.{k}" for cls, saved in methods.items() for k in saved}
    assert expected <= set(replaced)
    assert all(vars(module)[k] is v for k, v in genuine.items())
    assert all(vars(cls)[k] is v for cls, saved in methods.items() for k, v in saved.items())
    assert all(len(t) > 0 for t in tables)
    assert guard.check() == []
    with pytest.raises(AssertionError, match="sign"):
        check_function(DoubleSignFlipped, lambda x: 2 * x, torch.randn(4))


def test_a_replaced_function_body_in_the_checker_is_restored():
    guard = Guard()
    from autograder.student.checker import core

    original = core._judge.__code__
    core._judge.__code__ = (lambda *a, **k: None).__code__
    assert "autograder.student.checker.core._judge" in guard.check()
    assert core._judge.__code__ is original
