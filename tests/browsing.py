"""Headless Chromium for the browser tests: Debian's chromium driven by Playwright, and named steps
with a screenshot each (under test-artifacts/browser/<test>/). The ``browser`` and ``page``
fixtures are in conftest.py."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "browser"
# As the machine's notes start it: without the background-networking flags, chromium's connections
# are refused by a closed network, many at a time.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def find_chromium() -> str | None:
    """Debian's chromium: $CHROMIUM if set, else /usr/bin/chromium or `chromium` on PATH."""
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


class Steps:
    """Run a test as named steps: a screenshot after each, and a failure that names its step."""

    def __init__(self, page, name: str):
        self.page = page
        self.folder = ARTIFACTS / name
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.count = 0

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.count += 1
        shot = self.folder / f"{self.count:02d}-{name.replace(' ', '-')}"
        try:
            yield
        except Exception as error:
            self._screenshot(shot.with_name(shot.name + "-FAILED.png"))
            raise AssertionError(f"browser step {self.count} '{name}' broke: {type(error).__name__}: "
                                 f"{error}\n(screenshot: {shot.with_name(shot.name + '-FAILED.png')})") from error
        self._screenshot(shot.with_name(shot.name + ".png"))

    def _screenshot(self, path: Path) -> None:
        try:
            self.page.screenshot(path=str(path), full_page=False)
        except Exception:  # a dead page must not hide the real failure
            pass
