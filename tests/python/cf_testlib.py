"""Shared by tests/python and tests/gpu: random problem generation, eager PyTorch references, comparisons.

A case is a conv description plus a chain description (no tensors); `materialize` draws fresh random tensors for it.
Every case has a one-line reproducer (`Case.line()`), printed on failure, in the harness notation
`n2c3h7w5-k3x2c4-s2x1p1x0d1x1op1x0-T+b:softmax_channels,add_channel,mul_scalar(2),sigmoid`.
"""

import math
import random
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

# Accuracy contract of a backend against float64 PyTorch (see docs/python.md, "Tests"):
#   raw: the output is fp32, so each element is off by its rounding, <= 2^-24 relative:
#        ||err|| / ||ref|| <= REL_RAW and max |err| <= 2^-24 * max |ref| (+ tiny absolute slack)
#   rounded: against the float64 result rounded once to fp32, the CPU backend (double everywhere) must agree to
#        ||err|| / ||ref|| <= REL_ROUNDED = 1e-9 (a 1-ulp flip only where the double results straddle a rounding edge)
#   noise floor: errors below ABS_FLOOR pass. Where the exact result is ~0 (a BatchNorm channel whose values are all
#        equal), both sides hold double rounding noise of O(1) intermediates (~1e-16) and a relative error means nothing.
REL_RAW = 1e-7
REL_ROUNDED = 1e-9
ABS_FLOOR = 1e-12
FP32_TOL = dict(atol=1e-4, rtol=1e-4)


def out_size(transposed, size, k, s, p, op, d):
    if transposed:
        return (size - 1) * s - 2 * p + d * (k - 1) + op + 1
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


@dataclass
class Case:
    transposed: bool
    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    k: tuple
    stride: tuple
    padding: tuple
    output_padding: tuple
    dilation: tuple
    bias: bool
    chain: list  # descriptions: ("softmax_channels",), ("mul_scalar", 2.0), ("add_channel",), ("affine_channel",),
    #              ("batch_norm", training, momentum, eps, affine), ...
    x_scale: float = 1.0  # inputs are torch.rand * x_scale (large logits: 1e4)
    nan_inputs: int = 0  # number of NaNs planted in x
    extra: dict = field(default_factory=dict)

    def out_hw(self):
        return tuple(out_size(self.transposed, (self.h, self.w)[i], self.k[i], self.stride[i], self.padding[i],
                              self.output_padding[i], self.dilation[i]) for i in range(2))

    def line(self):
        def xy(t):
            return f"{t[0]}x{t[1]}"

        ops = []
        for op in self.chain:
            if op[0] in ("mul_scalar", "add_scalar"):
                ops.append(f"{op[0]}({op[1]:g})")
            elif op[0] == "batch_norm":
                ops.append(f"batch_norm({'train' if op[1] else 'eval'},m={op[2]},eps={op[3]:g}"
                           f"{',affine' if op[4] else ''})")
            else:
                ops.append(op[0])
        tail = ""
        if self.x_scale != 1.0:
            tail += f" x*{self.x_scale:g}"
        if self.nan_inputs:
            tail += f" nan={self.nan_inputs}"
        return (f"n{self.n}c{self.c_in}h{self.h}w{self.w}-k{xy(self.k)}c{self.c_out}-s{xy(self.stride)}"
                f"p{xy(self.padding)}d{xy(self.dilation)}op{xy(self.output_padding)}-{'T' if self.transposed else 'C'}"
                f"{'+b' if self.bias else ''}:{','.join(ops)}{tail}")


# --------------------------------------------------------------------------------------------------------------
# Random cases.

ELEMENTWISE = [("relu",), ("tanh",), ("gelu",), ("sigmoid",), ("add_channel",), ("affine_channel",)]


