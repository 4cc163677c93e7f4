"""Nothing of the command that started grading reaches a sandbox: ``check`` and ``grade`` look the same from inside.

multiprocessing hands every process it starts what its parent had (``spawn.get_preparation_data``): the
parent's ``sys.argv`` (``grade 01`` against ``check --serve SOCKET``), ``sys.path`` (where the command was run
from), working folder and main module (``python -m autograder`` against the ``autograder`` script); and it
starts the warm process with the parent's interpreter flags (``-O``, ``-X dev``, ...) and its ``sys.path`` in
the command line. Here

- ``start_warm_process`` starts the warm process (the multiprocessing forkserver) with the same flags whoever
  starts it: ``-P`` only (nothing of the current folder on its ``sys.path``), and ``same_start`` makes every
  process it forks get none of the parent's own state: they keep the warm process's ``sys.argv``,
  ``sys.path`` and main module, which are the same for every command (the warm process's environment is the
  same too: ``autograder.grading.running.confinement.environment``);
- ``forget_the_starter`` (in the sandboxed process, before the sandbox) sets what is left, the folder the
  warm process was started in, to the notebook's own working folder.
"""

from __future__ import annotations

import os
import sys
from multiprocessing import process, spawn, util

WARM_FLAGS = ["-P"]  # the warm process's interpreter flags, whatever the command's were
# What a forked process takes from the warm process instead of from its parent.
PARENTS_OWN = ("sys_argv", "sys_path", "dir", "orig_dir", "init_main_from_name", "init_main_from_path")
# Whose start is made so: the grader's processes (protocol.start names them), and the warm process itself
# (multiprocessing asks for the data of a process named "ignore" when it starts it). Any other process this
# one starts (a Dask worker, spawned) gets multiprocessing's own.
OURS = ("autograder-", "ignore")

_preparation_data = spawn.get_preparation_data


def same_start(name: str) -> dict:
    """``spawn.get_preparation_data``, for the grader's processes without the parent's own argv, path, folders
    and main module."""
    data = _preparation_data(name)
    if name.startswith(OURS):
        for key in PARENTS_OWN:
            data.pop(key, None)
    return data


def start_warm_process(ensure_running) -> None:
    """Call ``ensure_running`` (the forkserver's) so that the warm process starts with ``WARM_FLAGS`` and
    without the parent's ``sys.path`` in its command line. Called with the grader's start lock held."""
    spawn.get_preparation_data = same_start
    flags = util._args_from_interpreter_flags
    util._args_from_interpreter_flags = lambda: list(WARM_FLAGS)
    try:
        ensure_running()
    finally:
        util._args_from_interpreter_flags = flags


def forget_the_starter(cwd: str) -> None:
    """In a sandboxed process: no trace of the folder grading was started in (imports come from the Python
    installation only; multiprocessing's record of the original folder is the working folder)."""
    sys.path[:] = [p for p in sys.path if p and os.path.isabs(p)]
    process.ORIGINAL_DIR = os.path.abspath(cwd)
