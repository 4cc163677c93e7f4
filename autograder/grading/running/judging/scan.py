"""A scan of a student's answer cells, before the grader runs them where its checks are answered.

The grader answers the referee's questions in an examinee process that runs only the notebook's given
cells and the student's answer cells (``autograder.grading.running.judging.examinee``). An answer that
reached the interpreter, the grader's own objects or torch's internals could make that process report
something untrue, so an answer cell is run there only if everything it names is on the allow-list
(``allowed``: the modules, names and attributes an answer may use, derived from the pinned versions).
Anything else is refused: every check of what the cell defines fails, with a message naming what it used
and its line. The rule is about the source alone (data whose truth does not depend on any process).

What a name in an answer means is what the cells before it bound (``Known``: the given cells' imports and
definitions, the earlier answer cells'), what the answer binds itself, else a builtin. A name bound two
ways (``F`` imported as ``torch.nn.functional``, then ``F = Square``) must pass the rules of both; a name
bound more than ``bindings.MAX_MEANINGS`` ways is refused.

The scan runs in the examinee (``screen``, before any answer runs there), so its time is the notebook's
(its budget), and its work is linear in the cell's size: the tree is walked once, each node checked against
the few meanings of its names (a chain of attributes once, at its outermost node).

Refused, besides what the allow-list does not name:

- modules used as values (``m = torch.nn``, ``f(numpy)``): a module's names are reached only through it;
- no string ever becomes code or an attribute: a string in an annotation (``def f(x: "..."):``, unless
  inside ``Literal[...]``) and ``from __future__ import annotations``; ``getattr``, ``hasattr``,
  ``setattr`` and ``delattr`` unless called with an allowed attribute name written out; ``.format`` and
  ``.format_map`` unless on a string written out whose fields name no attribute or index
  (``"{0.__class__}"``); a string that names a special attribute (``"__class__"``); ``type(x)`` and
  ``x.__class__`` other than for their ``__name__`` or in a comparison (a class made from strings);
- torch.library registrations in torch's own namespaces (``"aten::mul"``), or for an operator named
  other than by a string written out or a function the answers define;
- special methods other than ``SPECIAL_METHODS`` (``__torch_function__``, ``__reduce__``, ``__del__``...),
  class keywords (a metaclass), special names, keyword arguments with a special name;
- private attributes other than the answer's own (assigned by the answers or the given cells, and not a
  name torch or numpy uses) and a named tuple's ``_fields``, ``_replace``, ``_asdict``, ``_make``;
- changing what the answer did not make: assigning or deleting an attribute or item of a module or of a
  name the answer cell did not bind (``torch.allclose = ...``, ``F.gelu = ...``, ``CONSTANTS["x"] = 1``).
"""

from __future__ import annotations

import ast
import re
import string
from functools import lru_cache

from autograder.grading.running.judging import allowed
from autograder.grading.running.judging.bindings import (FUNCTION, MAX_MEANINGS, TOO_MANY, VALUE, Cell, Known, cell,
                                                         chain, capped, literal)

SPECIAL_METHODS = {"__init__", "__call__", "__repr__", "__str__", "__post_init__"}
SPECIAL_NAMES = {"__name__", "__doc__"}  # as names (``if __name__ == "__main__"``)
SPECIAL_STRINGS = {"__main__"}
TYPE_NAMES = {"__name__", "__qualname__"}  # what type(x) and x.__class__ may be used for
ATTRIBUTE_BUILTINS = {"getattr", "hasattr", "setattr", "delattr"}
# torch.library's functions that name an operator (first argument, or these keywords): never one of torch's
REGISTRATIONS = {f"torch.library.{n}" for n in ("custom_op", "triton_op", "define", "impl", "impl_abstract",
                                                 "register_fake", "register_autograd", "register_kernel",
                                                 "register_vmap", "register_autocast")}
OPERATOR_KEYWORDS = {"op", "qualname", "name"}


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _private(name: str) -> bool:
    return name.startswith("_") and not _dunder(name) and name != "_"


