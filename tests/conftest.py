"""Shared fixtures: the real course, and throwaway copies of it for nbgrader runs.

The course's own packages and Playwright are imported where a fixture needs them, not here: the GPU
tests run on a bare CUDA machine that has torch and pytest and nothing else
(``python -m autograder.authoring.gpu_check``).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

# Triton kernels in the tests run in Triton's interpreter, as in grading, GPU or not. Whether Triton
# interprets is fixed when a process first imports it (torch may), so this comes before any import
# that could. (kernel_timings measures a GPU in a fresh Python without it.)
os.environ["TRITON_INTERPRET"] = "1"

import pytest

from browsing import CHROMIUM_ARGS, find_chromium

# Every run ends with its slowest tests, their wall-clock and the CPU their processes used (tests/timings.py).
pytest_plugins = ("timings",)

REPO = Path(__file__).resolve().parent.parent


# The longest test files of `make test`, longest first (seconds of one worker, summed over a file's
# tests, in a run of 2026-11-26 on a quiet 2-core machine: 157, 157, 103, 96, 91, 86, 81, 64, 56, 53, 48,
# 40, 39, 39, 36, 35; every other file takes under 31 s; test_same_score, test_seed_sweep and test_oversized,
# added later, are placed by estimate). Started in this order, the short files fill in at
# the end, so neither worker waits long for the other (the longest-processing-time-first rule).
LONGEST_FIRST = ("tests/grading/test_check_agrees.py", "tests/authoring/test_notebooks.py", "tests/authoring/test_book.py",
                 "tests/test_install.py", "tests/grading/test_grading.py", "tests/test_browser.py",
                 "tests/grading/test_robustness.py", "tests/grading/test_referee.py", "tests/grading/test_deadlines.py",
                 "tests/grading/test_demo.py", "tests/grading/test_same_score.py", "tests/grading/test_grading_backends.py",
                 "tests/grading/test_selfcheck.py", "tests/grading/test_hostile.py", "tests/grading/test_seed_sweep.py",
                 "tests/grading/test_oversized.py", "tests/grading/test_check_server.py",
                 "tests/grading/test_one_student.py", "tests/grading/test_hand_grading.py")


def pytest_collection_modifyitems(items) -> None:
    """For `make test`'s parallel run (pytest-xdist, --dist loadfile --no-loadscope-reorder: a file's
    tests and its module fixtures on one worker, files handed out in this order): the longest files
    first, in the order above; the others keep their order."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


@contextmanager
def running_jupyter(app: str, course: Course, env: dict[str, str], log_path: Path, options: Sequence[str] = (),
                    timeout: float = 60, python: str = sys.executable) -> Iterator[tuple[str, str]]:
    """``jupyter <app>`` (lab, server) of ``python``'s environment on ``course.root``, started there, at a
    free local port: yields (base URL, token).

    It answers ``/api/status`` before this yields, and is stopped after (SIGTERM, then SIGKILL).
    Its output goes to ``log_path``, whose end the failure shows if it exits or stays silent.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token, base = secrets.token_hex(16), f"http://127.0.0.1:{port}"
    command = [str(python), "-m", "jupyter", app, "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={course.root}", *options]
    if os.geteuid() == 0:
        command.append("--allow-root")  # Jupyter refuses to run as root otherwise
    with log_path.open("w") as log:
        server = subprocess.Popen(command, cwd=course.root, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if server.poll() is not None:
                    pytest.fail(f"jupyter {app} exited ({server.returncode}) at start:\n{log_path.read_text()[-3000:]}")
                try:
                    urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"jupyter {app} did not answer within {timeout} s:\n{log_path.read_text()[-3000:]}")
                    time.sleep(0.3)
            yield base, token
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@contextmanager
def jupyter_server(course: Course) -> Iterator[tuple[str, str]]:
    """``jupyter server`` as `make lab` starts it on ``course`` (its environment: the course's nbgrader
    config), with nbgrader's formgrader on as nbgrader's install enables it: yields (base URL, token)."""
    env = {**course.environment(), "JUPYTER_RUNTIME_DIR": str(course.root / "grading" / ".runtime")}
    # (etc/jupyter/jupyter_server_config.d/nbgrader.json enables it in an instructor's installation)
    with running_jupyter("server", course, env, course.root / "grading" / "jupyter-server.log",
                         ["--ServerApp.jpserver_extensions=nbgrader.server_extensions.formgrader=True"]) as server:
        yield server


@pytest.fixture(scope="session", autouse=True)
def private_check_processes():
    """check's warm processes of this test session live in a folder of its own, end after 2 idle minutes
    (an interrupted session leaves none for long), and are stopped when the session ends. On a bare GPU
    machine (`make gpu-check`: no nbgrader, Jupyter or traitlets) there is no check to run: nothing to do."""
    try:
        from autograder.grading import check_server
    except ImportError:
        yield None
        return

    folder = Path(tempfile.mkdtemp(prefix="ag-check-"))  # short: a Unix socket's path has at most 107 bytes
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(check_server.FOLDER_VARIABLE, str(folder))
        patch.setenv(check_server.IDLE_VARIABLE, "120")
        yield folder
        for socket_path in folder.glob("*.sock"):
            check_server.stop_at(socket_path)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def course() -> Course:
    from autograder.course import Course

    return Course(REPO)


@pytest.fixture
def course_copy(tmp_path) -> Course:
    """A temporary course with this repository's solutions/ and course/; nbgrader writes there."""
    from autograder.course import Course

    for folder in ("solutions", "course"):
        shutil.copytree(REPO / folder, tmp_path / folder)
    (tmp_path / "grading").mkdir()
    return Course(tmp_path)


