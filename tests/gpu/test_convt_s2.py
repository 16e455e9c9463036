"""The stride-2 transposed-conv kernel (src/cuda/convt_s2.cuh, impl cuda_convt_s2_tf32) against eager PyTorch.

Its family: ConvTranspose2d kernel 4, stride 2, padding 1 (output_padding 0 or 1 per dimension), C_in <= 64,
C_out <= 128, W a multiple of 4, TF32 products. Every variant: one CTA (C_out <= 64) and the channel-half pair,
with and without the extra column (output_padding 1 with W a multiple of 64), several 64-column segments, padded
C_in and C_out, N = 1, chains with the softmax first, in the middle, or absent. The launch log must name the kernel
and its variant; CONVFUSE_CONVT_S2=0 must hand the same plan to the implicit GEMM with the same answer (to TF32
rounding). Outputs are NaN-poisoned, inputs fresh for each case; atol = rtol = 1e-4 against float64 and fp32.
Skips (visibly) without a CUDA device or without the CUDA backend in the library."""

import pytest
import torch

import convfuse
from cf_testlib import Case, conv_kwargs, convfuse_chain, materialize, require_cuda_backend

require_cuda_backend()


@pytest.fixture(autouse=True)
def convt_s2_on(monkeypatch):
    """The kernel serves its shapes by default; CONVFUSE_CONVT_S2=1 says so explicitly, whatever the environment. The
    switch is read when a plan is made: plans cached by other tests must not serve these, nor these plans others."""
    monkeypatch.setenv("CONVFUSE_CONVT_S2", "1")
    with convfuse._plans_lock:
        convfuse._plans.clear()
    yield
    with convfuse._plans_lock:
        convfuse._plans.clear()

from test_cuda_backend import DEV, KB91_CHAIN, gpu_case  # noqa: E402  (after the skip)


def ct(n, c_in, h, w, c_out, op=(1, 1), bias=True, chain=KB91_CHAIN, **kw):
    return Case(True, n, c_in, h, w, c_out, (4, 4), (2, 2), (1, 1), op, (1, 1), bias, chain, **kw)


# (case, variant words the launch log must carry)
CASES = [
    (ct(2, 64, 64, 64, 128), ["+pair", "+extra_column", "segments=1"]),          # KB2-91 at N=2
    (ct(1, 64, 64, 64, 128, op=(0, 0)), ["+pair", "segments=1"]),               # no extra column
    (ct(3, 64, 20, 64, 64), ["+extra_column"]),                                 # one CTA: all channels
    (ct(2, 13, 17, 20, 100), ["+pair", "segments=1"]),                           # C_in, C_out padded; odd OH
    (ct(1, 3, 5, 8, 1, bias=False), ["segments=1"]),                             # C_out 1, no bias
    (ct(3, 32, 9, 128, 96), ["+pair", "+extra_column", "segments=2"]),           # two segments
    (ct(2, 24, 6, 132, 72, op=(0, 1)), ["+pair", "segments=3"]),                 # a partial third segment
    (ct(2, 40, 11, 192, 40, op=(1, 0)), ["segments=3"]),                         # no extra: OW even
    (ct(1, 64, 3, 4, 128), ["+pair"]),                                           # tiny: more clusters than tiles
    (ct(4, 8, 15, 16, 128, chain=[("add_channel",), ("relu",)]), ["+pair"]),     # no softmax
    (ct(2, 16, 7, 64, 128, chain=[("mul_scalar", -1.5), ("softmax_channels",), ("add_scalar", 0.25), ("gelu",)]),
     ["+pair", "+extra_column"]),                                                # softmax in the middle
    (ct(2, 16, 7, 64, 50, chain=[("softmax_channels",), ("tanh",)]), ["+extra_column"]),
    (ct(2, 8, 7, 64, 128, chain=[("sigmoid",)]), ["+pair", "+extra_column"]),   # no affine stage after the bias
    (ct(2, 8, 7, 8, 96, nan_inputs=2), ["+pair"]),                               # NaN propagates like torch
    (ct(1, 16, 9, 64, 128, x_scale=30.0), ["+pair", "+extra_column"]),            # large logits
]


