"""Run one notebook's code cells in a fresh process forked from a warm one.

nbgrader starts a new Jupyter kernel per notebook and the kernel imports torch: about 3 s of
the ~4 s nbgrader spends per notebook. Here a forkserver process imports torch, numpy,
matplotlib and IPython once (``autograder.grading.running.warm``); every submission runs in its own child
forked from it, so each still starts from a clean interpreter, but in milliseconds.

The child runs the cells in an IPython shell and sends each cell's outputs back in nbformat's
shape (streams, display data, results, errors), as nbgrader's own kernel would have shown them.
Each test cell also gets a ``Verdict`` (passed or not, and why): its points come from that alone,
never from what the cell printed or returned (nbgrader's partial credit reads a number from a
test cell's outputs, which the student's code can emit). Untrusted code is bounded:

- each cell may run ``Limits.cell_timeout`` seconds; once one cell has timed out, later cells
  get at most ``Limits.after_timeout`` seconds, so a looping function costs the full limit once;
- each process may use ``Limits.memory`` bytes more than it started with (RLIMIT_AS), and all of the
  notebook's processes together that much (``autograder.grading.running.confinement.memory``: a memory
  cgroup, or no second process); when the kernel stops one of them for want of memory, the notebook
  "ran out of memory" in the cell that was running;
- printed output is kept up to ``Limits.output_chars`` characters per cell (figures and other
  rich output up to 2 MB);
- if the process dies (``os._exit``, a segfault, a kill at the hard deadline) the cell where
  it died says so, and every later cell says it did not run; ``sys.exit()``, ``exit()`` and a
  raised ``KeyboardInterrupt`` are errors in their cell, and the next cell runs;
- after every cell the tamper guard (``autograder.grading.running.judging.tamper``) restores ``torch.allclose``, the
  checker and the other functions tests rely on if student code replaced them, and says so in
  the cell (status "tampering found");
- the whole notebook, its cells and the referee's checks together, has a budget of wall-clock and
  CPU time (``Limits.budget``: status "over budget"), and no process it started outlives it.

Student code can reach whatever decides a verdict in its own process, so a referee process that
runs no student code (``autograder.grading.running.judging.referee``) decides the test cells
(``execute(..., trusted=...)``): it plans every cell before the notebook starts, and a cell it
decides reaches the student's process without its hidden tests; the cell passes only if its
visible part passed there and the referee's checks agree. The referee's questions are answered by
the notebook's examinee, a process that runs only the given cells and the student's answer cells
(``autograder.grading.running.judging.examinee``), never by the notebook's own process.

Hidden tests stay hidden: a cell the referee decides never holds them where student code runs;
in one it does not (no referee, or a check no judge covers), an error is reported as its last line
only (``AssertionError: ...``), never a traceback showing the test's source, and no cell's output
shows a line of a hidden test (code that prints the test running it gets ``<hidden test line>``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from autograder.grading.running.confinement import memory, processes, starter
from autograder.grading.running.confinement.budget import Budget
from autograder.grading.running.child import child_main
from autograder.grading.running.confinement.limits import Limits, confine, notebook_budget
from autograder.grading.running.confinement.environment import kept
from autograder.grading.running.judging.examinee import Examinee, program
from autograder.grading.running.messages.protocol import Messages, ProtocolError, crash_line, error_output, start, tell
from autograder.grading.running.judging.referee import HIDDEN_BEGIN, visible_source
from autograder.grading.running.judging.referee_process import RefereeProcess
from autograder.grading.running.confinement.sandbox import UID_BASE


@dataclass(frozen=True)
class Verdict:
    """A test cell's verdict, which alone decides its points (in ``grade`` and ``check`` alike): never a
    number the cell printed or returned. ``decided``: by the referee, outside the notebook's process."""

    passed: bool
    reason: str = ""      # why it did not pass: the first error of the cell ("" when it passed)
    decided: bool = False


