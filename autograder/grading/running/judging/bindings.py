"""What the names in a notebook's cells mean, for the answer scan (``scan``): each cell walked once.

An answer cell runs in the examinee after the given cells' definitions (all of a ``setup`` cell) and the
earlier answer cells (``examinee.program``). What a name means there is what those cells bound it to:
a path when imported (``F``: ``torch.nn.functional``), ``FUNCTION`` for a ``def`` or ``class``, ``VALUE``
otherwise; a name bound several ways has every meaning, and the scan checks each (``Known``). A name bound
more than ``MAX_MEANINGS`` ways means ``TOO_MANY`` (which the scan refuses): each name's meanings stay few, so
the scan's work is linear in the cells' size (each node of the tree is looked at once, against a few meanings).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache

NAMED_BY_STRING = {"register_buffer", "register_parameter", "add_module", "register_module"}  # self.<first argument>
VALUE, FUNCTION = ":value", ":function"  # meanings of a name that are not a module path
TOO_MANY = ":too many"  # the meaning of a name bound more than MAX_MEANINGS ways (honest cells bind a name 1-3 ways)
MAX_MEANINGS = 8
COURSE_IMPORTS = """
import math
import statistics
import time
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import Function
import triton
import triton.language as tl
"""  # what the course's given cells bind, for a scan told nothing else (tests, a single cell)


@dataclass(frozen=True)
class Known:
    """What the names an answer cell finds bound mean: each name's meanings (module or object paths such as
    ``torch.nn.functional``, or ``VALUE``/``FUNCTION``), and the attribute names those cells define."""

    names: dict = field(default_factory=dict)
    attributes: frozenset = frozenset()

    @classmethod
    def course(cls) -> "Known":
        return cls().given(COURSE_IMPORTS)

    def given(self, source: str, setup: bool = False) -> "Known":
        """With a given cell: its definitions as the examinee runs them (a ``setup`` cell: everything it binds)."""
        return self._with(cell(source, definitions_only=not setup))

    def answer(self, source: str) -> "Known":
        """With an answer cell the examinee runs."""
        return self._with(cell(source))

    def _with(self, walked: "Cell | None") -> "Known":
        if walked is None:
            return self
        merged = dict(self.names)
        for name, meanings in walked.meanings(self.names).items():
            merged[name] = capped(merged.get(name, frozenset()) | meanings)
        return Known(merged, self.attributes | walked.attributes)


@dataclass(frozen=True)
class Cell:
    """A cell's code, walked once: its nodes, each node's parent, what it binds and the attributes it defines."""

    nodes: tuple
    parents: dict
    names: dict  # name -> meanings (imports: paths; def and class: FUNCTION; anything else: VALUE)
    aliases: tuple  # (name, ["torch", "nn"]) for ``name = torch.nn``: the name means that path too
    attributes: frozenset

    def meanings(self, before: dict) -> dict[str, frozenset]:
        """What each name the cell binds means, ``before`` being what names meant before it."""
        found = dict(self.names)
        for name, parts in self.aliases:
            paths = (found.get(parts[0], frozenset()) | before.get(parts[0], frozenset())) - {VALUE, FUNCTION, TOO_MANY}
            found[name] = capped(found[name] | {".".join([path, *parts[1:]]) for path in paths})
        return found


def capped(meanings: frozenset) -> frozenset:
    """``meanings``, or ``{TOO_MANY}`` when they are more than ``MAX_MEANINGS``."""
    return meanings if len(meanings) <= MAX_MEANINGS else frozenset({TOO_MANY})


@lru_cache(maxsize=1024)
def cell(source: str, definitions_only: bool = False) -> Cell | None:
    """``source`` walked (with ``definitions_only``: what the examinee runs of a given cell, ``referee._is_definition``);
    None if it is not Python, or nested deeper than Python's parser goes (it fails when run, with its own error)."""
    from autograder.grading.running.judging.referee import _is_definition, ipython_python

    try:
        tree = ast.parse(source)
    except (RecursionError, MemoryError):  # what the parser raises for an expression thousands deep
        return None
    except SyntaxError:
        try:  # magics: what IPython (and the examinee) would run; IPython gives up after 500 rewrites (RuntimeError)
            tree = ast.parse(ipython_python(source))
        except (SyntaxError, RecursionError, MemoryError, RuntimeError):
            return None
    if definitions_only:
        tree = ast.Module([s for s in tree.body if _is_definition(s)], [])
    nodes, parents, stack = [], {}, [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
            stack.append(child)
    names, aliases = _bindings(nodes)
    return Cell(tuple(nodes), parents, names, aliases, own_attributes(nodes))


def _bindings(nodes: list) -> tuple[dict, tuple]:
    """What each name the nodes bind means, and the names assigned a name or attribute chain (``G = torch.nn``)."""
    found: dict[str, set] = {}

    def bind(name: str, meaning: str) -> None:
        found.setdefault(name, set()).add(meaning)

    aliases = []
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                bind(alias.asname or alias.name.split(".")[0], alias.name if alias.asname else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                bind(alias.asname or alias.name, f"{'.' * node.level}{node.module or ''}.{alias.name}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind(node.name, FUNCTION)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bind(node.id, VALUE)
        elif isinstance(node, ast.arg):
            bind(node.arg, VALUE)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bind(node.name, VALUE)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bind(node.rest, VALUE)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bind(name, VALUE)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and chain(node.value):
            aliases.append((node.targets[0].id, chain(node.value)))
    return {name: capped(frozenset(meanings)) for name, meanings in found.items()}, tuple(aliases)


def chain(node: ast.AST) -> list[str] | None:
    """``["torch", "nn", "functional"]`` for ``torch.nn.functional``; None if it is not names and attributes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else None


def own_attributes(nodes: list) -> frozenset:
    """Attribute names the source defines: ``self.x = ...``, what a class body binds, ``setattr(o, "x", ...)``,
    ``self.register_buffer("x", ...)``, a named tuple's fields."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(statement.name)
                targets = statement.targets if isinstance(statement, ast.Assign) else \
                    [statement.target] if isinstance(statement, ast.AnnAssign) else []
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Call) and literal(node.args[1:2]) and isinstance(node.func, ast.Name) \
                and node.func.id == "setattr":
            names.add(node.args[1].value)
        elif isinstance(node, ast.Call) and literal(node.args[:1]) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in NAMED_BY_STRING:
            names.add(node.args[0].value)
        elif isinstance(node, ast.Call) and chain(node.func) and chain(node.func)[-1] == "namedtuple":
            fields = node.args[1] if len(node.args) > 1 else None
            items = fields.elts if isinstance(fields, (ast.List, ast.Tuple)) else [fields]
            names |= {w for i in items if literal([i]) for w in re.split(r"[\s,]+", i.value) if w}
    return frozenset(names)


def literal(nodes: list) -> bool:
    return bool(nodes) and isinstance(nodes[0], ast.Constant) and isinstance(nodes[0].value, str)
