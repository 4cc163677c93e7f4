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

Hidden tests stay hidden: an error in a cell that holds hidden tests is reported as its last
line only (``AssertionError: ...``), never a traceback showing the test's source, and no
cell's output shows a line of a hidden test (code that prints the test running it gets
``<hidden test line>`` instead).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field

HIDDEN_TESTS_MARKER = "### BEGIN " "HIDDEN TESTS"  # written in two parts: no shipped file holds the marker itself
HIDDEN_TESTS_END = "### END HIDDEN TESTS"


@dataclass(frozen=True)
class Limits:
    """What one notebook may use while it is graded."""

    cell_timeout: float = 60.0
    after_timeout: float = 10.0
    memory: int | None = 4 * 1024**3
    output_chars: int = 100_000
    threads: int = 1


@dataclass
class Execution:
    """What happened when a notebook ran: outputs per code cell index, and how it ended."""

    outputs: dict[int, list[dict]] = field(default_factory=dict)
    execution_counts: dict[int, int] = field(default_factory=dict)
    status: str = "graded"          # graded | timed out | ran out of memory | kernel died | tampering found
    cell: int | None = None         # index of the cell where that happened
    detail: str = ""                # what happened there, in a few words
    seconds: float = 0.0


# ----------------------------------------------------------------------------------------
# Parent side


def _context():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["autograder.grading.warm"])
    return context


def warm_up() -> None:
    """Start the warm process now (it imports torch in the background) so the first notebook need not wait."""
    _context()
    from multiprocessing import forkserver

    forkserver.ensure_running()


def execute(cells: list[dict], cwd: str, limits: Limits = Limits(),
            env: dict[str, str] | None = None) -> Execution:
    """Run the code ``cells`` (nbformat v4 dicts) in a fresh warm process in ``cwd``."""
    started = time.monotonic()
    result = Execution()
    context = _context()
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child_main, args=(cells, cwd, limits, env or {}, send),
                            name="autograder-notebook", daemon=True)
    child.start()
    send.close()
    running, cell_started, timed_out, finished = None, time.monotonic(), False, False
    try:
        while True:
            limit = min(limits.after_timeout, limits.cell_timeout) if timed_out else limits.cell_timeout
            wait = max(0.05, cell_started + limit + 5.0 - time.monotonic())
            if receive.poll(wait):
                try:
                    message = receive.recv()
                except (EOFError, OSError):
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
                elif kind == "done":
                    finished = True
                    break
                elif kind == "crash":
                    # Student code runs in this process and can break it too (or the grader has a bug):
                    # this notebook stops here, the batch goes on.
                    why = "the grading process failed: " + message[1].strip().splitlines()[-1]
                    if running is not None:
                        _append(result, running, _error("DeadKernelError", why))
                    result.status, result.cell, result.detail = "kernel died", running, why
                    running = "killed"
                    break
            elif running is not None:
                # The cell ignored its own alarm (e.g. a bare ``except:`` in a loop): stop it.
                child.kill()
                _append(result, running, _error("TimeoutError",
                        f"timed out after {limit:g} s: the cell did not stop when asked, so "
                        "grading stopped this notebook here"))
                result.status, result.cell, result.detail = "timed out", running, "did not stop when asked"
                running = "killed"
                break
            elif not child.is_alive():
                break
    finally:
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
    elif not finished and result.status == "graded":
        # The process ended without saying it was done, between cells or before the first one
        # (it could not even start): cells that never ran must not count as passed.
        why = _death(child.exitcode)
        result.status, result.detail = "kernel died", f"the notebook's process ended early ({why})"
    if result.status in ("kernel died", "timed out") and (running is not None or not finished):
        for index, cell in enumerate(cells):
            if cell.get("cell_type") == "code" and index not in result.outputs:
                result.outputs[index] = [_error(
                    "NotRunError", f"not run: grading of this notebook stopped earlier ({result.status}"
                    f"{': ' + result.detail if result.detail else ''})")]
    result.seconds = time.monotonic() - started
    return result


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


def _child_main(cells, cwd, limits: Limits, env, connection) -> None:
    """Run every code cell and send ("start", i) / ("end", i, outputs, count, status) / ("done",)."""
    try:
        _isolate(cwd, limits, env)
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
            connection.send(("start", index))
            limit = min(limits.after_timeout, limits.cell_timeout) if timed_out else limits.cell_timeout
            recorder.begin(hidden=HIDDEN_TESTS_MARKER in source, limit=limit, memory=limits.memory)
            signal.setitimer(signal.ITIMER_REAL, limit)
            outcome = None
            try:
                outcome = shell.run_cell(source, store_history=True)
            except CellTimeout:
                recorder.timeout()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            _record_unshown_error(recorder, outcome)
            after_cell(shell)  # also an IPython hook, which student code could remove
            outputs, status = recorder.end()
            timed_out = timed_out or status == "timed out"
            connection.send(("end", index, outputs, shell.execution_count - 1, status))
        connection.send(("done",))
        connection.close()
    except BaseException as error:  # a bug here, not in the student's code: say so
        import traceback

        try:
            connection.send(("crash", "".join(traceback.format_exception(error))))
        except Exception:
            pass
    finally:
        os._exit(0)


def _record_unshown_error(recorder, outcome) -> None:
    """A cell that raised fails, even when showing its traceback failed.

    When formatting a traceback itself fails (a time limit that strikes inside IPython's slow
    traceback formatting, or a broken formatter), IPython prints a fallback text to stdout and
    records no error; nbgrader would then score the test cell as passed. IPython's own verdict
    on the cell (``ExecutionResult.success``) decides instead.
    """
    if outcome is None or outcome.success:
        return
    if any(output.get("output_type") == "error" for output in recorder.outputs):
        return
    error = outcome.error_in_exec or outcome.error_before_exec
    name = type(error).__name__ if error is not None else "Error"
    recorder.error(name, str(error) if error is not None else "the cell failed", [])


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


def _isolate(cwd: str, limits: Limits, env: dict[str, str]) -> None:
    """Own working folder, no stdin, C-level output discarded, bounded memory and threads."""
    os.chdir(cwd)
    os.environ.update(env)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    if limits.memory is not None:
        import resource

        page = os.sysconf("SC_PAGE_SIZE")
        with open("/proc/self/statm") as statm:
            in_use = int(statm.read().split()[0]) * page
        resource.setrlimit(resource.RLIMIT_AS, (in_use + limits.memory, in_use + limits.memory))
    import torch

    torch.set_num_threads(max(1, limits.threads))
