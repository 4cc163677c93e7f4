"""What assignment 11 says in words about GPUs, precision and its record is what the shipped record, the pinned torch
and Triton show (no notebook is run).

Exercise 9's cell prints the shipped record (``autograder/student/data/attention_cuda.json``) from code, so a new
recording changes what it prints by itself; what Section 9 says of it in words ("1.40 times the flash backend's
throughput", "means, not medians", "no fingerprint") is checked here against the file, as
``test_gpu_lesson.py`` does for 07: a new record that contradicts a sentence fails its test until the text says what
the new one shows. The published figures Section 9 quotes are constants here, and what it says of Triton's code for
Hopper and Ampere is compiled here, for those GPUs, without one.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from autograder.authoring import attention_timings, kernel_timings
from autograder.student import flash_timing

NOTEBOOK = attention_timings.NOTEBOOK
REPO = NOTEBOOK.parents[2]
CELLS = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
RECORD = flash_timing.reference_record()
# The FlashAttention-3 paper's H100 figures that Section 9 quotes: causal forward, d = 64, 4,096 tokens, TFLOP/s.
PAPER = {"FlashAttention-2": 284, "Triton": 363, "cuDNN": 363, "FlashAttention-3": 420}
# solution_sha256 of the attention kernel cells ("attention_forward", "attention_backward") as they were at commit
# 4b0cffa, the commit that shipped the first record (computed from `git show 4b0cffa:solutions/...` on 2026-12-02):
# the kernels that record timed, as far as any file tells.
FIRST_RECORD_KERNELS_SHA256 = "888806d96ddaf12d1d64a2d9126ca95e49c97329d25a872e610d4532fbf955f0"


def _text(cell_id: str) -> str:
    return " ".join("".join(next(c["source"] for c in CELLS if c.get("id") == cell_id)).split())


def _row(variant: str, pass_: str) -> dict:
    return next(r for r in RECORD["rows"] if (r["variant"], r["pass"]) == (variant, pass_))


def test_the_shipped_record_is_the_one_section_9_describes():
    text = _text("section-9")
    assert (RECORD["device_name"], RECORD["torch_version"][:4], RECORD["triton_version"], RECORD["date"][:10]) == (
        "NVIDIA H200", "2.11", "3.6.0", "2026-11-27")
    assert "made on an NVIDIA H200 with torch 2.11 and triton 3.6.0 on 2026-11-27" in text
    # "against PyTorch's flash backend only, one run of each"
    assert {r["variant"] for r in RECORD["rows"]} == {flash_timing.SDPA, attention_timings.SOLUTION}
    assert not any("rounds_milliseconds" in r for r in RECORD["rows"]) and "rounds" not in RECORD
    assert "against PyTorch's flash backend only, one run of each" in text
    assert "It timed neither cuDNN nor FlashAttention-3" in text


def test_section_9_says_the_record_holds_means_and_no_fingerprint_and_that_the_kernels_changed_since():
    text = _text("section-9")
    # the first recorder passed no return_mode, and do_bench's default is the mean (test_facts_10.py pins it)
    assert RECORD.get("format", 1) == 1 and "return_mode" not in RECORD["method"]
    assert "its figures are `do_bench`'s **means**, not medians (that recorder passed no `return_mode`)" in text
    assert "solution_sha256" not in RECORD
    now = kernel_timings.solution_sha256(NOTEBOOK, ("attention_forward", "attention_backward"))
    assert now != FIRST_RECORD_KERNELS_SHA256
    assert "it holds no fingerprint of the kernels it timed, and the notebook's kernels have changed since" in text
    assert flash_timing.FIRST_RECORDER in flash_timing.result_lines(RECORD), "the printed record says so too"


def test_the_figures_section_9_quotes_are_the_records():
    text = _text("section-9")
    mine, theirs = (_row(v, "forward+backward") for v in (attention_timings.SOLUTION, flash_timing.SDPA))
    forward = _row(attention_timings.SOLUTION, "forward")
    assert f"{mine['share_of_sdpa']:.2f}" == "1.40" and f"{forward['share_of_sdpa']:.2f}" == "1.36"
    assert (round(mine["tflops"]), round(theirs["tflops"]), round(RECORD["nominal_peak_tflops"])) == (328, 234, 989)
    assert abs(mine["share_of_peak"] - 1 / 3) < 0.01, "a third of the peak on paper"
    assert ("forward and backward ran at 1.40 times the flash backend's throughput (328 against 234 TFLOP/s, a third "
            "of the H200's 989 on paper), and forward alone at 1.36 times") in text


def test_the_published_figures_and_their_ratios_are_quoted_as_they_are():
    text = _text("section-9")
    assert ("FlashAttention-2 284 TFLOP/s, Triton's tutorial kernel 363, cuDNN 363, FlashAttention-3 420") in text
    assert (round(PAPER["cuDNN"] / PAPER["FlashAttention-2"], 1), round(PAPER["FlashAttention-3"] / PAPER["FlashAttention-2"], 1)) == (1.3, 1.5)
    assert "about 1.3 and 1.5 times above FlashAttention-2" in text
    assert f"{PAPER['Triton'] / PAPER['FlashAttention-2']:.2f}" == "1.28"
    assert "Triton's kernel ran 1.28 times FlashAttention-2's forward" in text and "the paper's 1.28" in text


def test_the_aim_and_the_recorders_conditions_are_what_section_9_and_exercise_9_say():
    text, exercise = _text("section-9"), _text("exercise-9")
    assert attention_timings.AIM == 0.5 and "aims at **half its throughput**" in text
    assert "The fair bar is the fastest kernel the GPU has" in text
    assert attention_timings.ROUNDS == flash_timing.ROUNDS == 5
    assert flash_timing.round_orders([1, 2], 3) == [[1, 2], [2, 1], [1, 2]]
    assert "once a round in alternating order over five rounds, each call `do_bench`'s median" in text
    assert "five alternating rounds, deterministic algorithms off while it times" in exercise
    assert "torch's deterministic algorithms off" in text and torch.utils.deterministic.fill_uninitialized_memory


def test_pytorchs_flash_backend_is_flashattention_2_and_it_has_a_cudnn_backend():
    assert "FlashAttention-2" in F.scaled_dot_product_attention.__doc__
    from torch.nn.attention import SDPBackend

    assert {"FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH"} <= set(SDPBackend.__members__)
    assert "Its flash backend is FlashAttention-2" in _text("section-9") and "Its cuDNN backend" in _text("section-9")


COMPILE = r"""
import json, re, torch, triton
torch.cuda.is_available = lambda: True  # no GPU here: the setup cell must still define compiled kernels
from triton.backends.compiler import GPUTarget
from autograder.authoring.attention_timings import NOTEBOOK
from autograder.authoring.kernel_timings import solution_namespace
ns = solution_namespace(NOTEBOOK, ("setup", "tiles", "layer_norm_forward", "layer_norm_backward", "attention_forward"))
tile = ns["ATTENTION_TILE"]


