"""The sandbox's modes, one notebook each through the real executor (test_hostile.py grades whole classes).

Landlock is what grading falls back on where namespaces are not allowed (a non-root JupyterHub
pod); it is forced here. Where neither is available, grading refuses unless told --no-sandbox.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from dataclasses import dataclass

import pytest

from autograder.grading.running.confinement import limits as confinement
from autograder.grading.running.confinement import sandbox
from autograder.grading.running.confinement.limits import Limits, SandboxRefused, confine
from autograder.grading.running.executor import execute
from autograder.grading.running.messages.protocol import Messages, NOTEBOOK_OUTPUT_CHARS, ProtocolError

PROBE = """
import os, signal, socket, time
def attempt(what, action):
    try:
        action()
        print('GOT:', what)
    except Exception as error:
        print('refused:', what, type(error).__name__)
def detach():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            open('detached.pid', 'w').write(str(os.getpid()))
            time.sleep(120)
        os._exit(0)
    while not os.path.exists('detached.pid'):
        time.sleep(0.05)
attempt('read secret', lambda: open({secret!r}).read())
attempt('list course', lambda: os.listdir({course!r}))
attempt('write outside', lambda: open({outside!r}, 'w').write('x'))
attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2))
attempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {udp_port})))
attempt('unix socket', lambda: socket.socket(socket.AF_UNIX).connect({unix_path!r}))
attempt('signal the grader', lambda: os.kill({grader}, signal.SIGCONT))
attempt("read the grader's environment", lambda: open('/proc/{grader}/environ').read())
attempt('detach a process', detach)
open('mine.txt', 'w').write('ok')
print('own folder', open('mine.txt').read(), 'secret' in repr(dict(os.environ)))
"""


@dataclass
class Probe:
    shown: str              # the probe's outputs
    udp: bytes | None       # what reached the UDP listener
    unix: bool              # whether the Unix socket listener was connected to
    detached_alive: bool    # whether the process it detached outlived the notebook


def probe(tmp_path, mode: str) -> Probe:
    course = tmp_path / "course"
    work = course / "grading" / ".staging" / "s" / "a"
    work.mkdir(parents=True)
    (course / "solutions").mkdir()
    secret = course / "solutions" / "answers.txt"
    secret.write_text("hidden")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "service.sock"))
    unix.listen()
    code = PROBE.format(secret=str(secret), course=str(course / "solutions"), outside=str(course / "planted"),
                        port=listener.getsockname()[1], udp_port=udp.getsockname()[1],
                        unix_path=str(tmp_path / "service.sock"), grader=os.getpid())
    limits = Limits(cell_timeout=30, memory=1024**3, sandbox=mode, hidden=(str(course),))
    os.environ["GRADER_SECRET_TOKEN"] = "secret-token"
    try:
        result = execute([{"cell_type": "code", "source": code}], str(work), limits)
        udp.setblocking(False)
        unix.setblocking(False)
        received = _try(lambda: udp.recv(10))
        connected = _try(unix.accept) is not None
    finally:
        del os.environ["GRADER_SECRET_TOKEN"]
        for sock in (listener, udp, unix):
            sock.close()
    assert (course / "planted").exists() == (mode == "off")
    assert result.status == "graded", result
    detached = int((work / "detached.pid").read_text())
    alive = _alive(detached)
    if alive:
        os.kill(detached, signal.SIGKILL)
    return Probe(json.dumps(result.outputs[0]), received, connected, alive)


def _try(action):
    try:
        return action()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_landlock_alone_keeps_files_network_and_signals_in(tmp_path):
    if sandbox.landlock_abi() < 6:
        pytest.skip(f"Landlock ABI {sandbox.landlock_abi()} here; signal scoping needs 6")
    seen = probe(tmp_path, "landlock")
    shown = seen.shown
    assert "GOT:" not in shown.replace("GOT: detach a process", ""), shown
    for what in ("read secret", "list course", "write outside", "tcp", "udp", "unix socket", "signal the grader",
                 "read the grader's environment"):
        assert f"refused: {what}" in shown, shown
    assert "own folder ok False" in shown
    assert (seen.udp, seen.unix, seen.detached_alive) == (None, False, False)


@pytest.mark.slow
def test_landlock_kills_what_a_notebook_leaves_when_the_grader_stops_it(tmp_path):
    """A cell that swallows its time-out is stopped by the grader (SIGTERM); its detached process dies too."""
    work = tmp_path / "work"
    work.mkdir()
    detach = PROBE.split("attempt('read secret'")[0] + "detach()"
    stubborn = "import time\nwhile True:\n    try:\n        time.sleep(60)\n    except BaseException:\n        pass"
    cells = [{"cell_type": "code", "source": detach}, {"cell_type": "code", "source": stubborn}]
    result = execute(cells, str(work), Limits(cell_timeout=1, memory=1024**3, sandbox="landlock"))
    assert (result.status, result.cell, result.detail) == ("timed out", 1, "did not stop when asked")
    assert not _alive(int((work / "detached.pid").read_text()))


@pytest.mark.slow
def test_without_a_sandbox_the_same_code_gets_everything(tmp_path):
    """What --no-sandbox means: the probe above is not a test that cannot fail."""
    seen = probe(tmp_path, "off")
    for what in ("read secret", "list course", "write outside", "tcp", "udp", "unix socket", "signal the grader",
                 "read the grader's environment", "detach a process"):
        assert f"GOT: {what}" in seen.shown, seen.shown
    assert (seen.udp, seen.unix, seen.detached_alive) == (b"x", True, True)


@pytest.mark.slow
def test_the_working_folder_tmp_and_shm_share_one_size_cap(tmp_path):
    """Their files are RAM (tmpfs) that RLIMIT_AS does not count: one cap for all three bounds it."""
    size = int(sandbox.SCRATCH_SIZE.removesuffix("m")) * 1024**2 // 2 - 1024**2   # just under half the cap
    code = f"""