@pytest.mark.parametrize("case,words", CASES, ids=lambda c: c.line() if isinstance(c, Case) else "")
def test_convt_s2(case, words, monkeypatch, capfd):
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    gpu_case(case, torch.Generator().manual_seed(case.c_out * 7 + case.w))
    err = capfd.readouterr().err
    launches = [ln for ln in err.splitlines() if "launch: convt_s2" in ln]
    assert len(launches) == 1, f"launch log: {err.strip()}\n  reproduce: {case.line()}"
    for wd in words:
        assert wd in launches[0], f"{wd!r} not in {launches[0]!r}\n  reproduce: {case.line()}"
    if "+pair" not in words:
        assert "+pair" not in launches[0], f"{launches[0]!r}\n  reproduce: {case.line()}"
    if "+extra_column" not in words:
        assert "+extra_column" not in launches[0], f"{launches[0]!r}\n  reproduce: {case.line()}"


def run(case, t, math="default"):
    oh, ow = case.out_hw()
    out = torch.full((case.n, case.c_out, oh, ow), float("nan"), device=DEV)
    convfuse.conv_chain(t["x"], t["weight"], t["bias"], convfuse_chain(case, t), transposed=True, backend="cuda",
                        math=math, out=out, **conv_kwargs(case))
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("case", [ct(2, 64, 16, 64, 128), ct(1, 24, 9, 68, 60, op=(0, 1))], ids=lambda c: c.line())
def test_off_switch_hands_over_to_the_implicit_gemm(case, monkeypatch, capfd):
    t = materialize(case, torch.Generator().manual_seed(5), device=DEV)
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    a = run(case, t)
    monkeypatch.setenv("CONVFUSE_CONVT_S2", "0")
    b = run(case, t)
    err = capfd.readouterr().err
    assert "launch: convt_s2" in err and "launch: igemm" in err, err
    assert not torch.isnan(a).any() and not torch.isnan(b).any()
    # both TF32, but convt_s2 rounds the input to TF32 and the implicit GEMM's tensor cores truncate it: each is
    # within the contract's 1e-4 of float64 (the tests above), so the two within twice that
    torch.testing.assert_close(a, b, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("case", [ct(2, 64, 16, 64, 128), ct(3, 32, 9, 128, 96), ct(2, 13, 17, 20, 60)],
                         ids=lambda c: c.line())
def test_two_and_three_consumer_warpgroups_agree(case, monkeypatch, capfd):
    """CONVFUSE_CT_WGS only changes which warpgroup takes a tile, not its arithmetic: the outputs are bitwise equal
    (tile counts not a multiple of 2 or 3 included: 16 + 17 and 9 + 8 phase rows)."""
    t = materialize(case, torch.Generator().manual_seed(11), device=DEV)
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    outs = {}
    for wgs in (2, 3):
        monkeypatch.setenv("CONVFUSE_CT_WGS", str(wgs))
        with convfuse._plans_lock:
            convfuse._plans.clear()
        outs[wgs] = run(case, t)
        err = capfd.readouterr().err
        assert f"consumer_wgs={wgs}" in err, err
    assert not torch.isnan(outs[3]).any()
    assert torch.equal(outs[2], outs[3]), f"max diff {(outs[2] - outs[3]).abs().max().item():.3g}; {case.line()}"


def test_plan_names_the_kernel():
    x = torch.rand(1, 64, 8, 8, device=DEV)
    w = torch.randn(64, 128, 4, 4, device=DEV)
    chain = [("softmax_channels",), ("add_channel", torch.randn(128, device=DEV)), ("mul_scalar", 2.0), ("sigmoid",)]
    info = convfuse.plan_info(x, w, torch.zeros(128, device=DEV), chain, transposed=True, stride=2, padding=1,
                              output_padding=1)
    assert info["impl"] == "cuda_convt_s2_tf32", info
    strict = convfuse.plan_info(x, w, torch.zeros(128, device=DEV), chain, transposed=True, stride=2, padding=1,
                                output_padding=1, math="strict")
    assert strict["impl"] != "cuda_convt_s2_tf32", strict  # 3xTF32: the implicit GEMM


def test_misaligned_input_view_takes_the_implicit_gemm(monkeypatch, capfd):
    """A view starting one float into its storage cannot take 16-byte loads: the plan's execute runs the implicit
    GEMM instead, with the same answer."""
    case = ct(1, 16, 8, 64, 128)
    t = materialize(case, torch.Generator().manual_seed(3), device=DEV)
    store = torch.empty(t["x"].numel() + 1, device=DEV)
    store[1:] = t["x"].reshape(-1)
    t["x"] = store[1:].view_as(t["x"])
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    out = run(case, t)
    err = capfd.readouterr().err
    assert "launch: igemm" in err and "launch: convt_s2" not in err, err
    from cf_testlib import eager
    ref, _ = eager(case, t, torch.float64)
    torch.testing.assert_close(out.double(), ref, atol=1e-4, rtol=1e-4)
