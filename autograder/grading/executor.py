"""Run one notebook's code cells in a fresh process forked from a warm one.

nbgrader starts a new Jupyter kernel per notebook and the kernel imports torch: about 3 s of
the ~4 s nbgrader spends per notebook. Here a forkserver process imports torch, numpy,
matplotlib and IPython once (``autograder.grading.warm``); every submission runs in its own child
forked from it, so each still starts from a clean interpreter, but in milliseconds.

The child runs the cells in an IPython shell and sends each cell's outputs back in nbformat's
shape (streams, display data, results, errors), so nbgrader scores the notebook exactly as if
its own kernel had run it. Untrusted code is bounded:

- each cell may run ``Limits.cell_timeout`` seconds; once one cell has timed out, later cells
  get at most ``Limits.after_timeout`` seconds, so a looping function costs the full limit once;
- the process may use ``Limits.memory`` bytes more than it started with (RLIMIT_AS);
- printed output is kept up to ``Limits.output_chars`` characters per cell (figures and other
  rich output up to 2 MB);
- if the process dies (``os._exit``, a segfault, a kill at the hard deadline) the cell where
  it died says so, and every later cell says it did not run; ``sys.exit()``, ``exit()`` and a
  raised ``KeyboardInterrupt`` are errors in their cell, and the next cell runs;
- after every cell the tamper guard (``autograder.grading.tamper``) restores ``torch.allclose``, the
  checker and the other functions tests rely on if student code replaced them, and says so in
  the cell (status "tampering found").

Student code can reach whatever decides a verdict in its own process, so a referee process that
runs no student code (``autograder.grading.referee``) decides each test cell's value checks again
(``execute(..., trusted=...)``): a test cell passes only if both agree.

Hidden tests stay hidden: an error in a cell that holds hidden tests is reported as its last
line only (``AssertionError: ...``), never a traceback showing the test's source, and no
cell's output shows a line of a hidden test (code that prints the test running it gets
``<hidden test line>`` instead).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, field, replace

from autograder.grading import sandbox

HIDDEN_TESTS_MARKER = "### BEGIN " "HIDDEN TESTS"  # written in two parts: no shipped file holds the marker itself
HIDDEN_TESTS_END = "### END HIDDEN TESTS"
NOTEBOOK_OUTPUT_CHARS = 5_000_000  # all of a notebook's outputs together (one cell keeps Limits.output_chars)


@dataclass(frozen=True)
class Limits:
    """What one notebook may use while it is graded."""

    cell_timeout: float = 60.0
    after_timeout: float = 10.0
    memory: int | None = 4 * 1024**3
    output_chars: int = 100_000
    threads: int = 1
    sandbox: str = "auto"             # namespaces | landlock | off | auto (the strongest available)
    hidden: tuple[str, ...] = ()      # folders the notebook must not see (the course's), see sandbox.Policy


@dataclass
class Execution:
    """What happened when a notebook ran: outputs per code cell index, and how it ended."""

    outputs: dict[int, list[dict]] = field(default_factory=dict)
    execution_counts: dict[int, int] = field(default_factory=dict)
    status: str = "graded"          # graded | timed out | ran out of memory | kernel died | tampering found
    cell: int | None = None         # index of the cell where that happened
    detail: str = ""                # what happened there, in a few words
    seconds: float = 0.0
    judged: dict[int, int] = field(default_factory=dict)  # test cell index -> checks the referee decided


# ----------------------------------------------------------------------------------------
# Parent side


# What the warm process keeps of the grading process's environment: no database URL, no token can
# reach a notebook, not even through its process's original environment block (/proc/self/environ).
WARM_ENVIRONMENT = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH", "PYTHONHASHSEED",
                    "VIRTUAL_ENV", "MPLBACKEND", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "JUPYTER_PATH",
                    "JUPYTER_CONFIG_PATH", "AUTOGRADER_COURSE_ROOT"}
_starting = threading.Lock()


def _context():
    context = multiprocessing.get_context("forkserver")
    # sandbox too: its libseccomp lookup (pyseccomp, ~6 ms) is then paid once, not by every notebook.
    context.set_forkserver_preload(["autograder.grading.warm", "autograder.grading.sandbox",
                                    "autograder.grading.referee"])
    from multiprocessing import forkserver

    with _starting:
        if forkserver._forkserver._forkserver_pid is None:  # (multiprocessing keeps no public flag)
            saved = dict(os.environ)
            try:
                for name in [n for n in os.environ if n not in WARM_ENVIRONMENT and not n.startswith("LC_")]:
                    del os.environ[name]
                forkserver.ensure_running()
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
    is read as bytes, parsed as JSON and checked (``_Messages``), never unpickled.

    With ``trusted`` (the instructor's cells, ``referee_cells``), a referee process
    (``autograder.grading.referee``) runs each test cell again after the student's process has,
    and a test cell whose checks the referee finds wrong fails, whatever the student's process said.
    Cells to judge carry their ``grade_id``.
    """
    started = time.monotonic()
    if limits.sandbox == "auto":  # a Dask worker: its own machine decides
        limits = confine(limits, [])
    result = Execution()
    context = _context()
    receive, send = context.Pipe(duplex=True)
    judged = trusted is not None and any(c.get("grade_id") for c in cells)
    referee = _Referee.for_notebook(context, trusted, limits) if judged else None
    child = context.Process(target=_child_main, args=(cells, cwd, limits, env or {}, send, judged),
                            name="autograder-notebook", daemon=True)
    child.start()
    send.close()
    messages = _Messages(cells, limits)
    running, cell_started, timed_out, done = None, time.monotonic(), False, False
    try:
        while True:
            limit = min(limits.after_timeout, limits.cell_timeout) if timed_out else limits.cell_timeout
            deadline = cell_started + limit + 5.0
            if receive.poll(max(0.05, deadline - time.monotonic())):
                try:
                    message = messages.read(receive, child, deadline)
                except EOFError:
                    break
                except ProtocolError as error:
                    child.terminate()  # SIGTERM: in Landlock mode the sandbox then kills what the notebook left
                    why = f"the notebook's process sent the grader an invalid message ({error})"
                    if running is not None:
                        _append(result, running, _error("DeadKernelError", why))
                    result.status, result.cell, result.detail = "kernel died", running, why
                    running = "killed"
                    break
                kind = message[0]
                if kind == "start":
                    running, cell_started = message[1], time.monotonic()
                elif kind == "end":
                    _, index, outputs, count, status = message
                    result.outputs[index], result.execution_counts[index] = outputs, count
                    running = None
                    if status != "ok" and result.status == "graded":
                        result.status, result.cell = status, index
                    timed_out = timed_out or status == "timed out"
                    if referee is not None and cells[index].get("grade_id"):
                        # A cell that failed in the student's process fails whatever the referee finds.
                        if not any(o["output_type"] == "error" for o in outputs):
                            result.judged[index], failure = referee.judge(cells[index]["grade_id"], receive, child)
                            if failure:
                                _append(result, index, _error("AssertionError", failure))
                        if referee.child_gone:
                            why = referee.child_gone
                            result.status, result.cell, result.detail = "kernel died", index, why
                            running = "killed"
                            break
                        _tell(receive, ["continue"])
                        cell_started = time.monotonic()
                elif kind == "done":
                    done = True
                    break
                elif kind == "crash":
                    # Student code runs in this process and can break it too (or the grader has a bug):
                    # this notebook stops here, the batch goes on.
                    why = "the grading process failed: " + (message[1].strip().splitlines() or ["?"])[-1][:500]
                    if running is not None:
                        _append(result, running, _error("DeadKernelError", why))
                    result.status, result.cell, result.detail = "kernel died", running, why
                    running = "killed"
                    break
            elif running is not None:
                # The cell ignored its own alarm (e.g. a bare ``except:`` in a loop): stop it.
                child.terminate()
                _append(result, running, _error("TimeoutError",
                        f"timed out after {limit:g} s: the cell did not stop when asked, so "
                        "grading stopped this notebook here"))
                result.status, result.cell, result.detail = "timed out", running, "did not stop when asked"
                running = "killed"
                break
            elif not child.is_alive():
                break
    finally:
        if referee is not None:
            referee.done()
        child.join(1)
        if child.is_alive():
            child.terminate()
            child.join(1)
        if child.is_alive():
            child.kill()
            child.join()
        receive.close()
    if running not in (None, "killed"):
        # The process vanished in the middle of a cell.
        why = _death(child.exitcode)
        _append(result, running, _error("DeadKernelError", f"the kernel died while running this cell ({why})"))
        result.status, result.cell, result.detail = "kernel died", running, why
    elif running is None and not done:
        # It ended between cells without saying it was done: what did not run did not pass.
        why = _death(child.exitcode)
        if result.status == "graded":
            result.status, result.cell, result.detail = "kernel died", messages.next_cell(), why
    if not done:
        for index, cell in enumerate(cells):
            if cell.get("cell_type") == "code" and index not in result.outputs:
                result.outputs[index] = [_error(
                    "NotRunError", f"not run: grading of this notebook stopped earlier ({result.status}"
                    f"{': ' + result.detail if result.detail else ''})")]
    result.seconds = time.monotonic() - started
    return result