def ptx(name, signature, constants, capability, warps, stages):
    aligned = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(signature) if a.endswith("_ptr")}
    source = triton.compiler.ASTSource(fn=ns[name], signature=signature | {k: "constexpr" for k in constants},
                                       constexprs=constants, attrs=aligned)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": warps, "num_stages": stages}).asm["ptx"]


found = {}
attention = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "lse_ptr": "*fp32",
             "seq_len": "i32", "scale": "fp32"}
blocks = {"HEAD_DIM": 64, "CAUSAL": True, "BLOCK_M": tile["BLOCK_M"], "BLOCK_N": tile["BLOCK_N"]}
for capability in (90, 80):
    code = ptx("attention_forward_kernel", attention, blocks, capability, tile["num_warps"], tile["num_stages"])
    found[f"attention sm_{capability}"] = sorted(set(re.findall(r"\b(wgmma\.mma_async|mma\.sync)\b", code)))
for dtype in ("bf16", "fp16"):
    forward = {"x_ptr": f"*{dtype}", "weight_ptr": f"*{dtype}", "bias_ptr": f"*{dtype}", "y_ptr": f"*{dtype}",
               "mean_ptr": "*fp32", "rstd_ptr": "*fp32", "n_columns": "i32", "eps": "fp32"}
    backward = {"x_ptr": f"*{dtype}", "weight_ptr": f"*{dtype}", "mean_ptr": "*fp32", "rstd_ptr": "*fp32",
                "grad_output_ptr": f"*{dtype}", "grad_x_ptr": f"*{dtype}", "partial_weight_ptr": "*fp32",
                "partial_bias_ptr": "*fp32", "n_rows": "i32", "n_columns": "i32"}
    for name, signature, constants in (
            ("layer_norm_forward_kernel", forward, {"BLOCK_SIZE": 1024}),
            ("layer_norm_backward_kernel", backward, {"ROWS_PER_PROGRAM": ns["LAYER_NORM_ROWS"], "BLOCK_SIZE": 1024})):
        found[f"{name} {dtype}"] = "st.global" in ptx(name, signature, constants, 90, 4, 1)
