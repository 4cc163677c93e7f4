"""The processes of one sandbox, read from ``/proc``: their CPU time, and ending every one of them.

A notebook can start processes that detach (``setsid``, a double fork), ignore every signal they
may, stop themselves (SIGSTOP) or, in the namespaces sandbox, run as the sandbox's own uid. The
grader ends a sandbox by killing (SIGKILL) every process under its outer process, again until none is
left (in Landlock mode that process is a subreaper, so an orphan comes back under it), then the outer
process itself, then every process still running as the sandbox's uid. A process is known by its pid
and its start time, so a pid used again by another process is never mistaken for it.
"""

from __future__ import annotations

import os
import signal
import time

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rpartition(b")")[2].decode().split()
    except (OSError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot): with the pid, what identifies a process."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def _table() -> dict[int, list[str]]:
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields:
                table[int(entry)] = fields
    return table


def _under(table: dict[int, list[str]], root: int) -> list[int]:
    """The processes below ``root`` (its children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for pid, fields in table.items():
        children.setdefault(int(fields[1]), []).append(pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def cpu_seconds(roots: list[tuple[int, int | None]]) -> float:
    """CPU time used so far by the processes ``roots`` ((pid, start time) pairs) and every process under
    them, including the children they have already waited for."""
    table = _table()
    total = 0
    for root, started in roots:
        if root not in table or int(table[root][19]) != started:
            continue
        for pid in [root, *_under(table, root)]:
            total += sum(int(n) for n in table[pid][11:15])  # utime, stime, cutime, cstime
    return total / _TICKS


def _uid_processes(uid: int) -> list[int]:
    """Processes whose real, effective, saved or file-system uid is ``uid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as file:
                for line in file:
                    if line.startswith("Uid:"):
                        if str(uid) in line.split()[1:]:
                            found.append(int(entry))
                        break
        except OSError:
            continue
    return found


def below(root: int) -> list[int]:
    """The processes under ``root`` that still run (not zombies)."""
    table = _table()
    return [pid for pid in _under(table, root) if _alive(table, pid)]


def _alive(table: dict[int, list[str]], pid: int) -> bool:
    return pid in table and table[pid][0] not in ("Z", "X")


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)  # also ends a stopped process, and cannot be caught or ignored
        except (ProcessLookupError, PermissionError):
            pass


def end_sandbox(root: int, started: int | None, uid: int | None = None, wait: float = 10.0) -> list[int]:
    """Kill every process of the sandbox whose outer process is ``root`` (started at ``started``) and every
    process of ``uid``; return those still running after ``wait`` seconds (none, unless the kernel is stuck)."""
    deadline = time.monotonic() + wait
    ours = started is not None
    while time.monotonic() < deadline:  # below the outer process first: an orphan comes back under it
        table = _table()
        ours = ours and root in table and int(table[root][19]) == started
        left = [pid for pid in _under(table, root) if _alive(table, pid)] if ours else []
        if not left:
            break
        _kill(left)
        time.sleep(0.01)
    while time.monotonic() < deadline:
        table = _table()
        left = [root] if ours and _alive(table, root) and int(table[root][19]) == started else []
        left += [pid for pid in (_uid_processes(uid) if uid is not None else []) if _alive(table, pid)]
        if not left:
            return []
        _kill(left)
        time.sleep(0.02)
    table = _table()
    return [pid for pid in _uid_processes(uid) if _alive(table, pid)] if uid is not None else []