for path in ('here.bin', '/tmp/there.bin', '/dev/shm/shared.bin'):
    try:
        with open(path, 'wb') as f:
            f.write(bytes({size}))
        print('wrote', path)
    except OSError as error:
        print('refused', path, error.strerror)
"""
    limits = Limits(memory=1024**3, sandbox="namespaces")
    result = execute([{"cell_type": "code", "source": code}], str(tmp_path), limits)
    assert result.outputs[0][0]["text"].splitlines() == [
        "wrote here.bin", "wrote /tmp/there.bin", "refused /dev/shm/shared.bin No space left on device"]


def test_grading_refuses_without_a_sandbox_unless_told(monkeypatch):
    monkeypatch.setattr(confinement, "_available", "off")
    with pytest.raises(SandboxRefused, match="--no-sandbox"):
        confine(Limits(), ["/course"])
    assert confine(Limits(sandbox="off"), ["/course"]).sandbox == "off"


def test_this_machine_allows_the_strongest_mode():
    """CI runs as root on a kernel with namespaces: make test grades in the namespaces sandbox."""
    assert sandbox.available() == "namespaces"
    assert confine(Limits(), ["/course"]).hidden == ("/course",)


def test_the_grader_accepts_only_the_message_it_expects_next():
    """What a notebook's process sends is checked before anything trusts it (protocol.Messages)."""
    cells = [{"cell_type": "markdown", "source": ""}, {"cell_type": "code", "source": ""},
             {"cell_type": "code", "source": ""}]
    stream = {"output_type": "stream", "name": "stdout", "text": "hi"}
    bad = [["start", 2], ["end", 1, [], 1, "ok"], ["done"], ["start", "1"], ["crash", 1], "start", [], ["x"]]
    for message in bad:
        with pytest.raises(ProtocolError):
            Messages(cells, Limits().output_chars).check(message)
    messages = Messages(cells, Limits().output_chars)
    assert messages.check(["start", 1]) == ["start", 1]
    for wrong_output in ({"output_type": "stream", "name": "stdin", "text": "x"}, {"output_type": "script"},
                         {"output_type": "display_data", "data": {"html": "x"}, "metadata": {}}):
        with pytest.raises(ProtocolError):
            checked = Messages(cells, Limits().output_chars)
            checked.check(["start", 1])
            checked.check(["end", 1, [wrong_output], 1, "ok"])
    with pytest.raises(ProtocolError):
        messages.check(["end", 1, [stream], 1, "passed"])  # not a status
    assert messages.check(["end", 1, [stream], 1, "ok"]) == ["end", 1, [stream], 1, "ok"]
    with pytest.raises(ProtocolError):
        messages.check(["done"])  # cell 2 has not run
    messages.check(["start", 2])
    messages.check(["end", 2, [], 2, "ok"])
    assert messages.check(["done"]) == ["done"]


