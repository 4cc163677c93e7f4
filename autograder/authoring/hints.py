"""Hints in levels: the last level of an exercise's hints, the one that hands over the answer, is the
instructor's choice per release.

Every exercise's hints are collapsed ``<details>`` blocks, ``<summary>Hint 1</summary>``, ... The
level that gives the solution line is marked by its summary alone: ``<summary>Hint 3: the
answer</summary>``. The setting ``answer-hints`` (``[tool.custom-autograd-course]`` in pyproject.toml)
says what the graded release does with it: ``"strip"`` (the default: ``course/``, the students'
edition and a JupyterHub release, all made by ``release``, hold no answer-level hint) or ``"keep"``.
``solutions/``, the book and the self-study edition always keep every level.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from autograder.course import Course, CourseError

SETTING = "answer-hints"
CHOICES = ("strip", "keep")
ANSWER_LEVEL = re.compile(r"<details>\s*<summary>\s*Hint \d+: the answer\s*</summary>.*?</details>\n?", re.S)


def answer_hints(course: Course) -> str:
    """The course's choice for the graded release: "strip" (default) or "keep"."""
    try:
        settings = tomllib.loads((course.root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return "strip"
    chosen = settings.get("tool", {}).get("custom-autograd-course", {}).get(SETTING, "strip")
    if chosen not in CHOICES:
        raise CourseError(f"pyproject.toml: {SETTING} = {chosen!r}; choose one of {', '.join(CHOICES)}")
    return chosen


def strip_answer_hints(markdown: str) -> str:
    """``markdown`` without its answer-level hint blocks."""
    return ANSWER_LEVEL.sub("", markdown)


def has_answer_hints(markdown: str) -> bool:
    return bool(ANSWER_LEVEL.search(markdown))


def strip_notebook(path: Path) -> bool:
    """Remove the answer-level hints from the Markdown cells of the notebook at ``path``; True if any were."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    changed = False
    for cell in notebook["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown" and has_answer_hints(source):
            cell["source"] = strip_answer_hints(source).splitlines(keepends=True)
            changed = True
    if changed:
        path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return changed


def restore_answer_hints(released: Path, solution: Path) -> None:
    """Put the solution notebook's Markdown (all hint levels) back into the released notebook, cell by cell id."""
    notebook = json.loads(released.read_text(encoding="utf-8"))
    full = {c.get("id"): c["source"] for c in json.loads(solution.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "markdown"}
    for cell in notebook["cells"]:
        source = full.get(cell.get("id"))
        if cell["cell_type"] == "markdown" and source is not None and has_answer_hints("".join(source)):
            cell["source"] = source
    released.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
