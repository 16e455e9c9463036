"""The C CPU backend against eager PyTorch on CPU: float64 (the contract in cf_testlib) and fp32 (atol=rtol=1e-4).

Randomized, seeded cases; fresh random inputs per case; the output buffer is poisoned with NaN before each run.
A failure prints the one-line reproducer of its case."""

import random
import zlib

import pytest
import torch
import torch.nn as nn

import convfuse
from cf_testlib import Case, check_output, conv_kwargs, convfuse_chain, eager, materialize, random_case, snapshot_bn

SEED = 20261122
N_RANDOM = 48


def run_case(case, gen, rounded=True, fp32=True):
    t = materialize(case, gen)
    before = snapshot_bn(t)  # eager runs from the pre-call BN state
    oh, ow = case.out_hw()
    out = torch.full((case.n, case.c_out, oh, ow), float("nan"))
    y = convfuse.conv_chain(t["x"], t["weight"], t["bias"], convfuse_chain(case, t), transposed=case.transposed,
                            out=out, **conv_kwargs(case))
    assert y is out
    ref64, st64 = eager(case, before, torch.float64)
    ref32, st32 = eager(case, before, torch.float32)
    err = check_output(out, ref64, ref32, case.line(), rounded=rounded, fp32=fp32)
    bn_ops = [b for op, b in zip(case.chain, t["ops"]) if op[0] == "batch_norm"]
    for bufs, s64, s32 in zip(bn_ops, st64, st32):
        check_bn_state(bufs, s64, s32, case.line())
    return err


def check_bn_state(bufs, s64, s32, line):
    for name, got, r64, r32 in (("running_mean", bufs["running_mean"], s64[0], s32[0]),
                                ("running_var", bufs["running_var"], s64[1], s32[1])):
        rel = ((got.double() - r64).norm() / r64.norm().clamp_min(1e-300)).item()
        assert rel <= 5e-7, f"{name}: ||err||/||ref|| = {rel:.3e} vs float64\n  reproduce: {line}"
        torch.testing.assert_close(got, r32, atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}\n  reproduce: {line}")
    assert int(bufs["num_batches_tracked"]) == int(s64[2]), f"num_batches_tracked\n  reproduce: {line}"


@pytest.mark.parametrize("i", range(N_RANDOM))
def test_random_case(i):
    rng = random.Random(SEED + i)
    gen = torch.Generator().manual_seed(SEED + i)
    case = random_case(rng, transposed=(i % 2 == 0))
    max_abs, rel = run_case(case, gen)
    print(f"[cpu] {case.line()}: max_abs={max_abs:.2e} rel={rel:.2e}")


EDGE_CASES = [
    # N=1, Cout=1, 1x1 kernels, odd sizes, large strides and dilations, maximal output_padding.
    Case(False, 1, 1, 1, 1, 1, (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), True, [("sigmoid",)]),
    Case(False, 1, 3, 7, 5, 1, (5, 3), (3, 2), (2, 1), (0, 0), (1, 2), False, [("softmax_channels",), ("tanh",)]),
    Case(True, 1, 2, 1, 1, 3, (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), True, [("gelu",)]),
    Case(True, 2, 3, 5, 3, 1, (4, 4), (3, 3), (1, 1), (2, 2), (1, 1), True,
         [("softmax_channels",), ("add_channel",), ("mul_scalar", 2.0), ("sigmoid",)]),
    Case(True, 1, 4, 3, 7, 6, (3, 5), (2, 3), (2, 0), (1, 2), (3, 2), False, [("relu",), ("add_scalar", -0.25)]),
    Case(False, 2, 5, 9, 11, 8, (3, 3), (1, 1), (4, 4), (0, 0), (3, 3), True, [("affine_channel",), ("relu",)]),
    # KB2-91 default geometry at a small size.
    Case(True, 2, 8, 8, 8, 16, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True,
         [("softmax_channels",), ("add_channel",), ("mul_scalar", 2.0), ("sigmoid",)]),
    # KB2-73 geometry at a small size, train and eval.
    Case(False, 4, 8, 12, 12, 16, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True,
         [("batch_norm", True, 0.1, 1e-5, True), ("mul_scalar", 2.0)]),
    Case(False, 4, 8, 12, 12, 16, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True,
         [("batch_norm", False, 0.1, 1e-5, True), ("mul_scalar", 2.0)]),
    # Every op, softmax twice, 12 ops long.
    Case(False, 2, 3, 6, 6, 5, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), True,
         [("add_channel",), ("softmax_channels",), ("mul_scalar", 3.0), ("add_scalar", -1.0), ("affine_channel",),
          ("batch_norm", True, None, 1e-3, True), ("relu",), ("tanh",), ("gelu",), ("softmax_channels",),
          ("sigmoid",), ("mul_scalar", 0.5)]),
]


