"""The examinee: the process that answers the referee's questions about a student's answers.

The referee (``autograder.grading.running.judging.referee``) runs no student code: it asks questions as plain
data ("apply Cube to these tensors, backward with these gradients", "record what Cube saves") and
judges the replies itself. The notebook's own process runs every cell the student wrote (hooks,
scratch cells, code that reaches the grader's objects), so it does not answer. The examinee does: a
process of its own for each notebook, forked from the warm process like the notebook and sandboxed
the same way (with a uid of its own), that runs only

- the instructor's given cells (from ``solutions/``), their definitions only, as the referee runs
  them, and the definitions of the visible part of its test cells (the harnesses ``check_with`` runs);
- the student's answer cells (the submission's cells that match the source's solution cells by nbgrader
  grade id, else by cell id), each only if the scan finds nothing it refuses (``scan``, run here, within the
  notebook's budget),

in notebook order, and then answers (``answer``). The student's other cells never run here. Each answer cell runs
under torch's profiler (``autograd_use.Watch``): what autograd ran while it ran is said in every reply about an
object whose exercise forbids it (``requires(..., autograd=False)``) and whose cell shares state with it
(``_cells_of``); the course's self-checks the given cells import (``check_function``, ``gradcheck``) do nothing in
the answer cells here. Before the
first cell it is confined: no thread or process can start (``confinement.one_thread``, seccomp), and
audit hooks refuse what answers never need (``confinement.audit``: frames, the garbage collector's
objects, strings made into code, ctypes, files); a check during which an answer was refused fails, saying
what was refused. The answering code, the checker functions and the torch functions they use were bound
when the warm process imported them, before any student code ran; after every answer cell, before every
reply, after every batch of questions and at the answering code's checkpoints the tamper guard
(``tamper``, which watches these modules too) looks for anything replaced, puts it back, and from then
on every reply fails with "tampering found". The given cells run in a namespace of their
own as well, into which only the names the solution defines are copied from the answers: a harness
runs with the instructor's helpers, whatever the answers define.

An answer that needs something defined outside the answer cells (a helper in a scratch cell) fails
here with a message saying that the grader runs only the answer cells.
"""

from __future__ import annotations

import ast
import builtins
import json
import linecache
import os
import shutil
import signal
import sys
import tempfile
import time
import types
import warnings
from collections import Counter

from autograder.grading.running.confinement import audit, lifetime, one_thread, processes

from autograder.grading.running.judging import scan
from autograder.grading.running.confinement.limits import CellTimeout, Limits, isolate
from autograder.grading.running.messages.protocol import (ProtocolError, crash_line, receive, send, send_crash, start,
                                                             tell)
from autograder.grading.running.judging.referee import _is_definition, _statements, ipython_python, visible_source
from autograder.grading.running.confinement.sandbox import UID_BASE

ONLY_ANSWER_CELLS = ("the grader runs only the notebook's given cells and your answer cells, in order, so "
                     "whatever an answer uses must be defined in its answer cell")
ANSWER_BYTES = 64 * 1024**2
SELF_CHECKS_APART = ("the grader runs your answer cells with autograd watched: a check you run yourself, such as a "
                     "training step, belongs in a cell of its own")


# ----------------------------------------------------------------------------------------
# Grader's side


def program(trusted: dict, cells: list[dict]) -> list[dict]:
    """What the examinee runs, in the instructor's notebook order: the given cells and the visible part of
    the test cells (definitions only), and for each solution cell the student's answer (not yet scanned: the
    examinee scans it, ``scan.screen``), or why there is none, and the names the solution defines."""
    def text(cell: dict) -> str:
        source = cell.get("source", "")
        return "".join(source) if isinstance(source, list) else source

    code = [c for c in cells if c.get("cell_type") == "code" and not c.get("grade_id")]
    by_answer = {c["answer_id"]: text(c) for c in code if c.get("answer_id")}
    by_cell_id = {c["cell_id"]: text(c) for c in code if c.get("cell_id")}
    steps = []
    for cell in trusted["cells"]:
        if cell["kind"] == "given":
            steps.append({"kind": "given", "source": cell["source"], "setup": bool(cell.get("setup"))})
        elif cell["kind"] == "test":
            steps.append({"kind": "test", "source": visible_source(cell["source"])})
        else:
            grade_id = cell["grade_id"]
            source = by_answer.get(grade_id, by_cell_id.get(cell.get("cell_id") or grade_id))
            why = None if source is not None else \
                f"your notebook has no answer cell '{grade_id}' (the grader finds it by its nbgrader id)"
            steps.append({"kind": "answer", "grade_id": grade_id, "names": cell["names"], "source": source, "why": why,
                          "refused": False, "scanned": False})
    return steps


