"""Shared benchmark helpers: CUDA-event timing with an L2 flush before every repetition, the measured copy
bandwidth that sets the memory floor, float64 error metrics, and the JSON header (GPU, torch, git sha)."""

import os
import statistics
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))


def git_sha():
    """The commit the measured library was built from: GIT_SHA, else the one bench/stage.sh recorded next to the
    build it staged (the device's copy of the tree can carry stale git metadata), else git rev-parse HEAD."""
    if os.environ.get("GIT_SHA"):
        return os.environ["GIT_SHA"]
    staged = ROOT / ".devbuild" / "GIT_SHA"
    if staged.is_file():
        return staged.read_text().strip()
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def header(shape):
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "git_sha": git_sha(), "shape": shape}


_flush = None


def flush_l2():
    """Overwrite a buffer twice the size of the largest L2 we run on (H200: 60 MB)."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    _flush.random_(0, 255)


def time_ms(fn, iters=30, warmup=3):
    """Median (and p20/p80) of `iters` CUDA-event timings of fn(), L2 flushed before each one."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        flush_l2()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return {"median": statistics.median(times), "p20": times[len(times) // 5], "p80": times[(4 * len(times)) // 5],
            "min": times[0], "n": len(times)}


def copy_bandwidth_gbs(nbytes=1 << 30):
    """Device-to-device copy bandwidth, counting bytes read plus bytes written."""
    a = torch.empty(nbytes // 4, device="cuda").uniform_()
    b = torch.empty_like(a)
    t = time_ms(lambda: b.copy_(a), iters=20)
    del a, b
    return 2 * nbytes / (t["median"] * 1e-3) / 1e9


def errors(out, ref64):
    """max |out - ref| and ||out - ref|| / ||ref|| against a float64 reference; NaN counts as failure."""
    d = out.double() - ref64
    if torch.isnan(out).any() and not torch.isnan(ref64).any():
        return float("nan"), float("nan")
    return d.abs().max().item(), (d.norm() / ref64.norm()).item()


def print_table(rows, cols):
    widths = [max(len(c), *(len(f"{r.get(c, '')}") for r in rows)) for c in cols]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(f"{r.get(c, '')}".rjust(w) for c, w in zip(cols, widths)))
