"""NaN and ±Inf inputs, and huge logits, on the CPU backend: compared with eager PyTorch in float64.

The contract (cf_testlib.check_output): NaN positions equal PyTorch's exactly, ±Inf positions and signs equal those of
the float64 result rounded to fp32, every other element within the float64 accuracy contract. Softmax over huge
logits (even logits past the fp32 range: the CPU backend keeps the conv output in double) stays finite.
The eager modules are the torch.nn.functional calls in cf_testlib.eager, written out per op there."""

import math
import random
import zlib

import pytest
import torch

import convfuse
from cf_testlib import Case, check_output, conv_kwargs, convfuse_chain, eager, materialize, snapshot_bn

INF = float("inf")
POISON = 1234.5  # not NaN: NaN outputs are expected here, so an unwritten element must look different


def run(case, t, fp32=False, check=True):
    """Runs `case` with tensors `t` on the CPU backend; checks it against float64 PyTorch; returns the output."""
    before = snapshot_bn(t)
    oh, ow = case.out_hw()
    out = torch.full((case.n, case.c_out, oh, ow), POISON)
    y = convfuse.conv_chain(t["x"], t["weight"], t["bias"], convfuse_chain(case, t), transposed=case.transposed,
                            backend="cpu", out=out, **conv_kwargs(case))
    assert y is out
    ref64, _ = eager(case, before, torch.float64)
    ref32 = eager(case, before, torch.float32)[0] if fp32 else None
    assert not (out == POISON).any(), f"elements left unwritten\n  reproduce: {case.line()}"
    if check:
        check_output(out, ref64, ref32, case.line(), fp32=fp32)
    return out, ref64


def small_case(transposed, chain, c_out=4, bias=True):
    # k3, stride 2 for the transposed conv (overlapping and non-overlapping taps), padding 1
    return Case(transposed, 2, 3, 6, 5, c_out, (3, 3), (2, 2) if transposed else (1, 1), (1, 1),
                (1, 1) if transposed else (0, 0), (1, 1), bias, chain)


def tensors(case, positive_weights=False):
    gen = torch.Generator().manual_seed(zlib.crc32(case.line().encode()))
    t = materialize(case, gen)
    t["x"] = t["x"] * 2 - 1  # signed inputs
    if positive_weights:  # every tap of an Inf input then has its sign: +-Inf outputs, not Inf - Inf
        t["weight"] = t["weight"].abs() + 0.01
    return t


CHAINS = {
    "add_s": [("add_scalar", 0.5)],  # (the Python layer refuses an empty chain)
    "relu": [("relu",)],
    "sigmoid": [("sigmoid",)],
    "tanh": [("tanh",)],
    "gelu": [("gelu",)],
    "softmax": [("softmax_channels",)],
    "kb91": [("softmax_channels",), ("add_channel",), ("mul_scalar", 2.0), ("sigmoid",)],
    "neg_relu": [("mul_scalar", -2.0), ("relu",)],
    "affine_add": [("affine_channel",), ("add_scalar", 1.5)],
    "bn_eval": [("batch_norm", False, 0.1, 1e-5, True), ("mul_scalar", 2.0)],
    "bn_train": [("batch_norm", True, 0.1, 1e-5, True), ("tanh",)],
}


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "convT"])
@pytest.mark.parametrize("chain", list(CHAINS), ids=list(CHAINS))
@pytest.mark.parametrize("value", [float("nan"), INF, -INF], ids=["nan", "+inf", "-inf"])
def test_special_input(value, chain, transposed):
    """One NaN/+Inf/-Inf input element: it reaches exactly the outputs PyTorch's reaches, with the same value class
    (weights positive, so a single Inf makes ±Inf conv outputs that each op then maps as torch does:
    relu(-inf) = 0, sigmoid(±inf) = 1/0, tanh(±inf) = ±1, gelu(-inf) = NaN, softmax over a +inf = NaN)."""
    case = small_case(transposed, CHAINS[chain])
    t = tensors(case, positive_weights=True)
    t["x"][1, 2, 3, 2] = value
    out, ref = run(case, t)
    assert torch.isnan(out).any() or torch.isinf(out).any() or chain in ("sigmoid", "tanh", "neg_relu", "relu"), \
        f"the special value vanished\n  reproduce: {case.line()}"
    if chain == "bn_train" and value == value:  # an Inf in a channel's batch statistics: that channel is NaN
        assert torch.isnan(out).any()


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "convT"])
@pytest.mark.parametrize("chain", ["add_s", "relu", "softmax", "gelu"])
def test_inf_minus_inf(chain, transposed):
    """+Inf and -Inf inputs in one receptive field (and mixed-sign weights): Inf - Inf = NaN, as in PyTorch."""
    case = small_case(transposed, CHAINS[chain])
    t = tensors(case)
    t["x"][0, 0, 2, 2] = INF
    t["x"][0, 1, 2, 2] = -INF
    t["x"][1, 0, 4, 1] = INF  # alone in its neighbourhood: mixed-sign weights give +Inf and -Inf outputs
    run(case, t)


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "convT"])
def test_all_special(transposed):
    """Every input NaN: every output NaN (softmax and batch norm included), nothing left unwritten."""
    case = small_case(transposed, CHAINS["kb91"])
    t = tensors(case)
    t["x"].fill_(float("nan"))
    out, _ = run(case, t)
    assert torch.isnan(out).all()