def problems(source: str, known: Known | None = None) -> list[str]:
    """What in ``source`` (an answer cell's code) the grader refuses to run: ``line N: what``, in order.
    ``known``: what the cells before it bound (the course's usual imports if not said)."""
    walked = cell(source)
    if walked is None:
        return []
    scan = _Scan(walked, known or _course())
    try:
        scan.run()
    except RecursionError:  # (ast.unparse, for a message: an expression over a thousand deep)
        return ["line 1: an expression nested too deeply to read"]
    return [f"line {line}: {what}" for line, what in sorted(set(scan.found))]


def screen(steps: list[dict]) -> list[dict]:
    """``steps`` (``examinee.program``'s) with each answer not yet scanned (``"scanned": False``) scanned in order, what
    the cells before it bound resolving its names: one the scan refuses is not run (``source`` None), and ``why`` says
    what it uses. Run in the examinee, inside the notebook's budget."""
    known = Known()
    for step in steps:
        if step["kind"] == "given":
            known = known.given(step["source"], bool(step.get("setup")))
        elif step["kind"] == "answer" and step["source"] is not None:
            found = [] if step.get("scanned") else problems(step["source"], known)
            step["scanned"] = True
            if found:
                step.update(source=None, why=refusal(step["grade_id"], found), refused=True)
            else:
                known = known.answer(step["source"])
    return steps


@lru_cache(maxsize=1)
def _course() -> Known:
    return Known.course()