class Examinee:
    """The grader's side of one notebook's examinee: start it, ask it a test cell's questions, end it.

    A question is answered within the cell time limit (each check of a batch); once one has run out of
    time, later checks get ``after_timeout``, as cells do. An examinee that answers out of turn, late or
    not at all is ended and gets no more questions (``gone`` says why): every check it did not answer fails.
    """

    def __init__(self, context, steps: list[dict], limits: Limits, env: dict[str, str]) -> None:
        self.limits, self.gone, self.timed_out, self.ready = limits, "", False, False
        self.answer_cells = sum(step["kind"] == "answer" for step in steps)
        self.folder = tempfile.mkdtemp(prefix="autograder-examinee-")
        self.process, self.connection = start(context, examinee_main, (steps, self.folder, limits, env),
                                              "autograder-examinee")
        self.started = processes.start_time(self.process.pid)

    def ask(self, requests: list) -> list | None:
        """The examinee's replies to one test cell's checks ``requests``, or None (then ``gone`` says why)."""
        limits = self.limits
        limit = min(limits.after_timeout, limits.cell_timeout) if self.timed_out else limits.cell_timeout
        if not self.gone and not self.ready:
            # Before its first answer it runs the given and answer cells, each within the cell time limit.
            said = self._receive(limits.cell_timeout * (self.answer_cells + 1) + 30.0)
            self.ready = said == ["ready"]
            if not self.ready:
                self._end_early(self.gone or _crashed(said) or "it did not get ready to answer")
        if self.gone or not tell(self.connection, ["ask", requests, limit]):
            self._end_early(self.gone or "it ended before the grader's checks")
            return None
        reply = self._receive(limit * len(requests) + 5.0)
        if not (isinstance(reply, list) and len(reply) == 2 and reply[0] == "answer" and isinstance(reply[1], list)):
            self._end_early(self.gone or _crashed(reply) or "it sent the grader an invalid message (not an answer)")
            return None
        self.timed_out = self.timed_out or any(isinstance(r, dict) and str(r.get("error")).startswith("TimeoutError")
                                               for r in reply[1])
        return reply[1]

    def _receive(self, seconds: float):
        try:
            return receive(self.connection, self.process, time.monotonic() + seconds, ANSWER_BYTES)
        except (EOFError, ProtocolError) as error:
            self.gone = f"it did not answer ({str(error) or 'it ended'})"
            return None

    def _end_early(self, why: str) -> None:
        self.gone = why
        self.process.kill()

    def stop(self) -> None:
        """Tell it to end (it ends meanwhile; ``end`` waits for that)."""
        tell(self.connection, ["stop"])

    def end(self) -> list[int]:
        """End it and everything it started; return the pids still running after that (none, normally)."""
        self.stop()
        self.process.join(1)
        uid = UID_BASE + self.process.pid if self.limits.sandbox == "namespaces" else None
        left = processes.end_sandbox(self.process.pid, self.started, uid)
        self.process.join()
        self.connection.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        return left


def _crashed(message) -> str:
    """What the examinee's own crash report (``["crash", traceback]``: a bug in the grader) says, in one line."""
    if isinstance(message, list) and len(message) == 2 and message[0] == "crash" and isinstance(message[1], str):
        return "it failed (a bug in the grader): " + crash_line(message[1], 300)
    return ""


# ----------------------------------------------------------------------------------------
# The examinee's process


