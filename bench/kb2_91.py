"""KB2-91 benchmark: ConvTranspose2d -> softmax(dim=1) -> +bias -> *scale -> sigmoid.

Prints eager / torch.compile / convfuse / memory floor at the default KernelBench shape and writes
bench/results/kb2_91.json (or --out). Times are medians of CUDA-event timings with L2 flushed before each
repetition; errors are against the same model in float64 on the GPU."""

import argparse
import os
import copy
import json

import torch
import torch.nn as nn

from common import copy_bandwidth_gbs, errors, header, print_table, time_ms, ROOT

import convfuse


class Model(nn.Module):
    """The original KernelBench level-2 problem 91."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape,
                 scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride,
                                                 padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        x = self.conv_transpose(x)
        x = torch.softmax(x, dim=1)
        x = x + self.bias
        x = x * self.scaling_factor
        return torch.sigmoid(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "kb2_91.json"))
    a = ap.parse_args()

    n, cin, cout, hw, k, s, p, op, scale = a.batch, 64, 128, 64, 4, 2, 1, 1, 2.0
    torch.manual_seed(0)
    model = Model(cin, cout, k, s, p, op, (cout, 1, 1), scale).cuda().eval()
    x = torch.rand(n, cin, hw, hw, device="cuda")
    ct = model.conv_transpose

    def fused(math):
        return lambda: convfuse.convt_softmax_bias_scale_sigmoid(
            x, ct.weight, ct.bias, model.bias, scale, stride=s, padding=p, output_padding=op, math=math)

    with torch.no_grad():
        ref64 = copy.deepcopy(model).double()(x.double())
        eager = lambda: model(x)  # noqa: E731
        t_eager = time_ms(eager, a.iters)
        t_compile = None
        if not a.no_compile:
            compiled = torch.compile(model)
            compiled(x)
            t_compile = time_ms(lambda: compiled(x), a.iters)
        bw = copy_bandwidth_gbs()
        out_elems = n * cout * ((hw - 1) * s - 2 * p + k + op) ** 2
        floor_ms = (x.numel() + out_elems) * 4 / (bw * 1e9) * 1e3
        rows = []
        for mode, math in (("tf32", "default"), ("strict_fp32", "strict")):
            fn = fused(math)
            y = fn()
            torch.cuda.synchronize()
            max_abs, rel = errors(y, ref64)
            del y
            t = time_ms(fn, a.iters)
            rows.append({"mode": mode, "eager_ms": round(t_eager["median"], 4),
                         "compile_ms": round(t_compile["median"], 4) if t_compile else None,
                         "convfuse_ms": round(t["median"], 4), "floor_ms": round(floor_ms, 4),
                         "max_abs_err": max_abs, "rel_err": rel,
                         "convfuse_p20_ms": round(t["p20"], 4), "convfuse_p80_ms": round(t["p80"], 4),
                         "impl": convfuse.plan_info(x, ct.weight, ct.bias, [("softmax_channels",),
                                                    ("add_channel", model.bias.reshape(-1)), ("mul_scalar", scale),
                                                    ("sigmoid",)], transposed=True, stride=s, padding=p,
                                                    output_padding=op, math=math).get("impl")})
    result = header({"n": n, "c_in": cin, "c_out": cout, "h": hw, "w": hw, "k": k, "stride": s, "padding": p,
                     "output_padding": op, "scale": scale})
    result["copy_bandwidth_gbs"] = round(bw, 1)
    # knobs set for this run (the defaults otherwise): a result must say what it measured
    result["env"] = {k: v for k, v in sorted(os.environ.items())
                     if k.startswith("CONVFUSE_") and k not in ("CONVFUSE_LIBRARY", "CONVFUSE_CLI")}
    result["rows"] = rows
    for r in rows:
        r["speedup_vs_compile"] = round(r["compile_ms"] / r["convfuse_ms"], 2) if r["compile_ms"] else None
        r["speedup_vs_eager"] = round(r["eager_ms"] / r["convfuse_ms"], 2)
    print_table(rows, ["mode", "impl", "eager_ms", "compile_ms", "convfuse_ms", "floor_ms", "speedup_vs_compile",
                       "max_abs_err", "rel_err"])
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
