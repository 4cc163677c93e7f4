"""check's warm process: started by the first check, reused, private, replaced when stale or dead, ended when idle.

Each test gives check a private folder of its own (``AUTOGRADER_CHECK_FOLDER``) and stops what it started.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder.course import Course
from autograder.grading import check_server
from conftest import REPO

pytestmark = pytest.mark.slow

BLANK = REPO / "course" / "01_first_function" / "01_first_function.ipynb"
SOLUTION = REPO / "solutions" / "01_first_function" / "01_first_function.ipynb"
HEAVY = ("torch", "nbgrader", "nbconvert", "sqlalchemy")


@pytest.fixture
def folder():
    """A private folder for check's sockets; whatever warm process a test started there is stopped after it."""
    path = Path(tempfile.mkdtemp(prefix="ag-t-"))
    yield path
    for socket_path in path.glob("*.sock"):
        check_server.stop_at(socket_path)
    _wait_until_gone(_pids_serving(path))


def _env(folder: Path, idle: float = 120) -> dict[str, str]:
    return {**os.environ, check_server.FOLDER_VARIABLE: str(folder), check_server.IDLE_VARIABLE: str(idle)}


def _check(folder: Path, notebook: Path = BLANK, idle: float = 120, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", "check", str(notebook), *args], cwd=REPO,
                          env=_env(folder, idle), capture_output=True, text=True, timeout=600)


def _server_pid(folder: Path) -> int | None:
    """The pid of the process listening on the folder's socket (SO_PEERCRED), None if none listens."""
    [path] = folder.glob("*.sock") or [None]
    if path is None:
        return None
    with socket.socket(socket.AF_UNIX) as connection:
        try:
            connection.connect(str(path))
        except OSError:
            return None
        pid, _, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        return pid