@dataclass
class DemoRun:
    """A course copy in which `python -m autograder demo` ran (the demo class graded in its own workspace, build/demo/,
    with feedback, report, similarity and export), and what the command printed."""

    root: Path
    run: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory, worker_id) -> DemoRun:
    """`python -m autograder demo` run once for the whole test run, in a course copy: the first test process to ask
    runs it (a file lock keeps the others waiting), the others find it. Read it, or copy it to change it."""
    from autograder.course import Course

    # pytest-xdist's workers share the folder above their own temporary folders (one run's: its name is new each run)
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    root, printed = shared / "demo-ran", shared / "demo-ran.json"
    with open(shared / "demo-ran.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (released when the file closes)
        if not printed.exists():
            for folder in ("solutions", "course"):
                shutil.copytree(REPO / folder, root / folder)
            course = Course(root)
            run = subprocess.run([sys.executable, "-m", "autograder", "demo"], cwd=root, env=course.environment(),
                                 capture_output=True, text=True, timeout=600)
            printed.write_text(json.dumps([run.args, run.returncode, run.stdout, run.stderr]))
    run = subprocess.CompletedProcess(*json.loads(printed.read_text()))
    assert run.returncode == 0, run.stdout + run.stderr  # (each worker that asks fails the same way)
    return DemoRun(root, run)


@dataclass
class BuiltBook:
    """The course's book built once for the test session, from a copy of the course."""

    course: Course  # the copy it was built from
    output: Path  # the HTML site
    work: Path  # Sphinx's sources, doctrees and the execution cache
    executed: list[str]  # notebooks the build ran


# A real 1x1 PNG: what a phone photo of a handwritten derivation becomes when pasted into Jupyter.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

CLASS_REPOSITORY = "https://github.com/example-class/autograd-2027"  # a students' repository, as an instructor names it


@pytest.fixture(scope="session")
def built_book(tmp_path_factory) -> BuiltBook:
    """Every chapter built with ``python -m autograder book``'s code, once per session (it runs every notebook)."""
    from autograder.authoring.book import build
    from autograder.authoring.colab import REPOSITORY_VARIABLE
    from autograder.course import Course

    root = tmp_path_factory.mktemp("book")
    for folder in ("solutions", "course"):
        shutil.copytree(REPO / folder, root / "course" / folder)
    shutil.copy(REPO / "pyproject.toml", root / "course")  # the authors the footer names
    course = Course(root / "course")
    with pytest.MonkeyPatch.context() as patch:  # the students' repository the Colab and Binder links open
        patch.setenv(REPOSITORY_VARIABLE, CLASS_REPOSITORY)
        built = build(course, root / "book", work=root / "work")
    return BuiltBook(course, root / "book", root / "work", built.executed)


@pytest.fixture(scope="module")
def browser(request):
    """Debian's chromium, headless, for a test file; skips, saying why, where it is not installed. Playwright
    hides every scroll bar in headless mode; a test file that sets ``OVERLAY_SCROLL_BARS = True`` gets overlay
    scroll bars instead, as on macOS or a phone: they take no room and show only where the page styles one
    (the book's tests measure them)."""
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (no /usr/bin/chromium, none on PATH, $CHROMIUM "
                    "unset): `make browser` installs it with apt-get")
    with sync_playwright() as playwright:
        overlay = getattr(request.module, "OVERLAY_SCROLL_BARS", False)
        browser = playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS + (["--enable-features=OverlayScrollbar"] if overlay else []),
            ignore_default_args=["--hide-scrollbars"] if overlay else None)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    """A fresh browser context and page, 1400x900, with waits long enough for 2 loaded cores."""
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    # expect() waits 5 s by default: too short for a 42-cell notebook to render on 2 loaded cores
    expect.set_options(timeout=30_000)
    yield page
    context.close()


