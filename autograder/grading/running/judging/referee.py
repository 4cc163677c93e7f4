"""The referee: decides a notebook's test cells in a process that never runs student code.

A test cell run in the student's own process can be forged by student code (it reaches IPython's
shell, the output recorder, the pipe to the grader), and the hidden tests it runs can be read by the
Function they call (linecache, ``In``, the caller's frame). The referee is a second process, forked
from the same warm process and sandboxed the same way, that holds the instructor's copy of the
tests and never executes a line the student wrote:

- before the notebook runs, it runs every test cell once (``Referee.plan``): every name the
  solution cells define (``Cube``, ``Net``) is a ``StudentObject`` it may only pass to a judge
  (``autograder.grading.running.judging.judges``: ``check_function``, ``check_saved``, ``check_with``, ...).
  A judge computes what is right itself, on the test's random inputs, and queues a request to the
  student's process as plain data ("apply F on these tensors, backward with these upstream gradients,
  send the results back"), answered by the examinee, a process that runs only the notebook's given
  cells and the student's answer cells (``autograder.grading.running.judging.examinee``, ``answer``).
  Each test cell starts from its own seed (``autograder.student.seeds``), as it does in the student's
  process and in JupyterLab, and each judge draws what it adds (upstream gradients) from a seed of
  its own: the inputs are the same on every run, and a failure says the seed;
- a test cell whose hidden tests it runs entirely (judges, and asserts on its own values) is
  *decided* by the referee: the student's process gets that cell without its hidden tests, so no
  code of the student's ever sees them; the cell passes only if its visible part passed there and
  every judge agrees with the examinee's answers here;
- a cell whose hidden tests need the student's objects in a way no judge covers runs whole in the
  student's process, as before, and ``grade`` counts its points as decided there.

The examinee runs the student's answers, so what they compute is theirs; every fact it reports about
them (what is saved, the graph, sizes, dtypes, whether backward called autograd) is measured there by
the grader's own functions, bound before any answer ran (the book's Guarantees page).
"""

from __future__ import annotations

import ast
import builtins
import sys
import types
from dataclasses import dataclass

from autograder.grading.running.judging.judges import JUDGES, UNAVAILABLE, Judges, StudentObject, _Unavailable
from autograder.grading.running.judging.replies import unanswered

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
    seed: int = 0          # the test's seed (``seeds.seed_of``), said in a failure




# ----------------------------------------------------------------------------------------
# Referee side: runs in the referee's process, never runs student code.


def trusted_cells(notebook: dict) -> dict:
    """What the referee and the examinee need from the instructor's notebook (nbformat v4, as a dict): its
    given and test code cells in order, where each solution cell was (its grade id, cell id and the names
    it defines, never its source), and the names the solution cells define (the student's, in grading).
    A given cell tagged ``setup`` (Jupyter's cell tags) is one the answers need run whole: imports inside
    ``try``, settings, calls such as 10's ``guard_memory()``; the examinee runs it so, before the answers."""
    cells, solutions = [], []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if nbgrader.get("solution"):
            solutions.append(source)
            cells.append({"kind": "answer", "grade_id": nbgrader.get("grade_id"), "cell_id": cell.get("id"),
                          "source": "", "names": solution_names([source])})
        elif nbgrader.get("grade"):
            cells.append({"kind": "test", "grade_id": nbgrader["grade_id"], "source": source})
        else:
            tags = cell.get("metadata", {}).get("tags") or []
            cells.append({"kind": "given", "grade_id": None, "source": source, "setup": "setup" in tags})
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
        try:
            return ast.parse(ipython_python(source)).body
        except SyntaxError:
            return []