class _Scan:
    """One answer cell's walk: each node checked against the allow-list, ``found`` what is refused."""

    def __init__(self, cell: Cell, known: Known) -> None:
        self.cell, self.list, self.parents = cell, allowed.load(), cell.parents
        self.meanings = dict(known.names)
        self.own_names = cell.meanings(known.names)
        for name, meanings in self.own_names.items():  # (a builtin the answer rebinds somewhere: both)
            self.meanings[name] = capped(self._name_meanings(name) | meanings)
        self.own_attributes = known.attributes | cell.attributes
        self.found: list[tuple[int, str]] = []

    def flag(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    def run(self) -> None:
        for node in self.cell.nodes:
            check = getattr(self, f"_{type(node).__name__}", None)
            if check is not None:
                check(node)
        for annotation in _annotations(self.cell.nodes):
            self._annotation(annotation)

    # --- what a name means -------------------------------------------------------------------------

    def _name_meanings(self, name: str) -> frozenset:
        meanings = self.meanings.get(name)
        if meanings is None and name in _interpreter_builtins():
            return frozenset({f"builtins.{name}"})
        return meanings or frozenset()

    def _Name(self, node: ast.Name) -> None:
        if _dunder(node.id):
            if node.id not in SPECIAL_NAMES:
                self.flag(node, f"the special name `{node.id}`")
            return  # (__name__, __doc__: the namespace's own strings)
        if not isinstance(node.ctx, ast.Load) or self._is_base(node):
            return  # (stored: the answer's own; a base: checked with its attributes)
        for meaning in self._name_meanings(node.id):
            if meaning == TOO_MANY:
                self._too_many(node, node.id)
            elif meaning.startswith("builtins."):
                self._builtin(node, meaning.removeprefix("builtins."))
            elif meaning not in (VALUE, FUNCTION):
                self._path(node, meaning.split("."), node)

    def _too_many(self, node: ast.AST, name: str) -> None:
        self.flag(node, f"the name `{name}`, bound more than {MAX_MEANINGS} different ways")

    def _builtin(self, node: ast.Name, name: str) -> None:
        parent = self.parents.get(id(node))
        called = isinstance(parent, ast.Call) and parent.func is node
        if name not in self.list["builtins"]:
            self.flag(node, f"`{name}`")
        elif name in ATTRIBUTE_BUILTINS:
            if not (called and literal(parent.args[1:2])):
                self.flag(node, f"`{name}` with an attribute name that is not written out (or not allowed)")
            else:
                self._attribute_call(parent, name)
        elif name == "type" and not (called and len(parent.args) == 1 and not parent.keywords
                                     and self._type_use(parent) or self._class_checked(node)):
            self.flag(node, "`type` other than for type(x).__name__ or in a comparison")

    def _type_use(self, node: ast.AST) -> bool:
        """Whether the type ``node`` gives is used only for its name or in a comparison."""
        parent = self.parents.get(id(node))
        return isinstance(parent, ast.Compare) or isinstance(parent, ast.Attribute) and parent.attr in TYPE_NAMES

    def _class_checked(self, node: ast.AST) -> bool:
        """Whether ``node`` is a class ``isinstance`` or ``issubclass`` checks against: ``isinstance(c, type)``."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Tuple):
            parent = self.parents.get(id(parent))
        return isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in (
            "isinstance", "issubclass") and node not in parent.args[:1]

    def _attribute_call(self, call: ast.Call, name: str) -> None:
        """``getattr(o, "x")`` is checked as ``o.x``; ``setattr``/``delattr`` as changing it."""
        base, attribute = call.args[0], call.args[1].value
        change = name in ("setattr", "delattr")
        self._attributes(call, base, [attribute], change, used_as_value=name == "getattr")

    def _is_base(self, node: ast.AST) -> bool:
        """Whether ``node`` is the object of an attribute (``torch`` in ``torch.nn``) or of ``getattr(node, "x")``."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Attribute):
            return True
        return (isinstance(parent, ast.Call) and parent.args[:1] == [node] and isinstance(parent.func, ast.Name)
                and parent.func.id in ATTRIBUTE_BUILTINS and literal(parent.args[1:2])
                and any(m.startswith("builtins.") for m in self._name_meanings(parent.func.id)))

    # --- attributes ---------------------------------------------------------------------------------

    def _Attribute(self, node: ast.Attribute) -> None:
        if isinstance(self.parents.get(id(node)), ast.Attribute):
            return  # checked with the outermost attribute of its chain
        parts, base = [], node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        self._attributes(node, base, list(reversed(parts)), not isinstance(node.ctx, ast.Load),
                         used_as_value=not isinstance(node.ctx, (ast.Store, ast.Del)))

    def _attributes(self, node: ast.AST, base: ast.AST, parts: list[str], change: bool, used_as_value: bool) -> None:
        """``base.parts[0].parts[1]...``, checked for each meaning of ``base``; ``change``: the last is assigned."""
        if isinstance(base, ast.Constant) and isinstance(base.value, str) and parts[0] in ("format", "format_map"):
            self._format_string(node, base.value)
            parts = parts[1:]
        if change and not (isinstance(base, ast.Name) and base.id in self.own_names):
            self.flag(node, f"changing `{ast.unparse(node)[:60]}`, which the answer did not make")
            return
        meanings = self._name_meanings(base.id) if isinstance(base, ast.Name) else frozenset({VALUE})
        for meaning in meanings or {VALUE}:
            builtin = meaning.removeprefix("builtins.") if meaning.startswith("builtins.") else None
            if meaning == TOO_MANY:
                self._too_many(node, base.id)
            elif builtin and (builtin not in self.list["builtins"] or builtin in ATTRIBUTE_BUILTINS | {"type"}):
                self.flag(node, f"`{builtin}`")
            elif builtin or meaning in (VALUE, FUNCTION):
                self._value_attributes(node, parts, change)
            else:
                self._path(node, meaning.split(".") + parts, node if used_as_value else None, change)

    def _value_attributes(self, node: ast.AST, parts: list[str], change: bool) -> None:
        for i, name in enumerate(parts):
            last = i == len(parts) - 1
            problem = self._value_attribute_problem(node, name, stored=change and last)
            if name == "__class__" and not (parts[i + 1:i + 2] and parts[i + 1] in TYPE_NAMES
                                            or last and self._type_use(node)):
                problem = problem or "`__class__` other than for x.__class__.__name__ or in a comparison"
            if problem:
                self.flag(node, problem)
                return

    def _value_attribute_problem(self, node: ast.AST, name: str, stored: bool = False) -> str | None:
        data = self.list
        if name in data["never"]:
            return f"the attribute `{name}`"
        if _dunder(name):
            if name not in data["dunders"] or stored and name == "__class__":
                return f"the special attribute `{name}`"
            return None
        if _private(name):
            own = name in self.own_attributes and name not in data["torch_private"]
            return None if own or name in data["private"] else f"the private attribute `{name}`"
        if stored:
            return None  # an attribute the answer sets is its own
        if name in ("format", "format_map"):
            return f"`.{name}` other than on a string written out"
        if name not in data["attributes"] and name not in self.own_attributes:
            return f"the attribute `{name}`"
        return None

    def _path(self, node: ast.AST, parts: list[str], used_as_value: ast.AST | None, change: bool = False) -> None:
        """A path from a module (``torch.nn.functional.gelu``): each step on the list, then a value's attributes."""
        data = self.list["modules"]
        if change:
            self.flag(node, f"changing `{'.'.join(parts)[:80]}`, which the answer did not make")
            return
        if parts[0] not in data:
            self.flag(node, f"`{'.'.join(parts)[:80]}`")
            return
        module = parts[0]
        for i in range(1, len(parts)):
            name = parts[i]
            if _dunder(name):
                self._value_attributes(node, parts[i:], change)
                return
            if module == "torch" and name == "ops":
                self._operators(node, parts[i + 1:], used_as_value)
                return
            if name not in data[module]:
                self.flag(node, f"`{'.'.join(parts[:i + 1])}`")
                return
            if f"{module}.{name}" not in data:  # an object of the module: its attributes are a value's
                self._value_attributes(node, parts[i + 1:], change)
                self._library_object(node, ".".join(parts[:i + 1]), used_as_value, i == len(parts) - 1)
                return
            module = f"{module}.{name}"
        if used_as_value is not None:
            self.flag(node, f"the module `{module}` used as a value")

    def _library_object(self, node: ast.AST, path: str, used_as_value, whole: bool) -> None:
        """torch.library's registrations: only called, naming an operator outside torch's namespaces."""
        if path not in REGISTRATIONS or not whole or used_as_value is None:
            return
        parent = self.parents.get(id(node))
        if not (isinstance(parent, ast.Call) and parent.func is node):
            self.flag(node, f"`{path}` other than called")
            return
        named = parent.args[:1] or [k.value for k in parent.keywords if k.arg in OPERATOR_KEYWORDS][:1]
        problem = self._operator_problem(named[0]) if named else None
        if problem:
            self.flag(node, f"`{path}` for {problem}")

    def _operator_problem(self, op: ast.AST) -> str | None:
        if literal([op]):
            namespace = op.value.split("::")[0] if "::" in op.value else ""
            if not namespace or namespace.startswith("_") or namespace in self.list["op_namespaces"]:
                return f"the operator '{op.value}' (torch's own namespace, or none)"
            return None
        if isinstance(op, ast.Name) and self._name_meanings(op.id) == frozenset({FUNCTION}):
            return None
        parts = chain(op)
        if parts and len(parts) > 2 and self._name_meanings(parts[0]) == frozenset({"torch"}) and parts[1] == "ops":
            return None  # torch.ops.<namespace>...: the namespace is checked where it is named
        return "an operator named other than by a string written out or a function the answers define"

    def _operators(self, node: ast.AST, parts: list[str], used_as_value) -> None:
        """``torch.ops.<namespace>.<op>[.<overload>]``: an answer's own operators, never torch's."""
        namespace = parts[0] if parts else ""
        if not parts or _private(namespace) or _dunder(namespace) or namespace in self.list["op_namespaces"]:
            self.flag(node, f"`torch.ops{'.' + namespace if namespace else ''}`")
        elif len(parts) < 2 and used_as_value is not None:
            self.flag(node, f"`torch.ops.{namespace}` used as a value")
        elif any(_private(p) or _dunder(p) for p in parts[1:3]):
            self.flag(node, f"`torch.ops.{'.'.join(parts[:3])}`")
        else:
            self._value_attributes(node, parts[3:], False)

    # --- strings, annotations, imports, definitions --------------------------------------------------

    def _format_string(self, node: ast.AST, text: str) -> None:
        try:
            fields = list(_format_fields(text))
        except ValueError:
            return  # it fails when run
        if any(re.search(r"[.\[]", name) for name in fields):
            self.flag(node, "a format string whose fields name attributes or indexes")

    def _Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and not re.search(r"\s", node.value):
            dunders = set(re.findall(r"__\w+?__", node.value)) - self.list["dunders"] - SPECIAL_STRINGS
            if dunders:
                self.flag(node, f"a string naming the special attribute `{sorted(dunders)[0]}`")

    def _annotation(self, annotation: ast.AST) -> None:
        literal_args = set()
        for node in ast.walk(annotation):
            if isinstance(node, ast.Subscript) and self._is_literal_type(node.value):
                literal_args |= {id(n) for n in ast.walk(node.slice)}
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in literal_args:
                self.flag(node, "a string in an annotation (code may run it)")
                return

    def _is_literal_type(self, node: ast.AST) -> bool:
        parts = chain(node)
        return bool(parts) and any(".".join([m, *parts[1:]]) == "typing.Literal" for m in self._name_meanings(parts[0]))

    def _Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._import(node, alias.name.split("."), module=True)

    def _ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "__future__":
            self.flag(node, "`from __future__ import ...` (annotations would become strings code may run)")
            return
        if node.level or not node.module:
            self.flag(node, f"importing `{'.' * node.level}{node.module or ''}`")
            return
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"importing `*` from `{node.module}`")
            else:
                self._import(node, node.module.split(".") + [alias.name], module=False)

    def _import(self, node: ast.AST, parts: list[str], module: bool) -> None:
        data = self.list["modules"]
        path = ".".join(parts)
        steps_ok = parts[0] in data and all(
            ".".join(parts[:i]) in data and parts[i] in data[".".join(parts[:i])] for i in range(1, len(parts)))
        if not steps_ok or (module and path not in data):
            self.flag(node, f"importing `{path}`")

    def _FunctionDef(self, node: ast.FunctionDef) -> None:
        if _dunder(node.name) and node.name not in SPECIAL_METHODS:
            self.flag(node, f"the special method `{node.name}`")

    _AsyncFunctionDef = _FunctionDef

    def _ClassDef(self, node: ast.ClassDef) -> None:
        for keyword in node.keywords:
            self.flag(node, "a metaclass" if keyword.arg == "metaclass" else f"the class keyword `{keyword.arg}`")

    def _keyword(self, node: ast.keyword) -> None:
        if node.arg and _dunder(node.arg):
            self.flag(self.parents.get(id(node), node), f"the keyword argument `{node.arg}`")

    def _Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            base = node.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if not (isinstance(base, ast.Name) and base.id in self.own_names):
                self.flag(node, f"changing `{ast.unparse(node)[:60]}`, which the answer did not make")

    def _MatchClass(self, node: ast.MatchClass) -> None:
        for name in node.kwd_attrs:  # case C(x=...): reads the attribute x
            problem = self._value_attribute_problem(node, name)
            if problem:
                self.flag(node, problem)


def _format_fields(text: str):
    """The field names of a format string, those in its format specs included."""
    for _, name, spec, _ in string.Formatter().parse(text):
        if name is not None:
            yield name
        if spec:
            yield from _format_fields(spec)


def _annotations(nodes: tuple):
    for node in nodes:
        if isinstance(node, ast.arg) and node.annotation is not None:
            yield node.annotation
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation


@lru_cache(maxsize=1)
def _interpreter_builtins() -> frozenset:
    import builtins

    return frozenset(dir(builtins))


def refusal(grade_id: str, found: list[str]) -> str:
    """What a student reads for every check of an answer cell the grader refused to run."""
    shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    return (f"the grader did not run your answer cell '{grade_id}': it uses {shown}. Answers may use torch's "
            f"tensor operations, torch.nn, the Function and ctx API and what each assignment teaches, numpy, "
            f"math and plain Python, but nothing that reaches the interpreter, the grader or torch's internals "
            f"(see the course's grading rules)")
