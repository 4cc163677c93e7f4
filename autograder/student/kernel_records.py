"""Assignment 10's timings: its kernels timed on a GPU (Exercise 6), and the records shipped with the course.

``time_bias_gelu`` times a bias + GELU forward+backward with 07's helpers (``autograder.student.timing``),
beside ``copy_`` and the built-in ``F.gelu(x + bias)``, as latency and as throughput; optionally each
call replayed from a CUDA graph (``graph_replay``: every kernel of a call launched at once, none of the
host's per-call work) and timed by ``triton.testing.do_bench`` too. ``python -m
autograder.authoring.kernel_timings`` records the solution's kernels with it; ``reference_timings``,
``timing_lines``, ``tile_lines`` and ``plot_kernel_share`` show such a record where there is no GPU.
"""

from __future__ import annotations

# A record of the course's solution kernels, written by ``python -m autograder.authoring.kernel_timings``
# on a GPU; where none is shipped, the notebook shows the H200 measurement of a hand-written pair.
SOLUTION_RECORD = "kernels_cuda.json"
EVIDENCE_RECORD = "kernels_h200_hand_written_pair.json"
GRAPHED = ", CUDA graph"  # the suffix of a variant's name when its calls are replayed from a CUDA graph


def graph_replay(call, warmup: int = 3):
    """``call`` (no arguments; its CUDA tensors stay where they are) captured once in a CUDA graph: the function
    returned replays it, every kernel the call launched, in one launch, without the host's per-call work
    (Python, Triton's launcher, autograd's bookkeeping, allocations). ``warmup`` calls first, on a side
    stream, as torch's documentation of ``torch.cuda.graph`` asks (and so that Triton compiles before)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph.replay


def time_bias_gelu(function, sizes, device="cuda", name: str = "your BiasGELU", repeats: int = 20,
                   calls: int = 10, blocks: int = 3, graphs: bool = False, bench: bool = False,
                   others: tuple = ()) -> list[dict]:
    """Forward+backward of ``function(x, bias)`` (float32, rows of 1024) against the built-in F.gelu(x + bias),
    and ``copy_`` (forward), at each size: one row per variant and size.

    With 07's helpers (``autograder.student.timing``): the same workloads, calls and byte counts, and
    ``throughput_seconds`` both ways: ``latency_seconds`` is one call between two synchronised clock reads
    (median of ``repeats``), ``throughput_seconds`` ``calls`` calls back to back. ``fraction_of_copy_*``
    divides the achieved bandwidth (model bytes / time) by copy_'s at the same size. ``others``: more
    ``(name, function)`` pairs timed the same way. ``graphs``: the built-in's and the functions' calls again,
    replayed from a CUDA graph (``graph_replay``; variant name + ``GRAPHED``). ``bench``: every row also gets
    ``do_bench_seconds``, ``triton.testing.do_bench``'s median (``return_mode="median"``: its default is the
    mean; CUDA events around each call, the L2 cache flushed before it). Torch's deterministic mode is off meanwhile (its NaN fill of new tensors would be
    timed too).
    """
    import torch

    import autograder.student.timing as timing

    synchronize = torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
    variants = [timing.variant(timing.COPY), timing.variant("built-in F.gelu(x + bias)"),
                timing.Variant("bias_gelu", name, function), *(timing.Variant("bias_gelu", n, f) for n, f in others)]
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    rows = []
    try:
        for elements in sizes:
            x, bias, grad_output = timing.workload_tensors(elements, device)
            measured = []
            for variant in variants:
                pass_ = "forward" if variant.workload == "copy" else "forward+backward"
                call = timing.timed_call(variant, x, bias, grad_output, pass_)
                call()  # compiles the kernels for this size before any clock starts
                synchronize()
                ways = [(variant.name, call)] + ([(variant.name + GRAPHED, graph_replay(call))]
                                                 if graphs and variant.workload != "copy" else [])
                for label, timed in ways:
                    row = {"variant": label, "pass": pass_, "elements": elements,
                           "bytes": timing.model_bytes(variant, x, bias, pass_),
                           "latency_seconds": timing.throughput_seconds(timed, synchronize, 1, repeats),
                           "throughput_seconds": timing.throughput_seconds(timed, synchronize, calls, blocks)}
                    if bench:
                        import triton.testing

                        row["do_bench_seconds"] = triton.testing.do_bench(timed, return_mode="median") / 1e3
                    measured.append(row)
            copy = measured[0]
            for row in measured:
                for kind in ("latency", "throughput"):
                    row[f"fraction_of_copy_{kind}"] = (row["bytes"] / row[f"{kind}_seconds"]) / (
                        copy["bytes"] / copy[f"{kind}_seconds"])
            rows += measured
            del x, bias, grad_output
    finally:
        torch.use_deterministic_algorithms(deterministic)
    return rows


def reference_timings(folder=None) -> dict:
    """The record Exercise 6 shows without a GPU: the solution kernels' if one is shipped, else the hand-written
    pair measured on an H200 (each says what was measured, on what, by which code)."""
    import json
    from pathlib import Path

    from autograder.student.timing import DATA_DIR

    folder = Path(folder or DATA_DIR)
    path = folder / SOLUTION_RECORD if (folder / SOLUTION_RECORD).is_file() else folder / EVIDENCE_RECORD
    return json.loads(path.read_text(encoding="utf-8"))


def plot_kernel_share(ax, record: dict, aim: float = 0.85) -> None:
    """The share of copy_'s bandwidth that a record's kernels and the built-in reach, by size: latency (solid) and
    throughput (dashed) where the record has both."""
    for variant, color in ((record["kernels_variant"], "C0"), ("built-in F.gelu(x + bias)", "C1")):
        rows = [r for r in record["rows"] if r["variant"] == variant]
        if not rows:
            continue
        sizes = [r["elements"] for r in rows]
        if "fraction_of_copy" in rows[0]:  # a record of one way only
            ax.semilogx(sizes, [r["fraction_of_copy"] for r in rows], marker="o", color=color, label=variant)
            continue
        for kind, style in (("latency", "-"), ("throughput", "--")):
            ax.semilogx(sizes, [r[f"fraction_of_copy_{kind}"] for r in rows], marker="o", ls=style, color=color,
                        label=f"{variant}, {kind}")
    ax.axhline(aim, color="gray", ls=":", label=f"the solution's aim: {aim:.0%} of copy_")
    ax.set(xlabel="elements (float32)", ylabel="share of copy_'s bandwidth", ylim=(0, 1.05),
           title=f"forward+backward on {record['device_name']} (recorded)")
    ax.legend(fontsize=7)


def timing_lines(record: dict) -> list[str]:
    """A record's provenance and its forward+backward rows, as lines to print."""
    return [f"{record['what']}", f"measured on {record['device_name']} with torch {record['torch_version']}, "
            f"triton {record['triton_version']}, {record['date'][:10]} ({record['source']})"] + row_lines(record["rows"])


