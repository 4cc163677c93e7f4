"""What assignment 07 says about GPUs is what the shipped H200 record measured (no notebook is run).

Each number the text quotes from the GPU reference is computed here from ``reference_cuda.json``,
formatted as the text writes it, and looked for in the notebook's Markdown: a new recording that
changes a number fails this test until the text says the new one. The toy device's crossovers are
computed from its formulas, and every live measurement is labelled with the machine and its load.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path

import pytest

from autograder.authoring.timed_functions import FUSED, FUSED_EAGER
from autograder.student import timing as bench

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "07_gpu_timing" / "07_gpu_timing.ipynb"
CELLS = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
TEXT = " ".join(" ".join("".join(c["source"]).split()) for c in CELLS if c["cell_type"] == "markdown")
RECORD = bench.reference_gpu_record()


def _row(variant: str, elements: int, pass_: str = "forward+backward") -> dict:
    return next(r for r in RECORD["sweep"] if (r["device"], r["variant"], r["pass"], r["elements"])
                == ("cuda", variant, pass_, elements))


def _gbps(row: dict) -> float:
    return row["bytes"] / row["seconds"] / 1e9


def _share_of_copy(variant: str, elements: int) -> str:
    return f"{_gbps(_row(variant, elements)) / _gbps(_row(bench.COPY, elements, 'forward')):.0%}"


SIZES = sorted({r["elements"] for r in RECORD["sweep"] if r["device"] == "cuda"})
LARGEST, SECOND = SIZES[-1], SIZES[-2]


def _compiled_inside() -> dict:
    """The compiled-inside Function against the eager one at every size: microseconds more per call."""
    return {n: (_row(FUSED, n)["seconds"] - _row(FUSED_EAGER, n)["seconds"]) * 1e6 for n in SIZES}


def lesson_facts() -> dict[str, list[str]]:
    """What the text says, by claim: the strings the record gives it."""
    extra = _compiled_inside()
    slower = [n for n, more in extra.items() if more > 0]
    faster = [n for n, more in extra.items() if more < 0]
    assert max(slower) < min(faster), "slower up to a size, faster from the next: as the text says"
    up_to = 2 ** 22
    small_extra = [more for n, more in extra.items() if n <= up_to]
    silu_small = [_row("built-in F.silu", n)["seconds"] * 1e6 for n in SIZES if n <= up_to]
    copy_on_paper = RECORD["copy_bandwidth_gbps"] / RECORD["nominal_peak_bandwidth_gbps"]
    small, _ = bench.figures(RECORD, "small_call")
    crossover, _ = bench.figures(RECORD, "crossover")
    return {
        "the H200 and its date": ["an NVIDIA H200, recorded on 2026-11-26", f"{RECORD['date'][:10]}"],
        "F.silu beats copy_": [f"reached {_share_of_copy('built-in F.silu', LARGEST)} of `copy_`'s GB/s at {LARGEST:,}",
                               f"and {_share_of_copy('built-in F.silu', SECOND)} at {SECOND:,}"],
        "copy_ against the bandwidth on paper": [f"{copy_on_paper:.0%} of it on the H200",
                                                 f"`copy_` reached {copy_on_paper:.0%} of the H200's"],
        "the bar on paper": [f"the bar is {bench.FUSED_BAR * copy_on_paper:.0%} of its bandwidth on paper",
                             f"**{bench.FUSED_BAR:.0%}**, set for an NVIDIA {bench.FUSED_BAR_DEVICE}"],
        "a small call": [f"took {small['latency_seconds'] * 1e6:.1f} us as latency and "
                         f"{small['throughput_seconds'] * 1e6:.1f} us as throughput", f"{small['elements']:,} elements"],
        "the crossover": [f"from {crossover['latency_elements']:,} elements measured as latency and from "
                          f"{crossover['throughput_elements']:,} as throughput"],
        "a small forward+backward's fixed cost": [f"a fixed {min(silu_small):.0f} to {max(silu_small):.0f} us, the same "
                                                  f"from {SIZES[0]:,} to {up_to:,} elements"],
        "compiling inside a Function": [f"at every size up to {max(slower):,} elements",
                                        f"(by {min(small_extra):.0f} to {max(small_extra):.0f} us per forward+backward "
                                        f"up to {up_to:,} elements)",
                                        f"faster only from {min(faster):,} elements on",
                                        f"it reaches {_share_of_copy(FUSED, SECOND)} and {_share_of_copy(FUSED, LARGEST)} "
                                        f"of `copy_`"],
    }


@pytest.mark.parametrize("claim", list(lesson_facts()))
def test_the_text_quotes_the_shipped_h200_record(claim):
    missing = [words for words in lesson_facts()[claim] if words not in TEXT]
    assert not missing, f"07's text should say {missing} ({claim}), as the shipped record gives it"


def test_the_record_s_numbers_are_the_h200_s_as_measured():
    """The numbers the text was written from (recordings/h200-2026-11-26), should the record be replaced."""
    assert RECORD["device_name"] == "NVIDIA H200"
    assert _share_of_copy("built-in F.silu", LARGEST) == "101%" and _share_of_copy(FUSED, LARGEST) == "66%"


def test_the_toy_device_s_crossovers_are_where_its_formulas_cross():
    """0.25 + 0.5 n / 4096 ms (the toy CPU) against 1 ms of launch + 0.05 + 0.25 n / 81920 ms of work (the toy GPU)."""
    source = next("".join(c["source"]) for c in CELLS if c.get("id") == "crossover-latency-throughput-run")
    assert "time.sleep(0.00025 + 0.5e-3 * n / 4096)" in source and "time.sleep(0.001)" in source
    assert "time.sleep(0.00005 + 0.25e-3 * n / 81920)" in source
    cpu = (0.25, 0.5 / 4096)
    latency = (1 + 0.05 - cpu[0]) / (cpu[1] - 0.25 / 81920)  # launch + work, then the wait
    throughput = (1 - cpu[0]) / cpu[1]  # the longer of launch and work: the launch, at these sizes
    assert 0.05 + 0.25 * throughput / 81920 < 1, "the work is shorter than the launch there"
    assert f"about {round(latency, -2):,.0f} elements as latency" in TEXT
    assert f"about {round(throughput, -2):,.0f} as throughput" in TEXT


def test_every_live_measurement_is_labelled_with_the_machine_and_its_load():
    code = ["".join(c["source"]) for c in CELLS if c["cell_type"] == "code"]
    live = [source for source in code if "LIVE" in source]
    assert live and all("bench.live_label(" in source for source in live)
    assert not [s for s in code if re.search(r"\[LIVE [a-z]", s)], "a bare '[LIVE cpu]' names no machine"


def test_no_cell_calls_cuda_unguarded():
    """Colab's CPU runtime has a CUDA build of torch and no GPU: every CUDA call sits under a check for one."""
    calls = 0
    for source in ("".join(c["source"]) for c in CELLS if c["cell_type"] == "code"):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and ast.unparse(node.func).startswith("torch.cuda."):
                calls += 1
                guarded = 'if GPU == "cuda"' in source or "except (AssertionError, RuntimeError)" in source
                assert guarded, f"unguarded: {ast.unparse(node)}"
    assert calls >= 3


def test_the_bar_is_stated_as_a_share_of_copy_for_one_device():
    assert math.isclose(bench.FUSED_BAR, 0.70) and bench.FUSED_BAR_DEVICE == "H100"
    assert "a share of the `copy_` bandwidth measured in the same run" in TEXT
