"""The benchmark report: eager / torch.compile / convfuse for KB2-91 and KB2-73 (train and eval) over batch sizes
1, 8, 32, 128 (128 is KernelBench's default shape), on the device.

    python3 bench/report.py                                  # run (GPU), write report.json + report.png
    python3 bench/report.py --table bench/results/report.json  # markdown table from the JSON (no GPU, no torch)
    python3 bench/report.py --plot bench/results/report.json   # redraw the PNG from the JSON (no GPU)

Times are medians of CUDA-event timings with L2 flushed before each repetition (bench/common.py's time_ms).
The memory floor is bytes / bandwidth with bytes = input + output + weights and bandwidth --bw (default 3000 GB/s,
the CLI's default; the measured copy bandwidth is recorded next to it). torch.compile compiles once per shape
(dynamic=False). A failing implementation at one size records an error string in its row; the run goes on. A time
budget (--budget-s) skips the remaining torch.compile cells rather than overrun: they say so in their row.
"""

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPLS = ("eager", "compile", "convfuse")
BLOCKS = ("kb2-91", "kb2-73 train", "kb2-73 eval")


def err_str(e):
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


# ---------------------------------------------------------------------------------------------------------------
# The device run


def make_block(block, n):
    """(eager callable, module for torch.compile, convfuse callable, bytes, impl name) at batch n."""
    import torch
    import convfuse
    import kb2_73
    import kb2_91

    torch.manual_seed(0)
    if block == "kb2-91":
        cin, cout, hw, k, s, p, op, scale = 64, 128, 64, 4, 2, 1, 1, 2.0
        model = kb2_91.Model(cin, cout, k, s, p, op, (cout, 1, 1), scale).cuda().eval()
        x = torch.rand(n, cin, hw, hw, device="cuda")
        ct = model.conv_transpose
        oh = (hw - 1) * s - 2 * p + k + op

        def fused():
            return convfuse.convt_softmax_bias_scale_sigmoid(x, ct.weight, ct.bias, model.bias, scale, stride=s,
                                                             padding=p, output_padding=op)

        def impl():
            return convfuse.plan_info(x, ct.weight, ct.bias, [("softmax_channels",),
                                      ("add_channel", model.bias.reshape(-1)), ("mul_scalar", scale), ("sigmoid",)],
                                      transposed=True, stride=s, padding=p, output_padding=op)["impl"]
        wbytes = ct.weight.numel() * 4
    else:
        training = block.endswith("train")
        cin, cout, hw, k, scale = 8, 64, 128, 3, 2.0
        base = kb2_73.Model(cin, cout, k, scale).cuda()
        with torch.no_grad():  # non-trivial running statistics, as bench/kb2_73.py
            base.bn.running_mean.uniform_(-0.2, 0.2)
            base.bn.running_var.uniform_(0.5, 1.5)
            base.bn.weight.uniform_(0.5, 1.5)
            base.bn.bias.uniform_(-0.5, 0.5)
        model = copy.deepcopy(base).train(training)
        fused_model = copy.deepcopy(base).train(training)
        x = torch.rand(n, cin, hw, hw, device="cuda")
        oh = hw - k + 1

        def fused():
            return kb2_73.fused_call(fused_model, x, training, "default")

        def impl():
            m = fused_model
            return convfuse.plan_info(x, m.conv.weight, m.conv.bias, [("batch_norm", {
                "training": training, "eps": m.bn.eps, "momentum": m.bn.momentum, "weight": m.bn.weight,
                "bias": m.bn.bias, "running_mean": m.bn.running_mean, "running_var": m.bn.running_var,
                "num_batches_tracked": m.bn.num_batches_tracked}), ("mul_scalar", scale)], transposed=False)["impl"]
        wbytes = model.conv.weight.numel() * 4
    nbytes = x.numel() * 4 + n * cout * oh * oh * 4 + wbytes
    return (lambda: model(x)), model, x, fused, nbytes, impl