def row_lines(rows: list[dict]) -> list[str]:
    """Rows of a record (``time_bias_gelu``'s), one line each: latency, throughput, do_bench where timed."""
    lines = []
    for row in rows:
        if "error" in row:
            lines.append(f"  {row['variant']}: {row['error']}")
        elif "latency_seconds" in row:
            bench = f", do_bench {row['do_bench_seconds'] * 1e6:8.1f} us" if "do_bench_seconds" in row else ""
            lines.append(f"  {row['variant']:28} {row['elements']:>11,} elements: latency {row['latency_seconds'] * 1e6:8.1f} us "
                         f"({row['fraction_of_copy_latency']:4.0%} of copy_), throughput "
                         f"{row['throughput_seconds'] * 1e6:8.1f} us ({row['fraction_of_copy_throughput']:4.0%}){bench}")
        else:
            lines.append(f"  {row['variant']:28} {row['elements']:>11,} elements: {row['seconds'] * 1e6:8.1f} us "
                         f"({row['fraction_of_copy']:4.0%} of copy_)")
    return lines


def tile_lines(record: dict) -> list[str]:
    """A record's comparison of tiles at its largest size, fastest (as latency) first, as lines to print."""
    def tile(t: dict) -> str:
        return f"{t['BLOCK_ROWS']} x {t['BLOCK_COLUMNS']}, {t['num_warps']} warps"

    compared = record.get("tiles_at_largest") or []
    if not compared:
        return []
    lines = [f"tiles compared at {record['largest_elements']:,} elements (forward; backward: latency, throughput, "
             f"share of copy_):"]
    for t in sorted(compared, key=lambda t: t["latency_seconds"]):
        lines.append(f"  {tile(t['forward_tile']):22}; {tile(t['backward_tile']):22}: {t['latency_seconds'] * 1e6:6.1f} us "
                     f"({t['fraction_of_copy_latency']:.0%}), {t['throughput_seconds'] * 1e6:6.1f} us "
                     f"({t['fraction_of_copy_throughput']:.0%})" + ("  <- the notebook's" if t["shipped"] else ""))
    return lines
