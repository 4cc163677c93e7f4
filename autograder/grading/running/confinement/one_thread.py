"""One thread and one process for a student's answers, enforced by the kernel (in the examinee).

The examinee (``autograder.grading.running.judging.examinee``) measures what an answer runs: the profiler
that finds autograd in a backward and the dispatch mode that finds its largest tensor record the thread
that started them, and nothing at all records another process. A backward that ran the autograd engine
in a new thread, or computed its gradient in a forked DataLoader worker, went unseen. So the examinee,
once its own setup is done and before it runs any given or answer cell, loads a seccomp filter (libseccomp,
through ``pyseccomp``, like the sandbox's socket filter) that answers ``clone``, ``clone3``, ``fork`` and
``vfork`` with EPERM: no thread and no process can start, whatever asks (Python, torch's C++, ctypes). What
an answer runs, it runs in the one thread every measurement watches.

``prepare`` makes, first, what the examinee's own work needs, so that nothing it does later needs a thread:

- torch computes in the calling thread (``torch.set_num_threads(1)``), numpy's BLAS too (threadpoolctl:
  OpenBLAS would start its threads on a large product);
- one profile is taken: the profiler starts its (kineto) thread on its first use, and fails to start
  without it;
- tqdm (torch.fx's progress bars) starts no monitor thread;
- ``torch.compile``'s inductor backend lowers nothing to C++: every operator falls back to ATen
  (``fallback_by_default``, what torch's own "lite" mode sets) and compiles in this process
  (``compile_threads = 1``), so it needs neither a C++ compiler's process nor compile workers. The
  referee's checks compile with ``aot_eager`` (``autograder.student.checker.transforms.COMPILE_BACKEND``),
  which starts none either; an answer that asks inductor for more (``mode="max-autotune"``) is refused
  its compiler and fails, with the message.

Where libseccomp is missing (not Linux, no libseccomp2), nothing is refused: ``enforced`` says so, and
``grade`` prints ``describe``'s line.
"""

from __future__ import annotations

import errno
import importlib.util

import threadpoolctl

try:
    import pyseccomp as seccomp
except (ImportError, OSError, RuntimeError):  # no libseccomp: nothing can be refused (describe says so)
    seccomp = None

STARTS = ("clone", "clone3", "fork", "vfork")
_POOLS: list = []  # the thread pools of the libraries loaded (threadpoolctl), found once in the warm process


def find_pools() -> None:
    """Find the thread pools of the libraries loaded now (numpy's BLAS): the warm process does, once (~5 ms that
    each examinee would spend otherwise)."""
    _POOLS[:] = [threadpoolctl.ThreadpoolController()]


def enforced() -> bool:
    """Whether this machine can refuse new threads and processes (libseccomp is there)."""
    return seccomp is not None


def describe() -> str:
    """One line for ``grade``: whether answers run in one thread and one process here."""
    if enforced():
        return ("answers: one thread and one process (seccomp refuses clone, clone3, fork, vfork while the grader "
                "runs them), audit hooks (no frames, garbage collector walks, strings made into code, ctypes, files)")
    return ("answers: threads and processes are NOT refused (no libseccomp2 here): an answer can compute in "
            "another thread or process, where the grader's measurements do not see it; audit hooks still refuse "
            "what a thread's or process's start looks like in Python")


def prepare() -> None:
    """Make now what the examinee's own work needs a thread for, and have torch.compile need no process."""
    import torch
    import torch._inductor.config

    torch.set_num_threads(1)
    (_POOLS or [threadpoolctl.ThreadpoolController()])[0].limit(limits=1)
    if importlib.util.find_spec("tqdm") is not None:  # (the students' edition's environment has none)
        import tqdm

        tqdm.tqdm.monitor_interval = 0  # its progress bars start no monitor thread
    torch._inductor.config.fallback_by_default = True
    torch._inductor.config.compile_threads = 1
    with torch.autograd.profiler.profile():
        torch.zeros(1).add_(1)


def refuse_new_threads() -> bool:
    """From now on, no thread or process can start in this process (EPERM); False where it cannot be done."""
    if seccomp is None:
        return False
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for call in STARTS:
        rules.add_rule(seccomp.ERRNO(errno.EPERM), call)
    rules.load()
    return True
