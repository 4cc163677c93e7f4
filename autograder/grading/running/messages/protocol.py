"""What a notebook's process may send the grader: JSON messages, checked, in order, never unpickled.

Student code runs in that process and can write to its pipe, so everything read from it is
untrusted: ``Messages`` accepts only the next expected message and nbformat-shaped outputs, and
bounds their size. The referee's and the examinee's pipes use the same framing (``send``, ``receive``, ``tell``;
``start`` starts a process with such a pipe).
"""

from __future__ import annotations

import json
import threading
import time

from autograder.grading.running.messages import untrusted_json

NOTEBOOK_OUTPUT_CHARS = 5_000_000  # all of a notebook's outputs together (one cell keeps Limits.output_chars)


class ProtocolError(Exception):
    """A message from the notebook's process that the grader does not accept."""


OUTPUT_TYPES = {"stream", "display_data", "execute_result", "error"}
STATUSES = {"ok", "timed out", "ran out of memory", "tampering found"}


class Messages:
    """Reads and checks what the notebook's process sends: JSON only, in order, nbformat-shaped outputs.

    Messages are ``["start", i]``, ``["end", i, outputs, count, status]``, ``["done"]`` and
    ``["crash", text]``, where ``i`` must be the next code cell, and ``done`` comes only after
    the last. Outputs must be valid nbformat v4 outputs; the whole notebook keeps at most
    ``NOTEBOOK_OUTPUT_CHARS`` characters of them (errors are always kept, shortened, so that
    dropping outputs never turns a failing test into a passing one).
    """

    def __init__(self, cells: list[dict], output_chars: int) -> None:
        self.code_cells = [i for i, c in enumerate(cells) if c.get("cell_type") == "code"]
        self.position = 0           # index into code_cells of the next cell to start
        self.running: int | None = None
        self.max_bytes = 4 * (output_chars + 2_000_000 + 20_000) + 65_536
        self.max_chars = output_chars
        self.notebook_left = NOTEBOOK_OUTPUT_CHARS

    def next_cell(self) -> int | None:
        return self.code_cells[self.position] if self.position < len(self.code_cells) else None

    def read(self, connection, child, deadline: float) -> list:
        """The next message; EOFError when the process closed the pipe; ProtocolError when it is wrong."""
        return self.check(receive(connection, child, deadline, self.max_bytes))

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
            check_output(output)
            output = defuse_markers(output)
            size = len(json.dumps(output))
            if output["output_type"] == "error":
                output = error_output(str(output["ename"])[:200], str(output["evalue"])[:10_000]) if size > 20_000 else output
                kept.append(output)
            elif size <= self.notebook_left:
                self.notebook_left -= size
                kept.append(output)
            elif self.notebook_left > 0:
                self.notebook_left = 0
                kept.append({"output_type": "stream", "name": "stdout", "text": (
                    f"... output left out: this notebook's outputs passed {NOTEBOOK_OUTPUT_CHARS} characters ...\n")})
        return kept


def receive(connection, process, deadline: float, max_bytes: int):
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
        return untrusted_json.loads(data)
    except ValueError as error:  # too deep, a number too long, not JSON at all
        raise ProtocolError(f"not JSON the grader reads: {str(error)[:200]}") from None


def tell(connection, message: list) -> bool:
    """Send ``message`` as JSON; False when the other end is gone."""
    try:
        connection.send_bytes(json.dumps(message).encode())
        return True
    except OSError:
        return False


def check_output(output: dict) -> None:
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


def send(connection, message: list) -> None:
    """One message to the grader, as JSON bytes (the grader never unpickles what a notebook sends)."""
    connection.send_bytes(json.dumps(message, default=str).encode())


def start(context, target, args: tuple, name: str):
    """``target(*args, connection)`` started in a daemon process of ``context``: that process and the grader's
    end of the pipe to it (the process's end is closed here, so the grader reads EOF once the process ends).
    The process is named for ``ps``, ``top`` and ``/proc/<pid>/comm`` after ``name`` (``autograder-notebook`` is
    ``ag-notebook``): what the bench counts each one's CPU by."""
    ours, theirs = context.Pipe(duplex=True)
    process = context.Process(target=_named, args=(short_name(name), target, *args, theirs), name=name, daemon=True)
    process.start()
    theirs.close()
    return process, ours


def short_name(name: str) -> str:
    """A grading process's name as Linux keeps it (15 characters): ``autograder-examinee`` is ``ag-examinee``."""
    return name.replace("autograder-", "ag-", 1)[:15]


def _named(name: str, target, *args) -> None:
    """Run ``target(*args)`` in a process named ``name`` (its own ``/proc/self/comm``; nothing where there is none)."""
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(name)
    except OSError:
        pass
    target(*args)


def crash_line(traceback_text: str, limit: int) -> str:
    """The last line of a ``["crash", traceback]`` report (the error itself), at most ``limit`` characters."""
    return (traceback_text.strip().splitlines() or ["?"])[-1][:limit]


def send_crash(connection, error: BaseException) -> None:
    """Tell the grader that this process (a notebook's, the referee's, an examinee's) failed with ``error``:
    a bug in the grader, or student code that broke it; the grader then fails what is left and says so."""
    import traceback

    try:
        send(connection, ["crash", "".join(traceback.format_exception(error))])
    except Exception:  # the pipe is gone: the grader sees the process end instead
        pass


def error_output(name: str, value: str) -> dict:
    """An error output the grader writes (a referee's verdict, a death): its text may quote the student's."""
    name, value = defuse_markers(name), defuse_markers(value)
    return {"output_type": "error", "ename": name, "evalue": value, "traceback": [f"{name}: {value}"]}


MARKER_WORDS = "HIDDEN TESTS"  # the words of nbgrader's markers "### BEGIN/END HIDDEN TESTS"
# nbgrader's markers, made from their words: no file of the package holds one whole, so no traceback quoting the
# grader's own source shows one (a page showing a marker is refused). tests/authoring/test_publish.py checks.
HIDDEN_TESTS_BEGIN, HIDDEN_TESTS_END = f"### BEGIN {MARKER_WORDS}", f"### END {MARKER_WORDS}"


def defuse_markers(value):
    """``value`` (a text, or an output made of texts) with nbgrader's hidden-test markers defused
    ("HIDDEN TESTS" becomes "HIDDEN_TESTS"): whatever a student prints, raises or makes the grader quote
    never looks like hidden tests on a page, where it would make that page refused."""
    if isinstance(value, str):
        return value.replace(MARKER_WORDS, "HIDDEN_TESTS") if MARKER_WORDS in value else value
    if isinstance(value, list):
        return [defuse_markers(v) for v in value]
    if isinstance(value, dict):
        return {defuse_markers(k): defuse_markers(v) for k, v in value.items()}
    return value
