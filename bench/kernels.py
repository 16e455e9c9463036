"""Per-kernel GPU time of one fused call (torch.profiler / CUPTI), averaged over repeats, at the default shapes:
python3 bench/kernels.py kb2-73|kb2-73-eval|kb2-91 [N] [repeats]. Set CONVFUSE_* variables to compare paths."""
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from common import ROOT  # noqa: F401  (puts python/ on the path)
import convfuse

block = sys.argv[1] if len(sys.argv) > 1 else "kb2-73"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 128
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
torch.manual_seed(0)
if block == "kb2-91":
    x = torch.rand(n, 64, 64, 64, device="cuda")
    w, b, bias = torch.randn(64, 128, 4, 4, device="cuda") * 0.03, torch.randn(128, device="cuda") * 0.03, torch.randn(128, device="cuda")

    def call():
        return convfuse.convt_softmax_bias_scale_sigmoid(x, w, b, bias, 2.0, 2, 1, 1)
else:
    x = torch.randn(n, 8, 128, 128, device="cuda")
    w, b = torch.randn(64, 8, 3, 3, device="cuda") * 0.1, torch.randn(64, device="cuda") * 0.1
    g, be = torch.rand(64, device="cuda") + 0.5, torch.randn(64, device="cuda")
    rm, rv = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
    nbt = torch.zeros((), dtype=torch.int64, device="cuda")
    training = block != "kb2-73-eval"

    def call():
        return convfuse.conv_bn_scale(x, w, b, g, be, rm, rv, nbt, training, 0.1, 1e-5, 2.0)
for _ in range(3):
    call()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(reps):
        call()
    torch.cuda.synchronize()
tot = defaultdict(float)
cnt = defaultdict(int)
for e in prof.events():
    if e.device_type.name == "CUDA" and e.device_time_total > 0:
        tot[e.name[:90]] += e.device_time_total
        cnt[e.name[:90]] += 1
print(f"{block} N={n}: GPU time per call by kernel (us)")
for k in sorted(tot, key=lambda k: -tot[k]):
    print(f"  {tot[k] / reps:9.2f}  x{cnt[k] // reps}  {k}")
print(f"  {sum(tot.values()) / reps:9.2f}  total")
