"""The tools assignment 07 teaches, in the student's library: profiler traces (``traces``) and a CPU stand-in for
CUDA graphs (``toy_cuda``); and the shipped trace, checked to be what it says it is."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from autograder.student import timing as bench
from autograder.student.toy_cuda import TOY_CUDA
from autograder.student.traces import KEPT, trim


# --------------------------------------------------------------------------------------------
# Traces


def _event(name, cat, ts, dur, **extra):
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1, **extra}


def test_trim_keeps_07_s_events_from_the_first_step_s_start_with_their_correlation_ids():
    raw = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": 0},
        _event("ProfilerStep#1", "user_annotation", 990.0, 100.0),
        _event("step", "user_annotation", 1000.0, 50.0, args={"External id": 3}),
        _event("aten::add", "cpu_op", 1001.5, 4.25, args={"External id": 4, "Ev Idx": 2}),
        _event("cudaLaunchKernel", "cuda_runtime", 1002.0, 1.0, args={"correlation": 9, "External id": 4}),
        _event("add_kernel", "kernel", 1060.0, 2.0, args={"correlation": 9, "device": 0}),
        _event("some python", "python_function", 1000.0, 1.0),
        {"ph": "s", "cat": "ac2g", "id": 9, "ts": 1002.0, "pid": 1, "tid": 1, "name": "ac2g"},
    ]}
    trace = trim(raw, {"device": "cuda"})
    assert [(e["name"], e["ts"]) for e in trace["traceEvents"]] == [
        ("step", 0.0), ("aten::add", 1.5), ("cudaLaunchKernel", 2.0), ("add_kernel", 60.0)]
    assert [e.get("args") for e in trace["traceEvents"]] == [None, None, {"correlation": 9}, {"correlation": 9}]
    assert {e["cat"] for e in trace["traceEvents"]} <= set(KEPT) and trace["otherData"] == {"device": "cuda"}


def test_profile_steps_records_each_call_s_steps_on_the_cpu():
    x = torch.randn(64, requires_grad=True)
    calls = {"double": lambda: torch.autograd.grad((2 * x).sum(), x), "square": lambda: (x * x).sum()}
    synced = []
    trace = bench.profile_steps(calls, lambda: synced.append(1), steps=2, warmup=1, about={"device": "cpu"})
    steps = [e["name"] for e in trace["traceEvents"] if e["cat"] == "user_annotation"]
    assert sorted(steps) == ["double", "double", "square", "square"]
    assert trace["otherData"]["steps"] == {"double": 2, "square": 2} and trace["otherData"]["device"] == "cpu"
    assert trace["otherData"]["kind"] == "measurement" and trace["otherData"]["torch_version"] == torch.__version__
    assert any(e["name"] == "aten::mul" for e in trace["traceEvents"]), "the operators inside the steps"
    assert len(synced) == 1 + 3 * 2, "once after the warm-up, then after every run (the profiler's warm-up round too)"
    json.dumps(trace)  # plain data


def test_the_illustrative_trace_is_labelled_and_its_kernels_run_after_their_launch():
    trace = bench.illustrative_trace(steps=2, ops=3, launch_us=2.0, kernel_us=40.0)
    assert "NOT MEASURED" in trace["otherData"]["warning"] and trace["otherData"]["kind"] == "illustrative"
    events = trace["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events if e["cat"] == "cuda_runtime"}
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert len(kernels) == 6 and all(k["ts"] > launches[k["args"]["correlation"]]["ts"] for k in kernels)
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] == "user_annotation"]
    outside = [k for k in kernels if not any(a <= k["ts"] <= b for a, b in windows)]
    assert outside, "with launches shorter than the kernels, kernels run after their step's window: a trace's lesson"
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


def test_the_shipped_cpu_trace_is_a_measurement_of_exercise_3_s_function():
    trace = bench.reference_trace("cpu")
    about = trace["otherData"]
    assert about["kind"] == "measurement" and about["device"] == "cpu" and about["cpu_threads"] == 1
    assert about["made_by"] == "autograder.authoring.record_tools.profile" and about["date"]
    assert "Exercise 3's BiasGELU" in about["workload"]
    names = [e["name"] for e in trace["traceEvents"] if e["cat"] == "user_annotation"]
    assert {n: names.count(n) for n in names} == about["steps"]
    assert {e["cat"] for e in trace["traceEvents"]} <= set(KEPT)
    assert bench.reference_traces()[-1] == trace


@pytest.mark.parametrize("trace", bench.reference_traces(), ids=lambda t: t["otherData"]["device"])
def test_a_shipped_trace_has_no_near_ties_that_would_make_nesting_ambiguous(trace):
    """Exercise 4 decides nesting with <= on start and end: a near tie (1e-6 us apart, not equal) would make two
    correct answers that add in another order disagree."""
    ops = [e for e in trace["traceEvents"] if e["cat"] == "cpu_op" and e["name"].startswith("aten::")]
    close = [(e["name"], o["name"]) for e in ops for o in ops if o is not e and o["tid"] == e["tid"]
             for a, b in ((o["ts"], e["ts"]), (e["ts"] + e["dur"], o["ts"] + o["dur"]), (o["dur"], e["dur"]))
             if 0 < abs(a - b) < 1e-6]
    assert not close


# --------------------------------------------------------------------------------------------
# A CPU stand-in for CUDA graphs


def test_a_toy_graph_captures_without_results_and_replays_on_the_static_inputs():
    x = torch.randn(4)
    graph = TOY_CUDA.CUDAGraph()
    with TOY_CUDA.graph(graph):
        y = F.gelu(2 * x).t()
    assert torch.isnan(y).all(), "captured, not run: the output holds NaN until a replay"
    for _ in range(2):
        x.copy_(torch.randn(4))
        graph.replay()
        assert torch.allclose(y, F.gelu(2 * x))
    assert graph.replays == 2


def test_a_toy_graph_overwrites_its_output_and_leaves_tensors_made_before_it():
    x, weight = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    graph = TOY_CUDA.CUDAGraph()
    with TOY_CUDA.graph(graph):
        y = x * weight
    assert not torch.isnan(weight).any() and not torch.isnan(x).any(), "only what the capture made holds NaN"
    graph.replay()
    kept = y
    x.copy_(torch.tensor([10.0, 20.0]))
    graph.replay()
    assert kept.tolist() == [30.0, 80.0], "a result kept without a copy is the graph's own tensor: overwritten"


def test_a_toy_graph_refuses_what_a_cuda_graph_refuses():
    graph = TOY_CUDA.CUDAGraph()
    with pytest.raises(RuntimeError, match="captured nothing"):
        graph.replay()
    with TOY_CUDA.graph(graph):
        torch.ones(2) + 1
    with pytest.raises(RuntimeError, match="captured already"), TOY_CUDA.graph(graph):
        pass


def test_the_toy_has_the_stream_names_cuda_graph_code_uses():
    side = TOY_CUDA.Stream()
    side.wait_stream(TOY_CUDA.current_stream())
    with TOY_CUDA.stream(side) as current:
        assert current is side
    TOY_CUDA.current_stream().wait_stream(side)
    TOY_CUDA.synchronize()
    assert {"CUDAGraph", "graph", "Stream", "stream", "current_stream", "synchronize"} <= set(vars(TOY_CUDA))
    assert all(hasattr(torch.cuda, name) for name in vars(TOY_CUDA)), "every name is torch.cuda's too"