print(json.dumps(found))
"""


def test_triton_compiles_the_solutions_tl_dot_into_hoppers_wgmma_and_ampere_s_mma(tmp_path):
    """Section 9: "Triton compiles your tl.dots for the GPU they run on: on Hopper into its own asynchronous
    tensor-core instructions (wgmma), on an A100 into Ampere's (mma)". Without a GPU, Triton still compiles for one down
    to PTX: the solution's attention forward in bfloat16 for sm_90 (H100, H200) and sm_80 (A100); and LayerNorm's
    kernels, with their int64 rows and float32 statistics, compile for sm_90 in bfloat16 and float16."""
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"TRITON_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", COMPILE], cwd=REPO, env=environment, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found.pop("attention sm_90") == ["wgmma.mma_async"] and found.pop("attention sm_80") == ["mma.sync"]
    assert found == {f"layer_norm_{way}_kernel {dtype}": True for way in ("forward", "backward")
                     for dtype in ("bf16", "fp16")}
    assert "on Hopper into its own asynchronous tensor-core instructions (`wgmma`), on an A100 into Ampere's (`mma`)" \
        in _text("section-9")


SUM = textwrap.dedent('''
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch, triton, triton.language as tl

    @triton.jit
    def mean_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, CONVERT: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, BLOCK))
        if CONVERT:
            x = x.to(tl.float32)
        tl.store(out_ptr, tl.sum(x, axis=0) / n)

    x = torch.full((1024,), 100.0, dtype=torch.float16)
    found = []
    for convert in (False, True):
        out = torch.zeros(1, dtype=torch.float32)
        mean_kernel[(1,)](x, out, 1024, BLOCK=1024, CONVERT=convert)
        found.append(out.item())
    print(found)
''')


def test_a_float16_sum_of_1024_numbers_near_100_is_inf_and_a_float32_one_is_not(tmp_path):
    """Section 1's precision rule, under the interpreter (a fresh Python: the course's memory guard is not needed)."""
    script = tmp_path / "sum.py"
    script.write_text(SUM)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[inf, 100.0]", done.stderr[-2000:]
    assert torch.finfo(torch.float16).max == 65504 and 1024 * 100 == 102_400
    text = _text("section-1")
    assert "a row of 1,024 numbers near 100 adds up to about 102,400, past float16's largest number (65,504)" in text
    digits = [round(-math.log10(torch.finfo(t).eps)) for t in (torch.bfloat16, torch.float16)]
    assert digits == [2, 3] and "two or three significant digits (bfloat16, float16)" in text


def test_the_int64_examples_are_past_2_to_the_31():
    assert 64 * 8192 * 32 * 128 == 2 ** 31 and 2 ** 31 * torch.finfo(torch.bfloat16).bits // 8 == 4 * 2 ** 30
    assert ("64 sequences of 8,192 tokens with 32 heads of $d = 128$ hold $2^{31}$ elements per tensor (4 GiB in "
            "bfloat16)") in " ".join("".join(next(c["source"] for c in CELLS if c.get("id") == "section-3")).split())
    assert "(4 GiB of bfloat16, which one GPU holds)" in _text("section-1")


@pytest.mark.parametrize("exercise", ["exercise-3", "exercise-6", "exercise-8"])
def test_exercises_3_6_and_8_ask_for_a_decision_and_their_hints_point_at_it(exercise):
    """The decision is stated (not the answer), and the one hint students keep asks questions; the answer is the last
    level, which the graded release strips (autograder.authoring.hints)."""
    source = "".join(next(c["source"] for c in CELLS if c.get("id") == exercise))
    visible = re.sub(r"<details><summary>Hint \d+: the answer</summary>.*?</details>", "", source, flags=re.S)
    assert "decision" in visible or "decisions" in visible
    hints = re.findall(r"<details><summary>Hint \d+</summary>(.*?)</details>", visible, flags=re.S)
    assert len(hints) == 1 and hints[0].count("?") >= 2, hints
    assert "save_for_backward(" not in visible and "new_empty(" not in visible and "mark_non_differentiable" not in visible
