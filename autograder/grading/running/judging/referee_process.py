"""The referee's process, and the grader's side of it: start it, carry its questions, end it.

The referee itself (what it runs and decides) is ``autograder.grading.running.judging.referee``.
"""

from __future__ import annotations

import json
import os
import threading
import time

from autograder.grading.running.confinement import memory
from autograder.grading.running.confinement.limits import Limits, isolate
from autograder.grading.running.messages.protocol import ProtocolError, receive, send, send_crash, start, tell


_referees = threading.local()  # each grading thread's referee process, kept from one notebook to the next


class RefereeProcess:
    """The parent's side of the referee: starts it, and carries its questions to the examinee.

    The referee asks (``["ask", requests]``), the notebook's examinee answers
    (``autograder.grading.running.judging.examinee.Examinee.ask``); an examinee that answers out of turn, too late
    or not at all gets no more questions and every check it did not answer fails.

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
        self.process, self.connection = start(context, referee_main, (self.folder, limits), "autograder-referee")
        self.end = weakref.finalize(self, _end_referee, self.process, self.connection, self.folder)

    @classmethod
    def for_notebook(cls, context, trusted: dict, limits: Limits) -> "RefereeProcess":
        """This thread's referee, started if needed, ready for a notebook with the instructor's cells ``trusted``."""
        referee = getattr(_referees, "referee", None)
        if referee is None or referee.broken or referee.limits != limits or not referee.process.is_alive():
            referee = _referees.referee = cls(context, limits)
        same = trusted == referee.sent
        referee.sent = trusted
        if not tell(referee.connection, ["notebook"] if same else ["notebook", trusted]):
            referee.broken = True
        return referee

    def decided_cells(self) -> set[str]:
        """The test cells the referee decides for this notebook (it has planned them): their hidden tests
        run in the referee only. Empty if the referee failed: then every cell runs whole in the student's
        process, as without a referee, and counts as decided there."""
        if self.broken:
            return set()
        deadline = time.monotonic() + 2 * self.limits.cell_timeout + 60.0
        try:
            message = receive(self.connection, self.process, deadline, self.ANSWER_BYTES)
        except (EOFError, ProtocolError):
            message = None
        if not (isinstance(message, list) and len(message) == 2 and message[0] == "ready"):
            self.broken = True
            return set()
        return set(message[1])

    def judge(self, grade_id: str, examinee, failed_there: bool = False) -> tuple[int, str | None]:
        """Have the referee run test ``grade_id``, its questions answered by ``examinee``
        (``autograder.grading.running.judging.examinee.Examinee``): (how many checks it decided, its failure message or None).
        ``failed_there``: the cell failed in the student's process (``Referee.judge_cell``)."""
        deadline = lambda: time.monotonic() + self.limits.cell_timeout + 60.0  # noqa: E731 (trusted: a bug, not an attack)
        if self.broken or not tell(self.connection, ["judge", grade_id, bool(failed_there)]):
            self.broken = True
            return 0, "the grader's own check of this cell could not run (its process is gone)"
        self.busy = True
        while True:
            try:
                message = receive(self.connection, self.process, deadline(), self.ANSWER_BYTES)
            except (EOFError, ProtocolError) as error:
                self.broken = True
                return 0, f"the grader's own check of this cell could not run ({error or 'its process ended'})"
            if message[0] == "verdict":
                self.busy = False
                return message[1], message[2]
            if message[0] != "ask":
                self.broken = True
                return 0, f"the grader's own check of this cell failed: {str(message[-1]).strip()[-300:]}"
            replies = examinee.ask(message[1])
            if replies is None and isinstance(message[1], list):  # each check says why it got no answer
                replies = [{"gone": examinee.gone}] * len(message[1])
            tell(self.connection, ["answer", replies])

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

    tell(connection, ["stop"])
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join()
    memory.release(process.pid)
    connection.close()
    shutil.rmtree(folder, ignore_errors=True)


def referee_main(folder: str, limits: Limits, connection) -> None:
    """The referee's process: sandboxed like a notebook, it judges test cells when asked (never runs student code).

    ``["notebook", trusted]`` (or ``["notebook"]``: the same cells as before) starts a notebook: the
    referee plans its checks and answers ``["ready", decided grade_ids]``; ``["judge", grade_id, failed_there]``
    judges one of its test cells; anything else ends the process."""
    try:
        connection = isolate(folder, limits, {}, connection)
        from autograder.grading.running.judging.referee import Referee

        def ask(requests: list):
            send(connection, ["ask", requests])
            return json.loads(connection.recv_bytes())[1]

        trusted, judge = None, None
        while True:
            message = json.loads(connection.recv_bytes())
            if message[0] == "notebook":
                trusted = message[1] if len(message) == 2 else trusted
                judge = Referee(trusted["cells"], trusted["student_names"], ask)
                send(connection, ["ready", judge.plan()])
            elif message[0] == "judge":
                judged, failure = judge.judge_cell(message[1], message[2])
                send(connection, ["verdict", judged, failure])
            else:
                break
    except EOFError:
        pass
    except BaseException as error:  # a bug in the grader: the parent fails the cell and says so
        send_crash(connection, error)
    finally:
        os._exit(0)