def examinee_main(steps: list[dict], folder: str, limits: Limits, env: dict[str, str], connection) -> None:
    """Run the given and answer cells, say ``["ready"]``, then answer each ``["ask", requests, limit]`` with
    ``["answer", replies]`` until told anything else."""
    try:
        connection = isolate(folder, limits, env, connection)
        # No import may come from the working folder, where an answer can write files.
        sys.path[:] = [p for p in sys.path if p and os.path.isabs(p) and not p.startswith(folder)]
        signal.signal(signal.SIGALRM, _on_alarm)
        # From here on no thread or process can start, nor can an answer reach frames, the garbage collector's
        # objects, ctypes or files, or make a string into code (confinement.one_thread, confinement.audit).
        one_thread.prepare()
        lifetime.not_dumpable()
        warnings.simplefilter("ignore")  # (its output goes nowhere; showing a warning reads source files)
        from autograder.grading.running.judging import tamper  # (imports the checker and torch: not in `grade`'s parser)

        guard = tamper.handed_over()
        one_thread.refuse_new_threads()
        tampered: list[str] = []
        check = guard.check  # (bound now: what is replaced later in its class is not what runs)

        def checkpoint() -> None:  # the answering code's checkpoints, between an answer's code and what it measures
            tampered.extend(name for name in check(False) if name not in tampered)

        steps = scan.screen(steps)  # (here, not in the grader's process: its time is the notebook's)
        refusals = audit.install(audit.trusted_folders(), checkpoint)
        answers = Answers(steps, limits.cell_timeout, guard, refusals, tampered)
        sys.audit(audit.BOUND)  # (no file may be opened from now on)
        send(connection, ["ready"])
        while True:
            message = json.loads(connection.recv_bytes())
            if message[0] != "ask":
                break
            send(connection, ["answer", answers.reply(message[1], float(message[2]))])
    except EOFError:
        pass
    except BaseException as error:  # a bug in the grader: the parent fails the checks and says so
        send_crash(connection, error)
    finally:
        os._exit(0)


def _on_alarm(signum, frame):
    signal.setitimer(signal.ITIMER_REAL, 1.0)  # keep interrupting if it is swallowed
    raise CellTimeout()