def _pids_serving(folder: Path) -> list[int]:
    """Every process of a warm process of this folder: the process itself and all its descendants."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        parents[int(entry)] = (int(stat.rpartition(")")[2].split()[1]), cmdline)
    roots = {pid for pid, (_, cmdline) in parents.items() if b"--serve" in cmdline and str(folder).encode() in cmdline}
    found = set(roots)
    while True:
        more = {pid for pid, (parent, _) in parents.items() if parent in found} - found
        if not more:
            return sorted(found)
        found |= more


def _wait_until_gone(pids: list[int], seconds: float = 30) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists() and
                 " Z " not in Path(f"/proc/{pid}/stat").read_text(errors="replace")]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


def test_checks_command_imports_neither_torch_nor_nbgrader(folder):
    program = ("import json, sys\nfrom autograder import cli\n"
               f"status = cli.main(['check', {str(SOLUTION)!r}])\n"
               f"print(json.dumps([status, sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})]))\n")
    run = subprocess.run([sys.executable, "-c", program], cwd=REPO, env=_env(folder), capture_output=True, text=True,
                         timeout=600)
    status, heavy = json.loads(run.stdout.strip().splitlines()[-1])
    assert "score: 11 / 11" in run.stdout and status == 0, run.stdout + run.stderr
    assert heavy == [], f"check's own process imported {heavy}"


def test_the_first_check_starts_a_warm_process_and_later_checks_reuse_it_until_stopped(folder):
    first = _check(folder)
    assert first.returncode == 1 and "score: 0 / 11" in first.stdout and first.stderr == "", first.stderr
    pid = _server_pid(folder)
    assert pid is not None
    [sock] = folder.glob("*.sock")
    assert (os.stat(folder).st_mode & 0o777, os.stat(sock).st_mode & 0o777) == (0o700, 0o600)
    again = _check(folder, SOLUTION)
    assert again.returncode == 0 and "score: 11 / 11" in again.stdout
    assert _server_pid(folder) == pid  # the same warm process answered
    family = _pids_serving(folder)
    assert pid in family and len(family) > 1  # with its warm forkserver
    stopped = subprocess.run([sys.executable, "-m", "autograder", "check", "--stop"], cwd=REPO, env=_env(folder),
                             capture_output=True, text=True, timeout=60)
    assert stopped.stdout.strip() == "check's warm process stopped"
    assert _wait_until_gone(family) == []
    assert list(folder.glob("*.sock")) == []


def test_an_idle_warm_process_ends_by_itself(folder):
    assert _check(folder, idle=1).returncode == 1
    family = _pids_serving(folder)
    assert family and _wait_until_gone(family, 60) == []


def test_a_dead_or_stale_warm_process_is_replaced(folder):
    assert _check(folder).returncode == 1
    dead = _server_pid(folder)
    family = _pids_serving(folder)
    os.kill(dead, signal.SIGKILL)  # its socket file stays behind, answering nobody
    assert _wait_until_gone(family) == []
    assert list(folder.glob("*.sock"))
    replaced = _check(folder)
    assert replaced.returncode == 1 and "score: 0 / 11" in replaced.stdout, replaced.stderr
    new = _server_pid(folder)
    assert new not in (None, dead)
    # One that runs other code (a version it does not know) gives way to a new one.
    [path] = folder.glob("*.sock")
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(str(path))
        assert check_server._exchange(connection, {"notebook": str(BLANK), "version": "older"}) == {"stale": True}
    assert _wait_until_gone([new]) == []
    assert _check(folder).returncode == 1 and _server_pid(folder) not in (None, new)


def test_a_python_named_by_a_relative_path_uses_the_same_warm_process(folder):
    # `../venv/bin/python -m autograder check ...` (a student's venv beside the clone): sys.executable keeps the
    # "..", and the warm process's version must not depend on how the interpreter was named.
    assert _check(folder).returncode == 1
    served = _server_pid(folder)
    relative = os.path.relpath(sys.executable, REPO / "course")
    again = subprocess.run([relative, "-m", "autograder", "--course", str(REPO), "check", str(BLANK)], cwd=REPO / "course",
                           env=_env(folder), capture_output=True, text=True, timeout=600)
    assert again.returncode == 1 and "score: 0 / 11" in again.stdout, again.stdout + again.stderr
    assert _server_pid(folder) == served


def test_it_answers_only_its_own_user(folder):
    assert _check(folder).returncode == 1
    [path] = folder.glob("*.sock")
    if os.geteuid() != 0:
        pytest.skip("needs root, to connect as another user")
    version = check_server.identity(Course(REPO))[1]  # a request the warm process would answer
    os.chmod(folder, 0o711)
    os.chmod(path, 0o666)  # only the peer check is left between another user and the warm process
    try:
        reading, writing = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(reading)
            try:
                os.setgid(65534)
                os.setuid(65534)
                with socket.socket(socket.AF_UNIX) as connection:
                    connection.connect(str(path))
                    reply = check_server._exchange(connection, {"notebook": str(SOLUTION), "version": version})
                os.write(writing, json.dumps({"connected": True, "reply": reply}).encode())
            except BaseException as error:  # noqa: BLE001
                os.write(writing, json.dumps({"error": repr(error)}).encode())
            os._exit(0)
        os.close(writing)
        os.waitpid(child, 0)
        result = json.loads(os.read(reading, 65536))
    finally:
        os.chmod(folder, 0o700)
        os.chmod(path, 0o600)
    assert result == {"connected": True, "reply": None}  # connected, and got nothing back
    assert _check(folder, SOLUTION).returncode == 0  # its own user is still served


def test_a_folder_that_is_not_private_is_refused(folder):
    os.chmod(folder, 0o755)
    refused = _check(folder)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"error: {folder} is not a private folder of yours (a folder, yours, mode 0700): check does not put its warm "
        f"process's socket there (set {check_server.FOLDER_VARIABLE} to another folder)"]
    assert list(folder.iterdir()) == []


def test_where_the_machine_allows_no_sandbox_check_says_so_in_one_line_and_runs(monkeypatch, capsys):
    """grade refuses to run student code without a sandbox; check runs the student's own notebook anyway and
    says so (the machine's answer is faked to "none"; the notebook is really judged, in this process)."""
    from autograder import cli
    from autograder.grading import selfcheck
    from autograder.grading.running.confinement import limits as confinement
    from autograder.grading.running.confinement.limits import Limits, SandboxRefused
    from autograder.commands.check import NO_SANDBOX

    monkeypatch.setattr(confinement, "_available", "off")
    with pytest.raises(SandboxRefused):
        confinement.confine(Limits(), [])
    course = Course(REPO)
    assert selfcheck.sandboxed(course, Limits())[1] == "off"
    monkeypatch.setattr(check_server, "check", lambda course, notebook: selfcheck.judge(notebook, course).to_json())
    assert cli.main(["--course", str(REPO), "check", str(SOLUTION)]) == 0
    printed = capsys.readouterr()
    assert printed.err.splitlines() == [NO_SANDBOX] and "score: 11 / 11" in printed.out
