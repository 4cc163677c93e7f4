"""Every CSV file the course writes (grades.csv, the exports), safe to open in a spreadsheet.

Student ids, names, emails and error messages come from students and rosters. A spreadsheet runs a
cell that starts with ``=``, ``+``, ``-`` or ``@`` (``=HYPERLINK(...)``, ``+cmd|...``, ``@SUM(...)``,
``-2-3``) as a formula. Following OWASP's advice on CSV injection, such a cell is written with a
single quote in front (the spreadsheet then shows it as text), and so is such a character after a
separator or a double quote inside a cell, where a spreadsheet reading another separator would start a
new cell; tab, carriage return and line feed count as formula starts too. A plain number
(``-1.5``, ``2e3``) is a value, not a formula, and is written as it is.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

FORMULA_STARTS = "=+-@\t\r\n"
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# Where a spreadsheet may start reading a cell: the cell's start, or after a separator or double quote
# inside it; spaces before the formula's first character count for nothing (a spreadsheet may trim them).
FORMULA_START = re.compile(rf"(^|[,;\t\r\n\"])( *)(?=[{re.escape(FORMULA_STARTS)}])")


def neutral(value) -> str:
    """``value`` as the text of a cell that no spreadsheet runs as a formula."""
    text = "" if value is None else str(value)
    if NUMBER.fullmatch(text):
        return text
    return FORMULA_START.sub(r"\1\2'", text)


class CsvFile:
    """A CSV file written whole or not at all (a temporary file, renamed), every cell ``neutral``.

    ``with CsvFile(path) as rows: rows.writerow([...])``; ``CsvFile(path, fields)`` gives a
    ``DictWriter``-like ``writerow({...})`` with its header written first.
    """

    def __init__(self, path: Path, fields: list[str] | None = None) -> None:
        self.path, self.fields = Path(path), fields
        self.temporary = self.path.with_suffix(".csv.tmp")

    def __enter__(self) -> "CsvFile":
        self.stream = self.temporary.open("w", newline="", encoding="utf-8")
        self.writer = csv.writer(self.stream)
        if self.fields is not None:
            self.writer.writerow([neutral(f) for f in self.fields])
        return self

    def writerow(self, row) -> None:
        cells = [row.get(f, "") for f in self.fields] if isinstance(row, dict) else row
        self.writer.writerow([neutral(c) for c in cells])

    def writerows(self, rows) -> None:
        for row in rows:
            self.writerow(row)

    def __exit__(self, kind, *_) -> None:
        self.stream.close()
        if kind is None:
            self.temporary.replace(self.path)
        else:
            self.temporary.unlink(missing_ok=True)