class ProtocolError(Exception):
    """A message from the notebook's process that the grader does not accept."""


OUTPUT_TYPES = {"stream", "display_data", "execute_result", "error"}
STATUSES = {"ok", "timed out", "ran out of memory", "tampering found"}


class _Messages:
    """Reads and checks what the notebook's process sends: JSON only, in order, nbformat-shaped outputs.

    Messages are ``["start", i]``, ``["end", i, outputs, count, status]``, ``["done"]`` and
    ``["crash", text]``, where ``i`` must be the next code cell, and ``done`` comes only after
    the last. Outputs must be valid nbformat v4 outputs; the whole notebook keeps at most
    ``NOTEBOOK_OUTPUT_CHARS`` characters of them (errors are always kept, shortened, so that
    dropping outputs never turns a failing test into a passing one).
    """

    def __init__(self, cells: list[dict], limits: Limits) -> None:
        self.code_cells = [i for i, c in enumerate(cells) if c.get("cell_type") == "code"]
        self.position = 0           # index into code_cells of the next cell to start
        self.running: int | None = None
        self.max_bytes = 4 * (limits.output_chars + 2_000_000 + 20_000) + 65_536
        self.max_chars = limits.output_chars
        self.notebook_left = NOTEBOOK_OUTPUT_CHARS

    def next_cell(self) -> int | None:
        return self.code_cells[self.position] if self.position < len(self.code_cells) else None

    def read(self, connection, child, deadline: float) -> list:
        """The next message; EOFError when the process closed the pipe; ProtocolError when it is wrong."""
        return self.check(_receive(connection, child, deadline, self.max_bytes))

    def check(self, message) -> list:
        if not isinstance(message, list) or not message or not isinstance(message[0], str):
            raise ProtocolError("not a message")
        kind = message[0]
        if kind == "start" and len(message) == 2:
            if self.running is not None or message[1] != self.next_cell():
                raise ProtocolError(f"cell {message[1]} started out of order")
            self.running = message[1]
            self.position += 1
            return message
        if kind == "end" and len(message) == 5:
            _, index, outputs, count, status = message
            if index != self.running or index is None:
                raise ProtocolError(f"cell {index} ended but cell {self.running} was running")
            if status not in STATUSES or not (count is None or type(count) is int):
                raise ProtocolError("a bad status or execution count")
            self.running = None
            return ["end", index, self._outputs(outputs), count, status]
        if kind == "done" and len(message) == 1:
            if self.running is not None or self.next_cell() is not None:
                raise ProtocolError("done before the last cell ran")
            return message
        if kind == "crash" and len(message) == 2 and isinstance(message[1], str):
            return message
        raise ProtocolError(f"an unknown message {kind[:40]!r}")

    def _outputs(self, outputs) -> list[dict]:
        if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
            raise ProtocolError("outputs are not a list of outputs")
        kept = []
        for output in outputs:
            _check_output(output)
            size = len(json.dumps(output))
            if output["output_type"] == "error":
                output = _error(str(output["ename"])[:200], str(output["evalue"])[:10_000]) if size > 20_000 else output
                kept.append(output)
            elif size <= self.notebook_left:
                self.notebook_left -= size
                kept.append(output)
            elif self.notebook_left > 0:
                self.notebook_left = 0
                kept.append({"output_type": "stream", "name": "stdout", "text": (
                    f"... output left out: this notebook's outputs passed {NOTEBOOK_OUTPUT_CHARS} characters ...\n")})
        return kept