def ipython_python(source: str) -> str:
    """A cell's source as IPython runs it: magics (``%timeit``, ``!ls``) become Python calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _stored_names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))]


def _loaded_names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


class Referee(Judges):
    """One notebook's tests, run again with the student's objects out of reach.

    ``cells`` are the instructor's code cells in notebook order, each ``{"kind": "given" | "test",
    "grade_id": ..., "source": ...}``; ``ask(requests) -> replies`` reaches the student's process.

    ``plan()`` runs every cell once, before the student's notebook runs: a test cell's checks are
    collected with their expected results (their inputs never depend on the student's answers), to
    be sent in one batch when the student's process reaches the cell (``judge_cell``). A cell whose
    hidden tests the referee runs entirely (every hidden statement: judges, asserts on its own values)
    is *decided* here: the student's process then runs only its visible part and never sees a hidden line.
    """

    def __init__(self, cells: list[dict], student_names: list[str], ask, seed_of=None) -> None:
        """``seed_of(grade_id)``: each test's seed (``seeds.seed_of`` unless told: a sweep of seeds tells it)."""
        self.cells, self.ask, self.seed_of = cells, ask, seed_of
        # A real module's globals: torch.compile looks a function's module up in sys.modules by name.
        module = types.ModuleType("autograder_referee_tests")
        sys.modules[module.__name__] = module
        self.namespace = module.__dict__
        self.namespace["__builtins__"] = builtins
        self.namespace.update({name: StudentObject(name) for name in student_names})
        self._judges()
        self.namespace["print"] = lambda *args, **kwargs: None  # the student's process prints the cell's output
        self.pending: list[tuple[dict, object]] = []  # the cell being planned: (request, what judges its reply)
        self.plans: dict[str, Plan] | None = None
        self.contracts: dict = {}  # the exercises' requirements (``requires``), stated in the test cells
        self.seed = 0  # the seed of the cell being planned

    def _judges(self) -> None:
        """Put the judges (back) in the tests' namespace, each drawing what it adds from a seed of its own: the
        cell's own draws then follow one another as they do where no judge draws (the student's process)."""
        for name in JUDGES:
            self.namespace[name] = self._apart(getattr(self, name))

    def _apart(self, judge):
        import torch

        def run(*args, **kwargs):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed((self.seed * 1_000_003 + len(self.pending) + 1) % 2**32)
                return judge(*args, **kwargs)
        return run

    def plan(self) -> list[str]:
        """Run every cell once now; return the test cells the referee decides (their hidden tests run here only)."""
        if self.plans is None:
            self.plans = {}
            for cell in self.cells:
                if cell["kind"] == "given":
                    self._run(cell["source"], definitions_only=True)
                elif cell["kind"] == "test":
                    self.plans[cell["grade_id"]] = self._plan_test(cell["grade_id"], cell["source"])
        return [grade_id for grade_id, plan in self.plans.items() if plan.decided]

    def judge_cell(self, grade_id: str, failed_there: bool = False) -> tuple[int, str | None]:
        """Test ``grade_id``'s planned checks, asked now: (how many the referee decided, the first failure or None).

        ``failed_there``: the cell already failed in the student's process, which said why. Then only what
        names the mistake is added (a hidden assert, a diagnosis: 05's named wrong derivations, inf or NaN),
        and that the grader refused to run the answer cell (the scan: fixing the mistake alone would not do);
        a comparison that fails too, or the student's code raising again, would say the same thing twice."""
        self.plan()
        plan = self.plans.get(grade_id)
        if plan is None:
            return 0, None
        if not plan.pending:
            return 0, _with_seed(plan.failure, plan.seed)
        replies = self.ask([request for request, _ in plan.pending])
        if not (isinstance(replies, list) and len(replies) == len(plan.pending)):
            replies = [None] * len(plan.pending)
        failures = [problem for (request, compare), reply in zip(plan.pending, replies) for problem in [compare(reply)]
                    if problem and not (failed_there and not _refused(reply)
                                        and (request["kind"] != "diagnosis" or unanswered(reply)))]
        return len(plan.pending), _with_seed(plan.failure or (failures[0] if failures else None), plan.seed)

    def _plan_test(self, grade_id: str, source: str) -> "Plan":
        """Run one test cell from its seed: its visible part as far as it can, its hidden part entirely (or not
        decided). Each request carries a seed of its own (``test_seed``), which the examinee answers it from."""
        from autograder.student import seeds

        self.seed = (self.seed_of or seeds.seed_of)(grade_id)
        seeds.seed_all(self.seed)
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
                self._judges()
        for number, (request, _) in enumerate(self.pending):
            request["test_seed"] = (self.seed + number) % 2**32
        return Plan(self.pending, failure, hidden_ran and not undecidable and bool(self.pending), undecidable, self.seed)

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
            self._judges()

    def _make_unavailable(self, statement: ast.stmt) -> None:
        """What a skipped statement assigned, and every tensor or container it used, may now be wrong."""
        for name in _stored_names(statement):
            self.namespace[name] = UNAVAILABLE
        for name in _loaded_names(statement):
            if not _kept(self.namespace.get(name)):
                self.namespace[name] = UNAVAILABLE



def _with_seed(failure: str | None, seed: int) -> str | None:
    """A failure, with the seed its inputs came from (``seeds.reproduce``) after its first line."""
    from autograder.student.seeds import reproduce

    if failure is None:
        return None
    head, newline, details = failure.partition("\n")
    return f"{head} {reproduce(seed)}{newline}{details}"


def _refused(reply) -> bool:
    """Whether ``reply`` says the grader refused to run the answer cell it needed (``running/judging/scan.py``)."""
    return isinstance(reply, dict) and reply.get("refused") is True


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
