"""The notebook's own process: forked from the warm one, it runs the cells and reports each one.

It sends ``["start", i]``, ``["end", i, outputs, count, status]`` and ``["done"]``
(``autograder.grading.running.messages.protocol``); after each test cell the grader has the referee check it
(the examinee answers, never this process: ``autograder.grading.running.judging.examinee``), and this process
waits until the grader says go on. Each test cell starts from its own seed (``autograder.student.seeds``), as
in the referee and in JupyterLab: its inputs are the same wherever and however often it runs.
"""

from __future__ import annotations

import os
import signal
import warnings

from autograder.grading.running.confinement.limits import CellTimeout, Limits, isolate
from autograder.grading.running.messages.protocol import HIDDEN_TESTS_BEGIN, HIDDEN_TESTS_END, send, send_crash


def child_main(cells, cwd, limits: Limits, env, judged: bool, connection) -> None:
    """Run every code cell and send ("start", i) / ("end", i, outputs, count, status) / ("done",).

    With ``judged``, after each test cell (one with a ``grade_id``) wait until the grader says ``continue``
    (it has the cell's outputs; its referee checks the cell while this process goes on)."""
    try:
        connection = isolate(cwd, limits, env, connection)
        from autograder.grading.running import warm
        from autograder.student import seeds  # (torch: not in the grader's own process)

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
            send(connection, ["start", index])
            limit = min(limits.after_timeout, limits.cell_timeout) if timed_out else limits.cell_timeout
            recorder.begin(hidden=cell.get("hidden", False) or HIDDEN_TESTS_BEGIN in source, limit=limit,
                           memory=limits.memory)
            seed = seeds.seed_test(cell["grade_id"]) if cell.get("grade_id") else None
            drawn_from = seeds.state() if seed is not None else None
            signal.setitimer(signal.ITIMER_REAL, limit)
            outcome = None
            try:
                outcome = shell.run_cell(source, store_history=True)
            except CellTimeout:
                outcome = None
                recorder.timeout()
            except Exception as error:  # the cell's own, which IPython lets through (RecursionError compiling it)
                recorder.error(type(error).__name__, str(error)[:1000], [f"{type(error).__name__}: {error}"[:1000]])
                with warnings.catch_warnings():  # (IPython's coroutine for the cell, never run, goes with its frames)
                    warnings.simplefilter("ignore", RuntimeWarning)
                    error.__traceback__ = None
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            error = getattr(outcome, "error_in_exec", None) or getattr(outcome, "error_before_exec", None)
            if error is not None and not any(o["output_type"] == "error" for o in recorder.outputs):
                # The error's traceback was lost (e.g. the alarm fired while IPython formatted it):
                # the cell still failed, and must say so.
                recorder.error(type(error).__name__, str(error)[:1000], [])
            after_cell(shell)  # also an IPython hook, which student code could remove
            outputs, status = recorder.end()
            if seed is not None and seeds.drew_since(drawn_from):
                outputs = _with_seed(outputs, seeds.reproduce(seed))
            timed_out = timed_out or status == "timed out"
            send(connection, ["end", index, outputs, shell.execution_count - 1, status])
            if judged and cell.get("grade_id"):
                connection.recv_bytes()  # ["continue"]
        send(connection, ["done"])
        connection.close()
    except BaseException as error:  # a bug here, not in the student's code: say so
        send_crash(connection, error)
    finally:
        os._exit(0)


def _with_seed(outputs: list[dict], said: str) -> list[dict]:
    """A test cell's outputs, each error saying the seed its random inputs came from (``said``) on its last line."""
    return [dict(o, evalue=f"{o['evalue']} {said}", traceback=[*o["traceback"][:-1], f"{o['traceback'][-1]} {said}"])
            if o["output_type"] == "error" and o.get("traceback") else o for o in outputs]


def hidden_test_lines(cells: list[dict]) -> list[str]:
    """What outputs must not show: the markers, and hidden tests' lines that appear nowhere else in the notebook."""
    hidden, shown = set(), set()
    for cell in cells:
        source = cell.get("source", "")
        inside = False
        for line in ("".join(source) if isinstance(source, list) else source).splitlines():
            if HIDDEN_TESTS_BEGIN in line or HIDDEN_TESTS_END in line:
                inside = HIDDEN_TESTS_BEGIN in line
                continue
            (hidden if inside else shown).add(line.strip())
    lines = [line for line in hidden - shown if len(line) >= 8] + [HIDDEN_TESTS_BEGIN, HIDDEN_TESTS_END]
    return sorted(lines, key=len, reverse=True)
