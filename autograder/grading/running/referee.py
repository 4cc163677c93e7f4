"""The referee: re-decides a notebook's value checks in a process that never runs student code.

A test cell runs in the student's own process, so student code can reach whatever decides its
verdict there (IPython's shell, the output recorder, the pipe to the grader) and forge it. The
referee is a second process, forked from the same warm process and sandboxed the same way, that
holds the instructor's copy of the tests and never executes a line the student wrote. After a
test cell has run in the student's process, the referee runs that cell again itself:

- every name the solution cells define (``Cube``, ``Net``) is a ``StudentObject``: a name only,
  which the referee cannot call or inspect; a statement that needs one is skipped, and every name
  it assigns, and every tensor or container it uses, becomes ``UNAVAILABLE``;
- ``check_function(F, reference, *args)`` and ``check_forward(...)`` on a student's Function, and
  ``check_callable(f, reference, *args)`` on a student's function or Module class, are decided by
  the referee itself: the referee computes the reference itself, in float64, on the
  cell's own inputs (drawn from the referee's random generator, seeded from ``os.urandom``, so a
  recorded answer is useless) and fresh random upstream gradients, and asks the student's process
  only "apply F (or call f) on these tensors; backward with these upstream gradients; send the
  tensors back" (``answer``). The student's reply is plain data (JSON with tensors as base64 bytes), checked
  before use. A wrong value, an error, or no reply fails the test cell, whatever the student's
  process reported for it.

What the referee cannot judge stays with the student's process: assertions about what a Function
saved, graph node names, in-place identity, modules, plain functions. And a student who knows the
right values can still hand them back without writing the Function (README, threat model).
"""

from __future__ import annotations

import ast
import base64
import builtins
import os
import sys
import types
from dataclasses import dataclass

from autograder.grading.running.wire import Unsupported, decode, encode

JUDGES = ("check_function", "check_forward", "check_callable", "check_saved", "check_values", "check_with")
TRANSFORMS = ("vmap", "forward_ad", "double_backward", "compile", "mutates")  # judged from both sides' results
ALLOWED = {"autograd_in_backward"}  # a permission the in-process check enforces; nothing for the referee to judge


HIDDEN_BEGIN = "### BEGIN " "HIDDEN TESTS"  # in two parts: no file shipped to students holds the marker itself
HIDDEN_END = "### END " "HIDDEN TESTS"


def hidden_chunks(source: str) -> list[tuple[bool, str]]:
    """A test cell's source cut at nbgrader's hidden-test markers: (hidden?, text) in order, markers dropped."""
    chunks, lines, hidden = [], [], False
    for line in source.splitlines(keepends=True):
        if HIDDEN_BEGIN in line or HIDDEN_END in line:
            chunks.append((hidden, "".join(lines)))
            lines, hidden = [], HIDDEN_BEGIN in line
            continue
        lines.append(line)
    chunks.append((hidden, "".join(lines)))
    return [(h, text) for h, text in chunks if text.strip()]


def visible_source(source: str) -> str:
    """What the student's process runs of a test cell the referee decides: the cell without its hidden tests."""
    return "".join(text for hidden, text in hidden_chunks(source) if not hidden)


@dataclass
class Plan:
    """One test cell, run by the referee before the student's notebook: its checks, and whether it decides the cell."""

    pending: list          # (request to the student's process, what judges the reply)
    failure: str | None    # a hidden assert that failed on the referee's own values
    decided: bool          # every hidden statement ran here: the student's process never sees them
    undecidable: list      # else the hidden statements it could not run, with why (for the instructor)


