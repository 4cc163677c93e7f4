"""What `make test`'s time went on, printed at the end of every run: the machine, and the slowest tests with
the CPU their processes used beside their wall-clock time.

A suite that takes twice as long on another machine of the same size is either computing more slowly (CPU seconds
grow with the wall-clock) or waiting (for the other worker's core, a subprocess's start, a timeout, the disk):
then its tests' wall-clock grows and their CPU does not. So each test's setup, call and teardown are timed, and
the CPU seconds of every process the test ran (the worker and everything it started: nbgrader, Jupyter kernels,
grading sandboxes, chromium) are read from a cpuacct cgroup the worker puts itself in, where the machine lets it
(root with cgroup v1's cpuacct, as on this project's machines); elsewhere from the worker's own rusage and that of
the children it waited for, which misses what a still-running process (a warm forkserver) used, and says so.

The report is a figure, not a check: no test asserts a time (the developers' guide: speed is measured, not asserted).
"""

from __future__ import annotations

import os
import platform
import resource
import time

SLOWEST = 25  # tests listed at the end of a run
_CPUACCT = "/sys/fs/cgroup/cpuacct"


class _CpuClock:
    """CPU seconds used so far by this process and everything it starts (a cpuacct cgroup of its own), or by it and
    the children it has waited for (rusage) where no cgroup can be made."""

    def __init__(self) -> None:
        self.folder = None
        folder = os.path.join(_CPUACCT, f"autograder-tests-{os.getpid()}")
        try:
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
                procs.write(str(os.getpid()))
            self.folder = folder
        except OSError:
            pass
        self.source = "cgroup (every process a test started)" if self.folder else "rusage (this process and reaped children)"

    def seconds(self) -> float:
        if self.folder:
            try:
                with open(os.path.join(self.folder, "cpuacct.usage")) as usage:
                    return int(usage.read()) / 1e9
            except OSError:
                pass
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    def close(self) -> None:
        """Leave the cgroup (back to the root) and remove it if nothing of this session still runs in it."""
        if self.folder:
            try:
                with open(os.path.join(_CPUACCT, "cgroup.procs"), "w") as procs:
                    procs.write(str(os.getpid()))
                os.rmdir(self.folder)
            except OSError:
                pass  # a process that outlived its test is still there: the cgroup goes when it does


def machine_facts() -> str:
    """One line on what this run ran on: cores, CPU model, load, memory, and how grading confines notebooks here."""
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "")
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as meminfo:
            memory = f"{int(meminfo.readline().split()[1]) / 1024**2:.0f} GiB"
    except (OSError, ValueError, IndexError):
        memory = "? GiB"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    try:
        from autograder.grading.running.confinement import memory as memory_bound, sandbox

        found = memory_bound.hierarchy()
        mode = (f"; grading sandbox: {sandbox.available()}, memory cgroup: "
                f"{f'v{found[1]}' if found else 'none (one process)'}")
    except Exception as error:  # noqa: BLE001 (a bare GPU machine has no grader: the line says so)
        mode = f"; grading sandbox unknown ({type(error).__name__})"
    try:
        import psutil

        physical = f", {psutil.cpu_count(logical=False) or 'unknown'} physical"
    except ImportError:
        physical = ""
    return (f"{os.cpu_count()} cores{physical} ({model or platform.machine()}), {memory}, load {load}, "
            f"uid {os.geteuid()}{mode}")


# ---------------------------------------------------------------------------------------------------------------
# pytest hooks (registered from conftest.py)

_clock: _CpuClock | None = None
_started: dict[str, tuple[float, float]] = {}
_finished: list[tuple[float, float, str]] = []  # (wall, cpu, nodeid), on the controller (or the only process)
_counted_by: set[str] = set()  # how the workers counted CPU (_CpuClock.source)


def pytest_configure(config) -> None:
    global _clock
    _clock = _CpuClock()
    config._autograder_machine = machine_facts()


def pytest_unconfigure(config) -> None:
    if _clock is not None:
        _clock.close()


def pytest_report_header(config) -> str:
    return f"machine: {config._autograder_machine}"


def pytest_runtest_setup(item) -> None:
    _started[item.nodeid] = (time.monotonic(), _clock.seconds())


def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and item.nodeid in _started:
        wall, cpu = _started.pop(item.nodeid)
        item.user_properties.append(("timing", (time.monotonic() - wall, _clock.seconds() - cpu, _clock.source)))


def pytest_runtest_logreport(report) -> None:
    if report.when == "teardown":
        for name, value in report.user_properties:
            if name == "timing":
                _finished.append((value[0], value[1], report.nodeid))
                _counted_by.add(value[2])


def pytest_terminal_summary(terminalreporter) -> None:
    if not _finished:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"the {SLOWEST} slowest tests: wall-clock and the CPU of their processes")
    workers = terminalreporter.config.getoption("numprocesses", None)
    write(f"machine: {terminalreporter.config._autograder_machine}; test workers: {workers or 1}")
    write(f"CPU counted by {' and '.join(sorted(_counted_by))}; a test whose CPU is well under its "
          "wall-clock waited (for a core, a subprocess, a timeout, the disk)")
    write(f"{'wall s':>8} {'CPU s':>8}  {'waited':>6}  test (setup + call + teardown)")
    for wall, cpu, nodeid in sorted(_finished, reverse=True)[:SLOWEST]:
        waited = max(0.0, 1 - cpu / wall) if wall > 0 else 0.0
        write(f"{wall:8.1f} {cpu:8.1f}  {waited:6.0%}  {nodeid}")
    total_wall, total_cpu = sum(w for w, _, _ in _finished), sum(c for _, c, _ in _finished)
    write(f"all {len(_finished)} tests: {total_wall:.0f} s of wall-clock summed over workers, {total_cpu:.0f} s of CPU")