def test_a_notebook_keeps_its_errors_but_not_endless_output():
    messages = Messages([{"cell_type": "code"}] * 3, Limits().output_chars)
    big = {"output_type": "stream", "name": "stdout", "text": "x" * (NOTEBOOK_OUTPUT_CHARS - 100)}
    error = {"output_type": "error", "ename": "AssertionError", "evalue": "wrong", "traceback": []}
    kept = []
    for index in range(3):
        messages.check(["start", index])
        kept.append(messages.check(["end", index, [big, error], index + 1, "ok"])[2])
        assert kept[-1][-1] == error  # a failing test stays failing
    assert kept[0] == [big, error] and kept[2] == [error]
    assert json.dumps(kept).count("this notebook's outputs passed") == 1


def test_without_libseccomp_no_sandbox_is_offered(monkeypatch):
    """Sockets could not be refused, so neither mode is complete: grade refuses unless told --no-sandbox."""
    monkeypatch.setattr(sandbox, "seccomp", None)
    assert sandbox.available() == "off"
    with pytest.raises(sandbox.SandboxError, match="libseccomp"):
        sandbox._deny_sockets()


INSTRUCTORS_PARTS = """
import os, autograder
package = os.path.dirname(autograder.__file__)
for path in ('grading/demo/01_first_function/ada/01_first_function.ipynb', 'grading/demo/roster.csv',
             'authoring/timed_functions.py', 'grading/grade.py'):
    try:
        open(os.path.join(package, path)).read()
        print('GOT: read', path)
    except OSError as error:
        print('refused:', path, type(error).__name__)
for path in ('', 'grading', 'authoring', 'grading/demo'):
    try:
        print('listed', repr(path), sorted(os.listdir(os.path.join(package, path))))
    except OSError as error:
        print('refused: list', repr(path), type(error).__name__)
for module in ('autograder.authoring.timed_functions', 'autograder.grading.demo.make_demo'):
    try:
        __import__(module)
        print('GOT: imported', module)
    except Exception as error:
        print('refused: import', module, type(error).__name__)
import autograder.student.timing  # what 07 imports after the warm process started (not preloaded)
print('imported', autograder.student.timing.__name__)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["namespaces", "landlock"])
def test_the_sandbox_shows_what_notebooks_import_and_none_of_the_instructors_parts(tmp_path, mode):
    """Issue 32: a notebook read the demo class's full-mark answers and authoring/timed_functions.py (07's and
    02's answers) from the package folder; only what notebooks and the grader's own sandboxed code import is shown."""
    limits = Limits(cell_timeout=30, memory=1024**3, sandbox=mode, hidden=(str(tmp_path / "course"),))
    result = execute([{"cell_type": "code", "source": INSTRUCTORS_PARTS}], str(tmp_path), limits)
    shown = "".join(o.get("text", "") for o in result.outputs[0])
    assert result.status == "graded" and "GOT:" not in shown, shown
    assert shown.count("refused:") == 4 + (4 if mode == "landlock" else 2) + 2, shown  # reads, listings, imports
    assert "imported autograder.student.timing" in shown
    if mode == "namespaces":  # the package folder holds only the parts shown again
        assert "listed '' ['__init__.py', 'grading', 'student']" in shown
        assert "listed 'grading' ['__init__.py', 'running']" in shown
