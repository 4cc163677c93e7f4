"""``check``'s warm process: started by the first check, reused by the next ones, ended when idle.

A check would otherwise spend seconds importing torch before the notebook's first cell. The first
check starts this process, detached (``python -m autograder check --serve``: started the way
``grade`` starts, so its warm process, the multiprocessing forkserver that imports torch once, is
the same and each notebook is forked from it into its own sandbox exactly as in ``grade``). Later
checks send it the notebook's path and get the verdicts back (``autograder.grading.selfcheck``);
the command's own process imports neither torch nor nbgrader.

Safety: its Unix socket lies in a private folder (0700, owned by the user, checked before use:
``$AUTOGRADER_CHECK_FOLDER``, else ``$XDG_RUNTIME_DIR/autograder-check``, else
``/tmp/autograder-check-<uid>``); it answers only its own user (``SO_PEERCRED``); a notebook cannot
reach it (the sandbox hides those folders and refuses ``socket()``). There is one per user,
Python environment, package version, course and set of environment variables the warm process keeps
(``autograder.grading.running.confinement.environment``). One that answers to another version of the code is
replaced, and so is one that no longer answers. It ends after ``$AUTOGRADER_CHECK_IDLE`` seconds
(default 600) without a check, or when its socket is removed or replaced, or on ``check --stop``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import autograder
from autograder.course import Course, CourseError
from autograder.grading.running.confinement.environment import warm_environment

FOLDER_VARIABLE = "AUTOGRADER_CHECK_FOLDER"
IDLE_VARIABLE = "AUTOGRADER_CHECK_IDLE"
IDLE_SECONDS = 600.0
START_SECONDS = 300.0      # the longest a new warm process may take to listen (a loaded machine)
MAX_REQUEST = 64 * 1024


# ----------------------------------------------------------------------------------------
# Where it is, and which one


def private_folder() -> Path:
    """The folder of the warm processes' sockets, made private (0700) if new, refused unless private and ours."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(os.environ.get(FOLDER_VARIABLE) or (Path(runtime) / "autograder-check" if runtime and
                  os.path.isdir(runtime) else Path(tempfile.gettempdir()) / f"autograder-check-{os.getuid()}"))
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    found = os.lstat(folder)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise CourseError(f"{folder} is not a private folder of yours (a folder, yours, mode 0700): check does not "
                          f"put its warm process's socket there (set {FOLDER_VARIABLE} to another folder)")
    return folder


def identity(course: Course) -> tuple[str, str]:
    """(which warm process serves this user, environment and course; the version of the code it must run)."""
    package = Path(autograder.__file__).resolve().parent
    version = hashlib.sha256(f"{os.path.realpath(sys.executable)}\0{sys.version}".encode())
    for path in sorted(package.rglob("*.py")):
        found = path.stat()
        version.update(f"{path.relative_to(package)}\0{found.st_size}\0{found.st_mtime_ns}\0".encode())
    key = hashlib.sha256(json.dumps([os.getuid(), os.path.realpath(sys.executable), str(package), str(course.root),
                                     sorted(warm_environment().items())]).encode())
    return key.hexdigest()[:24], version.hexdigest()


# ----------------------------------------------------------------------------------------
# The command's side


def check(course: Course, notebook: Path) -> dict:
    """The warm process's verdicts on ``notebook`` (``Checked.to_json()``), starting or replacing it as needed."""
    if not Path(notebook).is_file():
        raise CourseError(f"no notebook at {notebook}")
    folder = private_folder()
    key, version = identity(course)
    request = {"notebook": str(Path(notebook).absolute()), "version": version}
    for _ in range(3):  # a stale one is replaced, and one that ends without answering is replaced once
        reply = _ask(course, folder, key, request)
        if reply and "stale" not in reply:
            if "error" in reply:
                raise CourseError(reply["error"])
            return reply["checked"]
        if not reply:
            _forget(folder / f"{key}.sock")
    raise CourseError(f"check's warm process ended without an answer (its log: {folder / f'{key}.log'})")


def stop(course: Course) -> bool:
    """End this course's warm process now; False if none was running."""
    return stop_at(private_folder() / f"{identity(course)[0]}.sock")


def stop_at(path: Path) -> bool:
    """End the warm process listening at ``path`` (it ends once its running checks are done); False if none."""
    connection = _connect(path)
    if connection is None:
        return False
    with connection:
        return bool((_exchange(connection, {"stop": True}) or {}).get("stopped"))


def _ask(course: Course, folder: Path, key: str, request: dict) -> dict | None:
    path = folder / f"{key}.sock"
    connection = _connect(path)
    if connection is None:
        with open(folder / f"{key}.lock", "w") as lock:  # one check starts it; the others wait for it
            fcntl.flock(lock, fcntl.LOCK_EX)
            connection = _connect(path) or _start(course, path, folder / f"{key}.log")
    with connection:
        return _exchange(connection, request)


