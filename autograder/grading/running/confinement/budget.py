"""One budget per notebook: wall-clock and CPU time for all its cells and the grader's checks together.

A cell may run ``--timeout`` seconds and each of the referee's checks as long, so without a budget a
notebook of many slow cells, or many slow answers to the checks, or processes burning CPU beside it,
holds its grading slot for as long as it likes. ``Budget`` watches a notebook's sandboxes (its own
process and its examinee, with everything they start) from a thread of the grader: past
``notebook_budget(limits)`` seconds of wall-clock time since they started, or of CPU time of all their
processes together, it kills them, and the executor reports the notebook ``over budget``, naming the cell.
"""

from __future__ import annotations

import threading
import time

from autograder.grading.running.confinement import processes

PERIOD = 0.5  # seconds between two looks at the clock and the processes' CPU time


class Budget:
    """Watches the sandboxes ``roots`` ((pid, start time) of each outer process): ``wall`` seconds since now,
    ``cpu`` seconds of CPU time (the same number, ``notebook_budget(limits)``, in grading)."""

    def __init__(self, wall: float, cpu: float, roots: list[tuple[int, int | None]]) -> None:
        self.wall, self.cpu, self.roots = wall, cpu, roots
        self.started = time.monotonic()
        self.exceeded = ""   # what ran out, in words (empty: nothing)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="autograder-budget", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stopped.wait(PERIOD):
            wall, cpu = time.monotonic() - self.started, processes.cpu_seconds(self.roots)
            if wall > self.wall:
                self.exceeded = f"it ran past its budget of {self.wall:g} s of wall-clock time"
            elif cpu > self.cpu:
                self.exceeded = f"its processes used more than its budget of {self.cpu:g} s of CPU time"
            if self.exceeded:
                for root, started in self.roots:
                    processes.end_sandbox(root, started, wait=2.0)
                return

    def stop(self) -> None:
        """The notebook is over: stop watching."""
        self._stopped.set()
        self._thread.join()