def run(a):
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    from common import copy_bandwidth_gbs, header, time_ms

    t_start = time.monotonic()
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = header(None)
    del result["shape"]
    result.update({"iters": a.iters, "floor_bw_gbs": a.bw, "batches": a.batches, "rows": []})
    try:
        result["copy_bandwidth_gbs"] = round(copy_bandwidth_gbs(), 1)
    except Exception as e:  # noqa: BLE001 (a report with a hole beats no report)
        result["copy_bandwidth_gbs"] = None
        result["copy_bandwidth_error"] = err_str(e)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)

    for block in a.blocks:
        for n in a.batches:
            row = {"block": block, "n": n, "default_shape": n == 128}
            print(f"== {block} N={n}", flush=True)
            try:
                eager, model, x, fused, nbytes, impl = make_block(block, n)
            except Exception as e:  # noqa: BLE001
                row["setup_error"] = err_str(e)
                result["rows"].append(row)
                torch.cuda.empty_cache()
                continue
            row["bytes"] = nbytes
            row["floor_ms"] = nbytes / (a.bw * 1e9) * 1e3
            try:
                row["convfuse_impl"] = impl()
            except Exception as e:  # noqa: BLE001
                row["convfuse_impl"] = None
                row["convfuse_impl_error"] = err_str(e)
            fns = {"eager": eager, "convfuse": fused}
            with torch.no_grad():
                ref = None
                try:
                    ref = eager().float()
                except Exception:  # noqa: BLE001 (eager's own timing below records the error)
                    pass
                if "compile" in a.impls:
                    if a.no_compile:
                        row["compile_error"] = "skipped: --no-compile"
                    elif time.monotonic() - t_start > a.budget_s:
                        row["compile_error"] = f"skipped: time budget of {a.budget_s:.0f} s spent"
                    else:
                        try:
                            t0 = time.monotonic()
                            compiled = torch.compile(model, dynamic=False)
                            compiled(x)  # compile once for this shape
                            torch.cuda.synchronize()
                            row["compile_seconds"] = round(time.monotonic() - t0, 1)
                            fns["compile"] = lambda: compiled(x)  # noqa: B023 (used within this iteration)
                        except Exception as e:  # noqa: BLE001
                            row["compile_error"] = err_str(e)
                for name in a.impls:
                    if name not in fns:
                        continue
                    try:
                        t = time_ms(fns[name], iters=a.iters)
                        row[f"{name}_ms"] = round(t["median"], 4)
                        row[f"{name}_p20_ms"] = round(t["p20"], 4)
                        row[f"{name}_p80_ms"] = round(t["p80"], 4)
                        row[f"{name}_pct_floor"] = round(100.0 * row["floor_ms"] / t["median"], 2)
                        if name != "eager" and ref is not None:
                            row[f"{name}_max_abs_diff_vs_eager"] = (fns[name]().float() - ref).abs().max().item()
                    except Exception as e:  # noqa: BLE001
                        row[f"{name}_error"] = err_str(e)
            c, f = row.get("compile_ms"), row.get("convfuse_ms")
            row["speedup_vs_compile"] = round(c / f, 2) if c and f else None
            e = row.get("eager_ms")
            row["speedup_vs_eager"] = round(e / f, 2) if e and f else None
            result["rows"].append(row)
            print("   " + "  ".join(f"{k}={row.get(k)}" for k in ("eager_ms", "compile_ms", "convfuse_ms",
                                                                   "convfuse_pct_floor", "convfuse_impl")), flush=True)
            errors = [k for k in row if k.endswith("_error")]
            for k in errors:
                print(f"   {k}: {row[k]}", flush=True)
            del eager, model, x, fused, fns, ref
            torch.cuda.empty_cache()
            with open(out_dir / "report.json", "w") as fh:  # after every row: a killed run keeps what it measured
                json.dump(result, fh, indent=1)

    result["total_seconds"] = round(time.monotonic() - t_start, 1)
    json_path = out_dir / "report.json"
    with open(json_path, "w") as fh:
        json.dump(result, fh, indent=1)
    print("wrote", json_path)
    try:
        print("wrote", plot(result, out_dir / "report.png"))
    except Exception as e:  # noqa: BLE001
        print("chart not written:", err_str(e))
    print(table(result))


# ---------------------------------------------------------------------------------------------------------------
# Reading the JSON back: markdown table and chart (no GPU, no torch)


def fmt(v, spec):
    return "error" if v is None else format(v, spec)