@dataclass
class Execution:
    """What happened when a notebook ran: outputs per code cell index, a verdict per test cell, and how it ended."""

    outputs: dict[int, list[dict]] = field(default_factory=dict)
    execution_counts: dict[int, int] = field(default_factory=dict)
    status: str = "graded"          # graded | timed out | ran out of memory | kernel died | tampering found | over budget
    cell: int | None = None         # index of the cell where that happened
    detail: str = ""                # what happened there, in a few words
    seconds: float = 0.0
    judged: dict[int, int] = field(default_factory=dict)  # test cell index -> checks the referee decided
    decided: set[int] = field(default_factory=set)  # test cells the referee decides: their hidden tests ran there only
    verdicts: dict[int, Verdict] = field(default_factory=dict)  # test cell index -> its verdict (``verdicts()``)


# ----------------------------------------------------------------------------------------
# Parent side


_starting = threading.Lock()


def _context():
    context = multiprocessing.get_context("forkserver")
    # sandbox too: its libseccomp lookup (pyseccomp, ~6 ms) is then paid once, not by every notebook.
    context.set_forkserver_preload(["autograder.grading.running.warm", "autograder.grading.running.confinement.sandbox",
                                    "autograder.grading.running.judging.referee", "autograder.grading.running.judging.answer",
                                    "autograder.grading.running.child", "autograder.grading.running.judging.examinee",
                                    "autograder.grading.running.judging.referee_process"])
    from multiprocessing import forkserver

    with _starting:
        if forkserver._forkserver._forkserver_pid is None:  # (multiprocessing keeps no public flag)
            saved = dict(os.environ)
            try:
                for name in [n for n in os.environ if not kept(n)]:
                    del os.environ[name]
                starter.start_warm_process(forkserver.ensure_running)  # the same whichever command starts it
            finally:
                os.environ.clear()
                os.environ.update(saved)
    return context


def warm_up() -> None:
    """Start the warm process now (it imports torch in the background) so the first notebook need not wait."""
    _context()


def execute(cells: list[dict], cwd: str, limits: Limits = Limits(),
            env: dict[str, str] | None = None, trusted: dict | None = None) -> Execution:
    """Run the code ``cells`` (nbformat v4 dicts) in a fresh warm process in ``cwd``.

    What the child sends is untrusted (student code runs there and can write to the pipe): it
    is read as bytes, parsed as JSON and checked (``Messages``), never unpickled.

    With ``trusted`` (the instructor's cells, ``referee.trusted_cells``), a referee process
    (``autograder.grading.running.judging.referee``) runs each test cell again after the student's process has,
    its questions answered by the notebook's examinee (``autograder.grading.running.judging.examinee``), and a
    test cell whose checks the referee finds wrong fails, whatever the student's process said. Cells
    carry what ``preparation.cells_to_run`` gives them: test cells their ``grade_id``, answer cells their
    ``answer_id`` (what the examinee runs), cells their ``cell_id``.

    The notebook (its cells and the referee's checks) has ``notebook_budget(limits)`` seconds of wall-clock
    and of CPU time (``autograder.grading.running.confinement.budget``); past them it is stopped (``over budget``). When
    it ends, every process it started is killed (``autograder.grading.running.confinement.processes``).

    The steps are ``_Run``'s: start the processes, follow the notebook's messages, clean up, then say how it ended.
    """
    started = time.monotonic()
    if "auto" in (limits.sandbox, limits.memory_bound):  # a Dask worker: its own machine decides
        limits = confine(limits, [])
    run = _Run(cells, limits, env or {})
    run.start(cwd, trusted)
    try:
        run.follow_messages()
    finally:
        run.clean_up()
    run.say_how_it_ended()
    run.result.seconds = time.monotonic() - started
    return run.result


