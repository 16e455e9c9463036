"""Run one fused call a few times (for ncu / compute-sanitizer): python3 bench/profile_one.py kb2-91|kb2-73 [N]."""
import sys

import torch

from common import ROOT  # noqa: F401  (puts python/ on the path)
import convfuse

block = sys.argv[1] if len(sys.argv) > 1 else "kb2-91"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 16
torch.manual_seed(0)
if block == "kb2-91":
    x = torch.rand(n, 64, 64, 64, device="cuda")
    w = torch.randn(64, 128, 4, 4, device="cuda") * 0.03
    b = torch.randn(128, device="cuda") * 0.03
    bias = torch.randn(128, device="cuda")
    for _ in range(3):
        y = convfuse.convt_softmax_bias_scale_sigmoid(x, w, b, bias, 2.0, 2, 1, 1)
else:
    x = torch.rand(n, 8, 128, 128, device="cuda")
    w = torch.randn(64, 8, 3, 3, device="cuda") * 0.1
    b = torch.randn(64, device="cuda") * 0.1
    g, be = torch.rand(64, device="cuda") + 0.5, torch.randn(64, device="cuda")
    rm, rv, nbt = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda"), torch.zeros((), dtype=torch.int64, device="cuda")
    training = block != "kb2-73-eval"
    for _ in range(3):
        y = convfuse.conv_bn_scale(x, w, b, g, be, rm, rv, nbt, training, 0.1, 1e-5, 2.0)
torch.cuda.synchronize()
print("ok", tuple(y.shape), float(y.float().mean()))
