"""Probe one row-tile case on the device (bisecting aid): python3 bench/rows_probe.py [n c h w cout]."""
import sys

import torch

import convfuse

n, c, h, w, co = (int(v) for v in (sys.argv[1:] or [1, 8, 8, 128, 64]))
g = torch.Generator().manual_seed(1)
x = torch.rand(n, c, h, w, generator=g).cuda()
wt = (torch.rand(co, c, 3, 3, generator=g) - 0.5).cuda()
b = torch.rand(co, generator=g).cuda()
out = torch.full((n, co, h - 2, w - 2), float("nan"), device="cuda")
y = convfuse.conv_chain(x, wt, b, [("mul_scalar", 2.0)], transposed=False, backend="cuda", math="strict", out=out)
torch.cuda.synchronize()
ref = torch.nn.functional.conv2d(x.double(), wt.double(), b.double()) * 2
print("max abs err", (y.double() - ref).abs().max().item(), "nan", torch.isnan(y).sum().item())
