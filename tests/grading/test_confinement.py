"""One thread, one process, nothing to reach from inside: the examinee's confinement (issue 39).

Each attack is a Function whose values are right and whose gradient comes from autograd where the
grader's measurements would not see it (another thread, another process), or that goes for the grader's
own state (frames, the garbage collector, a string made into code, ctypes, files, the measuring code's
methods, the tamper guard). The examinee runs them as grading does (``Examinee``: forked from the warm
process, sandboxed, one thread and one process enforced by seccomp, audit hooks; the referee judges its
replies), the answer cells put past the answer scan by hand, as the issue's routes around it did: what is
tested is what holds when the scan does not. Every attack fails its check, with a message that says what
was refused; the same answers, judged in this test's process where nothing is refused, pass
(``test_without_the_confinement_the_attacks_would_pass``): each attack is real.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap

import pytest
import torch

from autograder.grading.running import executor
from autograder.grading.running.confinement import audit, lifetime, one_thread
from autograder.grading.running.confinement.limits import Limits
from autograder.grading.running.judging import answer, examinee, referee
from test_examinee import PATHS

pytestmark = pytest.mark.skipif(not one_thread.enforced(), reason="no libseccomp2: threads cannot be refused here")

BY_AUTOGRAD = '''
import torch

def _by_autograd(x, g):
    with torch.enable_grad():
        y = x.detach().requires_grad_()
        return torch.autograd.grad(y ** 3, y, g)[0]
'''
FUNCTION = '''
class Cube_{name}(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
{body}
'''
# Replaces the grader's Watch.found (reached as ``where``) by one that says "no autograd" and puts the original
# back on its first call: after the batch, nothing is left to find (issue 39's attack).
RESTORE_ON_FIRST_CALL = '''
_watch = {where}
_found = _watch.found
def _says_nothing(self, allowed):
    _watch.found = _found
    return None
_watch.found = _says_nothing
return _by_autograd(x, grad_output)
'''
FIND_WATCH_IN_FRAMES = '''
import sys
def _raised():
    try:
        raise ValueError()
    except ValueError as error:
        return error
frame = {frame}
while "Watch" not in frame.f_globals:
    frame = frame.f_back
'''

# name -> (the code of backward, or of the cell with "BACKWARD" for it; what the failure says)
ATTACKS = {
    "thread": ("import threading\nout = []\nworker = threading.Thread(target=lambda: out.append(_by_autograd(x, "
               "grad_output)))\nworker.start()\nworker.join()\nreturn out[0]", "started a thread"),
    "thread_pool": ("from concurrent.futures import ThreadPoolExecutor\nwith ThreadPoolExecutor(1) as pool:\n"
                    "    return pool.submit(_by_autograd, x, grad_output).result()", "started a thread"),
    "timer": ("import threading\nout = []\ntimer = threading.Timer(0.0, lambda: out.append(_by_autograd(x, grad_output)))"
              "\ntimer.start()\ntimer.join()\nreturn out[0]", "started a thread"),
    "raw_thread": ("import _thread, time\nout = []\n_thread.start_new_thread(lambda: out.append(_by_autograd(x, "
                   "grad_output)), ())\nwhile not out:\n    time.sleep(0.001)\nreturn out[0]", "started a thread"),
    "thread_from_the_answer_cell": (
        "import queue, threading\n_jobs, _results = queue.Queue(), queue.Queue()\n"
        "def _serve():\n    while True:\n        _results.put(_by_autograd(*_jobs.get()))\n"
        "threading.Thread(target=_serve, daemon=True).start()\n"
        "BACKWARD\n_jobs.put((x, grad_output))\nreturn _results.get()",
        "your answer cell 'thread_from_the_answer_cell' started a thread when the grader ran it"),
    "hidden_thread": ("import torch\ntorch.functional.operator.attrgetter('__self__')(print).__import__('threading')"
                      ".Thread(target=print).start()\nreturn _by_autograd(x, grad_output)", "started a thread"),
    "os_fork": ("import os\nread, write = os.pipe()\npid = os.fork()\nif pid == 0:\n"
                "    os.write(write, _by_autograd(x, grad_output).numpy().tobytes())\n    os._exit(0)\n"
                "os.waitpid(pid, 0)\nreturn torch.frombuffer(bytearray(os.read(read, 1 << 20)), dtype=x.dtype).reshape(x.shape)",
                "started a process"),
    "process_pool": ("import multiprocessing\nmultiprocessing.current_process().daemon = False\n"
                     "with multiprocessing.get_context('fork').Pool(1) as pool:\n"
                     "    return pool.apply(_by_autograd, (x, grad_output))", "started a process"),
    "dataloader_worker": (
        "import torch.utils.data\n"
        "torch.utils.data.dataloader.python_multiprocessing.current_process().daemon = False\n"
        "torch.utils.data.dataloader.python_multiprocessing.resource_tracker._resource_tracker._fd = None\n"
        "jacobian = lambda batch: torch.func.jacfwd(lambda t: t ** 3)(x.reshape(-1)).diagonal().reshape(x.shape)\n"
        "return grad_output * next(iter(torch.utils.data.DataLoader([0], num_workers=1, collate_fn=jacobian)))",
        "started a process"),
    "subprocess": ("import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'pass'])\n"
                   "return grad_output * 3 * x ** 2", "started a process"),
    "shell": ("import os\nos.system('true')\nreturn grad_output * 3 * x ** 2", "started a process"),
    "ctypes_fork": ("import ctypes\nctypes.CDLL(None).fork()\nreturn grad_output * 3 * x ** 2", "used ctypes"),
    "frames": (FIND_WATCH_IN_FRAMES.format(frame="sys._getframe(1)")
               + RESTORE_ON_FIRST_CALL.format(where="frame.f_globals['Watch']"), "looked at the interpreter's frames"),
    "traceback_frames": (FIND_WATCH_IN_FRAMES.format(frame="_raised().__traceback__.tb_frame")
                         + RESTORE_ON_FIRST_CALL.format(where="frame.f_globals['Watch']"),
                         "reached a frame (object.__getattr__)"),
    "signal_handler": (FIND_WATCH_IN_FRAMES.format(frame="_interrupted()")
                       .replace("frame = _interrupted()", "import signal\ncaught = []\n"
                                "signal.signal(signal.SIGUSR1, lambda signum, frame: caught.append(frame))\n"
                                "signal.raise_signal(signal.SIGUSR1)\nframe = caught[0]")
                       + RESTORE_ON_FIRST_CALL.format(where="frame.f_globals['Watch']"), "set a signal handler"),
    "garbage_collector": ("import gc\n_watches = [o for o in gc.get_objects() if type(o).__name__ == 'Watch']\n"
                          + RESTORE_ON_FIRST_CALL.format(where="type(_watches[0])"),
                          "walked the garbage collector's objects"),
    "exec": ("scope = {'x': x, 'g': grad_output}\nexec('slope = g * 3 * x ** 2', scope)\nreturn scope['slope']",
             "turned a string into code"),
    "string_annotation": ("import typing\ndef _hint(a: 'grad_output * 3 * x ** 2'):\n    pass\n"
                          "return typing.get_type_hints(_hint, localns={'x': x, 'grad_output': grad_output})['a']",
                          "ran a string or a code object as code"),
    "benchmark_timer": ("import torch.utils.benchmark\nscope = {'x': x, 'g': grad_output, 'out': []}\n"
                        "torch.utils.benchmark.Timer(stmt='out.append(g * 3 * x ** 2)', globals=scope).timeit(1)\n"
                        "return scope['out'][0]", "turned a string into code"),
    "opens_a_file": ("open('/proc/self/mem', 'rb')\nreturn grad_output * 3 * x ** 2", "opened a file"),
    "audit_hook": ("import sys\nsys.addaudithook(lambda event, args: None)\nreturn grad_output * 3 * x ** 2",
                   "added an audit hook"),
    "tracing": ("import sys\nsys.settrace(lambda *args: None)\nsys.settrace(None)\nreturn grad_output * 3 * x ** 2",
                "traced the interpreter's frames"),
}
# Each in an examinee of its own: tampering found once fails every later check of the notebook.
TAMPERING = {
    "replaces_found": ("import sys\n_watch = sys.modules['autograder.grading.running.judging.autograd_use'].Watch\n"
                       "_watch.found = lambda self, allowed: None\nreturn _by_autograd(x, grad_output)",
                       "autograd_use.Watch.found"),
    "restores_found_on_first_call": ("import sys\n" + RESTORE_ON_FIRST_CALL.format(
        where="sys.modules['autograder.grading.running.judging.autograd_use'].Watch"), "autograd_use.Watch.found"),
    "rebinds_the_hooks_rules": ("import sys\n_audit = sys.modules['autograder.grading.running.confinement.audit']\n"
                                "_audit.ALWAYS_ALLOWED = frozenset({'sys._getframe', 'object.__getattr__'})\n"
                                + FIND_WATCH_IN_FRAMES.format(frame="sys._getframe(1)")
                                + RESTORE_ON_FIRST_CALL.format(where="frame.f_globals['Watch']"),
                                "audit.ALWAYS_ALLOWED"),
    "changes_the_guard": ("import sys\n_tamper = sys.modules['autograder.grading.running.judging.tamper']\n"
                          "_tamper.Guard.check = lambda self, functions=True: []\n"
                          + RESTORE_ON_FIRST_CALL.format(
                              where="sys.modules['autograder.grading.running.judging.autograd_use'].Watch"),
                          "tamper.Guard.check"),
}
HONEST = ("return grad_output * 3 * x ** 2", None)
# Honest answers written the ways plain Python and published code write them: what the standard library does for
# them (postponed annotations, a dataclass's code, a namedtuple's, TypeVar's and Enum's caller, a warning, a
# file written by the answer cell), numpy's BLAS on a large
# product, and torch.compile with its default backend, all inside the examinee's confinement.
PLAIN_PYTHON = ("""from __future__ import annotations
import collections, dataclasses, enum, functools, math, typing, warnings
import numpy
T = typing.TypeVar("T")
Slope = collections.namedtuple("Slope", "factor power")
class Pair(typing.NamedTuple):
    first: int
    second: int
