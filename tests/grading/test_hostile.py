"""Hostile submissions against the sandbox (README, "What grading guarantees"; issue 14).

One class of 01_first_function is graded in ONE `python -m autograder grade` run, sandboxed the
strongest way this machine allows (namespaces here: the tests run as root): honest students,
and students whose answers are wrong and who attack the grader from their notebook. Each
attack prints what it managed (``GOT: ...``); the tests check that it managed nothing: no file
read or changed outside its own folder, no process signalled or left running, no network, no
secret in its environment, nothing it sent the grader believed, no script in its feedback page,
and never a better score than the same wrong answer without the attack.

Attacks that forge a verdict from inside the student's own interpreter (``VERDICT_FORGING``)
make the cube tests pass there; the referee, which runs those checks again in a process of its
own, fails them, so they too gain nothing (README, "Verdicts the student's code cannot forge").
Those of issue 32 (``ISSUE_32``) make the notebook's process report the right facts (values, what
is saved, the graph), get a gradient from autograd, fix an answer in a later cell or read the
instructor's files: the examinee, which runs only the answer cells, answers the referee instead.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import html.parser
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

import autograder as autograder_package
from autograder.course import Course
from autograder.grading.running.confinement import sandbox
from autograder.grading.running.messages.protocol import NOTEBOOK_OUTPUT_CHARS
from conftest import filled_release, jupyter_server, sqrt_keeping
from test_robustness import (ASSIGNMENT, FORGOT_GRAD_OUTPUT, MAX_SCORE, NOTEBOOK, POINTS, WRONG_CUBE, Notebooks,
                             _course, autograded, autograder, cell_index, code_cell, grades_csv, gradebook_scores,
                             hidden_lines, outputs_of, write_submissions)

pytestmark = pytest.mark.slow

SECRET = "s3cr3t-" + "9f2c71d04e"               # in the grading process's environment only
PACKAGE = Path(autograder_package.__file__).resolve().parent   # the course's own code (autograder/)
PLANTED = PACKAGE / "hostile_was_here.py"       # what an attack would add to it


def attacks(course_root: Path, port: int) -> dict[str, str]:
    """student -> code added to a wrong answer. Each attack reports every attempt it makes, in the notebook's output:
    ``GOT: ...`` for whatever it achieved, ``TRIED: <what> -> <what it got instead>`` for what it did not (``RAN``)."""
    root = str(course_root)
    grading = f"{root}/grading"
    return {
        "reads_secrets": f"""
import base64, glob, os
for pattern in ['{grading}/submitted/*/*/*.ipynb', '{grading}/autograded/*/*/*']:
    print('TRIED: list', pattern, '->', len(glob.glob(pattern)), 'files')
for path in ['{root}/solutions/{ASSIGNMENT}/{NOTEBOOK}', '{grading}/gradebook.db', '/root/.bashrc',
             '/etc/shadow', *glob.glob('{grading}/submitted/*/*/*.ipynb'), *glob.glob('{grading}/autograded/*/*/*')]:
    try:
        print('GOT: read', path, base64.b64encode(open(path, 'rb').read()).decode())
    except OSError as error:
        print('TRIED: read', path, '->', type(error).__name__)
def contents(path):
    try:
        return open(path, 'rb').read()
    except OSError:
        return b''
processes = glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline')
telling = [path for path in processes if b'{SECRET[:6]}' in contents(path) or b'HIDDEN' in contents(path)]
for path in telling:
    print('GOT: read', path, base64.b64encode(contents(path)).decode())
print('TRIED: read the environment and command line of', len(processes) // 2, 'processes ->', len(telling), 'telling')
print('environment', base64.b64encode(repr(dict(os.environ)).encode()).decode())
""",
        "writes_everything": f"""
import glob, os, sqlite3, autograder
def attempt(what, action):
    try:
        action()
        print('GOT: wrote', what)
    except Exception as error:
        print('TRIED: write', what, '->', type(error).__name__)
def gradebook():
    db = sqlite3.connect('{grading}/gradebook.db')
    db.execute('UPDATE grade SET auto_score = 100')
    db.commit()
attempt('gradebook', gradebook)
attempt('grades.csv', lambda: open('{grading}/grades.csv', 'a').write('x,{ASSIGNMENT},100,11,graded,\\n'))
for path in glob.glob('{grading}/submitted/right/*/*.ipynb') or ['{grading}/submitted/right/{ASSIGNMENT}/{NOTEBOOK}']:
    attempt('classmate', lambda: open(path, 'w').write('{{}}'))
attempt('solutions', lambda: open('{root}/solutions/{ASSIGNMENT}/{NOTEBOOK}', 'a').write(' '))
attempt('package', lambda: open(os.path.join(os.path.dirname(autograder.__file__), '{PLANTED.name}'), 'w').write('1'))
attempt('tmp outside', lambda: open('/var/tmp/hostile', 'w').write('1'))
""",
        "leaves_processes": """
import os, subprocess
print('TRIED: start sleep 7771 in a session of its own -> pid', subprocess.Popen(['sleep', '7771'], start_new_session=True).pid)
middle = os.fork()
if middle == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp('sleep', ['sleep', '7772'])
    os._exit(0)
os.waitpid(middle, 0)
print('TRIED: start sleep 7772 by a double fork -> its parent pid', middle, 'ended')
""",
        "kills_everyone": """
import os, signal
mine = {os.getpid(), *map(int, os.listdir('/proc/self/task'))}  # its own process and threads
others = [p for p in range(1, 5000) if p not in mine]
for sig in (signal.SIGSTOP, signal.SIGKILL):
    signalled = []
    for pid in others:
        try:
            os.kill(pid, sig)
            signalled.append(pid)
        except OSError:
            pass
    print(f'TRIED: {sig.name} to every pid from 1 to 4999 but its own ->', f'GOT: {signalled}' if signalled else 'none there')
try:
    os.kill(-1, signal.SIGKILL)
    print('GOT: kill -1 reached a process')
except OSError as error:
    print('TRIED: SIGKILL to every process it may signal (kill -1) ->', type(error).__name__)
""",
        "fork_bomb": """
import os, time
made = 0
for _ in range(1000):
    try:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        made += 1
    except OSError:
        break
print('forked', made)
if made >= 1000:
    print('GOT: unlimited processes')
""",
        "uses_the_network": f"""
import socket
for address in (('127.0.0.1', {port}), ('10.0.0.1', 80)):
    try:
        socket.create_connection(address, timeout=2).sendall(b'hello')
        print('GOT: connected', address)
    except OSError as error:
        print('TRIED: connect to', address, '->', type(error).__name__)
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {port}))
    print('GOT: udp')