class StudentObject:
    """A name defined by the student's solution cells: the referee may pass it to a judge, nothing else."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", name)

    def __getattr__(self, attribute):
        raise Unsupported(f"{self.name}.{attribute} lives in the student's process")

    def __call__(self, *args, **kwargs):
        raise Unsupported(f"{self.name}() runs student code")

    def __repr__(self) -> str:
        return f"<the student's {self.name}>"


class _Unavailable:
    """A value the referee could not compute (its statement was skipped): any use skips the statement."""

    def __getattr__(self, attribute):
        raise Unsupported("a value the referee could not compute")

    def __call__(self, *args, **kwargs):
        raise Unsupported("a value the referee could not compute")

    def __bool__(self):
        raise Unsupported("a value the referee could not compute")

    def __iter__(self):
        raise Unsupported("a value the referee could not compute")

    def _unsupported(self, *args):
        raise Unsupported("a value the referee could not compute")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __len__ = __getitem__ = __contains__ = _unsupported
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _unsupported
    __abs__ = __neg__ = __float__ = __int__ = __index__ = __format__ = _unsupported
    __hash__ = object.__hash__


UNAVAILABLE = _Unavailable()


# ----------------------------------------------------------------------------------------
# Referee side: runs in the referee's process, never runs student code.


def trusted_cells(notebook: dict) -> dict:
    """What the referee needs from the instructor's notebook (nbformat v4, as a dict): its given and
    test code cells in order, and the names its solution cells define (the student's, in grading)."""
    cells, solutions = [], []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if nbgrader.get("solution"):
            solutions.append(source)
        elif nbgrader.get("grade"):
            cells.append({"kind": "test", "grade_id": nbgrader["grade_id"], "source": source})
        else:
            cells.append({"kind": "given", "grade_id": None, "source": source})
    return {"cells": cells, "student_names": solution_names(solutions)}


def test_cell_id(cell: dict) -> str | None:
    """The grade_id of a graded test cell (nbgrader metadata), else None."""
    nbgrader = cell.get("metadata", {}).get("nbgrader", {})
    return nbgrader.get("grade_id") if nbgrader.get("grade") and not nbgrader.get("solution") else None


def solution_names(sources: list[str]) -> list[str]:
    """The names the solution cells bind at top level (classes, functions, variables)."""
    names = []
    for source in sources:
        for node in _statements(source):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                names += _stored_names(node)
    return sorted(set(names))


def _statements(source: str) -> list[ast.stmt]:
    """A cell's top-level statements; IPython magics become calls the referee will skip."""
    try:
        return ast.parse(source).body
    except SyntaxError:
        from IPython.core.inputtransformer2 import TransformerManager

        try:
            return ast.parse(TransformerManager().transform_cell(source)).body
        except SyntaxError:
            return []


def _stored_names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))]


def _loaded_names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


