"""Progress bars with an ETA for the instructor's long commands (tqdm, on stderr, only on a terminal)."""

from __future__ import annotations

from typing import Iterable, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(items: Iterable[T], description: str, total: int | None = None) -> Iterable[T]:
    """``items``, drawing a bar with the count, rate and time left while they are consumed."""
    return tqdm(items, desc=description, total=total, unit="", leave=False, disable=None, dynamic_ncols=True)