@pytest.mark.parametrize("case", EDGE_CASES, ids=lambda c: c.line())
def test_edge_case(case):
    gen = torch.Generator().manual_seed(zlib.crc32(case.line().encode()))
    max_abs, rel = run_case(case, gen)
    print(f"[cpu] {case.line()}: max_abs={max_abs:.2e} rel={rel:.2e}")


@pytest.mark.parametrize("i", range(6))
def test_large_logits_softmax(i):
    """Logits around 1e4: softmax must subtract the max (a naive exp overflows to inf/NaN). Compared with float64
    only: fp32 PyTorch itself is off by far more than 1e-4 here (its conv error is ~1e-3 in the logits)."""
    rng = random.Random(SEED + 1000 + i)
    gen = torch.Generator().manual_seed(SEED + 1000 + i)
    case = random_case(rng, transposed=(i % 2 == 1),
                       chain=[("softmax_channels",), ("add_channel",), ("mul_scalar", 2.0), ("sigmoid",)])
    case.x_scale = 1e4
    if case.c_out == 1:
        case.c_out = 5
    max_abs, rel = run_case(case, gen, fp32=False)
    print(f"[cpu] {case.line()}: max_abs={max_abs:.2e} rel={rel:.2e}")


@pytest.mark.parametrize("i", range(6))
def test_nan_inputs(i):
    """NaNs in x: the NaN positions of the output match PyTorch's exactly; the other values meet the contract."""
    rng = random.Random(SEED + 2000 + i)
    gen = torch.Generator().manual_seed(SEED + 2000 + i)
    chains = [[("softmax_channels",), ("add_channel",), ("mul_scalar", 2.0), ("sigmoid",)], [("relu",)],
              [("tanh",), ("add_scalar", 1.0)], [("batch_norm", False, 0.1, 1e-5, True), ("mul_scalar", 2.0)]]
    case = random_case(rng, transposed=(i % 2 == 0), chain=chains[i % len(chains)])
    case.nan_inputs = 1 + i % 3
    run_case(case, gen)


# --------------------------------------------------------------------------------------------------------------
# The two problems, with their eager modules defined here as KernelBench defines them.


class KB91(nn.Module):
    """KernelBench level 2 #91: ConvTranspose2d -> softmax(dim=1) -> + bias -> * scale -> sigmoid."""

    def __init__(self, c_in, c_out, k, stride, padding, output_padding, scale, dilation=1):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(c_in, c_out, k, stride=stride, padding=padding,
                                                 output_padding=output_padding, dilation=dilation)
        self.bias = nn.Parameter(torch.randn(c_out, 1, 1))
        self.scaling_factor = scale

    def forward(self, x):
        x = self.conv_transpose(x)
        x = torch.softmax(x, dim=1)
        x = x + self.bias
        x = x * self.scaling_factor
        return torch.sigmoid(x)


class KB73(nn.Module):
    """KernelBench level 2 #73: Conv2d -> BatchNorm2d -> * scale."""

    def __init__(self, c_in, c_out, k, scale, momentum=0.1, eps=1e-5):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k)
        self.bn = nn.BatchNorm2d(c_out, momentum=momentum, eps=eps)
        self.scaling_factor = scale

    def forward(self, x):
        return self.bn(self.conv(x)) * self.scaling_factor


def kb91_convfuse(m, x):
    ct = m.conv_transpose
    return convfuse.convt_softmax_bias_scale_sigmoid(
        x, ct.weight.detach(), ct.bias.detach(), m.bias.detach(), m.scaling_factor, ct.stride, ct.padding,
        ct.output_padding, ct.dilation)


@pytest.mark.parametrize("shape", [(2, 8, 7, 9, 16, 4, 2, 1, 1, 1), (1, 3, 5, 5, 1, 3, 3, 0, 2, 1),
                                   (3, 5, 6, 4, 7, 3, 1, 2, 0, 2), (1, 4, 9, 3, 12, 5, 2, 2, 1, 3)])
def test_kb91_module(shape):
    n, c_in, h, w, c_out, k, s, p, op, d = shape
    torch.manual_seed(sum(shape))
    m = KB91(c_in, c_out, k, s, p, op, 2.0, dilation=d)
    x = torch.rand(n, c_in, h, w)
    line = f"kb2-91 n{n}c{c_in}h{h}w{w}-k{k}c{c_out}-s{s}p{p}d{d}op{op}"
    with torch.no_grad():
        y = kb91_convfuse(m, x)
        ref32 = m(x)
        ref64 = m.double()(x.double())
    max_abs, rel = check_output(y, ref64, ref32, line)
    print(f"[cpu] {line}: max_abs={max_abs:.2e} rel={rel:.2e}")


