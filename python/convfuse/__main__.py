"""`python -m convfuse`: the CLI's main job (cli/main.c) in Python, through the library.

    python -m convfuse run kb2-91 [--batch N] [--backend auto|cpu|cuda] [--math M] [--seed S] [--repeat R]
    python -m convfuse run kb2-73 [--mode train|eval] ...
    python -m convfuse info | --version

Same problems, same seeded inputs (the counter-based PRNG of cli/main.c, bit for bit) and the same output lines, so
the checksums of `convfuse run` and `python -m convfuse run` agree on the CPU backend. Unlike the C tool (for
now) this one runs the CUDA backend at the full shape when a device is present: torch allocates device memory.
Exit codes: 0 ok, 1 run error or failed output check, 2 usage error.
"""

import argparse
import json
import statistics
import sys
import time

import torch

import convfuse

CLI_REDUCED_BATCH = 2

PROBLEMS = {
    "kb2-91": dict(title="ConvTranspose2d(64->128, k4, s2, p1, op1) -> softmax(dim=1) -> +bias -> *2 -> sigmoid",
                   transposed=True, n=128, c_in=64, h=64, w=64, c_out=128, k=4, stride=2, pad=1, out_pad=1,
                   scale=2.0, batch_norm=False),
    "kb2-73": dict(title="Conv2d(8->64, k3) -> BatchNorm2d(64) -> *2", transposed=False, n=128, c_in=8, h=128,
                   w=128, c_out=64, k=3, stride=1, pad=0, out_pad=0, scale=2.0, batch_norm=True),
}

# --------------------------------------------------------------------------------------------------------------
# The PRNG of cli/main.c: u(seed, stream, i) = splitmix64(splitmix64(seed ^ stream*C) + (i+1)*golden) >> 40, / 2^24.
# torch int64 arithmetic wraps like uint64; logical right shifts are masked arithmetic shifts.

STREAM_X, STREAM_WEI, STREAM_BIA, STREAM_CHANNEL = 1, 2, 3, 4
_M64 = (1 << 64) - 1


def _s64(v):
    v &= _M64
    return v - (1 << 64) if v >= 1 << 63 else v


def _splitmix_int(z):
    z &= _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _shr(z, k):
    return (z >> k) & ((1 << (64 - k)) - 1)


def _splitmix_tensor(z):
    z = (z ^ _shr(z, 30)) * _s64(0xBF58476D1CE4E5B9)
    z = (z ^ _shr(z, 27)) * _s64(0x94D049BB133111EB)
    return z ^ _shr(z, 31)


def rng_uniform(seed, stream, count, device="cpu"):
    """float64 tensor of `count` uniforms in [0, 1) with 24 random bits, equal to cli/main.c's rng_uniform."""
    key = _splitmix_int(seed ^ ((stream * 0xD1B54A32D192ED03) & _M64))
    i = torch.arange(1, count + 1, dtype=torch.int64, device=device)
    z = i * _s64(0x9E3779B97F4A7C15) + _s64(key)
    return _shr(_splitmix_tensor(z), 40).double() * 2.0**-24


def fill_rand(shape, seed, stream, device):
    return rng_uniform(seed, stream, _numel(shape), device).float().reshape(shape)


def fill_uniform_bound(shape, seed, stream, fan_in, device):
    bound = 1.0 / (fan_in**0.5)
    return ((2.0 * rng_uniform(seed, stream, _numel(shape), device) - 1.0) * bound).float().reshape(shape)


def fill_randn_like(count, seed, stream, device):
    u = rng_uniform(seed, stream, 12 * count, device).reshape(count, 12)
    s = u[:, 0]
    for j in range(1, 12):  # sequential, as the C loop: the sum of 24-bit dyadics is exact in double either way
        s = s + u[:, j]
    return (s - 6.0).float()


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# --------------------------------------------------------------------------------------------------------------


