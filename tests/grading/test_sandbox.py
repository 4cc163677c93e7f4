"""The sandbox's modes, one notebook each through the real executor (test_hostile.py grades whole classes).

Landlock is what grading falls back on where namespaces are not allowed (a non-root JupyterHub
pod); it is forced here. Where neither is available, grading refuses unless told --no-sandbox.
"""

from __future__ import annotations

import json
import os
import socket

import pytest

from autograder.grading import executor, sandbox
from autograder.grading.executor import Limits, SandboxRefused, confine, execute

PROBE = """
import os, signal, socket
def attempt(what, action):
    try:
        action()
        print('GOT:', what)
    except Exception as error:
        print('refused:', what, type(error).__name__)
attempt('read secret', lambda: open({secret!r}).read())
attempt('list course', lambda: os.listdir({course!r}))
attempt('write outside', lambda: open({outside!r}, 'w').write('x'))
attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {port}), timeout=2))
attempt('signal the grader', lambda: os.kill({grader}, signal.SIGCONT))
open('mine.txt', 'w').write('ok')
print('own folder', open('mine.txt').read(), 'secret' in repr(dict(os.environ)))
"""


def probe(tmp_path, mode: str) -> str:
    course = tmp_path / "course"
    work = course / "grading" / ".staging" / "s" / "a"
    work.mkdir(parents=True)
    (course / "solutions").mkdir()
    secret = course / "solutions" / "answers.txt"
    secret.write_text("hidden")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    code = PROBE.format(secret=str(secret), course=str(course / "solutions"), outside=str(course / "planted"),
                        port=listener.getsockname()[1], grader=os.getpid())
    limits = Limits(cell_timeout=30, memory=1024**3, sandbox=mode, hidden=(str(course),))
    os.environ["GRADER_SECRET_TOKEN"] = "secret-token"
    try:
        result = execute([{"cell_type": "code", "source": code}], str(work), limits)
    finally:
        del os.environ["GRADER_SECRET_TOKEN"]
        listener.close()
    assert (course / "planted").exists() == (mode == "off")
    assert result.status == "graded", result
    return json.dumps(result.outputs[0])


@pytest.mark.slow
def test_landlock_alone_keeps_files_network_and_signals_in(tmp_path):
    if sandbox.landlock_abi() < 6:
        pytest.skip(f"Landlock ABI {sandbox.landlock_abi()} here; signal scoping needs 6")
    shown = probe(tmp_path, "landlock")
    assert "GOT:" not in shown, shown
    for what in ("read secret", "list course", "write outside", "tcp", "signal the grader"):
        assert f"refused: {what}" in shown, shown
    assert "own folder ok False" in shown


@pytest.mark.slow
def test_without_a_sandbox_the_same_code_gets_everything(tmp_path):
    """What --no-sandbox means: the probe above is not a test that cannot fail."""
    shown = probe(tmp_path, "off")
    for what in ("read secret", "list course", "write outside", "tcp", "signal the grader"):
        assert f"GOT: {what}" in shown, shown


def test_grading_refuses_without_a_sandbox_unless_told(monkeypatch):
    monkeypatch.setattr(executor, "_available", "off")
    with pytest.raises(SandboxRefused, match="--no-sandbox"):
        confine(Limits(), ["/course"])
    assert confine(Limits(sandbox="off"), ["/course"]).sandbox == "off"


def test_this_machine_allows_the_strongest_mode():
    """CI runs as root on a kernel with namespaces: make test grades in the namespaces sandbox."""
    assert sandbox.available() == "namespaces"
    assert confine(Limits(), ["/course"]).hidden == ("/course",)


def test_the_grader_accepts_only_the_message_it_expects_next():
    """What a notebook's process sends is checked before anything trusts it (executor._Messages)."""
    cells = [{"cell_type": "markdown", "source": ""}, {"cell_type": "code", "source": ""},
             {"cell_type": "code", "source": ""}]
    stream = {"output_type": "stream", "name": "stdout", "text": "hi"}
    bad = [["start", 2], ["end", 1, [], 1, "ok"], ["done"], ["start", "1"], ["crash", 1], "start", [], ["x"]]
    for message in bad:
        with pytest.raises(executor.ProtocolError):
            executor._Messages(cells, Limits()).check(message)
    messages = executor._Messages(cells, Limits())
    assert messages.check(["start", 1]) == ["start", 1]
    for wrong_output in ({"output_type": "stream", "name": "stdin", "text": "x"}, {"output_type": "script"},
                         {"output_type": "display_data", "data": {"html": "x"}, "metadata": {}}):
        with pytest.raises(executor.ProtocolError):
            checked = executor._Messages(cells, Limits())
            checked.check(["start", 1])
            checked.check(["end", 1, [wrong_output], 1, "ok"])
    with pytest.raises(executor.ProtocolError):
        messages.check(["end", 1, [stream], 1, "passed"])  # not a status
    assert messages.check(["end", 1, [stream], 1, "ok"]) == ["end", 1, [stream], 1, "ok"]
    with pytest.raises(executor.ProtocolError):
        messages.check(["done"])  # cell 2 has not run
    messages.check(["start", 2])
    messages.check(["end", 2, [], 2, "ok"])
    assert messages.check(["done"]) == ["done"]


def test_a_notebook_keeps_its_errors_but_not_endless_output():
    messages = executor._Messages([{"cell_type": "code"}] * 3, Limits())
    big = {"output_type": "stream", "name": "stdout", "text": "x" * (executor.NOTEBOOK_OUTPUT_CHARS - 100)}
    error = {"output_type": "error", "ename": "AssertionError", "evalue": "wrong", "traceback": []}
    kept = []
    for index in range(3):
        messages.check(["start", index])
        kept.append(messages.check(["end", index, [big, error], index + 1, "ok"])[2])
        assert kept[-1][-1] == error  # a failing test stays failing
    assert kept[0] == [big, error] and kept[2] == [error]
    assert json.dumps(kept).count("this notebook's outputs passed") == 1
