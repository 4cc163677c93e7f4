"""``--memory`` for all of a sandbox's processes together, the way this machine allows (``bound()``; grade says which).

``cgroup``: each sandbox (a notebook's process and everything it starts; its examinee is a sandbox of its own) gets
a memory cgroup of its own, made below the grader's by the sandbox's outer process before it drops any privilege
(``join``): cgroup v2's ``memory.max`` where the grader's cgroup hands the memory controller down, else cgroup v1's
``memory.limit_in_bytes``, with no swap on top. Every page its processes touch is charged there together (what they
allocate, the copies they make of the warm process's pages as they write to them, the files of the sandbox's tmpfs),
and when the sum would pass the allowance the kernel's OOM killer stops one of them. The grader reads how many it
stopped (``oom_kills``: the notebook then ``ran out of memory``) and removes the cgroup once the sandbox is gone
(``release``). It needs a cgroup folder the grader may write to: root with cgroup v1's memory controller (this
project's machines), or a cgroup v2 whose ``cgroup.subtree_control`` already has ``memory``, which v2 allows a
cgroup that holds processes only at the root (the v2 path is not exercised on this project's machines).

``one process`` (elsewhere: no cgroup to write to, e.g. a read-only ``/sys/fs/cgroup`` or a user without one): a
seccomp filter refuses every new process (``fork``, ``vfork``, ``clone`` without ``CLONE_THREAD``; ``clone3``
answers ENOSYS, so threads are still made, with ``clone``): the notebook's one process, whose address space
``RLIMIT_AS`` bounds (``limits.isolate``), holds all of its memory. What that costs: no ``subprocess``, no
DataLoader workers, no ``torch.compile`` with inductor (it starts a compiler).

``per process`` (no sandbox, or ``--memory 0``): only each process's own ``RLIMIT_AS``, if any.
"""

from __future__ import annotations

import errno
import os

