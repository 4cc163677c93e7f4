"""What one notebook may use while it is graded (``Limits``), and the sandbox it runs in.

``confine`` decides the sandbox mode for this machine (refusing to run student code without
one unless told) and what bounds a notebook's memory there (``autograder.grading.running.confinement.memory``),
``isolate`` puts the current process into it (``autograder.grading.running.confinement.sandbox``)
with its memory and thread limits: notebooks, their examinees and the referee all start with it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from autograder.grading.running.confinement import memory as memory_bound, sandbox, starter


class CellTimeout(BaseException):
    """Raised inside a cell that ran past its time limit (BaseException: ``except Exception``
    in student code does not swallow it)."""


@dataclass(frozen=True)
class Limits:
    """What one notebook may use while it is graded."""

    cell_timeout: float = 60.0
    after_timeout: float = 10.0
    budget: float | None = None       # seconds for a whole notebook, wall-clock and CPU (None: BUDGET_CELLS cells' worth)
    memory: int | None = 4 * 1024**3
    output_chars: int = 100_000
    threads: int = 1
    sandbox: str = "auto"             # namespaces | landlock | off | auto (the strongest available)
    memory_bound: str = "auto"        # cgroup | one process | per process | auto (decided with the sandbox: memory.py)
    hidden: tuple[str, ...] = ()      # folders the notebook must not see (the course's), see sandbox.Policy


BUDGET_CELLS = 10  # the default budget of a notebook: this many times the cell time limit
FEEDBACK_PAGE_SECONDS = 60.0  # the most one student's feedback pages may take to make (an honest one: under 1 s)


def notebook_budget(limits: Limits) -> float:
    """Seconds one notebook may take, all its cells and the grader's checks together, in wall-clock time and in
    CPU time of all its processes: ``limits.budget``, else ``BUDGET_CELLS`` times the cell time limit."""
    return limits.budget if limits.budget is not None else BUDGET_CELLS * limits.cell_timeout


_available: str | None = None
REFUSED = ("this machine allows no sandbox (neither namespaces nor Landlock, or no libseccomp2), so "
           "student code would run as you, able to read solutions/ and the gradebook, change grades and use "
           "the network: grade in a container or VM, or pass --no-sandbox to run it anyway")


class SandboxRefused(Exception):
    """No sandbox is available and none was explicitly declined."""


def confine(limits: Limits, hidden: list, here: bool = True) -> Limits:
    """``limits`` with ``hidden`` (the course's folders) kept from students, and its sandbox mode decided here.

    Raises SandboxRefused when ``auto`` finds no sandbox: only an explicit ``sandbox="off"`` runs without one.
    With ``here=False`` (notebooks run on Dask workers) each worker decides the mode for its machine.
    """
    mode = sandbox_mode(limits) if here else limits.sandbox
    if mode == "off" and limits.sandbox == "auto":
        raise SandboxRefused(REFUSED)
    bound = limits.memory_bound
    if bound == "auto" and mode != "auto":
        bound = memory_bound.bound(mode != "off", limits.memory)
    if bound == memory_bound.CGROUP:
        memory_bound.sweep()
    return replace(limits, sandbox=mode, memory_bound=bound,
                   hidden=tuple(str(h) for h in hidden) + tuple(limits.hidden))


def sandbox_mode(limits: Limits) -> str:
    """The sandbox ``limits`` asks for, ``auto`` resolved to the strongest this machine allows (probed once)."""
    global _available
    if limits.sandbox != "auto":
        return limits.sandbox
    if _available is None:
        _available = sandbox.available()
    return _available


def package_folder() -> str:
    """The course's own package (``autograder/``)."""
    import autograder

    return os.path.dirname(os.path.abspath(autograder.__file__))


# What a notebook and the grader's processes import of the package: the checker and timing a notebook uses
# (``autograder.student``) and the grader's own code that runs in the sandbox. Never the instructor's parts:
# ``authoring/`` (07's and 02's answers in timed_functions.py), ``grading/demo/`` (a class's full-mark answers),
# the gradebook's and the exports' code.
PACKAGE_PARTS = ("__init__.py", "student", os.path.join("grading", "__init__.py"), os.path.join("grading", "running"))


def package_parts() -> tuple[str, ...]:
    """The paths of ``PACKAGE_PARTS``: shown read-only inside the sandbox, the rest of the package hidden."""
    return tuple(os.path.join(package_folder(), part) for part in PACKAGE_PARTS)


RESULT_FD = 3  # the result pipe's descriptor in a sandbox: the same whatever the warm process had open


START_STEP = 256 * 1024**2  # a process's address space when its sandbox is made, rounded up to this


def _start() -> int:
    """This process's address space, rounded up to ``START_STEP``: a notebook may use ``Limits.memory`` beyond it.
    (Not rounded, it varied by some pages from one warm process to the next, with the order of their hash tables,
    and with what the warm process had served before: RLIMIT_AS told check from grade. Rounded, it is one number
    here: 1 GiB, for 1,019.5-1,019.7 MB in five warm processes.)"""
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    return -(-size // START_STEP) * START_STEP


def isolate(cwd: str, limits: Limits, env: dict[str, str], connection):
    """The sandbox (``autograder.grading.running.confinement.sandbox``), no stdin, C-level output discarded, bounded
    memory and threads; return ``connection`` (the result pipe), on descriptor ``RESULT_FD`` in a sandbox."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    starter.forget_the_starter(cwd)
    policy = sandbox.Policy(sandbox_mode(limits), tuple(limits.hidden) + (package_folder(),), package_parts())
    if limits.memory_bound == memory_bound.CGROUP:
        try:  # before the sandbox's forks and its change of uid: every process of the sandbox is in it
            memory_bound.join(limits.memory)
        except OSError as error:
            raise sandbox.SandboxError(f"no memory cgroup for this notebook ({error})") from None
    sandbox.enter(policy, cwd, connection.fileno(), env, limits.memory)
    if limits.memory_bound == memory_bound.ONE_PROCESS:
        memory_bound.refuse_processes()
    if policy.mode != "off":
        connection = _on_result_fd(connection)
    if limits.memory is not None:
        import resource

        start = _start()
        resource.setrlimit(resource.RLIMIT_AS, (start + limits.memory, start + limits.memory))
    import torch

    torch.set_num_threads(max(1, limits.threads))
    return connection


def _on_result_fd(connection):
    """``connection`` moved to descriptor ``RESULT_FD`` (the sandbox has closed every other descriptor but 0-2):
    its number would otherwise say how many processes the warm process was serving, more in grade than in check."""
    from multiprocessing.connection import Connection

    if connection.fileno() == RESULT_FD:
        return connection
    os.dup2(connection.fileno(), RESULT_FD)
    connection.close()
    return Connection(RESULT_FD)