def table(result):
    lines = [f"GPU: {result.get('gpu')}, torch {result.get('torch')}, git {str(result.get('git_sha'))[:12]}; "
             f"median of {result.get('iters')} CUDA-event timings, L2 flushed; memory floor at "
             f"{result.get('floor_bw_gbs')} GB/s (measured copy bandwidth {result.get('copy_bandwidth_gbs')} GB/s).",
             "",
             "| block | N | eager ms | torch.compile ms | convfuse ms | vs compile | vs eager | floor ms "
             "| convfuse % of floor | convfuse impl |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in result.get("rows", []):
        sp_c, sp_e = r.get("speedup_vs_compile"), r.get("speedup_vs_eager")
        lines.append("| {} | {}{} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["block"], r["n"], " (default)" if r.get("default_shape") else "",
            fmt(r.get("eager_ms"), ".3f"), fmt(r.get("compile_ms"), ".3f"), fmt(r.get("convfuse_ms"), ".3f"),
            f"{sp_c:.2f}x" if sp_c else "-", f"{sp_e:.2f}x" if sp_e else "-",
            fmt(r.get("floor_ms"), ".3f"), fmt(r.get("convfuse_pct_floor"), ".1f"), r.get("convfuse_impl") or "-"))
    errs = [(r["block"], r["n"], k, v) for r in result.get("rows", []) for k, v in r.items() if k.endswith("_error")]
    if errs:
        lines += ["", "Errors:"] + [f"- {b} N={n} {k}: {v}" for b, n, k, v in errs]
    return "\n".join(lines)


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.get("rows", [])
    labels = [f"{r['block'].replace('kb2-', '')}\nN={r['n']}" for r in rows]
    fig, (ax_t, ax_f) = plt.subplots(1, 2, figsize=(16, 5.5))
    width = 0.27
    colors = {"eager": "#9e9e9e", "compile": "#4c72b0", "convfuse": "#dd8452"}
    for i, name in enumerate(IMPLS):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        t = [r.get(f"{name}_ms") or math.nan for r in rows]
        pct = [r.get(f"{name}_pct_floor") or math.nan for r in rows]
        label = "torch.compile" if name == "compile" else name
        ax_t.bar(xs, t, width, label=label, color=colors[name])
        ax_f.bar(xs, pct, width, label=label, color=colors[name])
    floor = [r.get("floor_ms") or math.nan for r in rows]
    ax_t.plot(range(len(rows)), floor, "k_", markersize=18, label="memory floor")
    for ax, title, ylabel in ((ax_t, "time per call (median, L2 flushed)", "ms (log)"),
                              (ax_f, "% of the memory floor (higher is better)", "% (log)")):
        ax.set_yscale("log")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_f.axhline(100, color="k", lw=0.8, ls="--")
    fig.suptitle(f"convfuse vs PyTorch on {result.get('gpu')} (torch {result.get('torch')}, "
                 f"git {str(result.get('git_sha'))[:10]}); floor = (input + output + weights) / "
                 f"{result.get('floor_bw_gbs')} GB/s", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", metavar="JSON", help="print the markdown table of a report.json and exit")
    ap.add_argument("--plot", metavar="JSON", help="redraw report.png next to a report.json and exit")
    ap.add_argument("--iters", type=int, default=20, help="timed repetitions per cell (default 20)")
    ap.add_argument("--batches", type=lambda s: [int(v) for v in s.split(",")], default=[1, 8, 32, 128])
    ap.add_argument("--blocks", type=lambda s: s.split(","), default=list(BLOCKS),
                    help="comma-separated subset of: " + ", ".join(BLOCKS))
    ap.add_argument("--impls", type=lambda s: s.split(","), default=list(IMPLS))
    ap.add_argument("--bw", type=float, default=3000.0, help="memory-floor bandwidth, GB/s (default 3000)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="after this many seconds, skip the remaining torch.compile cells (default 420)")
    ap.add_argument("--out-dir", default=os.environ.get("REPORT_OUT", str(ROOT / "bench" / "results")))
    a = ap.parse_args(argv)
    if a.table:
        print(table(json.loads(Path(a.table).read_text())))
        return 0
    if a.plot:
        p = Path(a.plot)
        print("wrote", plot(json.loads(p.read_text()), p.with_suffix(".png")))
        return 0
    bad = [b for b in a.blocks if b not in BLOCKS] + [i for i in a.impls if i not in IMPLS]
    if bad:
        ap.error(f"unknown block or impl: {', '.join(bad)}")
    run(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