def _receive(connection, process, deadline: float, max_bytes: int):
    """One JSON message from ``process``; EOFError when it closed the pipe; ProtocolError when it is wrong."""
    # A sender that announces a long message and stops writing would block recv_bytes: past the
    # deadline, the process is killed, which closes the pipe.
    watchdog = threading.Timer(max(1.0, deadline - time.monotonic()), process.kill)
    watchdog.start()
    try:
        data = connection.recv_bytes(max_bytes)
    except OSError as error:
        raise ProtocolError(f"a message over {max_bytes} bytes") from error
    finally:
        watchdog.cancel()
    try:
        return json.loads(data)
    except ValueError:
        raise ProtocolError("not JSON") from None


def _tell(connection, message: list) -> bool:
    """Send ``message`` as JSON; False when the other end is gone."""
    try:
        connection.send_bytes(json.dumps(message).encode())
        return True
    except OSError:
        return False


_referees = threading.local()  # each grading thread's referee process, kept from one notebook to the next


class _Referee:
    """The parent's side of the referee: starts it, and carries its questions to the student's process.

    The referee asks (``["ask", request]``), the student's process answers (``["answer", reply]``),
    and nothing else may come from the student's process meanwhile. A process that answers out of
    turn, too late or not at all gets no more questions (``child_gone`` says why) and every check
    it did not answer fails.

    One referee process serves a grading thread's notebooks one after the other (starting one per
    notebook cost ~25 ms, 10% of grading); each notebook gets a fresh ``Referee`` in it, and a
    referee that fails in any way is ended and replaced for the next notebook.
    """

    ANSWER_BYTES = 64 * 1024**2

    def __init__(self, context, limits: Limits) -> None:
        import tempfile
        import weakref

        self.limits, self.sent, self.busy, self.broken = limits, None, False, False
        self.folder = tempfile.mkdtemp(prefix="autograder-referee-")
        self.connection, their_end = context.Pipe(duplex=True)
        self.process = context.Process(target=_referee_main, args=(self.folder, limits, their_end),
                                       name="autograder-referee", daemon=True)
        self.process.start()
        their_end.close()
        self.end = weakref.finalize(self, _end_referee, self.process, self.connection, self.folder)

    @classmethod
    def for_notebook(cls, context, trusted: dict, limits: Limits) -> "_Referee":
        """This thread's referee, started if needed, ready for a notebook with the instructor's cells ``trusted``."""
        referee = getattr(_referees, "referee", None)
        if referee is None or referee.broken or referee.limits != limits or not referee.process.is_alive():
            referee = _referees.referee = cls(context, limits)
        referee.child_gone, referee.timed_out = "", False
        same = trusted == referee.sent
        referee.sent = trusted
        if not _tell(referee.connection, ["notebook"] if same else ["notebook", trusted]):
            referee.broken = True
        return referee

    def judge(self, grade_id: str, student, child) -> tuple[int, str | None]:
        """Have the referee run test ``grade_id``: (how many checks it decided, its failure message or None).

        Each check may take the cell time limit; once one has run out of time, the checks after it in
        the same cell fail at once, and every later check may take ``after_timeout`` (as cells do)."""
        deadline = lambda: time.monotonic() + self.limits.cell_timeout + 60.0  # noqa: E731 (trusted: a bug, not an attack)
        if self.broken or not _tell(self.connection, ["judge", grade_id]):
            self.broken = True
            return 0, "the grader's own check of this cell could not run (its process is gone)"
        self.busy = True
        while True:
            try:
                message = _receive(self.connection, self.process, deadline(), self.ANSWER_BYTES)
            except (EOFError, ProtocolError) as error:
                self.broken = True
                return 0, f"the grader's own check of this cell could not run ({error or 'its process ended'})"
            if message[0] == "verdict":
                self.busy = False
                return message[1], message[2]
            if message[0] != "ask":
                self.broken = True
                return 0, f"the grader's own check of this cell failed: {str(message[-1]).strip()[-300:]}"
            _tell(self.connection, ["answer", self._ask(message[1], student, child)])

    def _ask(self, requests: list, student, child) -> list | None:
        """The student's process's replies to the checks ``requests`` (one test cell's), or None."""
        limits = self.limits
        limit = min(limits.after_timeout, limits.cell_timeout) if self.timed_out else limits.cell_timeout
        if self.child_gone or not _tell(student, ["ask", requests, limit]):
            self.child_gone = self.child_gone or "the notebook's process ended before the grader's checks"
            return None
        try:
            reply = _receive(student, child, time.monotonic() + limit * len(requests) + 5.0, self.ANSWER_BYTES)
        except (EOFError, ProtocolError) as error:
            child.kill()
            self.child_gone = f"the notebook's process did not answer the grader's check ({error or 'it ended'})"
            return None
        if not (isinstance(reply, list) and len(reply) == 2 and reply[0] == "answer" and isinstance(reply[1], list)):
            child.kill()
            self.child_gone = "the notebook's process sent the grader an invalid message (not an answer)"
            return None
        self.timed_out = self.timed_out or any(isinstance(r, dict) and str(r.get("error")).startswith("TimeoutError")
                                               for r in reply[1])
        return reply[1]

    def done(self) -> None:
        """The notebook is over: a referee left in the middle of a cell, or failed, is not used again."""
        if self.busy or self.broken:
            self.broken = True
            if getattr(_referees, "referee", None) is self:
                _referees.referee = None
            threading.Thread(target=self.end, daemon=True).start()


