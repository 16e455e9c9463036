"""Memory ceilings at the KB2-73 output shape (development measurement; prints, writes nothing).

Times, with bench/common.py's time_ms (CUDA events, median of 20, L2 flushed before each), writing the 0.52 GB
output tensor (fill_), copying the 67 MB input into a fresh tensor, and one elementwise pass over the output (mul_
in place: read + write), so the output pass's time can be set against what this GPU's memory system does for the
same bytes in the same run.
"""
import torch

from common import time_ms


def timed(fn):
    return time_ms(fn, iters=20)["median"]


def main():
    y = torch.empty(128, 64, 126, 126, device="cuda")
    x = torch.randn(128, 8, 128, 128, device="cuda")
    x2 = torch.empty_like(x)
    gb = y.numel() * 4 / 1e9
    t = timed(lambda: y.fill_(1.5))
    print(f"write {gb:.3f} GB (fill_): {t:.4f} ms = {gb / t:.2f} TB/s")
    t = timed(lambda: x2.copy_(x))
    print(f"copy input {x.numel() * 4 / 1e9:.3f} GB: {t:.4f} ms")
    t = timed(lambda: y.mul_(1.0001))
    print(f"read+write output in place: {t:.4f} ms = {2 * gb / t:.2f} TB/s")
    print(torch.cuda.get_device_name(), torch.__version__)


if __name__ == "__main__":
    main()