def random_chain(rng):
    r = rng.random()
    if r < 0.25:
        return [("softmax_channels",), ("add_channel",), ("mul_scalar", 2.0), ("sigmoid",)]  # KB2-91
    if r < 0.45:
        mom = rng.choice([0.1, 0.3, None])
        return [("batch_norm", rng.random() < 0.6, mom, rng.choice([1e-5, 1e-3]), rng.random() < 0.7),
                ("mul_scalar", rng.choice([2.0, -0.5]))]  # KB2-73
    ops = []
    for _ in range(rng.randint(1, 5)):
        p = rng.random()
        if p < 0.15:
            ops.append(("softmax_channels",))
        elif p < 0.3:
            ops.append((rng.choice(["mul_scalar", "add_scalar"]), round(rng.uniform(-3, 3), 3)))
        else:
            ops.append(rng.choice(ELEMENTWISE))
    return ops


def random_case(rng, transposed=None, small=True, chain=None):
    """A random valid case (resampled until the output is non-empty and BN training has > 1 value per channel)."""
    while True:
        t = rng.random() < 0.5 if transposed is None else transposed
        k = (rng.randint(1, 5), rng.randint(1, 5)) if rng.random() < 0.3 else (rng.randint(1, 5),) * 2
        s = (rng.randint(1, 3), rng.randint(1, 3)) if rng.random() < 0.3 else (rng.randint(1, 3),) * 2
        d = (1, 1) if rng.random() < 0.6 else (rng.randint(1, 3), rng.randint(1, 3))
        p = tuple(rng.randint(0, max(0, (d[i] * (k[i] - 1)) // 2 + (0 if t else 1))) for i in range(2))
        op = (0, 0)
        if t:
            op = tuple(rng.randint(0, max(s[i], d[i]) - 1) for i in range(2))
        hmax = 9 if small else 24
        c = Case(transposed=t, n=rng.choice([1, 1, 2, 3]), c_in=rng.randint(1, 6), h=rng.randint(1, hmax),
                 w=rng.randint(1, hmax), c_out=rng.choice([1, 2, 3, 5, 7, 8, 13]), k=k, stride=s, padding=p,
                 output_padding=op, dilation=d, bias=rng.random() < 0.7,
                 chain=chain if chain is not None else random_chain(rng))
        oh, ow = c.out_hw()
        if oh < 1 or ow < 1:
            continue
        bn_train = any(o[0] == "batch_norm" and o[1] for o in c.chain)
        if bn_train and c.n * oh * ow < 2:
            continue
        return c


# --------------------------------------------------------------------------------------------------------------
# Tensors and the eager reference.


def materialize(case, gen, device="cpu"):
    """Fresh random fp32 tensors for `case`: dict(x, weight, bias, ops=[per-op dict of tensors])."""
    def rand(*shape):
        return torch.rand(shape, generator=gen).to(device)

    def randn(*shape):
        return torch.randn(shape, generator=gen).to(device)

    x = rand(case.n, case.c_in, case.h, case.w) * case.x_scale
    if case.nan_inputs:
        flat = x.view(-1)
        idx = torch.randint(0, flat.numel(), (case.nan_inputs,), generator=gen)
        # NaN bit patterns in turn: 0x7fffffff (a GPU's 0/0; rounding it to TF32 by a bare add-and-mask gave -0),
        # torch's 0x7fc00000, a negative NaN
        bits = torch.tensor([0x7FFFFFFF, 0x7FC00000, -1], dtype=torch.int32).repeat(case.nan_inputs)
        flat[idx.to(device)] = bits[: case.nan_inputs].view(torch.float32).to(device)
    wshape = (case.c_in, case.c_out) if case.transposed else (case.c_out, case.c_in)
    fan_in = (case.c_out if case.transposed else case.c_in) * case.k[0] * case.k[1]
    bound = 1.0 / math.sqrt(fan_in)
    weight = (rand(*wshape, *case.k) * 2 - 1) * bound
    bias = (rand(case.c_out) * 2 - 1) * bound if case.bias else None
    ops = []
    for op in case.chain:
        if op[0] == "add_channel":
            ops.append({"v": randn(case.c_out, 1, 1)})
        elif op[0] == "affine_channel":
            ops.append({"a": randn(case.c_out), "b": randn(case.c_out)})
        elif op[0] == "batch_norm":
            affine = op[4]
            ops.append({
                "weight": (1 + 0.5 * randn(case.c_out)) if affine else None,
                "bias": randn(case.c_out) if affine else None,
                "running_mean": 0.1 * randn(case.c_out),
                "running_var": 0.5 + rand(case.c_out),
                "num_batches_tracked": torch.tensor(rng_int(gen, 0, 5), dtype=torch.int64, device=device),
            })
        else:
            ops.append({})
    return {"x": x, "weight": weight, "bias": bias, "ops": ops}


def rng_int(gen, lo, hi):
    return int(torch.randint(lo, hi + 1, (1,), generator=gen).item())


def convfuse_chain(case, t):
    """The conv_chain op list for `case` with tensors `t` (BN buffers are used in place)."""
    out = []
    for op, bufs in zip(case.chain, t["ops"]):
        if op[0] == "add_channel":
            out.append(("add_channel", bufs["v"]))
        elif op[0] == "affine_channel":
            out.append(("affine_channel", bufs["a"], bufs["b"]))
        elif op[0] == "batch_norm":
            out.append(("batch_norm", {"training": op[1], "momentum": op[2], "eps": op[3], **bufs}))
        elif op[0] in ("mul_scalar", "add_scalar"):
            out.append((op[0], op[1]))
        else:
            out.append((op[0],))
    return out


def conv_kwargs(case):
    kw = dict(stride=case.stride, padding=case.padding, dilation=case.dilation)
    if case.transposed:
        kw["output_padding"] = case.output_padding
    return kw


def eager(case, t, dtype):
    """The chain in plain PyTorch at `dtype`. BN buffers are copied (the caller compares them separately).
    Returns (y, bn_states) with bn_states a list of (running_mean, running_var, num_batches_tracked) after the op."""
    def cv(v):
        return None if v is None else v.to(dtype)

    x, w, b = cv(t["x"]), cv(t["weight"]), cv(t["bias"])
    conv = F.conv_transpose2d if case.transposed else F.conv2d
    y = conv(x, w, b, **conv_kwargs(case))
    states = []
    for op, bufs in zip(case.chain, t["ops"]):
        kind = op[0]
        if kind == "add_channel":
            y = y + cv(bufs["v"])
        elif kind == "mul_scalar":
            y = y * op[1]
        elif kind == "add_scalar":
            y = y + op[1]
        elif kind == "affine_channel":
            y = y * cv(bufs["a"]).view(1, -1, 1, 1) + cv(bufs["b"]).view(1, -1, 1, 1)
        elif kind == "batch_norm":
            training, momentum, eps, _ = op[1:]
            bn = nn.BatchNorm2d(case.c_out, eps=eps, momentum=momentum, affine=bufs["weight"] is not None)
            bn = bn.to(device=y.device, dtype=dtype)
            with torch.no_grad():
                if bufs["weight"] is not None:
                    bn.weight.copy_(bufs["weight"])
                    bn.bias.copy_(bufs["bias"])
                bn.running_mean.copy_(bufs["running_mean"])
                bn.running_var.copy_(bufs["running_var"])
                bn.num_batches_tracked.copy_(bufs["num_batches_tracked"])
            bn.train(training)
            y = bn(y)
            states.append((bn.running_mean.detach(), bn.running_var.detach(), bn.num_batches_tracked.clone()))
        elif kind == "softmax_channels":
            y = torch.softmax(y, dim=1)
        elif kind == "sigmoid":
            y = torch.sigmoid(y)
        elif kind == "relu":
            y = torch.relu(y)
        elif kind == "tanh":
            y = torch.tanh(y)
        elif kind == "gelu":
            y = F.gelu(y)
        else:
            raise AssertionError(kind)
    return y.detach(), states


def snapshot_bn(t):
    """Copies of the BN buffers (before a run that updates them in place)."""
    out = {"x": t["x"], "weight": t["weight"], "bias": t["bias"], "ops": []}
    for bufs in t["ops"]:
        out["ops"].append({k: (v.clone() if isinstance(v, torch.Tensor) and k in (
            "running_mean", "running_var", "num_batches_tracked") else v) for k, v in bufs.items()})
    return out


# --------------------------------------------------------------------------------------------------------------
# Comparison.


def errors(out, ref):
    """(max abs err, ||err|| / ||ref||) over the elements finite in ref (NaN positions are compared separately)."""
    out, ref = out.double(), ref.double()
    m = torch.isfinite(ref)
    e = (out[m] - ref[m])
    nref = ref[m].norm().item()
    rel = e.norm().item() / nref if nref > 0 else e.norm().item()
    return (e.abs().max().item() if e.numel() else 0.0), rel


def check_output(out, ref64, ref32, line, rounded=True, fp32=True, rel_raw=REL_RAW):
    """Asserts the accuracy contract; returns (max_abs, rel) vs float64 for reporting."""
    assert out.dtype == torch.float32
    nan_out, nan_ref = torch.isnan(out), torch.isnan(ref64)
    if not torch.equal(nan_out, nan_ref):
        msg = (f"NaN positions differ: {int(nan_out.sum())} in output, {int(nan_ref.sum())} in reference\n"
               f"  reproduce: {line}")
        print(msg)
        raise AssertionError(msg)
    inf_ok = torch.equal(torch.isinf(out), torch.isinf(ref64.float()))
    assert inf_ok, f"Inf positions differ\n  reproduce: {line}"
    max_abs, rel = errors(out, ref64)
    fin = torch.isfinite(ref64)
    scale = ref64[fin].abs().max().item() if fin.any() else 0.0
    bound_abs = 2.0**-24 * scale * 1.0001 + 1e-30
    problems = []
    if max_abs <= ABS_FLOOR:
        rel = 0.0 if rel > rel_raw else rel
    if rel > rel_raw:
        problems.append(f"||err||/||ref|| = {rel:.3e} > {rel_raw:.0e} (vs float64)")
    if max_abs > max(bound_abs, ABS_FLOOR) and rel_raw == REL_RAW:
        problems.append(f"max abs err = {max_abs:.3e} > 2^-24 * max|ref| = {bound_abs:.3e} (vs float64)")
    if rounded:
        max_r, rel_r = errors(out, ref64.float())
        if rel_r > REL_ROUNDED and max_r > ABS_FLOOR:
            problems.append(f"||err||/||ref|| = {rel_r:.3e} > {REL_ROUNDED:.0e} (vs float64 rounded to fp32)")
    if problems:
        msg = "; ".join(problems) + f"\n  reproduce: {line}"
        print(msg)
        raise AssertionError(msg)
    if fp32 and ref32 is not None:
        try:
            torch.testing.assert_close(out, ref32, equal_nan=True, **FP32_TOL)
        except AssertionError as e:
            print(f"vs torch fp32 failed\n  reproduce: {line}")
            raise AssertionError(f"{e}\n  reproduce: {line}") from None
    return max_abs, rel


def require_cuda_backend():
    """Skip the calling test module (visibly, with the reason) without a CUDA device or without the CUDA backend in
    the library. Call at module level, before anything touches the device."""
    import pytest
    import torch

    import convfuse

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device", allow_module_level=True)
    try:
        info = convfuse.info()
    except Exception as e:  # noqa: BLE001 - any load failure is a reason to skip, shown to the user
        pytest.skip(f"convfuse library not loadable: {e}", allow_module_level=True)
    if not info.get("cuda_available"):
        pytest.skip(f"convfuse built without CUDA or no sm_90 device ({info.get('library_version_string')})",
                    allow_module_level=True)
    return info