class _Run:
    """One run of one notebook, from the parent's side: its processes, and what the child has said so far.

    ``running`` is the cell the child is running (``None`` between cells), ``last_started`` the last cell it
    started; ``timed_out`` once a cell has timed out, ``done`` once the child has run every cell, ``stopped``
    once grading has stopped the notebook and said why in ``result``.
    """

    def __init__(self, cells: list[dict], limits: Limits, env: dict[str, str]) -> None:
        self.cells, self.limits, self.env = cells, limits, env
        self.result = Execution()
        self.running: int | None = None
        self.last_started: int | None = None
        self.timed_out = self.done = self.stopped = self.stopped_for_memory = False

    # -- starting

    def start(self, cwd: str, trusted: dict | None) -> None:
        """Start the referee and the examinee (for a notebook with test cells to judge), then the notebook's child."""
        context = _context()
        judged = trusted is not None and any(c.get("grade_id") for c in self.cells)
        self.examinee = Examinee(context, program(trusted, self.cells), self.limits, self.env) if judged else None
        self.referee = RefereeProcess.for_notebook(context, trusted, self.limits) if judged else None
        decided = self.referee.decided_cells() if self.referee is not None else set()
        self.result.decided = {i for i, c in enumerate(self.cells) if c.get("grade_id") in decided}
        self.child, self.receive = start(context, child_main, (_for_the_student(self.cells, decided), cwd,
                                                               self.limits, self.env, judged), "autograder-notebook")
        self.child_started = processes.start_time(self.child.pid)
        watched = [(self.child.pid, self.child_started)]
        if self.examinee:
            watched.append((self.examinee.process.pid, self.examinee.started))
        self.budget = Budget(notebook_budget(self.limits), notebook_budget(self.limits), watched)
        self.messages = Messages(self.cells, self.limits.output_chars)
        self.cell_started = time.monotonic()  # the first cell's time counts from here

    # -- following the notebook

    def follow_messages(self) -> None:
        """Act on the child's messages until it is done, its pipe closes, or grading stops it."""
        while True:
            # Once a cell has timed out, later cells get less time: a looping function costs the full limit once.
            limit = min(self.limits.after_timeout, self.limits.cell_timeout) if self.timed_out \
                else self.limits.cell_timeout
            deadline = self.cell_started + limit + 5.0
            if self.receive.poll(max(0.05, deadline - time.monotonic())):
                if not self._take_message(deadline):
                    return
            elif self.running is not None:
                self._ignored_alarm(limit)
                return
            elif not self.child.is_alive():
                return

    def _take_message(self, deadline: float) -> bool:
        """Read the child's next message and act on it; False when there is nothing more to follow."""
        try:
            message = self.messages.read(self.receive, self.child, deadline)
        except EOFError:
            return False
        except ProtocolError as error:
            self._sent_an_invalid_message(error)
            return False
        kind = message[0]
        if kind == "start":
            self._cell_started(message[1])
        elif kind == "end":
            _, index, outputs, count, status = message
            self._cell_ended(index, outputs, count, status)
        elif kind == "done":
            self.done = True
        elif kind == "crash":
            self._crashed(message[1])
        return kind not in ("done", "crash")

    def _cell_started(self, index: int) -> None:
        self.running, self.last_started, self.cell_started = index, index, time.monotonic()

    def _cell_ended(self, index: int, outputs: list[dict], count: int, status: str) -> None:
        """Keep the cell's outputs and what it says of how it ended; a test cell then goes to the referee."""
        result = self.result
        result.outputs[index], result.execution_counts[index] = outputs, count
        self.running = None
        if status != "ok" and result.status == "graded":
            result.status, result.cell = status, index
        elif result.status == "graded" and _stopped_for_memory(self.limits, self.child.pid):  # (a process it started)
            result.status, result.cell, result.detail = "ran out of memory", index, _memory_why(self.limits)
        self.timed_out = self.timed_out or status == "timed out"
        if self.referee is not None and self.cells[index].get("grade_id"):
            self._judge(index, outputs)
            self.cell_started = time.monotonic()

    def _judge(self, index: int, outputs: list[dict]) -> None:
        """The referee's checks of test cell ``index``; a failure is shown in the cell."""
        # A cell that failed in the student's process fails whatever the referee finds; where
        # the referee holds its hidden tests it still says what they found (it may name the
        # mistake: 05's diagnoses), after the visible part's own error, but not that the
        # student's code raised again (one message per cause: not done yet, an error, a timeout).
        failed_here = any(o["output_type"] == "error" for o in outputs)
        # The notebook goes on meanwhile (its next cells' messages wait in the pipe): the
        # referee and the examinee are other processes, so on a second core they overlap.
        tell(self.receive, ["continue"])
        if not failed_here or index in self.result.decided:
            self.result.judged[index], failure = self.referee.judge(self.cells[index]["grade_id"], self.examinee,
                                                                    failed_here)
            if failure:
                _append(self.result, index, error_output("AssertionError", failure))
        if self.examinee.gone and self.result.status == "graded" and not self.budget.exceeded:
            self._examinee_stopped(index)

    def _examinee_stopped(self, index: int) -> None:
        """The examinee is gone: its checks fail from here on; the notebook itself goes on."""
        why = f"the process that runs your answers for the grader's checks stopped: {self.examinee.gone}"
        self.result.status, self.result.cell, self.result.detail = "kernel died", index, why
        if _stopped_for_memory(self.limits, self.examinee.process.pid):
            self.result.status, self.result.detail = "ran out of memory", why + f" ({_memory_why(self.limits)})"

    # -- grading stops the notebook

    def _sent_an_invalid_message(self, error: ProtocolError) -> None:
        self.child.terminate()  # SIGTERM: in Landlock mode the sandbox then kills what the notebook left
        why = f"the notebook's process sent the grader an invalid message ({error})"
        self._stop("kernel died", error_output("DeadKernelError", why), why)

    def _crashed(self, traceback_text: str) -> None:
        """Student code runs in the child and can break it too (or the grader has a bug): this notebook stops
        here, the batch goes on."""
        why = "the grading process failed: " + crash_line(traceback_text, 500)
        self._stop("kernel died", error_output("DeadKernelError", why), why)

    def _ignored_alarm(self, limit: float) -> None:
        """The cell ignored its own alarm (e.g. a bare ``except:`` in a loop): stop it."""
        self.child.terminate()
        self._stop("timed out", error_output("TimeoutError", f"timed out after {limit:g} s: the cell did not stop "
                                             "when asked, so grading stopped this notebook here"),
                   "did not stop when asked")

    def _stop(self, status: str, output: dict, detail: str) -> None:
        """Grading stops the notebook: the running cell (if any) shows ``output``; the notebook ends with ``status``."""
        if self.running is not None:
            _append(self.result, self.running, output)
        self.result.status, self.result.cell, self.result.detail = status, self.running, detail
        self.stopped = True

    # -- the end

    def clean_up(self) -> None:
        """Stop the budget, the examinee, the referee and the child, and whatever the child left running."""
        self.budget.stop()
        if self.examinee is not None:
            self.examinee.stop()  # it ends while the notebook's process does
        if self.referee is not None:
            self.referee.done()
        child = self.child
        child.join(1)
        if child.is_alive():
            child.terminate()
            child.join(1)
        # Whatever it left running (detached, stopped, ignoring signals) dies with it.
        processes.end_sandbox(child.pid, self.child_started,
                              UID_BASE + child.pid if self.limits.sandbox == "namespaces" else None)
        child.join()
        self.stopped_for_memory = _stopped_for_memory(self.limits, child.pid)
        memory.release(child.pid)
        if self.examinee is not None:
            self.examinee.end()
            memory.release(self.examinee.process.pid)
        self.receive.close()

    def say_how_it_ended(self) -> None:
        """The notebook's status, the cell where it ended and why; cells that did not run say so; the verdicts."""
        if self.budget.exceeded and not self.done:
            self._over_budget()
        if not self.stopped:
            if self.running is not None:
                self._died_in_cell()
            elif not self.done:
                self._ended_between_cells()
        if not self.done:
            self._not_run()
        self.result.verdicts = verdicts(self.cells, self.result)

    def _over_budget(self) -> None:
        index, result = self.last_started, self.result
        why = f"{self.budget.exceeded} (cells and the grader's checks together)"
        if index is not None:
            _append(result, index, error_output("TimeoutError", f"over budget: {why}, so grading stopped this "
                                                                 "notebook here"))
        result.status, result.cell, result.detail = "over budget", index, why
        self.stopped = True

    def _died_in_cell(self) -> None:
        """The process vanished in the middle of a cell, or the kernel stopped it: its processes together
        passed their memory cgroup's limit."""
        if self.stopped_for_memory:
            status, why = "ran out of memory", _memory_why(self.limits)
            output = error_output("MemoryError", f"ran out of memory: {why}")
        else:
            status, why = "kernel died", _death(self.child.exitcode)
            output = error_output("DeadKernelError", f"the kernel died while running this cell ({why})")
        _append(self.result, self.running, output)
        self.result.status, self.result.cell, self.result.detail = status, self.running, why

    def _ended_between_cells(self) -> None:
        """It ended between cells without saying it was done: what did not run did not pass."""
        why = _memory_why(self.limits) if self.stopped_for_memory else _death(self.child.exitcode)
        if self.result.status == "graded":
            self.result.status = "ran out of memory" if self.stopped_for_memory else "kernel died"
            self.result.cell, self.result.detail = self.messages.next_cell(), why

    def _not_run(self) -> None:
        """Every code cell without outputs says it did not run, and why grading stopped."""
        result = self.result
        for index, cell in enumerate(self.cells):
            if cell.get("cell_type") == "code" and index not in result.outputs:
                result.outputs[index] = [error_output(
                    "NotRunError", f"not run: grading of this notebook stopped earlier ({result.status}"
                    f"{': ' + result.detail if result.detail else ''})")]


