"""What of the grading user's environment reaches the warm process that notebooks are forked from.

Only these variables: no database URL and no token can reach a notebook, not even through its
process's original environment block (``/proc/self/environ``). ``grade``'s warm process and
``check``'s are started with the same ones, so a notebook sees the same environment in both.
"""

from __future__ import annotations

import os

WARM_ENVIRONMENT = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH", "PYTHONHASHSEED",
                    "VIRTUAL_ENV", "MPLBACKEND", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "JUPYTER_PATH",
                    "JUPYTER_CONFIG_PATH", "AUTOGRADER_COURSE_ROOT"}


def kept(name: str) -> bool:
    return name in WARM_ENVIRONMENT or name.startswith("LC_")


def warm_environment() -> dict[str, str]:
    """The variables of this process's environment that the warm process keeps."""
    return {name: value for name, value in os.environ.items() if kept(name)}