@pytest.mark.parametrize("momentum", [0.1, None])
def test_kb73_module_training_three_calls(momentum):
    """Three consecutive training calls on the same buffers: outputs and running_mean/var/num_batches_tracked
    follow nn.BatchNorm2d.train() (momentum=None: cumulative average)."""
    torch.manual_seed(73)
    m32 = KB73(3, 6, 3, 2.0, momentum=momentum).train()
    with torch.no_grad():
        m32.bn.weight.uniform_(0.5, 1.5)
        m32.bn.bias.uniform_(-0.5, 0.5)
    m64 = KB73(3, 6, 3, 2.0, momentum=momentum).double().train()
    m64.load_state_dict(m32.state_dict())
    bn = m32.bn
    rm, rv, nbt = bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()
    for call in range(3):
        x = torch.rand(2, 3, 7, 6)
        line = f"kb2-73 train momentum={momentum} call {call}: n2c3h7w6-k3c6"
        out = torch.full((2, 6, 5, 4), float("nan"))
        with torch.no_grad():
            y = convfuse.conv_bn_scale(x, m32.conv.weight, m32.conv.bias, bn.weight, bn.bias, rm, rv, nbt,
                                       training=True, momentum=momentum, eps=bn.eps, scale=2.0, out=out)
            ref32 = m32(x)
            ref64 = m64(x.double())
        assert y is out
        max_abs, rel = check_output(y, ref64, ref32, line)
        print(f"[cpu] {line}: max_abs={max_abs:.2e} rel={rel:.2e}")
        check_bn_state({"running_mean": rm, "running_var": rv, "num_batches_tracked": nbt},
                       (m64.bn.running_mean, m64.bn.running_var, m64.bn.num_batches_tracked),
                       (bn.running_mean, bn.running_var, bn.num_batches_tracked), line)
    assert int(nbt) == 3


def test_kb73_module_eval():
    torch.manual_seed(7)
    m = KB73(4, 5, 3, 2.0).eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.2, 0.2)
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.5, 0.5)
    x = torch.rand(3, 4, 9, 8)
    rm, rv = m.bn.running_mean.clone(), m.bn.running_var.clone()
    with torch.no_grad():
        y = convfuse.conv_bn_scale(x, m.conv.weight, m.conv.bias, m.bn.weight, m.bn.bias, rm, rv, None,
                                   training=False, momentum=0.1, eps=m.bn.eps, scale=2.0)
        ref32 = m(x)
        ref64 = m.double()(x.double())
    check_output(y, ref64, ref32, "kb2-73 eval n3c4h9w8-k3c5")
    assert torch.equal(rm, m.bn.running_mean.float()) and torch.equal(rv, m.bn.running_var.float()), \
        "eval mode must not touch the running stats"


def test_non_contiguous_inputs():
    """Views with odd strides (channels_last, a transposed slice) give the same result as contiguous copies."""
    gen = torch.Generator().manual_seed(5)
    x = torch.rand(2, 6, 9, 8, generator=gen).to(memory_format=torch.channels_last)
    w = torch.rand(4, 6, 3, 3, generator=gen).transpose(2, 3)
    b = torch.rand(8, generator=gen)[::2]
    v = torch.randn(1, 4, 1, 1, generator=gen)
    chain = [("add_channel", v), ("tanh",)]
    y = convfuse.conv_chain(x, w, b, chain, transposed=False, padding=1)
    y2 = convfuse.conv_chain(x.contiguous(), w.contiguous(), b.contiguous(), chain, transposed=False, padding=1)
    assert torch.equal(y, y2)
    ref = torch.tanh(torch.nn.functional.conv2d(x.double(), w.double(), b.double(), padding=1) + v.double())
    check_output(y, ref, None, "non-contiguous n2c6h9w8-k3c4-p1:add_channel,tanh")


def test_plan_cache_reused():
    x = torch.rand(1, 2, 5, 5)
    w = torch.rand(3, 2, 3, 3)
    convfuse.conv_chain(x, w, None, [("relu",)], transposed=False)
    n = len(convfuse._plans)
    for _ in range(3):
        convfuse.conv_chain(torch.rand(1, 2, 5, 5), w, None, [("relu",)], transposed=False)
    assert len(convfuse._plans) == n
    info = convfuse.plan_info(x, w, None, [("relu",)], transposed=False)
    assert info["impl"] == "cpu_reference" and info["output_shape"] == (1, 3, 3, 3)
    assert info["workspace_bytes"] == 0