except OSError as error:
    print('TRIED: send UDP to', ('127.0.0.1', {port}), '->', type(error).__name__)
""",
        "pickles_into_the_pipe": f"""
import gc, multiprocessing.connection
class Evil:
    def __reduce__(self):  # run by whoever unpickles it
        return (exec, ("open('{grading}/pwned-by-pickle', 'w')",))
pipe = [o for o in gc.get_objects() if isinstance(o, multiprocessing.connection.Connection) and o.writable][0]
pipe.send(Evil())
print('TRIED: send a pickle to the grader -> sent')
""",
        # Issue 28: a Function that reads whatever runs it (every frame's source, linecache, In/Out,
        # sys.modules' sources) and prints it base64-encoded, past the grader's filter of hidden lines.
        "dumps_what_runs_it": """
import base64, inspect, linecache, sys

def _dump(where):
    found = []
    for frame in inspect.stack():
        found.append(frame.filename)
        try:
            found.append(inspect.getsource(frame.frame))
        except (OSError, TypeError):
            pass
    found += ['\\n'.join(lines) for _, _, lines, _ in list(linecache.cache.values()) if isinstance(lines, list)]
    shell = get_ipython()
    found += [repr(shell.user_ns.get('In')), repr(shell.user_ns.get('Out')), repr(shell.history_manager.input_hist_raw)]
    for module in list(sys.modules.values()):
        for value in list(vars(module).values())[:500]:
            if isinstance(value, str) and len(value) > 12:
                found.append(value)
    # What a test would look like, not printed before: small enough to pass the output limit whole.
    lines = {line.strip() for text in found for line in str(text).splitlines()
             if ('check_' in line or 'assert' in line) and len(line) < 300} - _printed
    _printed.update(lines)
    print(where, base64.b64encode('\\n'.join(sorted(lines)).encode()).decode())

_printed = set()

_forward, _backward = Cube.forward, Cube.backward
def _dumping_forward(ctx, x):
    _dump('forward')
    return _forward(ctx, x)
def _dumping_backward(ctx, g):
    _dump('backward')
    return _backward(ctx, g)
Cube.forward, Cube.backward = staticmethod(_dumping_forward), staticmethod(_dumping_backward)
get_ipython().events.register('post_run_cell', lambda result: _dump('after a cell'))
""",
        "writes_a_huge_file": """
chunk = b'x' * 1024**2
try:
    with open('big', 'wb') as f:
        for _ in range(1024):
            f.write(chunk)
    print('GOT: 1 GB written')
except OSError as error:
    print('refused:', error)
""",
    }


# Attacks on the verdict from inside the student's own interpreter: not stopped yet (README, the limits).
VERDICT_FORGING = {
    # The cells as graded (the tests back in place), found in memory, and this cell's index among them.
    "forges_pipe_messages": """
import gc, json, os, multiprocessing.connection
cells = next(o for o in gc.get_objects() if isinstance(o, list) and o and isinstance(o[0], dict) and 'cell_type' in o[0])
index = next(i for i, c in enumerate(cells) if 'forged: this cell' in ''.join(c.get('source', '')))  # forged: this cell
count = get_ipython().execution_count
pipe = [o for o in gc.get_objects() if isinstance(o, multiprocessing.connection.Connection) and o.writable][0]
send = lambda message: pipe.send_bytes(json.dumps(message).encode())
send(['end', index, [], count, 'ok'])
for later in range(index + 1, len(cells)):
    if cells[later]['cell_type'] == 'code':
        count += 1
        send(['start', later])
        send(['end', later, [], count, 'ok'])
send(['done'])
os._exit(0)
""",
    "replaces_run_cell": "get_ipython().run_cell = lambda *args, **kwargs: None\n",
    "replaces_error_hook": "get_ipython().recorder.error = lambda *args, **kwargs: None\n",
    "drops_asserts": """
import ast
class DropAsserts(ast.NodeTransformer):
    def visit_Assert(self, node):
        return ast.Pass()
get_ipython().ast_transformers.append(DropAsserts())
""",
}


# Issue 32: the referee checks, it does not ask. Each attack is a wrong (or underived) answer and code in
# cells of the student's own that makes the notebook's process report the right facts (values, what is saved,
# the graph), or an answer that gets its gradient from autograd, or reads the instructor's files.
# student -> (answer cells, {grade id: code in a cell of its own after that answer, or before it ("<cube")}).
FORGE_ANSWERS = """
import autograder.grading.running.judging.answer as _answer, torch as _torch
_real = _answer.answer
def _forged(request, namespace, harnesses=None):  # Cube's values and gradients from torch itself
    reply = _real(request, namespace, harnesses)
    if request['target'] == 'Cube' and reply.get('error') is None:
        x = _answer.decode(request['args'][0]).requires_grad_()
        y = x ** 3
        reply['outputs'] = [_answer.encode(y.detach())]
        if request['upstream'] is not None:
            reply['grads'] = [_answer.encode(_torch.autograd.grad(y, x, _answer.decode(request['upstream'][0]))[0])]
    return reply
