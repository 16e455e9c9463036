"""Small-batch latency: where a fused call's time goes (host or GPU). python3 bench/latency.py [--n 1 8] [--iters 200]

Per block and batch: the CUDA-event time per call over back-to-back calls (what the benchmarks report), the host
time per call (wall clock of the same loop before the final synchronize), the GPU time of the call's kernels
(torch.profiler, CUPTI), and the event time per replay of the call captured in a CUDA graph. When host >= event
time the GPU waits on the host: the call is launch-bound, and a graph removes that."""
import argparse
import cProfile
import json
import pstats
import time

import torch
from torch.profiler import ProfilerActivity, profile

import os
import sys

from common import ROOT, header  # noqa: F401  (ROOT: puts python/ on the path)

if os.environ.get("LATENCY_PYTHON"):  # an A/B baseline: another checkout's python/ (with its CONVFUSE_LIBRARY)
    sys.path.insert(0, os.environ["LATENCY_PYTHON"])
import convfuse  # noqa: E402


def make(block, n):
    g = torch.Generator(device="cuda").manual_seed(n)
    if block == "kb2-91":
        x = torch.rand(n, 64, 64, 64, device="cuda", generator=g)
        w = torch.randn(64, 128, 4, 4, device="cuda", generator=g) * 0.03
        b = torch.randn(128, device="cuda", generator=g) * 0.03
        bias = torch.randn(128, device="cuda", generator=g)
        return lambda: convfuse.convt_softmax_bias_scale_sigmoid(x, w, b, bias, 2.0, 2, 1, 1)
    x = torch.rand(n, 8, 128, 128, device="cuda", generator=g)
    w = torch.randn(64, 8, 3, 3, device="cuda", generator=g) * 0.1
    b = torch.randn(64, device="cuda", generator=g) * 0.1
    ga, be = torch.rand(64, device="cuda", generator=g) + 0.5, torch.randn(64, device="cuda", generator=g)
    rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
    nbt = torch.zeros((), dtype=torch.int64, device="cuda")
    training = block == "kb2-73-train"
    return lambda: convfuse.conv_bn_scale(x, w, b, ga, be, rm, rv, nbt, training, 0.1, 1e-5, 2.0)


def measure(fn, iters):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    host = (time.perf_counter() - t0) / iters * 1e3
    e1.record()
    torch.cuda.synchronize()
    event = e0.elapsed_time(e1) / iters
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    gpu_us = sum(e.self_device_time_total for e in prof.key_averages()) / 20
    kernels = sorted({e.key[:40] for e in prof.key_averages() if e.self_device_time_total > 0})
    # the same call captured in a CUDA graph (as tests/gpu/test_modules_cuda.py does), replays back to back: no host time
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(5):
        g.replay()
    e0.record()
    for _ in range(iters):
        g.replay()
    e1.record()
    torch.cuda.synchronize()
    graph = e0.elapsed_time(e1) / iters
    return event, host, gpu_us / 1e3, graph, kernels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--cprofile", action="store_true", help="also: the Python profile of 200 KB2-73 eval calls (N=1)")
    ap.add_argument("--out", help="write the rows as JSON (gpu, torch, git_sha)")
    a = ap.parse_args()
    rows = []
    print(f"convfuse from {convfuse.__file__}")
    print(f"{'block':14} {'N':>3} {'event ms':>9} {'host ms':>8} {'gpu ms':>8} {'graph ms':>9}  kernels")
    for block in ("kb2-91", "kb2-73-train", "kb2-73-eval"):
        for n in a.n:
            event, host, gpu, graph, kernels = measure(make(block, n), a.iters)
            print(f"{block:14} {n:3d} {event:9.4f} {host:8.4f} {gpu:8.4f} {graph:9.4f}  {', '.join(kernels)}")
            rows.append({"block": block, "n": n, "event_ms": round(event, 4), "host_ms": round(host, 4),
                         "gpu_ms": round(gpu, 4), "graph_ms": round(graph, 4), "kernels": len(kernels)})
    if a.out:
        doc = header("KB2-91 (N,64,64,64) k4s2p1op1 -> 128; KB2-73 (N,8,128,128) k3 -> 64")
        doc.update({"iters": a.iters, "rows": rows})
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    if a.cprofile:
        fn = make("kb2-73-eval", 1)
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(200):
            fn()
        pr.disable()
        torch.cuda.synchronize()
        pstats.Stats(pr).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
