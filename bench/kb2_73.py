"""KB2-73 benchmark: Conv2d -> BatchNorm2d -> *scale, training mode (the KernelBench harness default) and eval.

Prints eager / torch.compile / convfuse / memory floor at the default KernelBench shape and writes
bench/results/kb2_73.json (or --out). Medians of CUDA-event timings with L2 flushed before each repetition.
Errors are against the same module in float64 on the GPU; in training mode the running statistics are
compared too (after one call from the same starting state)."""

import argparse
import copy
import json
import os

import torch
import torch.nn as nn

from common import copy_bandwidth_gbs, errors, header, print_table, time_ms, ROOT

import convfuse


class Model(nn.Module):
    """The original KernelBench level-2 problem 73."""

    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return self.bn(self.conv(x)) * self.scaling_factor


def fused_call(model, x, training, math):
    bn, conv = model.bn, model.conv
    return convfuse.conv_bn_scale(x, conv.weight, conv.bias, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                  bn.num_batches_tracked, training, bn.momentum, bn.eps, model.scaling_factor,
                                  math=math)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "kb2_73.json"))
    a = ap.parse_args()

    n, cin, cout, hw, k, scale = a.batch, 8, 64, 128, 3, 2.0
    torch.manual_seed(0)
    base = Model(cin, cout, k, scale).cuda()
    # non-trivial running statistics so eval mode is not just a scaled conv
    with torch.no_grad():
        base.bn.running_mean.uniform_(-0.2, 0.2)
        base.bn.running_var.uniform_(0.5, 1.5)
        base.bn.weight.uniform_(0.5, 1.5)
        base.bn.bias.uniform_(-0.5, 0.5)
    x = torch.rand(n, cin, hw, hw, device="cuda")
    oh = hw - k + 1
    bw = copy_bandwidth_gbs()
    floor_ms = (x.numel() + n * cout * oh * oh) * 4 / (bw * 1e9) * 1e3
    rows = []
    with torch.no_grad():
        for mode in ("train", "eval"):
            training = mode == "train"
            model = copy.deepcopy(base).train(training)
            ref_model = copy.deepcopy(base).double().train(training)
            ref64 = ref_model(x.double())
            fused_model = copy.deepcopy(base).train(training)
            y = fused_call(fused_model, x, training, "default")
            torch.cuda.synchronize()
            max_abs, rel = errors(y, ref64)
            stats_err = None
            if training:
                stats_err = max((fused_model.bn.running_mean.double() - ref_model.bn.running_mean).abs().max().item(),
                                (fused_model.bn.running_var.double() - ref_model.bn.running_var).abs().max().item())
            del y
            t_eager = time_ms(lambda: model(x), a.iters)
            t_compile = None
            if not a.no_compile:
                compiled = torch.compile(model)
                compiled(x)
                t_compile = time_ms(lambda: compiled(x), a.iters)
            t = time_ms(lambda: fused_call(fused_model, x, training, "default"), a.iters)
            alt = {}
            if training:  # the batch-norm training paths, same run (docs/kb2_73.md): statistics from the input
                # Gram (the default where it applies), the direct statistics pass, store-then-normalise in place
                for path, var, val in (("recompute", "CONVFUSE_BN_PATH", "recompute"),
                                       ("direct-stats", "CONVFUSE_BN_STATS", "direct"),
                                       ("inplace", "CONVFUSE_BN_PATH", "inplace")):
                    os.environ[var] = val
                    m2 = copy.deepcopy(base).train(True)
                    y2 = fused_call(m2, x, True, "default")
                    torch.cuda.synchronize()
                    e2 = errors(y2, ref64)
                    del y2
                    alt[path] = {"ms": round(time_ms(lambda: fused_call(m2, x, True, "default"), a.iters)["median"], 4),
                                 "max_abs_err": e2[0]}
                    del os.environ[var]
            info = convfuse.plan_info(x, model.conv.weight, model.conv.bias, [("batch_norm", {
                "training": training, "eps": model.bn.eps, "momentum": model.bn.momentum,
                "weight": model.bn.weight, "bias": model.bn.bias, "running_mean": model.bn.running_mean,
                "running_var": model.bn.running_var, "num_batches_tracked": model.bn.num_batches_tracked}),
                ("mul_scalar", scale)], transposed=False)
            rows.append({"mode": mode, "impl": info.get("impl"), "eager_ms": round(t_eager["median"], 4),
                         "compile_ms": round(t_compile["median"], 4) if t_compile else None,
                         "convfuse_ms": round(t["median"], 4), "floor_ms": round(floor_ms, 4),
                         "max_abs_err": max_abs, "rel_err": rel, "running_stats_max_abs_err": stats_err,
                         "convfuse_p20_ms": round(t["p20"], 4), "convfuse_p80_ms": round(t["p80"], 4),
                         "bn_paths": alt or None})
    result = header({"n": n, "c_in": cin, "c_out": cout, "h": hw, "w": hw, "k": k, "scale": scale})
    result["copy_bandwidth_gbs"] = round(bw, 1)
    result["rows"] = rows
    for r in rows:
        r["speedup_vs_compile"] = round(r["compile_ms"] / r["convfuse_ms"], 2) if r["compile_ms"] else None
        r["speedup_vs_eager"] = round(r["eager_ms"] / r["convfuse_ms"], 2)
    print_table(rows, ["mode", "impl", "eager_ms", "compile_ms", "convfuse_ms", "floor_ms", "speedup_vs_compile",
                       "max_abs_err", "rel_err", "running_stats_max_abs_err", "bn_paths"])
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