_answer.answer = _forged
"""
FORGE_SAVED = """
import autograder.grading.running.judging.answer as _answer, autograder.student.checker.saved as _saved
_real_record = _saved.saved_record
def _record(function, leaves, inplace=False, swap_in=None, upstream=None):  # "it saved its output, kept nothing"
    record = _real_record(function, leaves, inplace, swap_in, upstream)
    return dict(record, saved=[function.apply(*leaves).detach()], kept=[], swap=None)
_saved.saved_record = _answer.saved_record = _record
"""
FORGE_GRAPH = """
import autograder.grading.running.judging.answer as _answer
_real_names = _answer.graph_names
_answer.graph_names = lambda outputs: sorted(set(_real_names(outputs)) | {'PolyFunctionBackward'})
"""
ENGINE = ("print('TRIED: the gradient from the autograd engine in backward -> running it')\n"
          "with torch.enable_grad():\n            y = x.detach().requires_grad_()\n"
          "            return torch.autograd.Variable._execution_engine.run_backward(\n"
          "                (y ** 3,), (grad_output,), False, False, (y,), False)[0]")
GRAD = ("with torch.enable_grad():\n            y = x.detach().requires_grad_()\n"
        "            return torch.autograd.grad(y ** 3, y, grad_output)[0]")
READS_INSTRUCTORS_FILES = """
import glob, os, autograder
package = os.path.dirname(autograder.__file__)
demo = glob.glob(package + '/grading/demo/*/ada/*.ipynb')
print('TRIED: list the demo notebooks ->', len(demo), 'found')
for path in demo + [package + '/authoring/timed_functions.py']:
    try:
        exec(open(path).read() if path.endswith('.py') else '')
        print('GOT: read', path)
    except OSError as error:
        print('TRIED: read', os.path.relpath(path, package), '->', type(error).__name__)
try:
    import autograder.authoring.timed_functions
    print('GOT: imported timed_functions')
except ImportError as error:
    print('TRIED: import autograder.authoring.timed_functions ->', type(error).__name__)
"""
# Issue 39: a string that becomes code past the scan (a string annotation, a benchmark statement) starts a thread
# in backward that gets the gradient from forward-mode AD (which the notebook's own check does not see), where
# the examinee's profiler would not see it either.
IN_A_THREAD = """
out = []
def _work():
    out.append(grad_output * torch.func.jvp(lambda t: t ** 3, (x,), (torch.ones_like(x),))[1])
worker = threading.Thread(target=_work)
worker.start()
worker.join()
print('TRIED: the gradient from forward-mode AD in a thread -> a tensor of shape', tuple(out[0].shape))
return out[0]
"""
THREADING_BY_ANNOTATION = """
import typing
def _modules(threading: "__import__('threading')"):
    pass