def stop_referee() -> None:
    """End this thread's referee process now (otherwise it waits for the thread's next notebook, and
    ends with the thread or the program)."""
    referee = getattr(_referees, "referee", None)
    _referees.referee = None
    if referee is not None:
        referee.end()


def _end_referee(process, connection, folder: str) -> None:
    """End a referee process (it needs ~10 ms to come down from its sandbox) and remove its folder."""
    import shutil

    _tell(connection, ["stop"])
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
    connection.close()
    shutil.rmtree(folder, ignore_errors=True)


def _check_output(output: dict) -> None:
    """Raise ProtocolError unless ``output`` is an nbformat v4 output (the fields nbgrader and nbconvert read)."""
    kind = output.get("output_type")
    strings = lambda value: isinstance(value, str) or (  # noqa: E731
        isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind == "stream":
        ok = output.get("name") in ("stdout", "stderr") and strings(output.get("text")) and len(output) == 3
    elif kind in ("display_data", "execute_result"):
        data, metadata = output.get("data"), output.get("metadata")
        ok = (isinstance(data, dict) and all(isinstance(k, str) and "/" in k for k in data)
              and isinstance(metadata, dict)
              and set(output) <= {"output_type", "data", "metadata", "execution_count", "transient"}
              and (kind == "display_data" or type(output.get("execution_count")) in (int, type(None))))
    elif kind == "error":
        ok = (isinstance(output.get("ename"), str) and isinstance(output.get("evalue"), str)
              and isinstance(output.get("traceback"), list) and all(isinstance(t, str) for t in output["traceback"]))
    else:
        ok = False
    if not ok:
        raise ProtocolError(f"an output that is not valid nbformat ({str(kind)[:40]})")


_available: str | None = None
REFUSED = ("this machine allows no sandbox (neither namespaces nor Landlock, or no libseccomp2), so "
           "student code would run as you, able to read solutions/ and the gradebook, change grades and use "
           "the network: grade in a container or VM, or pass --no-sandbox to run it anyway")


class SandboxRefused(Exception):
    """No sandbox is available and none was explicitly declined."""


def confine(limits: Limits, hidden: list, here: bool = True) -> Limits:
    """``limits`` with ``hidden`` (the course's folders) kept from students, and its sandbox mode decided here.

    Raises SandboxRefused when ``auto`` finds no sandbox: only an explicit ``sandbox="off"`` runs without one.
    With ``here=False`` (notebooks run on Dask workers) each worker decides the mode for its machine.
    """
    mode = sandbox_mode(limits) if here else limits.sandbox
    if mode == "off" and limits.sandbox == "auto":
        raise SandboxRefused(REFUSED)
    return replace(limits, sandbox=mode, hidden=tuple(str(h) for h in hidden) + tuple(limits.hidden))


def sandbox_mode(limits: Limits) -> str:
    """The sandbox ``limits`` asks for, ``auto`` resolved to the strongest this machine allows (probed once)."""
    global _available
    if limits.sandbox != "auto":
        return limits.sandbox
    if _available is None:
        from autograder.grading import sandbox

        _available = sandbox.available()
    return _available


def _package_folder() -> str:
    """The course's own package (``autograder/``): readable, never writable, inside the sandbox."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def _error(name: str, value: str) -> dict:
    return {"output_type": "error", "ename": name, "evalue": value, "traceback": [f"{name}: {value}"]}


# ----------------------------------------------------------------------------------------
# Child side: runs in the process forked from the warm forkserver.


class CellTimeout(BaseException):
    """Raised inside a cell that ran past its time limit (BaseException: ``except Exception``
    in student code does not swallow it)."""


def _child_main(cells, cwd, limits: Limits, env, connection, judged: bool = False) -> None:
    """Run every code cell and send ("start", i) / ("end", i, outputs, count, status) / ("done",).

    With ``judged``, after each test cell (one with a ``grade_id``) answer the referee's questions
    until the grader says ``continue``."""
    try:
        _isolate(cwd, limits, env, connection.fileno())
        from autograder.grading import warm

        shell = warm.new_shell(hidden_test_lines(cells))
        recorder, after_cell = shell.recorder, shell.tamper_guard.after_cell
        recorder.max_chars = limits.output_chars
        timed_out = False

        def on_alarm(signum, frame):
            signal.setitimer(signal.ITIMER_REAL, 1.0)  # keep interrupting if it is swallowed
            raise CellTimeout()

        signal.signal(signal.SIGALRM, on_alarm)
        for index, cell in enumerate(cells):
            if cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            _send(connection, ["start", index])
            limit = min(limits.after_timeout, limits.cell_timeout) if timed_out else limits.cell_timeout
            recorder.begin(hidden=HIDDEN_TESTS_MARKER in source, limit=limit, memory=limits.memory)
            signal.setitimer(signal.ITIMER_REAL, limit)
            outcome = None
            try:
                outcome = shell.run_cell(source, store_history=True)
            except CellTimeout:
                outcome = None
                recorder.timeout()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            error = getattr(outcome, "error_in_exec", None) or getattr(outcome, "error_before_exec", None)
            if error is not None and not any(o["output_type"] == "error" for o in recorder.outputs):
                # The error's traceback was lost (e.g. the alarm fired while IPython formatted it):
                # the cell still failed, and must say so.
                recorder.error(type(error).__name__, str(error)[:1000], [])
            after_cell(shell)  # also an IPython hook, which student code could remove
            outputs, status = recorder.end()
            timed_out = timed_out or status == "timed out"
            _send(connection, ["end", index, outputs, shell.execution_count - 1, status])
            if judged and cell.get("grade_id"):
                _answer_referee(connection, shell, limits)
        _send(connection, ["done"])
        connection.close()
    except BaseException as error:  # a bug here, not in the student's code: say so
        import traceback

        try:
            _send(connection, ["crash", "".join(traceback.format_exception(error))])
        except Exception:
            pass
    finally:
        os._exit(0)


def _answer_referee(connection, shell, limits: Limits) -> None:
    """Answer the referee's questions about this notebook's Functions until told to go on."""
    from autograder.grading import referee

    while True:
        message = json.loads(connection.recv_bytes())
        if message[0] != "ask":
            return
        limit, replies = message[2], []
        for request in message[1]:
            if replies and str(replies[-1].get("error")).startswith("TimeoutError"):
                replies.append({"error": "TimeoutError: an earlier check of this cell ran out of time"})
                continue
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                replies.append(referee.answer(request, shell.user_ns))
            except CellTimeout:
                replies.append({"error": f"TimeoutError: timed out after {limit:g} s"})
            except BaseException as error:  # KeyboardInterrupt, SystemExit from student code: its error, as in a cell
                replies.append({"error": f"{type(error).__name__}: {str(error)[:300]}"})
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        _send(connection, ["answer", replies])


def _referee_main(folder: str, limits: Limits, connection) -> None:
    """The referee's process: sandboxed like a notebook, it judges test cells when asked (never runs student code).

    ``["notebook", trusted]`` (or ``["notebook"]``: the same cells as before) starts a notebook,
    ``["judge", grade_id]`` judges one of its test cells, anything else ends the process."""
    try:
        _isolate(folder, limits, {}, connection.fileno())
        from autograder.grading.referee import Referee

        def ask(requests: list):
            _send(connection, ["ask", requests])
            return json.loads(connection.recv_bytes())[1]

        trusted, judge = None, None
        while True:
            message = json.loads(connection.recv_bytes())
            if message[0] == "notebook":
                trusted = message[1] if len(message) == 2 else trusted
                judge = Referee(trusted["cells"], trusted["student_names"], ask)
            elif message[0] == "judge":
                judged, failure = judge.judge_cell(message[1])
                _send(connection, ["verdict", judged, failure])
            else:
                break
    except EOFError:
        pass
    except BaseException as error:  # a bug in the grader: the parent fails the cell and says so
        import traceback

        try:
            _send(connection, ["crash", "".join(traceback.format_exception(error))])
        except Exception:
            pass
    finally:
        os._exit(0)


def _send(connection, message: list) -> None:
    """One message to the grader, as JSON bytes (the grader never unpickles what a notebook sends)."""
    connection.send_bytes(json.dumps(message, default=str).encode())


def hidden_test_lines(cells: list[dict]) -> list[str]:
    """What outputs must not show: the markers, and hidden tests' lines that appear nowhere else in the notebook."""
    hidden, shown = set(), set()
    for cell in cells:
        source = cell.get("source", "")
        inside = False
        for line in ("".join(source) if isinstance(source, list) else source).splitlines():
            if HIDDEN_TESTS_MARKER in line or HIDDEN_TESTS_END in line:
                inside = HIDDEN_TESTS_MARKER in line
                continue
            (hidden if inside else shown).add(line.strip())
    lines = [line for line in hidden - shown if len(line) >= 8] + [HIDDEN_TESTS_MARKER, HIDDEN_TESTS_END]
    return sorted(lines, key=len, reverse=True)


def _isolate(cwd: str, limits: Limits, env: dict[str, str], keep_fd: int) -> None:
    """The sandbox (``autograder.grading.sandbox``), no stdin, C-level output discarded, bounded memory and threads."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    policy = sandbox.Policy(sandbox_mode(limits), tuple(limits.hidden), (_package_folder(),))
    sandbox.enter(policy, cwd, keep_fd, env, limits.memory)
    if limits.memory is not None:
        import resource

        page = os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/statm") as statm:
            in_use = int(statm.read().split()[0]) * page
        resource.setrlimit(resource.RLIMIT_AS, (in_use + limits.memory, in_use + limits.memory))
    import torch

    torch.set_num_threads(max(1, limits.threads))
