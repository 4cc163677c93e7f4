"""Each test cell draws its random numbers from a seed of its own, the same wherever the cell runs.

A test's inputs (``torch.randn(4, 5)``) come from the random generators. Seeded with the test's own seed
as the cell starts, they are the same in ``grade``, in ``check``, in a regrade and in the student's
JupyterLab: a notebook gets the same score every time, and a failure can be reproduced. The grader seeds
its processes itself (the referee, the notebook's process, the examinee); in JupyterLab, importing the
course's library seeds each test cell (its cell id is its grade id) before it runs.
"""

from __future__ import annotations

import random
import zlib

import numpy
import torch

# Bound when the library is imported, before any notebook code runs: what seeds a test is never the student's.
_seed_torch, _seed_numpy, _seed_random = torch.manual_seed, numpy.random.seed, random.seed
_torch_state, _equal = torch.get_rng_state, torch.equal
TEST_PREFIX = "test_"  # a test cell's grade id (and cell id) starts with it: solutions/ and course/ keep that


def seed_of(grade_id: str) -> int:
    """The seed of the test ``grade_id``: a number made from its name alone (CRC-32), the same on every machine."""
    return zlib.crc32(grade_id.encode("utf-8"))


def seed_all(seed: int) -> None:
    """Seed torch (every device), numpy's and Python's global generators with ``seed``."""
    _seed_torch(seed)
    _seed_numpy(seed)
    _seed_random(seed)


def seed_test(grade_id: str) -> int:
    """Seed every generator for the test ``grade_id``, as each grading process does before the cell runs; its seed."""
    seed = seed_of(grade_id)
    seed_all(seed)
    return seed


def drew_since(state) -> bool:
    """Whether torch's generator drew since its state was ``state`` (``torch.get_rng_state()``, bound above)."""
    return not _equal(state, _torch_state())


def state():
    """Torch's generator's state now."""
    return _torch_state()


def reproduce(seed: int) -> str:
    """What a failing test's message adds: its seed, and how to draw its inputs again."""
    return f"[the test's inputs come from seed {seed}: torch.manual_seed({seed}) at the top of the test cell draws them again]"


def seed_test_cells(shell) -> None:
    """In a notebook's kernel: before a test cell runs (JupyterLab sends its cell id), seed it as the grader does."""
    def before(info) -> None:
        cell_id = getattr(info, "cell_id", None)
        if isinstance(cell_id, str) and cell_id.startswith(TEST_PREFIX):
            seed_test(cell_id)

    shell.events.register("pre_run_cell", before)