threading = typing.get_type_hints(_modules)["threading"]
""" + IN_A_THREAD
THREADING_BY_TIMER = """
import torch.utils.benchmark
found = {}
torch.utils.benchmark.Timer(stmt="found['threading'] = __import__('threading')", globals={"found": found}).timeit(1)
threading = found["threading"]
""" + IN_A_THREAD
SAVES_INPUT = ("result = x.sqrt()\n        ctx.save_for_backward(result)", "result = x.sqrt()\n        ctx.save_for_backward(x)",
               "(result,) = ctx.saved_tensors", "(x,) = ctx.saved_tensors\n        result = x.sqrt()")
NET_WITHOUT_POLY = ("return PolyFunction.apply(x1, x2)", "return x1 ** 3 + x2 ** 2")


def issue_32_submissions(notebooks: Notebooks, wrong: dict) -> dict[str, dict]:
    """The attacks above and the untampered answers they are compared with, as notebooks."""
    right = notebooks.right
    saves_input = right["sqrt"]
    for old, new in zip(SAVES_INPUT[::2], SAVES_INPUT[1::2]):
        saves_input = notebooks.edit("sqrt", old, new, base={"sqrt": saves_input})
    answers = {
        "blank": ({}, {}), "saves_input": ({"sqrt": saves_input}, {}),
        "net_without_poly": ({"net": notebooks.edit("net", *NET_WITHOUT_POLY)}, {}),
        "forges_the_answers": ({"cube": wrong["cube"]}, {"cube": FORGE_ANSWERS}),
        "forges_saved_records": ({"sqrt": saves_input}, {"sqrt": FORGE_SAVED}),
        "forges_graph_names": ({"net": notebooks.edit("net", *NET_WITHOUT_POLY)}, {"net": FORGE_GRAPH}),
        "run_backward_in_backward": ({"cube": notebooks.in_backward("cube", ENGINE)}, {}),
        "grad_in_backward": ({"cube": notebooks.in_backward("cube", GRAD)}, {}),
        "threading_by_annotation": ({"cube": notebooks.in_backward("cube", THREADING_BY_ANNOTATION)}, {}),
        "threading_by_timer": ({"cube": notebooks.in_backward("cube", THREADING_BY_TIMER)}, {}),
        "fixes_it_in_a_later_cell": ({"cube": wrong["cube"]}, {"cube": (
            "class _Right(torch.autograd.Function):\n" + right["cube"].split("\n", 1)[1] +
            "\nCube.forward, Cube.backward = _Right.forward, _Right.backward\n")}),
        "helper_outside_the_answer": ({"cube": notebooks.edit("cube", "return grad_output * 3 * x ** 2",
                                                              "return grad_output * slope(x)")},
                                      {"<cube": "def slope(x):\n    return 3 * x ** 2\n"}),
        "reads_instructors_files": ({}, {"cube": READS_INSTRUCTORS_FILES}),
    }
    subs = {}
    for student, (changed, own_cells) in answers.items():
        nb = (filled_release(notebooks.root, ASSIGNMENT, {}) if student in ("blank", "reads_instructors_files")
              else notebooks.answers(**changed))
        for where, code in own_cells.items():
            at = cell_index(nb, where.lstrip("<")) + (0 if where.startswith("<") else 1)
            nb["cells"].insert(at, code_cell(f"own-{where.lstrip('<')}", code))
        subs[student] = nb
    return subs


# The most each attack of issue 32 may score: its untampered student's score.
ISSUE_32 = {"forges_the_answers": "wrong_cube", "forges_saved_records": "saves_input",
            "forges_graph_names": "net_without_poly", "run_backward_in_backward": "grad_in_backward",
            "fixes_it_in_a_later_cell": "wrong_cube", "reads_instructors_files": "blank",
            "threading_by_annotation": "grad_in_backward", "threading_by_timer": "grad_in_backward"}


# Which wrong answer each attack is added to; its untampered score is the most it may get.
EXERCISE = {"reads_secrets": "cube", "writes_everything": "sqrt", "leaves_processes": "cube",
            "kills_everyone": "sqrt", "fork_bomb": "cube", "uses_the_network": "sqrt",
            "pickles_into_the_pipe": "cube", "writes_a_huge_file": "sqrt",
            "forges_pipe_messages": "cube", "replaces_run_cell": "cube", "replaces_error_hook": "cube",
            "drops_asserts": "cube", "dumps_what_runs_it": "cube"}
UNTAMPERED = {"cube": "wrong_cube", "sqrt": "forgot_grad_output"}

# The notebook's own test passed in its process (the forgery worked there) and the referee's check failed it.
OWN_CHECK_FAILED = "(found by the grader's own check, which runs this cell's checks outside your notebook's process"
# What shows that each attack ran, to its last attempt, in its notebook's outputs or its grades.csv detail: its own
# "TRIED: <what> -> <what it got instead>" lines, or what the grader said of it ({root}, {grading}: the course's
# folders). No test counts an attack as contained before `assert_ran` has seen this: a broken attack (a syntax
# error, a path that moved, a name that changed) fails its tests instead of passing them silently.
RAN = {
    "reads_secrets": ["TRIED: list {grading}/submitted/*/*/*.ipynb -> ", "TRIED: list {grading}/autograded/*/*/* -> ",
                      f"TRIED: read {{root}}/solutions/{ASSIGNMENT}/{NOTEBOOK} -> ", "TRIED: read {grading}/gradebook.db -> ",
                      "TRIED: read /root/.bashrc -> ", "TRIED: read /etc/shadow -> ",
                      "TRIED: read the environment and command line of "],
    "writes_everything": [f"TRIED: write {target} -> " for target in
                          ("gradebook", "grades.csv", "classmate", "solutions", "package", "tmp outside")],
    "leaves_processes": ["TRIED: start sleep 7771 in a session of its own -> pid ",
                         "TRIED: start sleep 7772 by a double fork -> its parent pid "],
    "kills_everyone": ["TRIED: SIGSTOP to every pid from 1 to 4999 but its own -> ",
                       "TRIED: SIGKILL to every pid from 1 to 4999 but its own -> ",
                       "TRIED: SIGKILL to every process it may signal (kill -1) -> "],
    "fork_bomb": ["forked "],
    "uses_the_network": ["TRIED: connect to ('127.0.0.1', ", "TRIED: connect to ('10.0.0.1', 80) -> ",
                         "TRIED: send UDP to ('127.0.0.1', "],
    "pickles_into_the_pipe": ["the notebook's process sent the grader an invalid message"],
    "writes_a_huge_file": ["refused: [Errno 27] File too large"],
    "dumps_what_runs_it": ["after a cell "],
    **{student: [OWN_CHECK_FAILED] for student in VERDICT_FORGING},
    "forges_the_answers": ["tampering found: autograder.grading.running.judging.answer.answer was changed"],
    "forges_saved_records": ["tampering found: autograder.student.checker.saved.saved_record"],
    "forges_graph_names": ["tampering found: autograder.grading.running.judging.answer.graph_names was changed"],
    # Answers the scan refuses: they ran in the notebook's own process (its visible tests), never in the examinee.
    "run_backward_in_backward": ["TRIED: the gradient from the autograd engine in backward -> ",
                                 "the grader did not run your answer cell 'cube': it uses line", "_execution_engine"],
    "threading_by_annotation": ["TRIED: the gradient from forward-mode AD in a thread -> a tensor of shape (",
                                "the grader did not run your answer cell 'cube'", "a string in an annotation"],
    "threading_by_timer": ["TRIED: the gradient from forward-mode AD in a thread -> a tensor of shape (",
                           "the grader did not run your answer cell 'cube'", "importing `torch.utils.benchmark`"],
    "fixes_it_in_a_later_cell": [OWN_CHECK_FAILED],
    "reads_instructors_files": ["TRIED: list the demo notebooks -> ", "TRIED: read authoring/timed_functions.py -> ",
                                "TRIED: import autograder.authoring.timed_functions -> "],
}
HTML_ATTACK_MARKDOWN = ("<script>alert('x-md')</script> <img src=x onerror=\"alert('x-img')\"> "
                        "[link](javascript:alert('x-link')) <iframe src='javascript:alert(\"x-frame\")'></iframe>")
HTML_ATTACK_CODE = ("from IPython.display import HTML, Javascript, display\n"
                    "display(HTML('<script>alert(\"x-out\")</script><b onmouseover=\"alert(\\'x-over\\')\">b</b>'))\n"
                    "display(Javascript('alert(\"x-js\")'))\n")


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


# Runs a command as a subreaper (prctl PR_SET_CHILD_SUBREAPER): a process the command starts that outlives
# its parent (a double fork, setsid) becomes this process's child, not init's. After the command, it writes
# what of its descendants still runs as a sandbox uid or runs the attacks' sleeps into the file argv[1]
# (processes of another checkout's tests on this machine are not its descendants), kills them and reaps them.
REAPER = r"""
import ctypes, json, os, re, signal, subprocess, sys, time
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
code = subprocess.call(sys.argv[2:])
time.sleep(0.5)