def run(name, batch=None, backend="auto", math="default", seed=0, repeat=1, mode="train"):
    p = PROBLEMS[name]
    cuda = convfuse.info()["cuda_available"] and torch.cuda.is_available()
    if backend == "cuda" and not cuda:
        print("convfuse: --backend cuda: CUDA backend unavailable (not built in, or no sm_90 device)",
              file=sys.stderr)
        return 1
    use_cuda = backend == "cuda" or (backend == "auto" and cuda)
    device = torch.device("cuda") if use_cuda else torch.device("cpu")
    n = batch or (p["n"] if use_cuda else CLI_REDUCED_BATCH)
    print(f"convfuse run {name}: {p['title']}")
    note = ("note: CUDA backend" if use_cuda else "note: no CUDA device: CPU backend" if backend == "auto"
            else "note: CPU backend (--backend cpu)")
    if n != p["n"]:
        note += f" at reduced shape N={n} (full shape N={p['n']})"
    print(note)

    c_in, c_out, k = p["c_in"], p["c_out"], p["k"]
    fan_in = (c_out if p["transposed"] else c_in) * k * k
    wshape = (c_in, c_out, k, k) if p["transposed"] else (c_out, c_in, k, k)
    x = fill_rand((n, c_in, p["h"], p["w"]), seed, STREAM_X, device)
    wei = fill_uniform_bound(wshape, seed, STREAM_WEI, fan_in, device)
    bia = fill_uniform_bound((c_out,), seed, STREAM_BIA, fan_in, device)
    if p["batch_norm"]:
        rmean = torch.zeros(c_out, device=device)
        rvar = torch.ones(c_out, device=device)
        nbt = torch.zeros((), dtype=torch.int64, device=device)
        bn = {"training": mode == "train", "eps": 1e-5, "momentum": 0.1, "weight": torch.ones(c_out, device=device),
              "bias": torch.zeros(c_out, device=device), "running_mean": rmean, "running_var": rvar,
              "num_batches_tracked": nbt}
        chain = [("batch_norm", bn), ("mul_scalar", p["scale"])]
    else:
        vec = fill_randn_like(c_out, seed, STREAM_CHANNEL, device)
        chain = [("softmax_channels",), ("add_channel", vec), ("mul_scalar", p["scale"]), ("sigmoid",)]
    kw = dict(transposed=p["transposed"], stride=p["stride"], padding=p["pad"], output_padding=p["out_pad"],
              backend="cuda" if use_cuda else "cpu", math=math)

    try:
        plan = convfuse.plan_info(x, wei, bia, chain, **kw)
        y = torch.empty(plan["output_shape"], device=device)
        times = []
        for _ in range(repeat):
            y.fill_(float("nan"))  # poison: a run that skips elements cannot pass the check
            if use_cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                convfuse.conv_chain(x, wei, bia, chain, out=y, **kw)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                convfuse.conv_chain(x, wei, bia, chain, out=y, **kw)
                times.append((time.perf_counter() - t0) * 1e3)
    except convfuse.ConvfuseError as e:
        print(f"convfuse: {e}", file=sys.stderr)
        return 1

    yd = y.double()
    print(f"x {tuple(x.shape)} -> y {tuple(y.shape)}".replace(",)", ")"))
    bn_note = f", batch_norm {mode}" if p["batch_norm"] else ""
    print(f"backend {device.type}, impl {plan['impl']}, math {math}{bn_note}")
    print(f"time {statistics.median_low(times):.3f} ms (median of {repeat})")
    print(f"checksum sum={yd.sum().item():.10e} sum|y|={yd.abs().sum().item():.10e}")
    if p["batch_norm"] and mode == "train":
        print(f"running stats sum(mean)={rmean.double().sum().item():.10e} "
              f"sum(var)={rvar.double().sum().item():.10e} num_batches_tracked={int(nbt.item())}")
    bad = ~torch.isfinite(y)
    if not p["batch_norm"]:
        bad |= (y < 0) | (y > 1)
    nbad = int(bad.sum().item())
    if nbad:
        print(f"convfuse: check failed: {nbad} of {y.numel()} outputs non-finite"
              + ("" if p["batch_norm"] else " or outside [0, 1]"), file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m convfuse", description=__doc__.split("\n\n")[0],
                                 epilog="exit codes: 0 ok, 1 run error or failed output check, 2 usage error")
    ap.add_argument("--version", action="store_true", help="print the package and library versions")
    sub = ap.add_subparsers(dest="cmd")
    sub.add_parser("info", help="library version, build flags, available backends (JSON)")
    rp = sub.add_parser("run", help="run a problem on seeded inputs; print impl, time, checksum")
    rp.add_argument("problem", choices=sorted(PROBLEMS))
    rp.add_argument("--batch", type=int, default=None,
                    help=f"batch size (default: full shape on CUDA, {CLI_REDUCED_BATCH} on the CPU backend)")
    rp.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    rp.add_argument("--math", choices=sorted(convfuse._lib.MATHS), default="default")
    rp.add_argument("--seed", type=int, default=0)
    rp.add_argument("--repeat", type=int, default=1, help="timed runs; the time printed is the median")
    rp.add_argument("--mode", choices=["train", "eval"], default="train", help="kb2-73: BatchNorm mode")
    a = ap.parse_args(argv)
    if a.version:
        try:
            lib = convfuse._lib.version_string()
        except convfuse.LibraryNotFoundError as e:
            lib = f"not found: {e}"
        print(f"convfuse {convfuse.__version__} (library {lib})")
        return 0
    if a.cmd == "info":
        print(json.dumps(convfuse.info(), indent=2))
        return 0
    if a.cmd == "run":
        if a.mode != "train" and a.problem != "kb2-73":
            ap.error("--mode applies to kb2-73 only")
        if a.batch is not None and a.batch < 1 or a.repeat < 1 or a.seed < 0:
            ap.error("--batch and --repeat must be >= 1, --seed >= 0")
        try:
            return run(a.problem, a.batch, a.backend, a.math, a.seed, a.repeat, a.mode)
        except convfuse.LibraryNotFoundError as e:
            print(f"convfuse: {e}", file=sys.stderr)
            return 1
    ap.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