def read_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def nbgrader_meta(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def solution_answers(root: Path, assignment: str) -> dict[str, str]:
    """grade_id -> the instructor's answer without nbgrader's markers: what a right student writes."""
    from autograder.course import Course
    from autograder.grading.demo import make_demo

    return make_demo.solution_answers(Course(root), assignment)


def filled_release(root: Path, assignment: str, answers: dict[str, str]) -> dict:
    """The released notebook (as JSON) with the solution cells named in ``answers`` filled in."""
    from autograder.course import Course
    from autograder.grading.demo import make_demo

    return json.loads(make_demo.filled_release(Course(root), assignment, answers))


# Issue 39: a Sqrt that saves its output, as 01 asks, and keeps its input some other way for backward to read:
# ``keep`` is forward's line that keeps `x`, ``get`` the expression backward reads it back with.
SQRT_KEEPING_ITS_INPUT = """
import dataclasses
import torch

{before}


class Sqrt(torch.autograd.Function):
    {class_body}

    @staticmethod
    def forward(ctx, x{extra}):
        result = x.sqrt()
        ctx.save_for_backward(result)
        {keep}
        return result

    @staticmethod
    def backward(ctx, grad_output):
        (result,) = ctx.saved_tensors
        x = {get}
        return grad_output / (2 * x.sqrt())
"""


def sqrt_keeping(keep: str, get: str, before: str = "", class_body: str = "pass", extra: str = "") -> str:
    """The source of a Sqrt answer cell that keeps its input as ``keep`` says and reads it back with ``get``."""
    return SQRT_KEEPING_ITS_INPUT.format(keep=keep, get=get, before=before, class_body=class_body, extra=extra)


# 11's solution with a query-gradient race typed in (tests/student/checker/test_attention.py, test_seeded_mistakes.py):
# dq added into by every key/value program, a load and a store; right in Triton's interpreter, a race on a GPU.
DQ_RACE = [
    ("delta_ptr, dk_ptr, dv_ptr, seq_len,", "delta_ptr, dk_ptr, dv_ptr, dq_ptr, seq_len,"),
    ("        dk += tl.dot(dst.to(q.dtype), q)\n",
     "        dk += tl.dot(dst.to(q.dtype), q)\n"
     "        dq_rows = tl.load(dq_ptr + offsets, mask=rows[:, None] < seq_len, other=0.0)\n"
     "        tl.store(dq_ptr + offsets, dq_rows + tl.dot(tl.trans(dst).to(k.dtype), k) * scale, mask=rows[:, None] < seq_len)\n"),
    ("dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
     "dq, dk, dv = torch.zeros_like(q), torch.empty_like(k), torch.empty_like(v)"),
    ("lse, delta, dk, dv, seq_len,", "lse, delta, dk, dv, dq, seq_len,"),
    ("lse, delta, dq, seq_len,", "lse, delta, torch.empty_like(dq), seq_len,"),
]
