"""Nothing to reach from inside: audit hooks that refuse what answers never need, in the examinee.

The examinee (``autograder.grading.running.judging.examinee``) runs a student's answers beside the grader's
own measuring code, in one process. An answer that reached the interpreter's frames or the garbage
collector's objects would find the grader's state (its ``Watch``, its tamper guard) and change what it
measures; one that turned a string into code would run what the answer scan never saw. So the examinee
installs a Python audit hook (``sys.addaudithook``: no hook can be removed once added) before it runs any
given or answer cell. Every audit event the interpreter raises reaches it, and it refuses what an
answer's code does itself:

- frames and code objects: ``sys._getframe``, ``sys._current_frames``, ``sys.settrace``, ``sys.setprofile``,
  the attributes that hand out frames and code (``tb_frame``, ``gi_frame``, ``f_code``, ``__code__``: the
  event ``object.__getattr__``), and changing a function's code or defaults or an object's class;
- the garbage collector's walks (``gc.get_objects``, ``gc.get_referrers``, ``gc.get_referents``);
- strings or data made into code (``compile``, ``exec``, ``eval``, ``code.__new__``, ``function.__new__``,
  ``marshal.loads``, ``pickle.find_class``), ``ctypes``, opening files once the answers are bound (after the
  answer cells: ``BOUND``), ``os`` calls, another audit hook;
- in fact every event but ``ALWAYS_ALLOWED`` (an import: which modules an answer names is the scan's to
  decide; ``id()``): what answers may do is a list of what is allowed.

"Does itself" is read from the Python frames on the stack, innermost first (the hook's caller's). A frame of
the grader's own package, of torch or of triton (``trusted``), or of the import system, decides: the event
is theirs, and allowed (``torch.compile`` compiles and runs the code it generates, reads sources, opens its
cache; Triton's interpreter rewrites a kernel's source and compiles it; the grader runs the answer cells
with ``exec``). A frame of the rest of the Python installation (the standard library, other installed
packages) does not decide: the event belongs to whoever called it, so ``inspect.stack()`` in an answer is
refused as the answer's. A few standard modules compile code they build from validated identifiers, or
read their caller's module name (``STANDARD_ALLOWED``: ``dataclasses``, ``namedtuple``, ``TypeVar``, ``Enum``):
those are allowed where the event comes from that module's own frame. Any other frame (an answer cell,
a given cell, code made from a string) decides: refused.

Why this is sound: an answer's frames and the code it makes are never trusted (a code object keeps the
file name it was compiled with, and making one with another name is itself refused), so whatever an
answer does directly, or through the standard library, is judged as its own. What torch or the grader do
when an answer calls them is allowed: which of their functions an answer may call at all (not
``torch.utils.benchmark.Timer``, which compiles the string it is given, nor ``torch.load``) is the answer
scan's allow-list (``autograder.grading.running.judging.scan``), and the scan's rule that no string becomes
code keeps an answer from handing torch a string to run.

Whoever starts a thread or a process, trusted or not, is refused (``os.fork``, ``subprocess.Popen``,
``os.posix_spawn``, ``os.system``, ``os.exec*``; threads through ``_thread`` and processes through
``_posixsubprocess``, which raise no event of their own, so their functions are replaced): what the kernel
refuses anyway (``one_thread``) is said in words. So is setting a signal handler, which raises no event
either and is handed the frame it interrupts (the examinee has set its own, for its time limit, before).

Each refusal raises ``Refused`` where it happened and is recorded; ``install`` returns the function that
hands over (and clears) the record. Only the examinee holds that function, and the record lives in the
hook's closure: an answer that catches the exception still fails the check, with the message.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import os
import sys
import typing

ALWAYS_ALLOWED = frozenset({"import", "builtins.id"})
# Raised by the answering code (``sys.audit(CHECKPOINT)``, bound when it was imported) where an answer's code has
# returned and the grader is about to read what it measured: the examinee's tamper guard looks there.
CHECKPOINT = "autograder.checkpoint"
# Raised by the examinee once the answer cells have run: from then on an answer may not open a file (an answer cell
# may, as in the notebook: it writes only into the examinee's own empty folder).
BOUND = "autograder.answers_bound"
# Of the attributes whose reading raises "object.__getattr__", those that hand out a frame (a code object alone runs
# nothing: making a function of it, or running it, is refused).
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
STARTS = {"os.fork": "process", "os.forkpty": "process", "os.posix_spawn": "process", "os.spawn": "process",
          "os.system": "process", "os.exec": "process", "subprocess.Popen": "process", "pty.spawn": "process"}
# Standard modules allowed these events from their own frames: code they build from identifiers they check
# (a dataclass's __init__, a namedtuple's __new__), their caller's module name (sys._getframe(1).f_globals), and
# typing's compiling a string annotation into a ForwardRef (running it, in get_type_hints, is "exec": refused).
STANDARD_ALLOWED = {dataclasses: {"compile", "exec", "object.__setattr__", "sys._getframe"},
                    collections: {"compile", "exec", "object.__setattr__", "sys._getframe"},
                    typing: {"compile", "sys._getframe", "object.__setattr__"}, enum: {"sys._getframe"}}
WHAT = {"sys._getframe": "looked at the interpreter's frames", "sys._current_frames": "looked at the interpreter's "
        "frames", "sys.settrace": "traced the interpreter's frames", "sys.setprofile": "traced the interpreter's frames",
        "object.__getattr__": "reached a frame", "object.__setattr__": "changed a function's code or defaults, or an "
        "object's class", "compile": "turned a string into code", "exec": "ran a string or a code object as code",
        "code.__new__": "made a code object", "function.__new__": "made a function from a code object",
        "marshal.loads": "turned data into code", "pickle.find_class": "unpickled data", "open": "opened a file",
        "sys.addaudithook": "added an audit hook"}
WHY = ("the grader runs answers in one thread and one process, with what answers need and no more (no frames, "
       "no garbage collector walks, no strings made into code, no ctypes, no files), so that its checks see "
       "everything they run")
# Parts of torch that run or load what their caller hands them (a statement to time, a pickle, a package, C++
# sources): not trusted, whatever answer reaches them is judged as the caller.
NOT_TRUSTED = ("torch/utils/benchmark/", "torch/hub.py", "torch/serialization.py", "torch/package/",
               "torch/utils/cpp_extension.py", "torch/_dynamo/repro/", "torch/_dynamo/debug_utils.py")
TRUSTED, LIBRARY, ANSWER = "trusted", "library", "answer"
IMPORT_SYSTEM = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>")
# The code of the answer cells, as the examinee compiles them (the given cells, "<given>", are the instructor's).
ANSWER_FILES = ("<answer ",)
GIVEN_FILES = ("<given",)


class Refused(RuntimeError):
    """What an answer did that the examinee refuses (a RuntimeError: ``sys.addaudithook`` then adds nothing)."""


def what(event: str) -> str:
    """The refused ``event`` in words, as a student reads it."""
    if event in STARTS:
        return f"started a {STARTS[event]}"
    if event.startswith("gc."):
        return f"walked the garbage collector's objects ({event})"
    if event.startswith("ctypes."):
        return f"used ctypes ({event})"
    return f"{WHAT[event]} ({event})" if event in WHAT else f"used {event}"


def message(done: str) -> str:
    """The error a check fails with when its answer did ``done`` (``what``'s words)."""
    return f"RefusedError: your code {done}: {WHY} (refused)"


def install(trusted: tuple[str, ...], checkpoint=None):
    """Add the hook; ``trusted``: the folders whose code decides for itself (the grader's package, torch,
    triton); ``checkpoint()`` runs at each event ``CHECKPOINT``. Return ``taken``: ``taken()`` is what was refused
    since its last call (``what``'s words), in order.

    The hook looks nothing up in this module when it runs: what it uses is bound here, in its closure, so code
    that reached the module and rebound its names (``ALWAYS_ALLOWED``) would change nothing the hook does."""
    refused: list[str] = []
    kinds: dict[str, str] = {name: TRUSTED for name in IMPORT_SYSTEM}
    trusted = tuple(p.rstrip("/") + "/" for p in trusted)
    allowed_here = {module.__file__: events for module, events in STANDARD_ALLOWED.items()}
    busy = [False]
    getframe, is_str, starts_with, says, refusal = sys._getframe, str, str.startswith, what, message
    always, frames, starts, checkpoint_event, bound_event = ALWAYS_ALLOWED, FRAME_ATTRIBUTES, STARTS, CHECKPOINT, BOUND
    bound = [False]
    answer, given, not_trusted, library, trusted_kind, answer_kind = (ANSWER_FILES, GIVEN_FILES, NOT_TRUSTED,
                                                                     LIBRARY, TRUSTED, ANSWER)
    error = Refused

    def kind(filename) -> str:
        if type(filename) is not is_str:
            return answer_kind
        found = kinds.get(filename)
        if found is None:
            found = (answer_kind if starts_with(filename, answer) else
                     trusted_kind if (starts_with(filename, trusted) and not any(p in filename for p in not_trusted)
                                      or starts_with(filename, given)) else library)
            kinds[filename] = found
        return found

    def decided_by_answer(event: str) -> bool:
        frame = getframe(1).f_back  # (1: the hook; its caller, none where C raised the event with no Python frame)
        while frame is not None:
            filename = frame.f_code.co_filename
            found = kind(filename)
            if found == library and event in allowed_here.get(filename, ()):
                return False
            if found != library:
                return found == answer_kind
            frame = frame.f_back
        return True

    def refuse(done: str):
        refused.append(done)
        raise error(refusal(done))

    def hook(event: str, args: tuple) -> None:
        if event in always or busy[0] or (event == "object.__getattr__" and args[1] not in frames):
            return
        busy[0] = True
        try:
            if event == checkpoint_event:
                if checkpoint is not None:
                    checkpoint()
                return
            if event == bound_event:  # (raised by an answer, it only refuses files earlier)
                bound[0] = True
                return
            refused_here = event in starts or ((bound[0] or event != "open") and decided_by_answer(event))
        finally:
            busy[0] = False
        if refused_here:
            refuse(says(event))

    def refusing(done: str):
        return lambda *args, **kwargs: refuse(done)

    def taken() -> list[str]:
        found = list(refused)
        refused.clear()
        return found

    import _posixsubprocess
    import _signal
    import _thread
    import threading

    sys.addaudithook(hook)
    _thread.start_new_thread = _thread.start_new = threading._start_new_thread = refusing("started a thread")
    _posixsubprocess.fork_exec = refusing("started a process")  # (multiprocessing's helpers raise no event first)
    _signal.signal = refusing("set a signal handler (a handler is handed the frame it interrupts)")
    return taken


def trusted_folders() -> tuple[str, ...]:
    """The grader's package, torch and triton (where installed): the code that decides for itself."""
    import torch

    import autograder

    folders = [os.path.dirname(autograder.__file__), os.path.dirname(torch.__file__)]
    try:
        import triton
    except ImportError:
        pass
    else:
        folders.append(os.path.dirname(triton.__file__))
    return tuple(folders) + tuple(os.path.realpath(f) for f in folders)