def _connect(path: Path) -> socket.socket | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
        return connection
    except OSError:
        connection.close()
        return None


def _forget(path: Path) -> None:
    """Remove a socket that does not answer: its process (if any) sees it gone and ends."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _start(course: Course, path: Path, log: Path) -> socket.socket:
    """Start a warm process for ``course`` listening at ``path``, detached; return a connection to it."""
    _forget(path)
    with open(log, "ab") as output:
        process = subprocess.Popen([sys.executable, "-m", "autograder", "--course", str(course.root), "check",
                                    "--serve", str(path)], cwd=course.root, stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=output, start_new_session=True, close_fds=True)
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        connection = _connect(path)
        if connection is not None:
            return connection
        if process.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-5:])
            raise CourseError(f"check's warm process could not start (exit {process.returncode}):\n{tail}")
        time.sleep(0.02)
    raise CourseError(f"check's warm process did not start within {START_SECONDS:g} s (its log: {log})")


def _exchange(connection: socket.socket, message: dict) -> dict | None:
    """Send ``message``, read the reply (None: the other side ended without one)."""
    try:
        connection.sendall(json.dumps(message).encode())
        connection.shutdown(socket.SHUT_WR)
        data = b"".join(iter(lambda: connection.recv(1 << 16), b""))
    except OSError:
        return None
    try:
        reply = json.loads(data) if data else None
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


# ----------------------------------------------------------------------------------------
# The warm process's side


def serve(course: Course, path: Path) -> None:
    """Answer checks of ``course``'s notebooks at ``path`` until idle, stopped, or replaced (``check --serve``)."""
    from concurrent.futures import ThreadPoolExecutor

    from autograder.grading import selfcheck
    from autograder.grading.running.confinement.limits import Limits

    _, version = identity(course)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _forget(path)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(16)
    mine = os.stat(path).st_ino
    selfcheck.sandboxed(course, Limits())  # the sandbox probe, once, before any thread needs it
    idle = float(os.environ.get(IDLE_VARIABLE) or IDLE_SECONDS)
    state = {"active": 0, "last": time.monotonic(), "stopping": False}
    lock = threading.Lock()

    def handle(connection: socket.socket) -> None:
        try:
            with connection:
                reply = _answer(course, path, mine, version, _request(connection), state)
                with contextlib.suppress(OSError):
                    connection.sendall(json.dumps(reply).encode())
        finally:
            with lock:
                state["active"] -= 1
                state["last"] = time.monotonic()

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="check") as pool:
        while True:
            readable, _, _ = select.select([listener], [], [], 1.0)
            with lock:
                quiet = state["active"] == 0
                if quiet and (state["stopping"] or time.monotonic() - state["last"] > idle):
                    break
            if not _is_mine(path, mine):
                state["stopping"] = True
            if not readable:
                continue
            connection, _ = listener.accept()
            if _peer_uid(connection) != os.getuid():
                connection.close()
                continue
            with lock:
                state["active"] += 1
            pool.submit(handle, connection)
    if _is_mine(path, mine):
        _forget(path)
    listener.close()


def _request(connection: socket.socket) -> dict:
    connection.settimeout(30)
    data = b""
    with contextlib.suppress(OSError):
        while len(data) <= MAX_REQUEST and (chunk := connection.recv(1 << 16)):
            data += chunk
    connection.settimeout(None)
    try:
        request = json.loads(data)
    except ValueError:
        return {}
    return request if isinstance(request, dict) else {}


def _answer(course: Course, path: Path, mine: int, version: str, request: dict, state: dict) -> dict:
    from autograder.grading import selfcheck

    if request.get("stop"):
        state["stopping"] = True
        return {"stopped": True}
    if not (isinstance(request.get("notebook"), str) and isinstance(request.get("version"), str)):
        return {"error": "check's warm process got a request it does not understand"}
    if request["version"] != version:  # the code changed since this process started: a new one takes over
        state["stopping"] = True
        if _is_mine(path, mine):
            _forget(path)
        return {"stale": True}
    try:
        return {"checked": selfcheck.judge(Path(request["notebook"]), course).to_json()}
    except CourseError as error:
        return {"error": str(error)}
    except Exception as error:  # a bug in the grader: said, and the process goes on serving
        import traceback

        traceback.print_exc()
        return {"error": f"the check failed ({type(error).__name__}: {error})"}


def _is_mine(path: Path, inode: int) -> bool:
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _peer_uid(connection: socket.socket) -> int | None:
    try:
        _, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                               struct.calcsize("3i")))
        return uid
    except OSError:
        return None