def verdicts(cells: list[dict], result: Execution) -> dict[int, Verdict]:
    """Each test cell's verdict: passed iff it shows no error (its visible part raised none in the notebook's
    process, and neither the referee's checks nor grading itself added one: a failed check, a time-out, a
    crash, "not run") and, where the referee decides the cell, the referee ran its checks. A cell the referee
    does not decide (none in this course) passes iff it raised no error."""
    found = {}
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code" or not cell.get("grade_id"):
            continue
        errors = [o for o in result.outputs.get(index, []) if o.get("output_type") == "error"]
        decided = index in result.decided
        if errors:
            reason = f"{errors[0].get('ename')}: {errors[0].get('evalue')}"
        elif decided and not result.judged.get(index):
            reason = "the grader's own check of this cell did not run"
        else:
            reason = ""
        found[index] = Verdict(not reason, reason, decided)
    return found


def _for_the_student(cells: list[dict], decided: set[str]) -> list[dict]:
    """The cells as the student's process gets them: a test cell the referee decides loses its hidden
    tests (it keeps a ``hidden`` flag, so its errors are still shown as their last line only)."""
    def text(cell: dict) -> str:
        source = cell.get("source", "")
        return "".join(source) if isinstance(source, list) else source

    return [dict(cell, source=visible_source(text(cell)), hidden=True) if cell.get("grade_id") in decided
            and HIDDEN_BEGIN in text(cell) else cell for cell in cells]


def _stopped_for_memory(limits: Limits, pid: int) -> bool:
    """Whether the kernel has stopped a process of the sandbox of outer process ``pid`` for want of memory."""
    return limits.memory_bound == memory.CGROUP and memory.oom_kills(pid) > 0


def _memory_why(limits: Limits) -> str:
    return (f"its processes together used more than the {limits.memory / 1024**3:g} GB a notebook may use, so the "
            "kernel stopped one of them")


def _append(result: Execution, index: int, output: dict) -> None:
    result.outputs.setdefault(index, []).append(output)


def _death(exitcode: int | None) -> str:
    if exitcode is None:
        return "no exit status"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"the process exited with status {exitcode}"
