"""How the processes of a sandbox end: with the grader, with their outer process, and none left behind.

A sandbox is an outer process, forked from the grader's warm process, and the notebook's process it
forks (PID 1 of a new pid namespace, or a child under it as subreaper in Landlock mode). Each gets a
parent-death signal, so no sandbox outlives ``grade``, even a ``grade`` killed with SIGKILL: the warm
process ends when the grader does (``die_with_parent``), the outer process when the warm process does,
the notebook's when the outer one does (set again after the sandbox changes its uid, which clears it:
``autograder.grading.running.confinement.sandbox``). The outer process waits for the notebook, holding no
descriptor, and ends as it ended (``wait_and_end_like``); in Landlock mode it first kills what the
notebook left (``fork_under_reaper``). The grader, for its part, kills whatever is left of a sandbox
after each notebook (``autograder.grading.running.confinement.processes``).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int, what: str) -> None:
    if _libc.prctl(option, value, 0, 0, 0) < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def not_dumpable() -> None:
    """No core dump, and this process's files under /proc belong to root from now on: a sandboxed process (a uid of
    its own, no capabilities) can no longer open its own memory (/proc/self/mem) to change the grader's code in it."""
    _prctl(PR_SET_DUMPABLE, 0, "dumpable")


def parent_death_signal(signum: int) -> None:
    """Get ``signum`` when the thread that forked this process ends (cleared by any change of uid)."""
    _prctl(PR_SET_PDEATHSIG, signum, "pdeathsig")


def die_with_parent(signum: int) -> None:
    """Get ``signum`` when the process that forked this one (the grader's warm process) ends, and let that
    process end when the grader does: no sandbox outlives ``grade``, even one killed with SIGKILL.

    The warm process (a multiprocessing forkserver) ends when the last copy of its "grader alive" pipe
    closes; every process it forks holds a copy, so this one closes it (the sandbox's processes close
    every other descriptor later, and the outer processes while they wait).
    """
    parent = os.getppid()
    parent_death_signal(signum)
    if os.getppid() != parent or parent == 1:  # it ended before the line above
        os._exit(1)
    from multiprocessing import forkserver

    alive = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if alive is not None:
        try:
            os.close(alive)
        except OSError:
            pass
        forkserver._forkserver._forkserver_alive_fd = None


def close_fds(keep_fd: int | None) -> None:
    """Close every inherited descriptor but stdin/out/err and ``keep_fd`` (the result pipe)."""
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if keep_fd is None:
        os.closerange(3, top)
    else:
        os.closerange(3, keep_fd)
        os.closerange(keep_fd + 1, top)


def wait_and_end_like(pid: int, reap: bool = False, keep: int | None = None) -> None:
    """The outer process: wait for the notebook (PID 1 inside), kill what it left if ``reap``, then end as it ended.

    It holds no descriptor but ``keep`` meanwhile: the coordinator sees the result pipe close when the
    notebook ends, and the warm process's "grader alive" pipe is not kept open by it."""
    close_fds(keep)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if reap:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the notebook is gone: its pid may be anyone's now
        _kill_leftovers()
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL) if number not in (signal.SIGKILL, signal.SIGSTOP) else None
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def fork_under_reaper() -> None:
    """Fork the notebook under this process, its subreaper; return in the notebook's process.

    Without a pid namespace a process the notebook detaches (``setsid``, double fork) would be
    adopted by init and outlive it. A subreaper adopts them instead; this process waits for the
    notebook, kills whatever is left, and ends as the notebook ended. SIGTERM (how the grader
    stops a notebook, and what this process gets when the grader's warm process ends) kills the
    notebook first, so the same clean-up runs. It forks before Landlock applies, so the notebook
    cannot signal it.
    """
    _prctl(PR_SET_CHILD_SUBREAPER, 1, "subreaper")
    reaper = os.getpid()
    pid = os.fork()
    if pid == 0:
        parent_death_signal(signal.SIGKILL)
        if os.getppid() != reaper:  # the reaper died before the line above
            os._exit(1)
        return
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
    wait_and_end_like(pid, reap=True)


def _kill_leftovers() -> None:
    """Kill this subreaper's children (what the notebook left running, adopted) until it has none."""
    from autograder.grading.running.confinement.processes import below

    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0]:
                continue
        except ChildProcessError:
            return  # the usual case: nothing left
        for child in below(os.getpid()):
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except (ChildProcessError, InterruptedError):
            pass