CGROUP, ONE_PROCESS, PER_PROCESS = "cgroup", "one process", "per process"
PREFIX = "autograder-"
CLONE_THREAD = 0x00010000
# cgroup version -> (limit, swap limit, the file that counts OOM kills)
FILES = {2: ("memory.max", "memory.swap.max", "memory.events"),
         1: ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.oom_control")}

_found: tuple[str, int] | None | bool = False  # (folder, version) of this process's memory cgroup; None: none usable


def hierarchy() -> tuple[str, int] | None:
    """(the folder of this process's memory cgroup, its cgroup version) if the grader may make cgroups below it."""
    global _found
    if _found is False:
        _found = _writable(_memory_cgroup())
    return _found


def _memory_cgroup() -> tuple[str, int] | None:
    try:
        with open("/proc/self/cgroup") as file:
            lines = [line.rstrip("\n").split(":", 2) for line in file if line.count(":") >= 2]
        with open("/proc/self/mountinfo") as file:
            mounts = [line.split() for line in file]
    except OSError:
        return None
    # mountinfo: id parent dev root mount-point options [optional...] - fstype source super-options
    mounts = [(m[3], m[4], m[m.index("-") + 1], m[m.index("-") + 3].split(",")) for m in mounts if "-" in m]
    v2 = [path for number, controllers, path in lines if number == "0" and controllers == ""]
    v1 = [path for _, controllers, path in lines if "memory" in controllers.split(",")]
    for root, point, fstype, options in mounts:
        if fstype == "cgroup2" and v2:
            folder = _inside(point, root, v2[0])
            if "memory" in _read(os.path.join(folder, "cgroup.subtree_control")).split():
                return folder, 2
    for root, point, fstype, options in mounts:
        if fstype == "cgroup" and "memory" in options and v1:
            return _inside(point, root, v1[0]), 1
    return None


def _inside(point: str, root: str, path: str) -> str:
    """The folder of cgroup ``path`` under a cgroup file system mounted at ``point`` (its ``root`` shown there)."""
    if root != "/" and (path == root or path.startswith(root + "/")):
        path = path[len(root):]
    return os.path.join(point, path.lstrip("/"))


def _writable(found: tuple[str, int] | None) -> tuple[str, int] | None:
    if found is None or not os.path.isdir(found[0]) or not os.access(found[0], os.W_OK | os.X_OK):
        return None
    return found


def _read(path: str) -> str:
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return ""


def bound(sandboxed: bool, memory: int | None) -> str:
    """What bounds a notebook's memory on this machine: ``cgroup``, ``one process`` or ``per process``."""
    if not sandboxed or memory is None:
        return PER_PROCESS
    return CGROUP if hierarchy() is not None else ONE_PROCESS


def describe(how: str, memory: int | None) -> str:
    """``how`` (a ``bound``) in words, for grade's first line and check's."""
    if memory is None:
        return "no limit"
    amount = f"{memory / 1024**3:g} GB"
    found = hierarchy()
    return {
        CGROUP: f"{amount} for all of a notebook's processes together (a memory cgroup v{found and found[1]} "
                f"each; its examinee has {amount} of its own)",
        ONE_PROCESS: f"{amount} for a notebook, whose one process may start no other (no memory cgroup "
                     f"here: no subprocess, DataLoader workers or torch.compile's inductor)",
        PER_PROCESS: f"{amount} for each process of a notebook, not for all of them together",
    }[how]


# ----------------------------------------------------------------------------------------
# In the sandbox: its cgroup (before any privilege is dropped), or no new process (after its own forks)


def folder_of(pid: int) -> str | None:
    """The cgroup of the sandbox whose outer process is ``pid``."""
    found = hierarchy()
    return os.path.join(found[0], f"{PREFIX}{pid}") if found else None


def join(memory: int) -> None:
    """Make this process's sandbox cgroup (``memory`` bytes, no swap) and move this process into it: every
    process it starts from now on is in it too. OSError if the kernel refuses."""
    version = hierarchy()[1]
    limit, swap, _ = FILES[version]
    folder = folder_of(os.getpid())
    _remove(folder)  # one an earlier sandbox of this pid left (its count of OOM kills is not this one's)
    os.mkdir(folder)
    _write(os.path.join(folder, limit), str(memory))
    if os.path.exists(os.path.join(folder, swap)):  # no swap accounting: nothing to bound
        _write(os.path.join(folder, swap), "0" if version == 2 else str(memory))
    _write(os.path.join(folder, "cgroup.procs"), str(os.getpid()))


def _write(path: str, text: str) -> None:
    with open(path, "w") as file:
        file.write(text)


def refuse_processes() -> None:
    """A seccomp filter: this process and its threads may start threads but no process (``one process``)."""
    import pyseccomp as seccomp

    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD, 0))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # its flags are out of a filter's reach: threads use clone
    for call in ("fork", "vfork"):
        try:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), call)
        except (OSError, RuntimeError, ValueError):  # no such call on this architecture (aarch64)
            pass
    rules.load()


# ----------------------------------------------------------------------------------------
# The grader's side


def oom_kills(pid: int) -> int:
    """How many processes the kernel stopped so far in the sandbox of outer process ``pid`` for want of memory."""
    folder = folder_of(pid)
    if folder is None:
        return 0
    for line in _read(os.path.join(folder, FILES[hierarchy()[1]][2])).splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def release(pid: int, tries: int = 50) -> None:
    """Remove the cgroup of the sandbox whose outer process was ``pid`` (ended: its processes are being reaped)."""
    import time

    folder = folder_of(pid)
    for _ in range(tries if folder else 0):
        if _remove(folder) != errno.EBUSY:  # (EBUSY: a process is still leaving it)
            return
        time.sleep(0.02)


def sweep() -> None:
    """Remove the cgroups of sandboxes whose outer process is gone (left by a grader that was killed, or whose
    processes took over a second to leave): once per grading run."""
    found = hierarchy()
    for name in os.listdir(found[0]) if found else ():
        pid = name.removeprefix(PREFIX)
        if name.startswith(PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            _remove(os.path.join(found[0], name))


def _remove(folder: str) -> int:
    """rmdir ``folder`` (a cgroup: only once no process is in it); 0, or the error's number."""
    try:
        os.rmdir(folder)
        return 0
    except OSError as error:
        return error.errno