class Answers:
    """The given and answer cells, run in order; the replies to the referee's requests about them."""

    def __init__(self, steps: list[dict], limit: float, guard, refusals=None, tampered: list | None = None) -> None:
        """``refusals()``: what the examinee's audit hook refused since its last call (``confinement.audit``; None:
        no hook); ``tampered``: what the tamper guard found (also at the answering code's checkpoints), said in
        every reply."""
        # The answering code, bound before any answer runs (here, not on import: the grader's own process
        # imports this module and must not import torch).
        from autograder.grading.running.judging.answer import answer
        from autograder.grading.running.judging.autograd_use import Watch
        from autograder.student.seeds import seed_all

        # Without the audit hook, which refuses replacing a function's code or defaults as it happens, the guard
        # compares them after each answer cell (~2,000 audit events a comparison, where a hook sees them).
        self._answer, self.refusals, self.functions = answer, refusals or list, refusals is None
        self._watch, self._no_nodes = Watch, Counter()
        self.autograd_in_cells: dict[str, str] = {}  # an answer cell's grade id -> what autograd ran while it ran
        self.cells_of: dict[str, set] = _cells_of(steps)  # a name an answer cell defines -> the cells it shares state with
        self._seed = seed_all
        self.given, self.answers = _namespace("autograder_examinee_given"), _namespace("autograder_examinee_answers")
        self.missing: dict[str, str] = {}  # a name the solution defines -> why the answers do not define it
        self.refused: set[str] = set()  # the names of answer cells the scan refused: said even where the cell failed
        self.guard, self._guard_check = guard, guard.check
        self.tampered = tampered if tampered is not None else []
        guard.user_ns = self.answers
        guard.watch(guard)  # (the guard's own attributes and the examinee's, as a class's)
        guard.watch(self)
        for step in steps:
            self.refusals()  # (what the instructor's cells did is not held against an answer)
            if step["kind"] == "given" and step.get("setup"):
                _run_whole(step["source"], self.given, limit)
                self.answers.update({k: v for k, v in self.given.items()
                                     if not k.startswith("__") and self.answers.get(k) is not v})
                _set_aside_self_checks(self.answers)
            elif step["kind"] == "given":
                for namespace in (self.given, self.answers):
                    _run_definitions(step["source"], namespace, limit)
                _set_aside_self_checks(self.answers)
            elif step["kind"] == "test":
                _run_definitions(step["source"], self.given, limit)
            else:
                self._check()  # (records the names the given cells bound, before the answer runs)
                self._run_answer(step, limit)
                self._check(self.functions)

    def _run_answer(self, step: dict, limit: float) -> None:
        why = step["why"]
        if why is None:
            watch = self._watch()  # what autograd runs while the cell runs: an exercise may forbid any (``requires``)
            try:
                signal.setitimer(signal.ITIMER_REAL, limit)
                with watch:
                    exec(_compiled(step["source"], f"<answer {step['grade_id']}>"), self.answers)
            except CellTimeout:
                why = f"your answer cell '{step['grade_id']}' ran past the {limit:g} s limit when the grader ran it"
            except BaseException as error:  # noqa: BLE001 (its error is the student's, said in each check)
                why = (f"your answer cell '{step['grade_id']}' failed when the grader ran it: "
                       f"{type(error).__name__}: {str(error)[:300]}" + _hint(error))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            ran = watch.found(self._no_nodes) if hasattr(watch, "profile") else None
            if ran:
                self.autograd_in_cells[step["grade_id"]] = (f"when the grader ran your answer cell '{step['grade_id']}', "
                                                            f"{ran} ({SELF_CHECKS_APART})")
            done = self.refusals()
            if done:  # whatever the cell defined is not used: a check of it could not see all it does
                why = f"your answer cell '{step['grade_id']}' {done[0]} when the grader ran it: {audit.WHY} (refused)"
                for name in step["names"]:
                    self.answers.pop(name, None)
        for name in step["names"]:
            if name in self.answers:  # (also when its cell failed after defining it, as in the notebook)
                self.given[name] = self.answers[name]
            else:
                self.missing[name] = why or f"your answer cell '{step['grade_id']}' does not define {name}"
                if step.get("refused"):
                    self.refused.add(name)

    def _check(self, functions: bool = False) -> None:
        """The tamper guard: anything replaced is put back, and said in every reply from now on (which code and
        defaults the functions have: only with ``functions``)."""
        self.tampered.extend(name for name in self._guard_check(functions) if name not in self.tampered)

    def reply(self, requests: list, limit: float) -> list[dict]:
        """The replies to one test cell's requests, each within ``limit`` seconds."""
        replies = []
        for request in requests:
            if replies and str(replies[-1].get("error")).startswith("TimeoutError"):
                replies.append({"error": "TimeoutError: an earlier check of this cell ran out of time"})
                continue
            target = request.get("target") if isinstance(request, dict) else None
            if target in self.missing and target not in self.answers:
                replies.append({"error": self.missing[target], "refused": target in self.refused})
                continue
            self.refusals()  # (what came before, the instructor's cells, is not this answer's)
            if isinstance(request.get("test_seed"), int):  # an answer that draws random numbers draws the same each run
                self._seed(request["test_seed"])
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                reply = self._answer(request, self.answers, self.given)
            except CellTimeout:
                reply = {"error": f"TimeoutError: timed out after {limit:g} s"}
            except BaseException as error:  # KeyboardInterrupt, SystemExit from student code: its error, as in a cell
                reply = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            done = self.refusals()
            if done:  # (even where the answer caught the refusal and went on)
                reply = {"error": audit.message(done[0])}
            if str(reply.get("error")).startswith("NameError") and target not in self.missing:
                reply["error"] += f" ({ONLY_ANSWER_CELLS})"
            if request.get("autograd_cells") is True:  # (an exercise that forbids autograd: what its cells ran)
                reply["autograd_in_cells"] = next((self.autograd_in_cells[cell] for cell in self.cells_of.get(target, ())
                                                   if cell in self.autograd_in_cells), None)
            replies.append(reply)
            self._check()  # before the reply goes back, and after the batch
        self._check()
        if self.tampered:
            shown = ", ".join(self.tampered[:5]) + (f" and {len(self.tampered) - 5} more" if len(self.tampered) > 5 else "")
            replies = [{"error": f"tampering found: {shown} {'was' if len(self.tampered) == 1 else 'were'} changed "
                                 f"while the grader ran your answers (restored); no check of them counts"}] * len(replies)
        return replies


def _cells_of(steps: list[dict]) -> dict[str, list]:
    """For each name an answer cell defines, the answer cells (grade ids, in order) that share state with its cell:
    two cells share state where one uses or binds a global name the other binds (not an import: a module or a
    function imported is no one's state), and the sharing is followed from cell to cell. Autograd run by a cell
    outside that group cannot reach what the name computes; run by one inside it, it can."""
    cells = [s for s in steps if s["kind"] in ("answer", "given") and s.get("source")]
    names = [_global_names(s["source"]) for s in cells]
    imported = set().union(*(found[2] for found in names)) if names else set()
    group = list(range(len(cells)))

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    by_name: dict[str, list[int]] = {}
    for i, (binds, uses, _) in enumerate(names):
        for name in (binds | uses) - imported:
            by_name.setdefault(name, []).append(i)
    for name, where in by_name.items():
        if any(name in names[i][0] for i in where):  # (a name that no cell binds is a builtin, or missing)
            for i in where[1:]:
                group[root(i)] = root(where[0])
    found: dict[str, list] = {}
    for i, step in enumerate(cells):
        if step["kind"] == "answer":
            together = [c["grade_id"] for j, c in enumerate(cells) if c["kind"] == "answer" and root(j) == root(i)]
            found.update({name: together for name in step["names"]})
    return found