def reap():
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass

def parents():
    found = {}
    for pid in filter(str.isdigit, os.listdir('/proc')):
        try:
            status = open(f'/proc/{pid}/status').read()
        except OSError:
            continue
        found[int(pid)] = (int(re.search(r'^PPid:\s+(\d+)', status, re.M)[1]),
                           int(re.search(r'^Uid:\s+(\d+)', status, re.M)[1]), re.search(r'^State:\s+(\S)', status, re.M)[1])
    return found

reap()
table, mine, left = parents(), {os.getpid()}, []
for _ in range(len(table)):
    mine |= {pid for pid, (ppid, _, _) in table.items() if ppid in mine}
for pid in sorted(mine - {os.getpid()}):
    _, uid, state = table[pid]
    try:
        cmdline = open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\0', b' ').decode()
    except OSError:
        continue
    if state != 'Z' and (uid >= int(sys.argv[1].split(':')[0]) or 'sleep 777' in cmdline):
        left.append(f'{pid} uid {uid}: {cmdline}')
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
reap()
open(sys.argv[1].split(':', 1)[1], 'w').write(json.dumps(left))
sys.exit(code)
"""


def run_reaping(command: list[str], report: Path, **kwargs) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``command`` run under REAPER: its result, and the processes it started that it left running."""
    result = subprocess.run([sys.executable, "-c", REAPER, f"{sandbox.UID_BASE}:{report}", *command], **kwargs)
    return result, json.loads(report.read_text())


def decoded(text: str) -> str:
    """``text`` and every base64 or hex token in it, decoded: what a student could read out of it."""
    parts = [text]
    for token in re.findall(r"[A-Za-z0-9+/=]{16,}", text):
        for decode in (base64.b64decode, bytes.fromhex):
            try:
                parts.append(decode(token + "=" * (-len(token) % 4) if decode is base64.b64decode else token)
                             .decode("utf-8", "replace"))
            except (binascii.Error, ValueError):
                pass
    return "\n".join(parts)


