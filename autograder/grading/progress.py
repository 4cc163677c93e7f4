"""Progress bars with an ETA for the instructor's long commands (tqdm, on stderr, only on a terminal)."""

from __future__ import annotations

import sys
import time
from typing import Iterable, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterable[T]:
    """``items``, drawing a bar with the count, rate and time left while they are consumed."""
    return tqdm(items, desc=description, total=total, unit="", leave=False, disable=None, dynamic_ncols=True)


class GradingProgress:
    """The grading progress bar (tqdm: count, rate and time left) on stderr.

    On a terminal it redraws one line; otherwise (a log) it prints a line per student, with the
    same count, elapsed time and time left.
    """

    def __init__(self, total: int, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.total, self.done, self.started = total, 0, time.monotonic()
        self.bar = tqdm(total=total, desc="grading", unit="student", file=self.stream, dynamic_ncols=True,
                        disable=not (self.tty and total))

    def advance(self, n: int, label: str = "") -> None:
        self.done += n
        if self.tty:
            self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(n)
        elif n and label and self.total:
            self.stream.write(tqdm.format_meter(self.done, self.total, time.monotonic() - self.started,
                                                prefix="grading", unit="student", postfix=label) + "\n")
            self.stream.flush()

    def close(self) -> None:
        self.bar.close()