class Referee:
    """One notebook's tests, run again with the student's objects out of reach.

    ``cells`` are the instructor's code cells in notebook order, each ``{"kind": "given" | "test",
    "grade_id": ..., "source": ...}``; ``ask(requests) -> replies`` reaches the student's process.

    ``plan()`` runs every cell once, before the student's notebook runs: a test cell's checks are
    collected with their expected results (their inputs never depend on the student's answers), to
    be sent in one batch when the student's process reaches the cell (``judge_cell``). A cell whose
    hidden tests the referee runs entirely (every hidden statement: judges, asserts on its own values)
    is *decided* here: the student's process then runs only its visible part and never sees a hidden line.
    """

    def __init__(self, cells: list[dict], student_names: list[str], ask) -> None:
        import torch

        torch.manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        self.cells, self.ask = cells, ask
        # A real module's globals: torch.compile looks a function's module up in sys.modules by name.
        module = types.ModuleType("autograder_referee_tests")
        sys.modules[module.__name__] = module
        self.namespace = module.__dict__
        self.namespace["__builtins__"] = builtins
        self.namespace.update({name: StudentObject(name) for name in student_names})
        self.namespace.update({name: getattr(self, name) for name in JUDGES})
        self.namespace["print"] = lambda *args, **kwargs: None  # the student's process prints the cell's output
        self.pending: list[tuple[dict, object]] = []  # the cell being planned: (request, what judges its reply)
        self.plans: dict[str, Plan] | None = None

    def plan(self) -> list[str]:
        """Run every cell once now; return the test cells the referee decides (their hidden tests run here only)."""
        if self.plans is None:
            self.plans = {}
            for cell in self.cells:
                if cell["kind"] == "given":
                    self._run(cell["source"], definitions_only=True)
                else:
                    self.plans[cell["grade_id"]] = self._plan_test(cell["source"])
        return [grade_id for grade_id, plan in self.plans.items() if plan.decided]

    def judge_cell(self, grade_id: str) -> tuple[int, str | None]:
        """Test ``grade_id``'s planned checks, asked now: (how many the referee decided, the first failure or None)."""
        self.plan()
        plan = self.plans.get(grade_id)
        if plan is None:
            return 0, None
        if not plan.pending:
            return 0, plan.failure
        replies = self.ask([request for request, _ in plan.pending])
        if not (isinstance(replies, list) and len(replies) == len(plan.pending)):
            replies = [None] * len(plan.pending)
        failures = [problem for (_, compare), reply in zip(plan.pending, replies) for problem in [compare(reply)]
                    if problem]
        return len(plan.pending), plan.failure or (failures[0] if failures else None)

    def _plan_test(self, source: str) -> "Plan":
        """Run one test cell: its visible part as far as it can, its hidden part entirely (or not decided)."""
        self.pending, failure, hidden_ran, undecidable = [], None, False, []
        for hidden, chunk in hidden_chunks(source):
            if not hidden:
                self._run(chunk, definitions_only=False)
                continue
            hidden_ran = True
            for statement in _statements(chunk) if failure is None else []:
                try:
                    exec(compile(ast.Module([statement], []), "<hidden test>", "exec"), self.namespace)
                except AssertionError as error:  # a hidden assert on the referee's own values
                    failure = str(error) or "a hidden test failed"
                except BaseException as error:  # noqa: BLE001 (needs the student's objects: their process must run it)
                    undecidable.append(f"line {statement.lineno}: {ast.unparse(statement).splitlines()[0][:100]} "
                                       f"({type(error).__name__}: {str(error)[:100]})")
                    self._make_unavailable(statement)
                for name in JUDGES:
                    self.namespace[name] = getattr(self, name)
        return Plan(self.pending, failure, hidden_ran and not undecidable and bool(self.pending), undecidable)

    def _run(self, source: str, definitions_only: bool) -> None:
        for statement in _statements(source):
            if definitions_only and not _is_definition(statement):
                continue
            if isinstance(statement, ast.Assert):
                continue  # visible asserts about the student's objects are the student's process's to decide
            try:
                exec(compile(ast.Module([statement], []), "<test>", "exec"), self.namespace)
            except BaseException:  # noqa: BLE001 (any failure here only means: not decidable outside)
                self._make_unavailable(statement)
            for name in JUDGES:
                self.namespace[name] = getattr(self, name)

    def _make_unavailable(self, statement: ast.stmt) -> None:
        """What a skipped statement assigned, and every tensor or container it used, may now be wrong."""
        for name in _stored_names(statement):
            self.namespace[name] = UNAVAILABLE
        for name in _loaded_names(statement):
            if not _kept(self.namespace.get(name)):
                self.namespace[name] = UNAVAILABLE

    def check_function(self, function, reference, *args, rtol: float = 1e-6, atol: float = 1e-8,
                       inplace: bool = False, constants: tuple = (), **options) -> None:
        """What the test's ``check_function`` call decides from values: outputs and gradients."""
        self._judge(function, reference, args, rtol, atol, inplace, constants, options, backward=True)

    def check_forward(self, function, reference, *args, rtol: float = 1e-6, atol: float = 1e-8,
                      inplace: bool = False) -> None:
        """What the test's ``check_forward`` call decides: forward's outputs."""
        self._judge(function, reference, args, rtol, atol, inplace, (), {}, backward=False)

    def check_callable(self, function, reference, *args, rtol: float = 1e-6, atol: float = 1e-8,
                       uses: tuple = (), **options) -> None:
        """What the test's ``check_callable`` call decides: a function's (or a Module's) outputs and gradients,
        that its graph holds the Functions it must ``use``, and its results under the ``options``' transforms."""
        self._judge(function, reference, args, rtol, atol, False, (), options, backward=not options.get("mutates"),
                    kind="call", uses=uses)

    def check_saved(self, function, reference, *args, saves=None, max_saved: int | None = None,
                    inplace: bool = False, rtol: float = 1e-6, atol: float = 1e-8) -> None:
        """What the test's ``check_saved`` call decides: the tensors the Function keeps for backward."""
        import torch

        from autograder.student.checker.saved import expected_saved, saved_problem

        if not isinstance(function, StudentObject):
            raise Unsupported("not a check of the student's Function")
        if (saves is None) == (max_saved is None):
            raise TypeError("check_saved needs saves=... or max_saved=..., not both")
        grad = [isinstance(a, torch.Tensor) and a.is_floating_point() for a in args]
        leaves = [a.detach().to(torch.float64).clone().requires_grad_(True) if wanted else a
                  for a, wanted in zip(args, grad)]
        expected = []
        if saves is not None:
            with torch.enable_grad():
                outputs = reference(*[a.detach().clone().requires_grad_(True) if w else a for a, w in zip(leaves, grad)])
            expected = expected_saved(saves, leaves, tuple(outputs) if isinstance(outputs, (tuple, list)) else
                                      (outputs,), None)
        largest = max((a.numel() for a in leaves if isinstance(a, torch.Tensor)), default=0)
        request = {"target": function.name, "kind": "saved", "args": [encode(a) for a in leaves], "grad": grad,
                   "inplace": bool(inplace), "upstream": None}

        def compare(reply) -> str | None:
            if not isinstance(reply, dict):
                return _found(function.name, "could not be checked: your notebook's process sent no answer")
            if reply.get("error") is not None:
                return _found(function.name, f"failed ({str(reply['error'])[:300]})")
            try:
                saved = [decode(t) for t in reply["saved"]]
                attributes = [str(a) for a in reply["attributes"]][:20]
            except (KeyError, TypeError, ValueError) as error:
                return _found(function.name, f"could not be checked: your notebook's process sent a malformed "
                                             f"answer ({error})")
            if not all(isinstance(t, torch.Tensor) for t in saved):
                return _found(function.name, "saved something that is not a tensor of a plain dtype")
            problem = saved_problem(function.name, saved, attributes, expected, max_saved, largest, rtol, atol)
            return problem and _found(function.name, problem, named=True)

        self.pending.append((request, compare))

    def check_values(self, function, reference, *args, rtol: float = 1e-9, atol: float = 0.0) -> None:
        """What the test's ``check_values`` call decides: a plain function's result on plain data."""
        self._judge_data(None, function, reference, args, rtol, atol)

    def check_with(self, harness, function, reference, *args, rtol: float = 1e-9, atol: float = 0.0) -> None:
        """What the test's ``check_with`` call decides: the notebook's ``harness`` run with the student's object."""
        if not isinstance(harness, types.FunctionType) or harness.__name__ == "<lambda>":
            raise Unsupported("check_with needs a harness the notebook's visible cells define by name")
        self._judge_data(harness, function, reference, args, rtol, atol)

    def _judge_data(self, harness, function, reference, args, rtol, atol) -> None:
        from autograder.student.checker.harness import _copies, as_data, same_data, short, with_message

        if not isinstance(function, StudentObject):
            raise Unsupported("not a check of the student's object")
        want = as_data(reference(*_copies(args)) if harness is None else harness(reference, *_copies(args)))
        request = {"target": function.name, "kind": "values" if harness is None else "with",
                   "harness": None if harness is None else harness.__name__, "args": [encode(a) for a in args],
                   "grad": [False] * len(args), "inplace": False, "upstream": None}

        def compare(reply) -> str | None:
            if not isinstance(reply, dict):
                return _found(function.name, "could not be checked: your notebook's process sent no answer")
            if reply.get("error") is not None:
                return _found(function.name, f"failed ({str(reply['error'])[:300]})")
            try:
                got = decode(reply["result"])
            except (KeyError, TypeError, ValueError) as error:
                return _found(function.name, f"could not be checked: a malformed answer ({error})")
            if same_data(got, want, rtol, atol):
                return None
            if harness is not None:
                return _found(function.name, with_message(harness.__name__, function.name, got, want), named=True)
            return _found(function.name, f"{function.name}{tuple(short(a) for a in args)} gives {short(got)}, "
                                         f"expected {short(want)}", named=True)

        self.pending.append((request, compare))

    def _judge(self, function, reference, args, rtol, atol, inplace, constants, options, backward,
               kind: str = "apply", uses: tuple = ()) -> None:
        import torch

        from autograder.student.checker.transforms import difference, draw_payload, fresh, run_transform, used_outputs

        if not isinstance(function, StudentObject) or set(options) - set(TRANSFORMS) - ALLOWED:
            raise Unsupported("not a check of the student's Function")
        if any(not isinstance(c, int) for c in constants):
            raise Unsupported("constants named, not numbered")
        grad = [isinstance(a, torch.Tensor) and a.is_floating_point() and i not in constants
                and not options.get("mutates") for i, a in enumerate(args)]
        leaves = [a.detach().to(torch.float64).clone().requires_grad_(wanted) if isinstance(a, torch.Tensor)
                  and a.is_floating_point() else a.clone() if isinstance(a, torch.Tensor) else a
                  for a, wanted in zip(args, grad)]
        request = {"target": function.name, "kind": kind, "args": [encode(a) for a in leaves], "grad": grad,
                   "inplace": bool(inplace), "upstream": None}
        with torch.enable_grad():
            expected = reference(*[a.clone() if w and inplace else a for a, w in zip(leaves, grad)])
        expected = tuple(expected) if isinstance(expected, (tuple, list)) else (expected,)
        upstream = []
        if backward:
            upstream = [torch.randn_like(e) if isinstance(e, torch.Tensor) and e.requires_grad else None
                        for e in expected]
            request["upstream"] = [None if u is None else encode(u) for u in upstream]
        words = ("forward's output", "backward's gradient") if kind == "apply" else ("output", "the gradient")
        transforms = []  # (kind, the reference's results) for each transform asked for
        for name in [t for t in TRANSFORMS if options.get(t)]:
            used = used_outputs(expected)
            payload = draw_payload(name, leaves, expected)
            transforms.append((name, run_transform(name, reference, fresh(leaves), payload, used)))
            request.setdefault("transforms", []).append({
                "kind": name, "used": used, "payload": {k: [encode(v) for v in vs] for k, vs in payload.items()}})

        def compare(reply) -> str | None:
            problem = self._compare(leaves, grad, expected, upstream, reply, rtol, atol, words)
            if problem is None and reply.get("upstream_modified") is True:
                problem = ("backward changed grad_output in place: another branch of the graph that shares it then "
                           "gets a wrong gradient. Compute a new tensor (grad_output * mask), do not write into it")
            if problem is None and inplace and (reply.get("returned_inputs") or [None])[0] is None:
                problem = ("should return its input tensor itself, modified in place (and marked with "
                           "ctx.mark_dirty), not a new tensor")
            for (name, want), got in zip(transforms, (reply.get("transforms") or [None] * len(transforms))
                                         if problem is None else []):
                if problem is not None:
                    break
                if not isinstance(got, dict) or (got.get("error") is None and not isinstance(got.get("results"), list)):
                    problem = f"could not be checked {name}: your notebook's process sent no answer"
                elif got.get("error") is not None:
                    problem = f"failed {name} ({str(got['error'])[:300]})"
                else:
                    try:
                        problem = difference(name, [decode(r) if isinstance(r, dict) and "other" not in r else r
                                                    for r in got["results"]], want, rtol, atol)
                    except (KeyError, TypeError, ValueError) as error:
                        problem = f"could not be checked {name}: a malformed answer ({error})"
            if problem is None and len(reply.get("transforms") or []) != len(transforms):  # (problem None: a dict)
                problem = "could not be checked: your notebook's process sent the wrong number of results"
            if problem is None and uses:
                from autograder.student.checker.callables import missing_functions, missing_message

                names = [str(n) for n in reply.get("graph") or []][:200]
                if missing_functions(uses, names):
                    return _found(function.name, missing_message(function.name, missing_functions(uses, names),
                                                                 names), named=True)
            return problem and _found(function.name, problem)

        self.pending.append((request, compare))

    @staticmethod
    def _compare(leaves, grad, expected, upstream, reply, rtol, atol, words) -> str | None:
        """What is wrong with the student's reply, or None when outputs (and gradients) match."""
        import torch

        from autograder.student.checker.references import _close

        if not isinstance(reply, dict):
            return "could not be checked: your notebook's process sent no answer"
        if reply.get("error") is not None:
            return f"failed ({str(reply['error'])[:300]})"
        try:
            outputs = [decode(o) if isinstance(o, dict) and "other" not in o else o for o in reply["outputs"]]
        except (KeyError, TypeError, ValueError) as error:
            return f"could not be checked: your notebook's process sent a malformed answer ({error})"
        if len(outputs) != len(expected):
            return f"returned {len(outputs)} outputs, the reference {len(expected)}"
        for k, (got, want) in enumerate(zip(outputs, expected)):
            if not isinstance(want, torch.Tensor):
                from autograder.student.checker.harness import same_data, short

                if not same_data(got, want, max(rtol, 1e-12), atol):
                    return f"{words[0]} {k} is {short(got)}, expected {short(want)}"
                continue
            if not isinstance(got, torch.Tensor):
                return f"{words[0]} {k} is not a tensor"
            if got.shape != want.shape or got.dtype != want.dtype:
                return (f"{words[0]} {k} has shape {list(got.shape)} and dtype {got.dtype}, expected "
                        f"{list(want.shape)} and {want.dtype}")
            if not (_close(got, want, rtol, atol) if want.is_floating_point() else torch.equal(got, want)):
                return f"{words[0]} {k} is wrong"
        if not any(u is not None for u in upstream):
            return None
        used = [(e, u) for e, u in zip(expected, upstream) if u is not None]
        wrt = [leaf for leaf, wanted in zip(leaves, grad) if wanted]
        right = torch.autograd.grad([e for e, _ in used], wrt, [u for _, u in used], allow_unused=True)
        try:
            grads = [decode(g) for g in reply["grads"]]
        except (KeyError, TypeError, ValueError) as error:
            return f"could not be checked: your notebook's process sent malformed gradients ({error})"
        if len(grads) != len(leaves):
            return "could not be checked: your notebook's process sent the wrong number of gradients"
        for i, (got, want) in enumerate(zip([g for g, w in zip(grads, grad) if w], right)):
            position = [j for j, w in enumerate(grad) if w][i]
            want = torch.zeros_like(wrt[i]) if want is None else want
            got = torch.zeros_like(want) if got is None else got
            if not isinstance(got, torch.Tensor) or not _close(got, want, rtol, atol):
                return f"{words[1]} for input {position + 1} is wrong"
        return None


def _found(name: str, problem: str, named: bool = False) -> str:
    """A referee's failure as the student reads it: what is wrong, and that the grader's own check found it."""
    return (f"{'' if named else name + ': '}{problem} (found by the grader's own check, which repeats this cell's "
            f"checks outside your notebook's process, on new random inputs)")


def _is_definition(statement: ast.stmt) -> bool:
    """Statements of the instructor's given cells the referee runs: imports, functions, classes, simple names."""
    if isinstance(statement, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        return True
    return isinstance(statement, ast.Assign) and isinstance(statement.value, (ast.Lambda, ast.Name, ast.Attribute,
                                                                                ast.Constant))


def _kept(value) -> bool:
    """Values a skipped statement cannot have changed: modules, functions, classes, numbers, strings."""
    return value is None or isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                                                type, StudentObject, _Unavailable, bool, int, float, complex, str,
                                                bytes, types.MethodType))
