"""Each notebook in a sandbox, set up in the forked grading child before any student code runs.

Three levels, the strongest this machine allows (``available()``; ``grade`` says which one it uses):

``namespaces`` (the grading user is root, as in CI and containers): the child calls
``unshare(2)`` (through ctypes: Python 3.11 has no ``os.unshare``) for new mount, pid, network,
IPC and cgroup namespaces and forks the notebook as PID 1 of its pid namespace, so every process the
notebook starts dies with it. In its mount namespace the whole file system is read-only; the
instructor's home, ``/home``, ``/tmp``, ``/run``, ``/sys/fs/cgroup`` and the course folder (``solutions/``, the
gradebook, ``grading/`` with every other student's files, the git history) are covered by empty
file systems; only the Python installation and the parts of the course's package that notebooks and the
grader's sandboxed processes import (``limits.PACKAGE_PARTS``: never ``authoring/`` or the demo
class) are shown again, read-only.
The notebook's working folder, ``/tmp`` and ``/dev/shm`` are folders of one private tmpfs, whose
size cap (``SCRATCH_SIZE``) bounds all the RAM its files can take. ``/proc``
shows only the notebook's own processes. The network namespace has no interface but a down
loopback. Then the process becomes a uid of its own (``UID_BASE`` + the sandbox's pid: no other
process has it), loses every capability, enters a new user namespace, sets ``no_new_privs``
and gets limits on processes, file size, open files and memory.

``landlock`` (not root, e.g. a JupyterHub pod): a Landlock ruleset lets the notebook read only
the system and Python folders and write only its working folder, denies TCP and signals to
processes outside the sandbox; rlimits as above; capabilities dropped. There is no pid
namespace: instead the child becomes a subreaper (``PR_SET_CHILD_SUBREAPER``) and forks the
notebook, so a process the notebook detaches (``setsid``, double fork) becomes its child, and
it kills every such process when the notebook ends (or when the grader stops it with SIGTERM).

``off``: nothing of the above (``grade --no-sandbox``); student code runs as the grading user.

In both sandboxed modes a seccomp filter (libseccomp, through ``pyseccomp``) refuses
``socket(2)`` for every address family (TCP, UDP, raw packets, Unix sockets named in the file
system; ``socketpair`` stays) and ``io_uring_setup`` (io_uring opens sockets without
``socket(2)``): no network even without a network namespace.

In every mode the environment is reduced to a few harmless variables (no ``AUTOGRADER_DB_URL``,
no tokens) and inherited file descriptors other than the result pipe are closed. Every process the
grader's warm process forks gets a parent-death signal, set again after each change of uid (which
clears it), so no sandbox outlives ``grade``, even when ``grade`` is killed; after each notebook the
grader also kills whatever is left of it (``autograder.grading.running.confinement.processes``).
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import select
import signal
import sys
from dataclasses import dataclass

from autograder.grading.running.confinement import lifetime

try:
    import pyseccomp as seccomp
except (ImportError, OSError, RuntimeError):  # no libseccomp (not Linux, or libseccomp2 missing): no sandbox
    seccomp = None

MODES = ("namespaces", "landlock", "off")
UID_BASE = 2_000_000            # sandbox uids: UID_BASE + pid, unused by any account
PROCESSES = 64                  # processes and threads a notebook may run at once
FILE_SIZE = 64 * 1024**2        # largest file a notebook may write
OPEN_FILES = 256
SCRATCH_SIZE = "128m"           # one tmpfs (RAM) for the working folder, /tmp and /dev/shm together
# Covered by an empty file system; the Python installation is shown again inside them.
# /sys/fs/cgroup: every sandbox's memory cgroup is there, as many as notebooks run at once (more in grade than check).
HIDDEN_ROOTS = ["/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run", "/mnt", "/media", "/srv",
                "/var/lib", "/var/log", "/var/mail", "/var/spool", "/var/backups", "/work", "/sys/fs/cgroup"]
SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "OMP_NUM_THREADS": "1"}

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x02000000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 4, 24, 38
# Syscall numbers from 424 on are the same on every architecture.
SYS_MOUNT_SETATTR, SYS_LANDLOCK_CREATE, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT = 442, 444, 445, 446
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}.get(os.uname().machine)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


class SandboxError(Exception):
    """The sandbox could not be set up; the notebook must not run."""


@dataclass(frozen=True)
class Policy:
    """What a sandbox hides and allows: ``mode`` and the folders no student may see (the course's)."""

    mode: str = "off"
    hidden: tuple[str, ...] = ()    # e.g. the course root: solutions/, grading/, .git; the package folder
    shown: tuple[str, ...] = ()     # folders and files shown again read-only inside hidden ones (parts of the package)


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise SandboxError(f"{what}: {os.strerror(code)}")
    return result


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                       flags, data.encode() if data else None), f"mount {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _set_readonly(path: str, readonly: bool, recursive: bool) -> None:
    attr = _MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY, 0, 0)
    _check(_libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE if recursive else 0,
                         ctypes.byref(attr), ctypes.sizeof(attr)), f"read-only {path}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def drop_capabilities() -> None:
    """No capability left, now or after any exec (bounding set emptied)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() == errno.EINVAL:
            break
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.syscall(SYS_CAPSET, header, data), "capset")


def no_new_privs() -> None:
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


# ----------------------------------------------------------------------------------------
# What this machine allows


def landlock_abi() -> int:
    """Landlock's ABI version here (0: not available)."""
    result = _libc.syscall(SYS_LANDLOCK_CREATE, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    return max(0, result)


def _namespaces_allowed() -> bool:
    """Whether a child may create the namespaces (tried in a throwaway fork)."""
    pid = os.fork()
    if pid == 0:
        try:
            flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWCGROUP
            unshare(flags if os.geteuid() == 0 else flags | CLONE_NEWUSER)
            os._exit(0 if os.geteuid() == 0 else 1)  # see enter(): the mount setup needs real root
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def available() -> str:
    """The strongest mode this machine allows: namespaces, landlock or off (also without libseccomp)."""
    if seccomp is None:
        return "off"
    if SYS_CAPSET is not None and _namespaces_allowed():
        return "namespaces"
    if landlock_abi() >= 4:
        return "landlock"
    return "off"


def describe(mode: str) -> str:
    """One line saying what protects the instructor in ``mode``."""
    return {
        "namespaces": "sandbox: namespaces (mount, pid, network, IPC, cgroup, user), read-only file system, course "
                      "and home hidden, own uid, no capabilities, no_new_privs, seccomp (no sockets), rlimits, "
                      "clean environment",
        "landlock": "sandbox: Landlock (files allow-listed, no TCP, no signals outside), seccomp (no "
                    "sockets), a subreaper that kills what a notebook leaves running, rlimits, no "
                    "capabilities, no_new_privs, clean environment; no pid or network namespace",
        "off": "NO SANDBOX: student code runs as the grading user and can read solutions/ and the gradebook, "
               "change grades, use the network and leave processes running",
    }[mode]


# ----------------------------------------------------------------------------------------
# Entering the sandbox (in the forked grading child)


def enter(policy: Policy, cwd: str, keep_fd: int, env: dict[str, str], memory: int | None) -> None:
    """Put this process in the sandbox ``policy`` asks for; return in the process that runs the notebook.

    In both sandboxed modes this process forks: the child (PID 1 of a new pid namespace, or the
    notebook under this process as its subreaper) returns; this one waits for it and ends the same
    way, so whoever watches this process sees the notebook's exit status. Raises SandboxError if
    the sandbox cannot be made.
    """
    os.chdir(cwd)
    lifetime.die_with_parent(signal.SIGTERM if policy.mode == "landlock" else signal.SIGKILL)
    tmp = "/tmp"
    if policy.mode == "namespaces":
        _enter_namespaces(policy, cwd)
    elif policy.mode == "landlock":
        lifetime.fork_under_reaper()
        tmp = _enter_landlock(policy, cwd)
    _clean_environment(env, cwd, tmp)
    if policy.mode != "off":
        _limit(memory)
        lifetime.close_fds(keep_fd)
        _deny_sockets()


def _clean_environment(env: dict[str, str], cwd: str, tmp: str) -> None:
    """Only harmless variables: nothing of the grading user's environment (database URLs, tokens)."""
    os.environ.clear()
    os.environ.update(SAFE_ENV, HOME=cwd, TMPDIR=tmp, IPYTHONDIR=os.path.join(tmp, ".ipython"),
                      MPLCONFIGDIR=os.path.join(tmp, ".matplotlib"),
                      # Assignment 10: Triton kernels run in Triton's interpreter, on the CPU tensors the
                      # referee sends (read when a kernel is defined); whatever Triton caches goes to scratch.
                      TRITON_INTERPRET="1", TRITON_HOME=tmp)
    os.environ.update(env)


def _limit(memory: int | None) -> None:
    """Processes, file size, open files, core dumps; memory is limited by the executor (RLIMIT_AS)."""
    processes = PROCESSES
    if os.getuid() < UID_BASE:
        # Not a uid of its own: RLIMIT_NPROC counts the grading user's other processes too.
        processes += sum(1 for p in os.listdir("/proc") if p.isdigit())
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
    resource.setrlimit(resource.RLIMIT_NOFILE, (OPEN_FILES, OPEN_FILES))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _enter_namespaces(policy: Policy, cwd: str) -> None:
    if os.geteuid() != 0:
        raise SandboxError("namespaces mode needs the grading process to run as root (use landlock)")
    sandbox_pid = os.getpid()
    unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWCGROUP)  # (its cgroup: "/")
    outer_alive, outer_holds = os.pipe()
    pid = os.fork()
    if pid:
        os.close(outer_alive)
        lifetime.wait_and_end_like(pid, keep=outer_holds)
    os.close(outer_holds)
    # PID 1 of the new pid namespace: when it ends, the kernel kills every process it started.
    lifetime.parent_death_signal(signal.SIGKILL)
    uid = UID_BASE + sandbox_pid
    files = _read_folder(cwd)
    _build_file_system(policy, cwd, uid)
    for relative, data in files.items():
        path = os.path.join(cwd, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    for folder, _, names in os.walk(cwd):
        for name in [folder] + [os.path.join(folder, n) for n in names]:
            os.chown(name, uid, uid)
    os.chdir(cwd)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # root -> a plain uid: every capability is gone
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # else /proc/self belongs to root and the maps cannot be written
    unshare(CLONE_NEWUSER)       # and the mounts above are now locked: no umount can uncover anything
    for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{uid} {uid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(line)
    drop_capabilities()
    no_new_privs()
    # Changing the uid cleared the parent-death signal (prctl(2)): set it again, now that the credentials are
    # final, and end if the outer process ended meanwhile (its end of the pipe then reads as closed).
    lifetime.parent_death_signal(signal.SIGKILL)
    if select.select([outer_alive], [], [], 0)[0]:
        os._exit(1)
    os.close(outer_alive)


def _read_folder(cwd: str, limit: int = 256 * 1024**2) -> dict[str, bytes]:
    """The working folder's files (the notebook and the course's data files), to copy into the tmpfs."""
    files, total = {}, 0
    for folder, _, names in os.walk(cwd):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            total += os.path.getsize(path)
            if total > limit:
                raise SandboxError(f"the working folder holds more than {limit // 1024**2} MB")
            with open(path, "rb") as f:
                files[os.path.relpath(path, cwd)] = f.read()
    return files


def _python_folders() -> list[str]:
    """Where this interpreter imports installed code from: shown read-only inside the hidden folders.

    Its prefixes (the standard library, site-packages) and the sys.path entries inside them. Other
    entries (a project's root, put there by pytest or PYTHONPATH) are not shown: they may hold a
    course's solutions, and one that others may not enter (a checkout in a 0700 folder) made every
    module not yet imported unreachable below it. The course's own package is ``Policy.shown``.
    """
    prefixes = [p for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix) if p]
    folders = set(prefixes)
    folders.update(p for p in sys.path if p and os.path.isabs(p) and any(_under(p, q) for q in prefixes))
    return sorted({os.path.realpath(f) for f in folders if os.path.isdir(f)})


def _hidden_outside_python(policy: Policy) -> list[str]:
    """The policy's hidden folders that are not inside the Python installation: a Python folder holding one
    of these (a course root inside a virtual environment) is not shown; the package installed into
    site-packages is hidden there on its own."""
    python = _python_folders()
    return [h for h in map(os.path.realpath, policy.hidden) if not any(_under(h, p) for p in python)]


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _build_file_system(policy: Policy, cwd: str, uid: int) -> None:
    """Read-only everything; hide homes, temporary folders and the course; show Python again; a private cwd."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    hidden = [os.path.realpath(p) for p in list(HIDDEN_ROOTS) + list(policy.hidden) if os.path.isdir(p)]
    # A folder that holds a hidden one (the editable install's course root) is not shown again.
    course = _hidden_outside_python(policy)
    shown = [p for p in _python_folders() + [os.path.realpath(s) for s in policy.shown if os.path.exists(s)]
             if any(_under(p, h) for h in hidden) and not any(_under(h, p) for h in course)]
    shown = [p for p in shown if not any(_under(p, q) and p != q for q in shown)]
    # Descriptors of what is shown again (folders, and single files such as autograder/__init__.py), taken
    # before anything covers it.
    handles = {path: os.open(path, os.O_PATH) for path in shown}
    covered: list[str] = []
    for path in sorted(set(hidden), key=lambda p: (len(p), p)):  # (in one order: /proc/self/mountinfo lists them)
        if any(_under(path, c) for c in covered):
            continue
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={SCRATCH_SIZE},mode=1777" if path == "/tmp" else "size=1m,mode=755")
        covered.append(path)
    for path, fd in sorted(handles.items()):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:  # a file is mounted on an empty file
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)
    # The working folder and /dev/shm are folders of /tmp's tmpfs: one size cap for all three.
    if "/tmp" not in covered:
        raise SandboxError("/tmp must be covered by the sandbox's own tmpfs")
    scratch = {cwd: os.path.join("/tmp", ".work")}
    if "/dev/shm" in covered:
        scratch["/dev/shm"] = os.path.join("/tmp", ".shm")
    for path, folder in scratch.items():
        os.makedirs(folder, mode=0o700 if path == cwd else 0o1777)
        os.chmod(folder, 0o700 if path == cwd else 0o1777)
        os.makedirs(path, exist_ok=True)
        _mount(folder, path, None, MS_BIND)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _set_readonly("/", True, recursive=True)
    for path in [*scratch, "/tmp", "/proc"]:
        _set_readonly(path, False, recursive=False)


# ----------------------------------------------------------------------------------------
# Both modes: no sockets (seccomp)


def _deny_sockets() -> None:
    """Refuse socket(2) for every family, and io_uring (which opens sockets without it): no network.

    ``socketpair`` stays: a pair of connected sockets reaches nothing outside the notebook. A system
    call of another ABI (32-bit ``socketcall``, x32) kills the process (libseccomp's default).
    """
    if seccomp is None:
        raise SandboxError("libseccomp is not available, so sockets cannot be refused (install libseccomp2)")
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for call in ("socket", "io_uring_setup"):
        rules.add_rule(seccomp.ERRNO(errno.EACCES), call)
    rules.load()


# ----------------------------------------------------------------------------------------
# Landlock: no namespaces, but a file system allow-list, no TCP, no signals out (and a subreaper: lifetime.py)


LL_EXECUTE, LL_WRITE_FILE, LL_READ_FILE, LL_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
LL_ALL_FS_V1 = (1 << 13) - 1  # execute .. make_sym
LL_REFER, LL_TRUNCATE, LL_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
LL_NET_BIND_TCP, LL_NET_CONNECT_TCP = 1, 2
LL_SCOPE_ABSTRACT_UNIX, LL_SCOPE_SIGNAL = 1, 2
LL_RULE_PATH_BENEATH = 1
READ_ONLY = LL_EXECUTE | LL_READ_FILE | LL_READ_DIR
READABLE_SYSTEM = ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev"]


class _Ruleset(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _enter_landlock(policy: Policy, cwd: str) -> str:
    """Restrict this process with Landlock; return its temporary folder (inside ``cwd``)."""
    abi = landlock_abi()
    if abi < 4:
        raise SandboxError(f"Landlock ABI {abi} is too old (4 or newer denies TCP)")
    handled = LL_ALL_FS_V1 | LL_REFER | LL_TRUNCATE | (LL_IOCTL_DEV if abi >= 5 else 0)
    ruleset = _Ruleset(handled, LL_NET_BIND_TCP | LL_NET_CONNECT_TCP,
                       LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(_Ruleset) if abi >= 6 else 16
    fd = _check(_libc.syscall(SYS_LANDLOCK_CREATE, ctypes.byref(ruleset), size, 0), "landlock ruleset")
    try:
        # Landlock cannot take a folder back out of a readable one: a hidden folder inside the Python
        # installation (the package installed into site-packages, not editable) stays readable.
        hidden = _hidden_outside_python(policy)
        readable = [p for p in READABLE_SYSTEM + _python_folders() + list(policy.shown)
                    if os.path.exists(p) and not any(_under(h, os.path.realpath(p)) for h in hidden)]
        rules = [(p, READ_ONLY) for p in readable]
        rules += [(cwd, handled & ~LL_IOCTL_DEV), ("/dev/null", LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE)]
        for path, access in rules:
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                if not os.path.isdir(path):
                    access &= LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV
                rule = _PathBeneath(access & handled, target)
                _check(_libc.syscall(SYS_LANDLOCK_ADD_RULE, fd, LL_RULE_PATH_BENEATH, ctypes.byref(rule), 0),
                       f"landlock rule {path}")
            finally:
                os.close(target)
        drop_capabilities()
        no_new_privs()
        _check(_libc.syscall(SYS_LANDLOCK_RESTRICT, fd, 0), "landlock restrict")
    finally:
        os.close(fd)
    tmp = os.path.join(cwd, ".tmp")
    os.makedirs(tmp, exist_ok=True)
    return tmp