def _global_names(source: str) -> tuple[set, set, set]:
    """(the global names a cell binds, not by an import; the global names it uses or binds anywhere, functions and
    classes included; the names it imports), read with ``symtable`` (Python's own scoping)."""
    import symtable

    try:
        table = symtable.symtable(source, "<cell>", "exec")
    except (RecursionError, MemoryError):  # nested past what Python compiles: the cell cannot run either
        return set(), set(), set()
    except SyntaxError:
        try:
            table = symtable.symtable(ipython_python(source), "<cell>", "exec")
        except (SyntaxError, RecursionError, MemoryError):
            return set(), set(), set()
    top = table.get_symbols()
    binds = {s.get_name() for s in top if s.is_assigned() and not s.is_imported()}
    imported = {s.get_name() for s in top if s.is_imported()}
    uses, todo = set(), list(table.get_children())
    uses.update(s.get_name() for s in top)
    while todo:
        scope = todo.pop()
        uses.update(s.get_name() for s in scope.get_symbols() if s.is_global())
        binds.update(s.get_name() for s in scope.get_symbols() if s.is_declared_global() and s.is_assigned())
        todo.extend(scope.get_children())
    return binds, uses, imported


def _set_aside_self_checks(namespace: dict) -> None:
    """The checks the given cells import for the student's own use (``check_function``, ``gradcheck``), as the answer
    cells see them here: they do nothing (``gradcheck`` passes). A self-check in an answer cell decides nothing (the
    referee's checks do), and what it runs would be autograd seen while the answer cells ran (``requires``)."""
    import autograder
    import torch

    checks = {id(getattr(autograder, name)): name for name in autograder.__all__ if name.startswith("check_")}
    checks.update({id(torch.autograd.gradcheck): "gradcheck", id(torch.autograd.gradgradcheck): "gradgradcheck"})
    for key, value in list(namespace.items()):
        if id(value) in checks:
            namespace[key] = _set_aside(checks[id(value)])


def _set_aside(name: str):
    def check(*args, **kwargs):
        return True if name.endswith("gradcheck") else None

    check.__name__ = check.__qualname__ = name
    check.__doc__ = "The grader runs no self-check in an answer cell: the referee's checks decide."
    return check


def _namespace(name: str) -> dict:
    """A real module's globals: torch.compile looks a function's module up in sys.modules by name."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    module.__dict__["__builtins__"] = builtins
    return module.__dict__


def _compiled(source: str, filename: str):
    """A cell's code; IPython's syntax (magics) as IPython turns it into Python; its own SyntaxError if neither.
    Its lines go to linecache, so that an error in it names the student's line, as in the notebook. It is
    compiled as the notebook compiles it, without this module's ``from __future__ import annotations``."""
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as error:
        try:
            source = ipython_python(source)
            code = compile(source, filename, "exec", dont_inherit=True)
        except SyntaxError:
            raise error from None
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return code


def _run_whole(source: str, namespace: dict, limit: float) -> None:
    """A given cell tagged ``setup``: every statement of the instructor's, as the notebook runs it."""
    try:
        signal.setitimer(signal.ITIMER_REAL, limit)
        exec(_compiled(source, "<given setup>"), namespace)
    except BaseException:  # noqa: BLE001 (what fails here is missing later, and said where it is used)
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _run_definitions(source: str, namespace: dict, limit: float) -> None:
    """The instructor's imports, functions, classes and simple names of a cell (as the referee runs them)."""
    for statement in _statements(source):
        if not _is_definition(statement):
            continue
        try:
            signal.setitimer(signal.ITIMER_REAL, limit)
            exec(compile(ast.Module([statement], []), "<given>", "exec", dont_inherit=True), namespace)
        except BaseException:  # noqa: BLE001 (what fails here is missing later, and said where it is used)
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _hint(error: BaseException) -> str:
    return f" ({ONLY_ANSWER_CELLS})" if isinstance(error, NameError) else ""
