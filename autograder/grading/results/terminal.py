"""What the instructor's commands draw: progress bars with a time left, and tables, all by rich.

On a terminal a bar redraws one line on stderr and disappears when done. In a log (stderr is a
file or a pipe) there is no bar; grading prints a line per student instead, with the count, the
time elapsed and the time left. Tables go to stdout as plain text (no colours, never wrapped), so
a log or a ``grep`` reads them as easily as a person does.
"""

from __future__ import annotations

import sys
import time
from typing import Iterable, Sequence, TypeVar

from rich import box
from rich.console import Console
from rich.markdown import Markdown
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn, track)
from rich.table import Table

T = TypeVar("T")
WIDE = 10_000  # the width of a console that is not a terminal: a table's rows are never wrapped


def _is_terminal(stream) -> bool:
    return bool(getattr(stream, "isatty", lambda: False)())


def console(stream=None) -> Console:
    """A rich console on ``stream`` (stdout by default): colours on a terminal, plain text elsewhere."""
    stream = stream if stream is not None else sys.stdout
    if _is_terminal(stream):
        return Console(file=stream, highlight=False)
    return Console(file=stream, width=WIDE, no_color=True, highlight=False, emoji=False, markup=False)


def print_table(columns: Sequence[str], rows: Iterable[Sequence[object]], stream=None,
                right: Sequence[str] = ()) -> None:
    """Print a table with a header row; the columns named in ``right`` are right-aligned (numbers)."""
    stream = stream if stream is not None else sys.stdout
    out = console(stream)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, highlight=False)
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left", no_wrap=not out.is_terminal)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    if out.is_terminal:
        out.print(table, markup=False)
        return
    with out.capture() as drawn:
        out.print(table, markup=False, crop=False)
    stream.write("".join(line.rstrip() + "\n" for line in drawn.get().splitlines()))  # no padding at line ends
    stream.flush()


def print_markdown(text: str, stream=None) -> None:
    """Markdown (the class report's summary): drawn by rich on a terminal, its own text in a log."""
    stream = stream if stream is not None else sys.stdout
    if _is_terminal(stream):
        console(stream).print(Markdown(text))
    else:
        stream.write(text + "\n")
        stream.flush()


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterable[T]:
    """``items``, drawing a bar with the count and time left on a terminal while they are consumed."""
    stream = sys.stderr
    return track(items, description=description, total=total, transient=True, console=console(stream),
                 disable=not _is_terminal(stream))


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f"{minutes}:{seconds:02d}"


class GradingProgress:
    """The grading progress on stderr: a rich bar on a terminal, a line per student in a log."""

    def __init__(self, total: int, stream=None, heading: str = "") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = _is_terminal(self.stream)
        if heading and total:  # before the first notebook ends, which may take a while
            self.stream.write(heading + "\n")
            self.stream.flush()
        self.total, self.done, self.graded, self.started = total, 0, 0, time.monotonic()
        self.bar = None
        if self.tty and total:
            self.bar = Progress(TextColumn("grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[label]}"),
                                console=console(self.stream), transient=True, auto_refresh=False)
            self.task = self.bar.add_task("grading", total=total, label="")
            self.bar.start()

    def advance(self, n: int, label: str = "") -> None:
        """Count ``n`` more students done; ``label`` names the last (resumed students are counted silently)."""
        self.done += n
        if self.bar is not None:
            self.bar.update(self.task, advance=n, label=label, refresh=True)
        elif n and label and self.total:
            self.graded += n  # the time left is estimated from the students graded, not those resumed
            elapsed = time.monotonic() - self.started
            left = elapsed / self.graded * (self.total - self.done)
            self.stream.write(f"grading {self.done}/{self.total} {label} "
                              f"({_clock(elapsed)} elapsed, {_clock(left)} left)\n")
            self.stream.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