class ScriptFinder(html.parser.HTMLParser):
    """Collects what a browser would run: scripts' text, on* handlers, javascript: URLs."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.in_script = False

    def handle_starttag(self, tag, attrs):
        self.in_script = tag == "script"
        for name, value in attrs:
            if name.startswith("on") or (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value}>")

    def handle_endtag(self, tag):
        self.in_script = False

    def handle_data(self, data):
        if self.in_script:
            self.found.append(data)


@dataclass
class Run:
    course_obj: Course
    grade: object
    feedback: object
    rows: dict
    scores: dict
    connections: list
    before: dict
    after: dict
    left_running: list

    @property
    def course(self) -> Path:
        return self.course_obj.root

    def outputs(self, student: str) -> str:
        nb = autograded(self.course_obj, student)
        return json.dumps([c.get("outputs", []) for c in nb["cells"]])

    def shown(self, student: str) -> str:
        """The text of every output of the student's graded notebook (streams, results, errors), one line each."""
        nb = autograded(self.course_obj, student)
        texts = []
        for output in (o for c in nb["cells"] for o in c.get("outputs", [])):
            text = output.get("text") or output.get("data", {}).get("text/plain") or [
                f"{output.get('ename')}: {output.get('evalue')}"]
            texts.append("".join(text) if isinstance(text, list) else str(text))
        return "\n".join(texts)

    def page(self, student: str) -> str:
        return (self.course / "grading" / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()


def assert_ran(run: "Run", student: str) -> None:
    """The attack of ``student`` ran to its last attempt (``RAN``): only then can what it gained be judged."""
    shown = run.shown(student) + "\n" + run.rows[student]["detail"]
    folders = {"root": str(run.course), "grading": str(run.course / "grading")}
    missing = [text.format(**folders) for text in RAN[student] if text.format(**folders) not in shown]
    assert not missing, f"{student}'s attack did not run to its end: nothing shows {missing}\n{shown[:3000]}"


def test_every_attack_has_what_shows_it_ran():
    assert set(RAN) == set(EXERCISE) | set(ISSUE_32)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    assert sandbox.available() == "namespaces", "these tests need the machine CI has (root, kernel with namespaces)"
    course = _course(tmp_path_factory.mktemp("hostile"))
    notebooks = Notebooks(course.root)
    wrong = {"cube": notebooks.edit("cube", *WRONG_CUBE["forward"],
                                    base={"cube": notebooks.edit("cube", *WRONG_CUBE["backward"])}),
             "sqrt": notebooks.edit("sqrt", *FORGOT_GRAD_OUTPUT)}
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    connections, stop = [], threading.Event()

    def accept():
        while not stop.is_set():
            try:
                connections.append(listener.accept()[1].recv(100))
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    subs = {"right": notebooks.answers(), "right_too": notebooks.answers(),
            "wrong_cube": notebooks.answers(cube=wrong["cube"]), "forgot_grad_output": notebooks.answers(sqrt=wrong["sqrt"])}
    for student, code in attacks(course.root, listener.getsockname()[1]).items():
        exercise = EXERCISE[student]
        subs[student] = notebooks.answers(**{exercise: wrong[exercise] + "\n\n" + code})
    for student, code in VERDICT_FORGING.items():  # in a cell of the student's own after the wrong answer
        exercise = EXERCISE[student]
        subs[student] = notebooks.answers(**{exercise: wrong[exercise]})
        subs[student]["cells"].insert(cell_index(subs[student], exercise) + 1, code_cell("forges", code))
    subs.update(issue_32_submissions(notebooks, wrong))
    subs.update(issue_39_submissions(notebooks))
    page = notebooks.answers(sqrt=wrong["sqrt"])
    page["cells"].insert(1, {"cell_type": "markdown", "id": "evil-md", "metadata": {}, "source": HTML_ATTACK_MARKDOWN})
    page["cells"].append(code_cell("evil-out", HTML_ATTACK_CODE))
    subs["injects_html"] = page
    flood = notebooks.answers()
    flood["cells"] += [code_cell(f"flood-{i}", f"print('{i % 10}' * 100_000)") for i in range(200)]
    subs["floods_200_cells"] = flood
    write_submissions(course, subs)
    before = {"solutions": digest(course.solutions), "package": digest(PACKAGE),
              "submitted": digest(course.grading / "submitted")}
    env = {**course.environment(), "GRADER_SECRET_TOKEN": SECRET}
    try:
        graded, left = run_reaping([sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--timeout", "10",
                                    "--memory", "1", "--jobs", "2"], course.root / "left-running.json",
                                   cwd=course.root, env=env, capture_output=True, text=True, timeout=900)
        feedback = autograder(course, "feedback", ASSIGNMENT)
    finally:
        time.sleep(0.5)
        stop.set()
        listener.close()
    after = {"solutions": digest(course.solutions), "package": digest(PACKAGE),
             "submitted": digest(course.grading / "submitted")}
    if PLANTED.exists():
        PLANTED.unlink()
    return Run(course, graded, feedback, grades_csv(course), gradebook_scores(course), connections, before, after, left)


def test_the_batch_finishes_and_honest_students_are_graded_as_usual(run):
    assert run.grade.returncode == 0, run.grade.stdout + run.grade.stderr
    assert "sandbox: namespaces" in run.grade.stderr
    assert "answers: one thread and one process (seccomp refuses clone" in run.grade.stderr  # (issue 39)
    assert run.feedback.returncode == 0, run.feedback.stderr
    for student in ("right", "right_too"):
        assert (float(run.rows[student]["score"]), run.rows[student]["status"]) == (MAX_SCORE, "graded")
    assert float(run.rows["wrong_cube"]["score"]) == MAX_SCORE - 3
    assert float(run.rows["forgot_grad_output"]["score"]) == MAX_SCORE - 3
    for student, grades in run.scores.items():  # the gradebook says what grades.csv says
        assert sum(v or 0 for v in grades.values()) == float(run.rows[student]["score"]), student


@pytest.mark.parametrize("student", sorted(set(EXERCISE) - set(VERDICT_FORGING)))
def test_an_attack_that_ran_gains_no_point_and_reports_nothing_achieved(run, student):
    assert_ran(run, student)
    assert float(run.rows[student]["score"]) <= float(run.rows[UNTAMPERED[EXERCISE[student]]]["score"]), run.rows[student]
    assert "GOT:" not in run.outputs(student), run.outputs(student)[:3000]


def test_nothing_outside_its_own_folder_was_changed(run):
    for student in ("writes_everything", "pickles_into_the_pipe", "writes_a_huge_file"):
        assert_ran(run, student)
    assert run.after == run.before
    assert not PLANTED.exists() and not (run.course / "grading" / "pwned-by-pickle").exists()
    assert not Path("/var/tmp/hostile").exists()
    assert set(run.rows) >= {"right", "right_too"} and "x" not in run.rows


def test_nothing_is_left_running(run):
    """Of the processes the grading run started (another checkout's tests on this machine are not judged)."""
    for student in ("leaves_processes", "fork_bomb", "kills_everyone"):
        assert_ran(run, student)
    assert run.left_running == []
    made = int(re.search(r"forked (\d+)", run.outputs("fork_bomb")).group(1))
    assert 0 < made <= sandbox.PROCESSES


def test_the_reaper_sees_what_a_command_leaves_running_and_ends_it(tmp_path):
    """The check above can fail: a detached sleep is reported (and ended); a command leaving nothing reports nothing."""
    detach = "import subprocess; subprocess.Popen(['sleep', '7779'], start_new_session=True)"
    result, left = run_reaping([sys.executable, "-c", detach], tmp_path / "left.json", timeout=60)
    assert result.returncode == 0 and len(left) == 1 and left[0].endswith("sleep 7779 "), left
    pid = int(left[0].split()[0])
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/status").read_text().split("State:")[1][:4]
    assert run_reaping([sys.executable, "-c", "pass"], tmp_path / "none.json", timeout=60)[1] == []


def test_no_secret_or_hidden_test_reaches_what_students_see(run):
    for student in ("reads_secrets", "dumps_what_runs_it", "uses_the_network", "reads_instructors_files"):
        assert_ran(run, student)
    hidden = hidden_lines(run.course_obj)
    for student in run.rows:
        seen = decoded(run.outputs(student) + run.page(student))
        assert SECRET not in seen and "AUTOGRADER_DB_URL" not in seen, student
        leaked = [line for line in hidden if line in seen]
        assert not leaked, (student, leaked[:2])
    assert run.connections == []
    # The dump did run, in test cells and in the referee's requests, and read what it could: the visible tests.
    dumped = decoded(run.outputs("dumps_what_runs_it"))
    assert "after a cell" in dumped and "backward" in dumped
    assert "check_function(Cube, lambda x: x ** 3" in dumped


def test_a_pickle_sent_to_the_grader_is_not_unpickled(run):
    assert_ran(run, "pickles_into_the_pipe")
    row = run.rows["pickles_into_the_pipe"]
    assert row["status"] == "kernel died" and "invalid message" in row["detail"], row


def test_a_huge_file_and_200_flooded_cells_stay_small(run):
    assert "File too large" in run.outputs("writes_a_huge_file")
    flooded = run.course / "grading" / "autograded" / "floods_200_cells" / ASSIGNMENT / NOTEBOOK
    assert flooded.stat().st_size < 2 * NOTEBOOK_OUTPUT_CHARS
    assert "this notebook's outputs passed" in flooded.read_text()
    assert (float(run.rows["floods_200_cells"]["score"]), run.rows["floods_200_cells"]["status"]) == (MAX_SCORE, "graded")


def test_feedback_pages_run_no_student_script(run):
    finder = ScriptFinder()
    finder.feed(run.page("injects_html"))
    assert [found for found in finder.found if "x-" in found] == []
    assert "x-md" in run.page("injects_html")  # escaped and shown, not dropped silently


def test_the_formgrader_serves_the_submission_with_no_student_script(run):
    """The instructor's view: a real Jupyter server with the course's config serves the formgrader's page."""
    from nbgrader.api import Gradebook

    with Gradebook(run.course_obj.config().CourseDirectory.db_url) as gradebook:
        submission = gradebook.find_submission_notebook(NOTEBOOK.removesuffix(".ipynb"), ASSIGNMENT, "injects_html").id
    with jupyter_server(run.course_obj) as (base, token):
        request = urllib.request.Request(f"{base}/formgrader/submissions/{submission}",
                                         headers={"Authorization": f"token {token}"})
        page = urllib.request.urlopen(request, timeout=60).read().decode()
    assert "x-md" in page and "x-out" in page, page[:2000]  # the student's cells are there, as text
    assert "formgrader/static/js/formgrade.js" in page and "scoring-buttons" in page  # grading still works
    finder = ScriptFinder()
    finder.feed(page)
    assert [found for found in finder.found if "x-" in found] == []
    assert "<iframe" not in page


@pytest.mark.parametrize("student", sorted(VERDICT_FORGING))
def test_forging_a_verdict_from_inside_the_interpreter_gains_nothing(run, student):
    # Each of these makes the cube tests pass in the student's own process; the referee, which runs
    # their checks again outside it, fails them (autograder/grading/running/judging/referee.py) and says so.
    assert_ran(run, student)
    assert float(run.rows[student]["score"]) <= float(run.rows[UNTAMPERED[EXERCISE[student]]]["score"])
    shown = outputs_of(autograded(run.course_obj, student), "test_cube_forward")
    assert "Cube: forward's output is wrong" in shown and "first (found by the grader's own check" in shown



# ----------------------------------------------------------------------------------------
# Issue 32: the referee checks, it does not ask


def test_the_untampered_answers_score_what_their_mistakes_cost(run):
    score = lambda student: float(run.rows[student]["score"])  # noqa: E731
    assert score("blank") == 0
    assert score("saves_input") == MAX_SCORE - POINTS["test_sqrt"]  # right values, the input saved
    assert score("net_without_poly") == MAX_SCORE - POINTS["test_net"]  # right values, PolyFunction unused
    assert score("grad_in_backward") == MAX_SCORE - POINTS["test_cube_backward"]  # right values, no derivation


@pytest.mark.parametrize("student", sorted(ISSUE_32))
def test_what_the_notebooks_process_reports_or_runs_gains_nothing(run, student):
    assert_ran(run, student)
    assert float(run.rows[student]["score"]) <= float(run.rows[ISSUE_32[student]]["score"]), run.rows[student]
    assert "GOT:" not in run.outputs(student)


def test_a_backward_that_hands_its_work_to_autograd_fails_whichever_way(run):
    # torch.autograd.grad in backward: the notebook's own check already says so (the cell fails once, said once).
    caught = outputs_of(autograded(run.course_obj, "grad_in_backward"), "test_cube_backward")
    assert "backward calls autograd itself (torch.autograd.grad or .backward())" in caught, caught
    refused = outputs_of(autograded(run.course_obj, "run_backward_in_backward"), "test_cube_backward")
    assert "the grader did not run your answer cell 'cube': it uses line" in refused and "_execution_engine" in refused
    assert float(run.rows["run_backward_in_backward"]["score"]) == MAX_SCORE - 3  # forward's test too: not run


def test_forged_records_and_replaced_answering_code_are_reported_as_tampering(run):
    for student in ("forges_the_answers", "forges_saved_records", "forges_graph_names"):
        assert run.rows[student]["status"] == "tampering found", run.rows[student]
    assert "Sqrt's saved tensor 1 should be the output" in run.outputs("forges_saved_records")
    assert "Net's output should come from PolyFunction.apply" in run.outputs("forges_graph_names")


def test_an_answer_is_judged_as_its_answer_cell_defines_it(run):
    # Fixed in a later cell of the student's own: the notebook's visible tests passed, the grader's did not.
    assert "forward's output is wrong" in outputs_of(autograded(run.course_obj, "fixes_it_in_a_later_cell"),
                                                        "test_cube_forward")
    helper = outputs_of(autograded(run.course_obj, "helper_outside_the_answer"), "test_cube_backward")
    assert "NameError: name 'slope' is not defined" in helper and "runs only the notebook's given cells and your answer cells" in helper



# ----------------------------------------------------------------------------------------
# Issue 39: behaviour, not declarations. A Sqrt that saves its output, as asked, and keeps its input some other way
# for backward; a Net that only looks built on PolyFunction (whose backward is wrong), with a right result computed
# otherwise. Each student has one of each, or a Sqrt alone: student -> (how Sqrt keeps x, how Net cheats or None).
KEEPS = {  # how -> (how conftest.sqrt_keeping keeps it, where the message must say it is kept)
    "by_id_of_ctx": (dict(before="_kept = {}", keep="_kept[id(ctx)] = x", get="_kept.pop(id(ctx))"),
                     "in the module-level dict `_kept`"),
    "in_a_ctx_tuple": (dict(keep="ctx.inputs = (x,)", get="ctx.inputs[0]"), "in `ctx.inputs[0]`"),
    "in_a_ctx_dataclass": (dict(before="@dataclasses.dataclass\nclass Box:\n    x: object\n\n\n"
                                       "@dataclasses.dataclass\nclass State:\n    box: Box",
                                keep="ctx.state = State(Box(x))", get="ctx.state.box.x"), "in `ctx.state.box.x`"),
    "in_a_class_list": (dict(class_body="kept = []", keep="Sqrt.kept.append(x)", get="Sqrt.kept.pop()"),
                        "in the class attribute `Sqrt.kept`"),
    "in_a_closure": (dict(before="def _store():\n    kept = []\n\n    def put(x):\n        kept.append(x)\n\n"
                                 "    def take():\n        return kept.pop()\n\n    return put, take\n\n\n"
                                 "put, take = _store()", keep="put(x)", get="take()"), "in a closure of put"),
    "in_a_default_argument": (dict(before="def _kept(x=None, box=[]):\n    if x is not None:\n        box.append(x)\n"
                                          "    return box", keep="_kept(x)", get="_kept().pop()"),
                              "in a default argument of _kept"),
    "in_a_function_attribute": (dict(before="def _holder():\n    pass", keep="_holder.x = x", get="_holder.x"),
                                "in the function attribute `_holder.x`"),
    "as_clones_in_a_global_list": (dict(before="_clones = []", keep="_clones.append(x.clone())", get="_clones.pop()"),
                                   "(a copy of the input `x`) in the module-level list `_clones`"),
}
POLY_BACKWARD = ("return grad_output * 3 * x1 ** 2, grad_output * 2 * x2", "return grad_output * 3 * x1 ** 2, grad_output * x2")
NET_CHEATS = {  # how Net's forward computes its right result without following PolyFunction
    "adds_zero_times_poly": "return (x1 ** 3 + x2 ** 2).sum() + 0 * PolyFunction.apply(x1, x2).sum()",
    "on_a_detached_copy": ("p = PolyFunction.apply(x1.detach(), x2.detach())\n        right = x1 ** 3 + x2 ** 2\n"
                           "        return (right + (p - right).detach()).sum() + 0 * PolyFunction.apply(x1, x2).sum()"),
    "discards_poly": "PolyFunction.apply(x1, x2)\n        return (x1 ** 3 + x2 ** 2).sum()",
    "poly_on_the_visible_shape_only": ("right = (x1 ** 3 + x2 ** 2).sum()\n        if x1.shape == (3,):\n"
                                       "            return right + 0 * self.poly(x1, x2).sum()\n        return right"),
}
ISSUE_39 = {f"sqrt_keeps_input_{how}" + (f"_net_{net}" if net else ""): (how, net) for how, net in zip(
    KEEPS, [*NET_CHEATS, None, None, None, None])}


def issue_39_submissions(notebooks: Notebooks) -> dict[str, dict]:
    subs = {}
    for student, (how, net) in ISSUE_39.items():
        answers = {"sqrt": sqrt_keeping(**KEEPS[how][0])}
        if net:
            answers["poly_function"] = notebooks.edit("poly_function", *POLY_BACKWARD)
            answers["net"] = notebooks.edit("net", "return self.poly(x1, x2).sum()", NET_CHEATS[net])
        subs[student] = notebooks.answers(**answers)
    return subs


def test_the_keeping_and_cheating_answers_are_ones_the_scan_lets_run():
    from autograder.grading.running.judging import scan

    for how, (parts, _) in KEEPS.items():
        assert scan.problems(sqrt_keeping(**parts)) == [], how
    for net, body in NET_CHEATS.items():
        net_answer = (f"class Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                      f"        self.poly = PolyFunction.apply\n\n    def forward(self, x1, x2):\n        {body}\n")
        assert scan.problems(net_answer) == [], net


@pytest.mark.parametrize("student", sorted(ISSUE_39))
def test_a_tensor_kept_outside_save_for_backward_and_a_net_that_does_not_follow_poly_function_gain_nothing(run, student):
    how, net = ISSUE_39[student]
    lost = POINTS["test_sqrt"] + (POINTS["test_poly_function"] + POINTS["test_net"] if net else 0)
    assert (float(run.rows[student]["score"]), run.rows[student]["status"]) == (MAX_SCORE - lost, "graded"), run.rows[student]
    graded = autograded(run.course_obj, student)
    said = outputs_of(graded, "test_sqrt")
    assert f"Sqrt keeps a tensor" in said and KEEPS[how][1] in said and "outside save_for_backward" in said, said
    if net:
        said = outputs_of(graded, "test_net")
        assert "Net does not follow PolyFunction" in said or "Net's output should come from PolyFunction.apply" in said, said


def test_a_string_made_into_code_is_refused_before_it_runs(run):
    # Issue 39: the answer scan's allow-list refuses both answers (a string annotation run by typing.get_type_hints,
    # a Timer statement compiled from a string), so backward never reaches its thread; were one to get past it, the
    # examinee's audit hook refuses running and compiling the string, and seccomp the thread (test_confinement.py).
    for student, says in (("threading_by_annotation", "a string in an annotation (code may run it)"),
                          ("threading_by_timer", "importing `torch.utils.benchmark`")):
        shown = outputs_of(autograded(run.course_obj, student), "test_cube_backward")
        assert "the grader did not run your answer cell 'cube'" in shown and says in shown, shown
        # A refused answer cell is not run, so both of Cube's tests lose their points.
        lost = POINTS["test_cube_forward"] + POINTS["test_cube_backward"]
        assert float(run.rows[student]["score"]) == MAX_SCORE - lost, run.rows[student]