@pytest.mark.parametrize("scale", [1e4, 1e20, 1e35, 3e38], ids=lambda s: f"x*{s:g}")
@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "convT"])
def test_huge_logits_softmax(scale, transposed):
    """Softmax over huge logits subtracts the max: finite, rows summing to 1, equal to float64 PyTorch. At 3e38 the
    logits themselves pass the fp32 range (FLT_MAX = 3.4e38): the CPU backend keeps them in double, as float64
    PyTorch does (fp32 PyTorch would overflow to Inf and NaN here, so only float64 is the reference)."""
    case = small_case(transposed, [("softmax_channels",)], c_out=7)
    t = tensors(case)
    t["x"] = t["x"] * scale
    out, ref = run(case, t)
    assert torch.isfinite(out).all(), f"non-finite softmax\n  reproduce: {case.line()} x*{scale:g}"
    sums = out.double().sum(dim=1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-6), f"rows do not sum to 1 at x*{scale:g}"


@pytest.mark.parametrize("chain", ["kb91", "sigmoid", "tanh", "bn_train"])
def test_huge_logits_chain_finite(chain):
    """Huge finite inputs through saturating chains stay finite (no exp overflow turning into NaN)."""
    case = small_case(True, CHAINS[chain], c_out=5)
    t = tensors(case)
    t["x"] = t["x"] * 1e30
    out, _ = run(case, t)
    assert torch.isfinite(out).all(), f"non-finite output\n  reproduce: {case.line()} x*1e30"


def test_overflow_to_inf_when_rounded():
    """Conv outputs past FLT_MAX (chain: * 1): +Inf in fp32, exactly where float64 PyTorch rounded to fp32 has them."""
    case = small_case(False, [("mul_scalar", 1.0)], c_out=3)
    t = tensors(case, positive_weights=True)
    t["x"] = t["x"].abs() * 3e38
    out, ref = run(case, t, check=False)  # (check_output measures errors against the unrounded float64 values)
    ref32 = ref.float()
    assert torch.isinf(out).any()
    assert torch.equal(out == INF, ref32 == INF) and torch.equal(out == -INF, ref32 == -INF)
    fin = torch.isfinite(ref32)
    torch.testing.assert_close(out[fin], ref32[fin], rtol=1e-6, atol=0)


def test_random_nan_inf_mix():
    """Random NaN/+Inf/-Inf sprinkled over random cases with random chains: positions and classes as PyTorch."""
    from cf_testlib import random_case
    for i in range(12):
        rng = random.Random(7100 + i)
        case = random_case(rng, transposed=(i % 2 == 0))
        gen = torch.Generator().manual_seed(7100 + i)
        t = materialize(case, gen)
        flat = t["x"].view(-1)
        for _ in range(1 + i % 3):
            flat[rng.randrange(flat.numel())] = rng.choice([float("nan"), INF, -INF])
        run(case, t)