class Mode(enum.Enum):
    EXACT = 1
@dataclasses.dataclass(frozen=True)
class Rule:
    slope: Slope
    mode: Mode = Mode.EXACT
@functools.lru_cache(maxsize=None)
def rule() -> Rule:
    return Rule(Slope(3, 2))
product = numpy.ones((400, 400)) @ numpy.ones((400, 400))
cube = torch.compile(lambda t: t * t * t)
with open("notes.txt", "w") as notes:  # (an answer cell may write into its folder, as in the notebook)
    notes.write("cube")
BACKWARD
warnings.warn("a warning in backward")
assert Pair(1, 2).second == 2 and math.isclose(product[0, 0], 400.0) and torch.allclose(cube(x), x ** 3)
return grad_output * rule().slope.factor * x ** rule().slope.power
""", None)
UID = 2_999_999  # a uid no account has
OPENLY = ("return _by_autograd(x, grad_output)", "backward calls autograd")


def _cell(name: str, code: str) -> str:
    """The answer cell of attack ``name``: its Function, with ``code`` as backward (or around it: ``BACKWARD``)."""
    before, _, body = code.rpartition("BACKWARD\n") if "BACKWARD\n" in code else ("", "", code)
    _, future, before = before.rpartition("from __future__ import annotations\n")  # (first, where there is one)
    return future + BY_AUTOGRAD + before + FUNCTION.format(name=name, body=textwrap.indent(body, " " * 8))


def _trusted(names: list[str]) -> dict:
    cells = [{"kind": "given", "grade_id": None, "source": "import torch\nfrom autograder import check_function"}]
    for name in names:
        cells += [{"kind": "answer", "grade_id": name, "cell_id": name, "source": "", "names": [f"Cube_{name}"]},
                  {"kind": "test", "grade_id": f"test_{name}",
                   "source": f"check_function(Cube_{name}, lambda x: x ** 3, torch.randn(4, 3))"}]
    return {"cells": cells, "student_names": [f"Cube_{name}" for name in names]}


def judged_in_the_examinee(attacks: dict[str, tuple[str, str | None]]) -> dict[str, str | None]:
    """Each attack's check, judged by the referee from a real examinee's replies: the failure, or None."""
    trusted = _trusted(list(attacks))
    steps = examinee.program(trusted, [{"cell_type": "code", "answer_id": name, "source": "pass"} for name in attacks])
    for step in steps:  # put past the scan, as the routes around it did
        if step["kind"] == "answer":
            step.update(source=_cell(step["grade_id"], attacks[step["grade_id"]][0]), why=None, refused=False, scanned=True)
    answering = examinee.Examinee(executor._context(), steps, Limits(cell_timeout=30), {})
    try:
        judge = referee.Referee(trusted["cells"], trusted["student_names"], answering.ask)
        return {name: judge.judge_cell(f"test_{name}")[1] for name in attacks}
    finally:
        assert answering.end() == []  # nothing it started is left running


# Every path to autograd that test_examinee.py pins in this process, with what the profiler sees of it: it sees
# the same under the seccomp filter (its thread was started before the filter).
IN_SIGHT = {f"path_{i}": ("\n".join(line.removeprefix(" " * 8) for line in body.split("\n")), seen)
            for i, (body, seen) in enumerate(PATHS[path] for path in sorted(PATHS))}


@pytest.fixture(scope="module")
def failures() -> dict[str, str | None]:
    return judged_in_the_examinee({"honest": HONEST, "plain_python": PLAIN_PYTHON, "openly": OPENLY, **IN_SIGHT,
                                   **ATTACKS})


def test_an_honest_answer_passes_and_autograd_in_backward_fails_as_before(failures):
    assert failures["honest"] is None and failures["plain_python"] is None
    assert "backward calls autograd (autograd ran PowBackward0" in failures["openly"]


@pytest.mark.parametrize("name", sorted(IN_SIGHT))
def test_the_profiler_sees_every_path_to_autograd_under_the_filter(failures, name):
    assert f"backward calls autograd ({IN_SIGHT[name][1]}" in failures[name], failures[name]


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_attack_fails_its_check_and_says_what_was_refused(failures, name):
    failure = failures[name]
    assert failure is not None and ATTACKS[name][1] in failure, failure
    assert failure.startswith(f"Cube_{name}")


def test_the_message_says_why_the_grader_refuses_it(failures):
    assert audit.WHY in failures["thread"] and "(refused)" in failures["thread"]


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_replacing_the_measuring_code_or_the_guard_is_found_before_it_is_used(name):
    failure = judged_in_the_examinee({name: TAMPERING[name]})[name]
    assert failure is not None and failure.startswith(f"Cube_{name}: ") and "tampering found" in failure, failure
    assert TAMPERING[name][1] in failure, failure


def _judged_here(name: str, code: str) -> str | None:
    """The check judged on ``answer.answer`` in this process (no seccomp, no audit hook, no tamper guard)."""
    namespace: dict = {}
    exec(compile(_cell(name, code), f"<answer {name}>", "exec"), namespace)
    ask = lambda requests: [json.loads(json.dumps(answer.answer(json.loads(json.dumps(r)), namespace)))  # noqa: E731
                            for r in requests]
    trusted = _trusted([name])
    previous = signal.signal(signal.SIGALRM, examinee._on_alarm)
    try:
        return referee.Referee(trusted["cells"], trusted["student_names"], ask).judge_cell(f"test_{name}")[1]
    finally:
        signal.signal(signal.SIGALRM, previous)


# (The attacks that start a process are left out here: forking this test process, with its threads, is unsafe.)
@pytest.mark.parametrize("name", ["thread", "thread_pool", "timer", "raw_thread", "frames", "traceback_frames",
                                  "signal_handler", "garbage_collector", "exec", "string_annotation",
                                  "benchmark_timer"])
def test_without_the_confinement_the_attacks_would_pass(name):
    from autograder.grading.running.judging import autograd_use

    found = autograd_use.Watch.found
    try:
        assert _judged_here(name, ATTACKS[name][0]) is None
        assert _judged_here("openly", OPENLY[0]) is not None  # (the same check, with autograd in sight)
        assert _judged_here("restores", RESTORE_ON_FIRST_CALL.format(
            where="__import__('sys').modules['autograder.grading.running.judging.autograd_use'].Watch")) is None
    finally:  # (what an attack replaced in this process must not reach the next test: the tamper guard would see it)
        autograd_use.Watch.found = found


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming a uid of its own, as the sandbox does, needs root")
def test_a_process_that_is_not_dumpable_cannot_open_its_own_memory():
    """What ``lifetime.not_dumpable`` relies on, on this kernel: as the sandbox leaves the examinee (a uid of its
    own, dumpable), it can open /proc/self/mem; once not dumpable, it cannot."""
    pid = os.fork()
    if pid == 0:
        opened = []
        try:
            os.setresgid(UID, UID, UID)
            os.setresuid(UID, UID, UID)
            lifetime._prctl(lifetime.PR_SET_DUMPABLE, 1, "dumpable")  # (as sandbox._enter_namespaces leaves it)
            for _ in range(2):
                try:
                    open("/proc/self/mem", "rb").close()
                    opened.append(True)
                except PermissionError:
                    opened.append(False)
                lifetime.not_dumpable()
        finally:
            os._exit({(True, False): 0}.get(tuple(opened), 1))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
