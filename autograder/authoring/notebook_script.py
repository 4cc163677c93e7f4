"""Run a notebook's code cells in order as plain Python, without Jupyter: ``python -m
autograder.authoring.notebook_script NOTEBOOK [--json REPORT]``.

For machines that have torch but no Jupyter (a bare GPU machine): each code cell is compiled and run
in one namespace, as a kernel would, with IPython's magics and shell lines (``%pip``, ``!ls``) left
out, figures drawn off screen (matplotlib's Agg backend) and closed after each cell. It stops at the
first cell that raises. The report says, per cell, whether it ran, how long it took, the end of
what it printed, and the error it raised.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import linecache
import os
import sys
import time
import traceback
import types
from pathlib import Path


def code_cells(notebook: dict) -> list[str]:
    """The code cells' sources, with magic and shell lines (``%...``, ``!...``) left out."""
    cells = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        cells.append("".join(line for line in source.splitlines(keepends=True)
                             if not line.lstrip().startswith(("%", "!"))))
    return cells


def read_code_cells(path) -> list[str]:
    """``code_cells`` of the notebook file at ``path``."""
    return code_cells(json.loads(Path(path).read_text(encoding="utf-8")))


def compile_cell(source: str, filename: str):
    """``source`` compiled under ``filename``, its lines put in ``linecache`` first, as IPython does, so that
    inspect.getsource finds them (Triton's @triton.jit reads its function's source: "@jit functions should
    be defined in a Python file")."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return compile(source, filename, "exec")


def run_cells(path, cell_ids, module: str, names: dict | None = None) -> dict:
    """The code cells of the notebook at ``path`` whose ids are ``cell_ids``, run in that order (as plain Python,
    each under a file name of its own in ``linecache``) in a new module ``module`` (registered in ``sys.modules``:
    torch.compile looks a function's module up there) that starts with ``names``; returns its namespace."""
    path = Path(path)
    cells = {cell.get("id"): cell for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]}
    made = types.ModuleType(module)
    sys.modules[module] = made
    namespace = made.__dict__
    namespace.update(names or {})
    for cell_id in cell_ids:
        source = cells[cell_id]["source"]
        source = "".join(source) if isinstance(source, list) else source
        exec(compile_cell(source, f"<{path.stem} cell {cell_id}>"), namespace)  # noqa: S102 - the course's own notebook
    return namespace


def run_notebook(path, tail: int = 1500) -> list[dict]:
    """Run ``path``'s code cells in order in one namespace, in its folder; one row per cell run."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path).resolve()
    # The cells' globals are a real module standing as __main__ while they run, as in a kernel: torch.compile
    # looks a function's module up in sys.modules (without it: "module '__main__' has no attribute 'torch'").
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    rows = []
    before, main = Path.cwd(), sys.modules.get("__main__")
    os.chdir(path.parent)
    sys.modules["__main__"] = module
    try:
        for number, source in enumerate(read_code_cells(path), 1):
            printed = io.StringIO()
            start = time.perf_counter()
            error = None
            try:
                with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                    exec(compile_cell(source, f"<{path.name} cell {number}>"), namespace)  # noqa: S102
            except BaseException as raised:  # noqa: BLE001 - the report says what the cell raised
                error = "".join(traceback.format_exception_only(type(raised), raised)).strip()[-tail:]
            finally:
                plt.close("all")
            rows.append({"cell": number, "seconds": round(time.perf_counter() - start, 3), "ok": error is None,
                         "error": error, "printed": printed.getvalue()[-tail:], "first_line": source.strip()[:80]})
            if error is not None:
                break
    finally:
        os.chdir(before)
        if main is not None:
            sys.modules["__main__"] = main
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.authoring.notebook_script", description=__doc__)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--json", type=Path, help="write the report (one row per cell) to this file")
    args = parser.parse_args(argv)
    rows = run_notebook(args.notebook)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        state = "ok" if row["ok"] else f"FAILED: {row['error']}"
        print(f"cell {row['cell']:3d} {row['seconds']:7.2f} s  {state}")
    total = len(read_code_cells(args.notebook))
    print(f"{sum(r['ok'] for r in rows)} of {total} code cells ran")
    return 0 if len(rows) == total and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
