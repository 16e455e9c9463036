"""The CUDA backend against eager PyTorch on the device, in float64 and fp32 (TF32 off), atol=rtol=1e-4.

Randomized, seeded shapes and values for the two problem chains (KB2-91: transposed conv + softmax + add_channel +
mul_scalar + sigmoid; KB2-73: conv + batch_norm train/eval + mul_scalar, and conv + affine_channel), their default
shapes, every math mode. Outputs are NaN-poisoned before each run. Run with -s to see max abs err and ||err||/||ref||
against float64 for every case; a failure prints the case's one-line reproducer.
Skips (visibly) without a CUDA device or without the CUDA backend in the library."""

import random

import pytest
import torch
import torch.nn as nn

import convfuse
from cf_testlib import Case, conv_kwargs, convfuse_chain, eager, errors, materialize, random_case, require_cuda_backend, snapshot_bn

require_cuda_backend()

DEV = torch.device("cuda")
SEED = 9120261
TOL = dict(atol=1e-4, rtol=1e-4)
KB91_CHAIN = [("softmax_channels",), ("add_channel",), ("mul_scalar", 2.0), ("sigmoid",)]


@pytest.fixture(autouse=True)
def exact_fp32_reference():
    """The fp32 reference is true fp32: PyTorch's TF32 convolutions would be a moving target."""
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def gpu_case(case, gen, math="default", check_state=True):
    t = materialize(case, gen, device=DEV)
    before = snapshot_bn(t)
    oh, ow = case.out_hw()
    out = torch.full((case.n, case.c_out, oh, ow), float("nan"), device=DEV)
    line = f"{case.line()} math={math}"
    try:
        y = convfuse.conv_chain(t["x"], t["weight"], t["bias"], convfuse_chain(case, t), transposed=case.transposed,
                                backend="cuda", math=math, out=out, **conv_kwargs(case))
    except convfuse.NotSupportedError as e:
        print(f"[cuda] {line}: refused: {e}")
        raise
    torch.cuda.synchronize()
    assert y is out
    ref64, st64 = eager(case, before, torch.float64)
    ref32, st32 = eager(case, before, torch.float32)
    report(line, out, ref64, ref32)
    if check_state:
        bn_ops = [b for op, b in zip(case.chain, t["ops"]) if op[0] == "batch_norm"]
        for bufs, s64 in zip(bn_ops, st64):
            for name, r in (("running_mean", s64[0]), ("running_var", s64[1])):
                torch.testing.assert_close(bufs[name].double(), r, **TOL,
                                           msg=lambda m, n=name: f"{n}: {m}\n  reproduce: {line}")
            assert int(bufs["num_batches_tracked"]) == int(s64[2]), f"num_batches_tracked\n  reproduce: {line}"
    return out


def report(line, out, ref64, ref32):
    nan_out, nan_ref = torch.isnan(out), torch.isnan(ref64)
    max_abs, rel = errors(out, ref64)
    print(f"[cuda] {line}: vs float64 max_abs={max_abs:.2e} rel={rel:.2e}")
    assert torch.equal(nan_out, nan_ref), (f"NaN positions differ ({int(nan_out.sum())} vs {int(nan_ref.sum())}; "
                                           f"a poisoned element was not written?)\n  reproduce: {line}")
    for name, ref in (("float64", ref64), ("fp32", ref32)):
        try:
            torch.testing.assert_close(out.double(), ref.double(), equal_nan=True, **TOL)
        except AssertionError as e:
            print(f"  vs torch {name} failed; reproduce: {line}")
            raise AssertionError(f"vs torch {name}: {e}\n  reproduce: {line}") from None


# --------------------------------------------------------------------------------------------------------------
# KB2-91 chain at random shapes: strides 1-3, dilation, output_padding, odd sizes, C not multiples of 8, N=1, Cout=1.


@pytest.mark.parametrize("math", ["default", "tf32", "strict"])
@pytest.mark.parametrize("i", range(16))
def test_kb91_random(i, math):
    rng = random.Random(SEED + i)
    gen = torch.Generator().manual_seed(SEED + i)
    case = random_case(rng, transposed=True, small=False, chain=KB91_CHAIN)
    case.c_in = rng.choice([1, 3, 5, 13, 64, 67])
    case.c_out = [1, 7, 13, 64, 128, 130][i % 6]
    if i % 4 == 0:
        case.n = 1
    gpu_case(case, gen, math)


KB91_FIXED = [
    Case(True, 1, 64, 16, 16, 128, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN),
    Case(True, 3, 17, 11, 9, 33, (3, 5), (3, 2), (1, 2), (2, 1), (1, 1), True, KB91_CHAIN),
    Case(True, 2, 8, 7, 13, 1, (4, 4), (2, 2), (1, 1), (1, 1), (2, 2), False, KB91_CHAIN),
    Case(True, 1, 5, 9, 9, 129, (2, 2), (1, 1), (0, 0), (0, 0), (3, 3), True, KB91_CHAIN),
]


@pytest.mark.parametrize("case", KB91_FIXED, ids=lambda c: c.line())
def test_kb91_fixed(case):
    gpu_case(case, torch.Generator().manual_seed(91))


def test_kb91_large_logits():
    case = Case(True, 2, 16, 9, 9, 32, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN, x_scale=1e4)
    t = materialize(case, torch.Generator().manual_seed(4), device=DEV)
    y = convfuse.conv_chain(t["x"], t["weight"], t["bias"], convfuse_chain(case, t), transposed=True, backend="cuda",
                            **conv_kwargs(case))
    ref64, _ = eager(case, t, torch.float64)
    assert torch.isfinite(y).all(), f"non-finite output with large logits\n  reproduce: {case.line()}"
    max_abs, rel = errors(y, ref64)
    print(f"[cuda] {case.line()}: vs float64 max_abs={max_abs:.2e} rel={rel:.2e} (large logits; no fp32 check)")


def test_nan_inputs_propagate_like_torch():
    case = Case(True, 2, 8, 7, 7, 16, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN, nan_inputs=2)
    gpu_case(case, torch.Generator().manual_seed(11))


# Split mode (docs/kb2_91.md v12): stride-2 column phases with 64 < C_out <= 128 (W a multiple of 4, TF32) run as a
# cluster of two CTAs holding the channel halves of both column phases, exchanging each pixel's softmax (max, sum).
# The launch log must name the path; CONVFUSE_IG_SPLIT=0 runs the column-phase pair on the same cases.
SPLIT_CASES = [
    Case(True, 1, 64, 16, 16, 128, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN),
    Case(True, 2, 13, 9, 12, 72, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN),  # 2 and 1 column taps
    Case(True, 3, 8, 7, 8, 100, (5, 4), (3, 2), (2, 1), (0, 1), (1, 1), False, KB91_CHAIN),
    Case(True, 1, 20, 5, 4, 65, (4, 3), (2, 2), (0, 0), (0, 1), (1, 2), True, KB91_CHAIN),  # column dilation 2
    Case(True, 2, 16, 8, 8, 128, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, [("add_channel",), ("sigmoid",)]),
    Case(True, 2, 8, 7, 8, 96, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN, nan_inputs=2),
]


@pytest.mark.parametrize("split", [True, False], ids=["split", "nosplit"])
@pytest.mark.parametrize("case", SPLIT_CASES, ids=lambda c: c.line())
def test_split_mode(case, split, monkeypatch, capfd):
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    monkeypatch.setenv("CONVFUSE_CONVT_S2", "0")  # the implicit GEMM's paths (k4 s2 p1 cases go to convt_s2 first)
    monkeypatch.setenv("CONVFUSE_IG_SPLIT", "1" if split else "0")
    gpu_case(case, torch.Generator().manual_seed(case.c_out))
    err = capfd.readouterr().err
    assert ("+split" in err) == split, f"launch log: {err.strip()}\n  reproduce: {case.line()}"


@pytest.mark.parametrize("c_out", [129, 295])
def test_no_split_past_128_channels(c_out, monkeypatch, capfd):
    """Split mode is two chunks of 64 channels: a wider C_out takes the column-phase pair (fuzz case 710 of seed 1,
    C_out = 295, once wrote only the first 128 channels)."""
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    case = Case(True, 2, 3, 5, 8, c_out, (5, 5), (2, 2), (2, 2), (1, 1), (1, 1), True, KB91_CHAIN)
    gpu_case(case, torch.Generator().manual_seed(c_out))  # TF32 products: the split mode's own condition
    err = capfd.readouterr().err
    assert "+split" not in err, f"launch log: {err.strip()}\n  reproduce: {case.line()}"


# TMA store (ig_store_tma): single-phase patch tiles with C_out <= 64 per chunk and OH*OW a multiple of 4 leave
# shared memory as bulk tensor copies that clip at the image end and at C_out. CONVFUSE_IG_TMA_STORE=0: staging.
BN_EVAL = [("batch_norm", False, 0.1, 1e-5, True), ("mul_scalar", 2.0)]
TMA_STORE_CASES = [
    Case(False, 2, 8, 34, 36, 64, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_EVAL),  # 32x34
    Case(False, 1, 5, 20, 24, 13, (3, 3), (2, 1), (1, 1), (0, 0), (1, 1), False, [("affine_channel",)]),
    Case(False, 3, 16, 12, 16, 40, (2, 3), (1, 1), (1, 0), (0, 0), (2, 1), True, [("add_channel",), ("relu",)]),
    Case(False, 2, 8, 20, 20, 64, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), True, KB91_CHAIN),  # softmax, 400 pixels
]


@pytest.mark.parametrize("tma", [True, False], ids=["tma_store", "staging"])
@pytest.mark.parametrize("case", TMA_STORE_CASES, ids=lambda c: c.line())
def test_tma_store(case, tma, monkeypatch, capfd):
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    monkeypatch.setenv("CONVFUSE_IG_TMA_STORE", "1" if tma else "0")
    # strict products: a chain without batch norm takes TF32 by default, whose rounding (~5e-4 here) the store
    # path has nothing to do with
    gpu_case(case, torch.Generator().manual_seed(case.c_out + 1), math="strict")
    err = capfd.readouterr().err
    assert ("+tma_store" in err) == tma, f"launch log: {err.strip()}\n  reproduce: {case.line()}"


class KB91(nn.Module):
    """KernelBench level 2 #91, as defined there."""

    def __init__(self, c_in=64, c_out=128, k=4, stride=2, padding=1, output_padding=1, scale=2.0):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(c_in, c_out, k, stride=stride, padding=padding,
                                                 output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(c_out, 1, 1))
        self.scaling_factor = scale

    def forward(self, x):
        x = torch.softmax(self.conv_transpose(x), dim=1)
        return torch.sigmoid((x + self.bias) * self.scaling_factor)


@pytest.mark.parametrize("math", ["default", "strict"])
def test_kb91_default_shape(math):
    torch.manual_seed(0)
    m = KB91().to(DEV)
    x = torch.rand(128, 64, 64, 64, device=DEV)
    ct = m.conv_transpose
    out = torch.full((128, 128, 129, 129), float("nan"), device=DEV)
    with torch.no_grad():
        y = convfuse.convt_softmax_bias_scale_sigmoid(x, ct.weight, ct.bias, m.bias, 2.0, 2, 1, 1, math=math, out=out)
        ref32 = m(x)
        ref64 = m.double()(x.double())
    torch.cuda.synchronize()
    report(f"kb2-91 default shape n128c64h64w64-k4x4c128-s2x2p1x1d1x1op1x1 math={math}", y, ref64, ref32)


# --------------------------------------------------------------------------------------------------------------
# KB2-73 chains: conv + batch_norm (train, eval) + mul_scalar; conv + affine_channel.


@pytest.mark.parametrize("math", ["default", "strict"])
@pytest.mark.parametrize("i", range(12))
def test_kb73_random(i, math):
    rng = random.Random(SEED + 100 + i)
    gen = torch.Generator().manual_seed(SEED + 100 + i)
    chains = [[("batch_norm", True, 0.1, 1e-5, True), ("mul_scalar", 2.0)],
              [("batch_norm", False, 0.1, 1e-5, True), ("mul_scalar", 2.0)],
              [("batch_norm", True, None, 1e-5, False), ("mul_scalar", -0.5)],
              [("affine_channel",)]]
    case = random_case(rng, transposed=False, small=False, chain=chains[i % 4])
    case.c_in = rng.choice([1, 3, 8, 13])
    case.c_out = [1, 7, 16, 64, 65, 3][i % 6]
    gpu_case(case, gen, math)


BN_TRAIN = [("batch_norm", True, 0.1, 1e-5, True), ("mul_scalar", 2.0)]


def test_bn_stats_after_sigmoid():
    """Batch-norm statistics of values far from zero relative to their spread (a sigmoid, then an affine, before the
    batch norm): per-tile statistics must not sum about zero (fuzz case 930 of seed 1 failed with 1551 of 51750 values
    off by up to 9e-3 under a one-reduction version whose first tile did; it was measured slower and dropped, this
    case kept). With a larger batch
    (n = 6) this chain is past what fp32 can hold to 1e-4: the normalised sigmoid values carry the rounding of
    values near 0.5 divided by a spread of ~1e-3, and eager fp32 PyTorch itself is off by as much (docs/kb2_73.md)."""
    n = 1
    chain = [("sigmoid",), ("add_channel",), ("mul_scalar", 1.703125), ("affine_channel",),
             ("batch_norm", True, 0.4375, 1e-5, True)]
    case = Case(True, n, 15, 14, 8, 46, (2, 2), (3, 3), (0, 0), (2, 0), (3, 3), True, chain)
    gpu_case(case, torch.Generator().manual_seed(930 + n))


@pytest.mark.parametrize("k, c_in", [((5, 5), 3), ((3, 3), 8)], ids=["direct_2xtf32", "gram"])
def test_bn_train_nan_input(k, c_in):
    """A NaN in the input makes every training batch-norm output NaN, as in torch, through both statistics passes:
    the direct pass's 2xTF32 products (2^16 values per channel) and the Gram's. The NaN is 0x7fffffff, which the
    add-half-an-ulp-and-mask rounding the 2xTF32 A operand had used turned into -0 (cf_testlib plants that first)."""
    case = Case(False, 4, c_in, 128 + k[0] - 1, 128 + k[1] - 1, 16, k, (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN,
                nan_inputs=1)
    out = gpu_case(case, torch.Generator().manual_seed(77), check_state=False)
    assert torch.isnan(out).all()


@pytest.mark.parametrize("w", [8, 7])
def test_bn_stats_few_values(w):
    """Training batch norm over few values per channel (3x7x6 = 126 at W = 8) through the input patch: the
    statistics must not take the 2xTF32 products, whose error only averages out over many values (they put this
    case 3.6e-4 off float64)."""
    case = Case(False, 3, 5, 9, w, 16, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN)
    gpu_case(case, torch.Generator().manual_seed(w))


# Training batch-norm statistics from the input Gram (src/cuda/bn_gram.cuh): conv2d 3x3, stride 1, no padding,
# C_in <= 8, C_out >= 4 C_in. Widths that are and are not multiples of 4, rows wider than the 32-row bands fit (W 260:
# 16-row bands), odd C_in (a zero channel pads the lane pairs), C_in = 1, N = 1, the smallest output (3x3), affine ops
# before the batch norm, no conv bias. CONVFUSE_VERBOSE=gram reports the device's decision; these must stand.
GRAM_AFFINE_FIRST = [("add_channel",), ("mul_scalar", -1.5), ("affine_channel",),
                     ("batch_norm", True, 0.1, 1e-5, True), ("mul_scalar", 2.0)]
GRAM_CASES = [
    Case(False, 4, 8, 32, 32, 64, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN),
    Case(False, 3, 3, 17, 29, 19, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN),
    Case(False, 1, 1, 5, 5, 8, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), False, BN_TRAIN),
    Case(False, 2, 7, 9, 130, 40, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, GRAM_AFFINE_FIRST),
    Case(False, 3, 5, 37, 32, 24, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN),  # odd C_in by TMA
    Case(False, 5, 8, 66, 67, 33, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN),
    Case(False, 2, 6, 70, 260, 32, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN),
    Case(False, 16, 8, 128, 128, 64, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True,
         [("batch_norm", True, None, 1e-5, False), ("mul_scalar", 2.0)]),
]


# The TMA store's boxes written and copied out in 1, 2 (the default for 8 n8 tiles) or 4 channel slices
# (ig_store_tma_slices): the same values in the same places, so the outputs agree bit for bit; C_out 40 leaves the
# second half mostly past C_out (clipped by the copy), 10x10 planes put the slices' rows 16 bytes into a sector.
@pytest.mark.parametrize("case", [
    Case(False, 3, 8, 12, 12, 64, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN),
    Case(False, 2, 5, 34, 36, 40, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_EVAL),
], ids=lambda c: c.line())
def test_tma_store_parts_agree(case, monkeypatch, capfd):
    outs = []
    for parts in (1, 2, 4):
        monkeypatch.setenv("CONVFUSE_IG_STORE_PARTS", str(parts))
        monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
        outs.append(gpu_case(case, torch.Generator().manual_seed(7), "default"))
        err = capfd.readouterr().err
        assert "+tma_store" in err and f"store_parts={parts}" in err, f"launch log: {err.strip()}"
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2]), f"reproduce: {case.line()}"


@pytest.mark.parametrize("math", ["default", "strict"])
@pytest.mark.parametrize("case", GRAM_CASES, ids=lambda c: c.line())
def test_bn_gram_stats(case, math, monkeypatch, capfd):
    monkeypatch.setenv("CONVFUSE_VERBOSE", "gram")
    gpu_case(case, torch.Generator().manual_seed(case.w + case.c_in), math)
    err = capfd.readouterr().err
    assert "gram: statistics stand" in err, f"gram log: {err.strip()}\n  reproduce: {case.line()}"


def test_bn_gram_guard_falls_back_to_the_direct_pass(monkeypatch, capfd):
    """A smooth input under weights that difference neighbours: var = w^T Cov w cancels far past what the Gram sums
    hold, so the device-side guard refuses them and the direct pass runs; the output is then bit for bit the output
    of the direct path (CONVFUSE_BN_STATS=direct), running statistics included."""
    torch.manual_seed(5)
    n, c_in, h, w, c_out = 4, 2, 40, 44, 16
    u = torch.arange(h, device=DEV, dtype=torch.float32).view(1, 1, h, 1)
    v = torch.arange(w, device=DEV, dtype=torch.float32).view(1, 1, 1, w)
    x = (torch.sin(0.05 * u + torch.rand(n, c_in, 1, 1, device=DEV)) + torch.cos(0.04 * v) +
         1e-4 * torch.randn(n, c_in, h, w, device=DEV)).contiguous()
    lap = torch.tensor([[0., 1., 0.], [1., -4., 1.], [0., 1., 0.]], device=DEV)
    weight = (lap.expand(c_out, c_in, 3, 3) * torch.randn(c_out, c_in, 1, 1, device=DEV)).contiguous()
    bias = torch.randn(c_out, device=DEV)
    outs = []
    for mode in ("gram", "direct"):
        monkeypatch.setenv("CONVFUSE_VERBOSE", "gram")
        monkeypatch.setenv("CONVFUSE_BN_STATS", "auto" if mode == "gram" else "direct")
        rm, rv = torch.zeros(c_out, device=DEV), torch.ones(c_out, device=DEV)
        nbt = torch.zeros((), dtype=torch.long, device=DEV)
        out = torch.full((n, c_out, h - 2, w - 2), float("nan"), device=DEV)
        convfuse.conv_bn_scale(x, weight, bias, None, None, rm, rv, nbt, training=True, momentum=0.1, eps=1e-5,
                               scale=2.0, out=out)
        torch.cuda.synchronize()
        outs.append((out, rm, rv))
        err = capfd.readouterr().err
        if mode == "gram":
            assert "gram: statistics refused by the guard" in err, err
        else:
            assert "gram:" not in err, err
    for a, b in zip(*outs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("shape", [(4, 8, 32, 36, 64), (3, 5, 37, 32, 24), (9, 8, 66, 67, 33)])
def test_bn_train_chain_launch_knobs_agree(shape, monkeypatch):
    """The training chain with programmatic dependent launch (CONVFUSE_PDL, pdl.cuh) on and off, and the Gram
    kernel's frame jobs first in half of its CTAs or last in all (CONVFUSE_GRAM_FRAME_FIRST): the same sums in the
    same places, so three consecutive calls give the same outputs and running statistics bit for bit (a kernel
    reading its predecessor's results before they are complete would not). Checked against float64 as well."""
    n, c_in, h, w, c_out = shape
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(n, c_in, h, w, generator=gen).to(DEV)
    weight = (torch.randn(c_out, c_in, 3, 3, generator=gen) * 0.2).to(DEV)
    bias, gamma, beta = (torch.randn(c_out, generator=gen).to(DEV) for _ in range(3))
    runs = []
    for pdl, first in (("1", "1"), ("0", "0"), ("1", "0"), ("0", "1")):
        monkeypatch.setenv("CONVFUSE_PDL", pdl)
        monkeypatch.setenv("CONVFUSE_GRAM_FRAME_FIRST", first)
        rm, rv = torch.zeros(c_out, device=DEV), torch.ones(c_out, device=DEV)
        nbt = torch.zeros((), dtype=torch.long, device=DEV)
        outs = []
        for _ in range(3):
            out = torch.full((n, c_out, h - 2, w - 2), float("nan"), device=DEV)
            convfuse.conv_bn_scale(x, weight, bias, gamma, beta, rm, rv, nbt, training=True, momentum=0.1, eps=1e-5,
                                   scale=2.0, out=out)
            outs.append(out)
        torch.cuda.synchronize()
        runs.append((*outs, rm, rv, nbt))
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert torch.equal(a, b)
    bn = torch.nn.BatchNorm2d(c_out).double().to(DEV)
    with torch.no_grad():
        bn.weight.copy_(gamma)
        bn.bias.copy_(beta)
        for _ in range(3):
            ref = bn(torch.nn.functional.conv2d(x.double(), weight.double(), bias.double())) * 2.0
    assert torch.allclose(runs[0][2].double(), ref, atol=1e-4, rtol=1e-4)
    assert torch.allclose(runs[0][3].double(), bn.running_mean, atol=1e-5, rtol=1e-5)
    assert torch.allclose(runs[0][4].double(), bn.running_var, atol=1e-5, rtol=1e-5)
    assert int(runs[0][5]) == 3


# Tile order (cf_ig_params::tile_interleave): clusters take every grid-th tile by default, contiguous ranges with
# CONVFUSE_IG_INTERLEAVE=0. Several tiles per CTA, groups (phases) of different sizes, the cluster pair, the patch
# prefetch across a stride of tiles.
INTERLEAVE_CASES = [
    Case(True, 9, 16, 30, 32, 128, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN),  # split mode
    Case(True, 5, 8, 21, 23, 40, (3, 3), (3, 2), (1, 0), (2, 1), (1, 1), True, KB91_CHAIN),  # 6 phase groups
    Case(False, 12, 8, 64, 64, 64, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN),  # TMA patch + store
]


@pytest.mark.parametrize("on", [True, False], ids=["interleaved", "ranges"])
@pytest.mark.parametrize("case", INTERLEAVE_CASES, ids=lambda c: c.line())
def test_tile_order(case, on, monkeypatch, capfd):
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    monkeypatch.setenv("CONVFUSE_CONVT_S2", "0")  # the implicit GEMM's tile order
    monkeypatch.setenv("CONVFUSE_IG_INTERLEAVE", "1" if on else "0")
    gpu_case(case, torch.Generator().manual_seed(case.n + 11))
    err = capfd.readouterr().err
    want = "tiles=interleaved" if on else "tiles=ranges"
    assert want in err, f"launch log: {err.strip()}\n  reproduce: {case.line()}"


# Input-patch copies of 8 or 4 bytes (cf_ig_params::pk_vec) where W is not a multiple of 4 (no TMA map either):
# odd and even widths, conv2d and transposed (split mode, phase groups), training batch norm, several stages. By
# default 4-byte copies serve split mode only (elsewhere the gather measured faster); CONVFUSE_IG_PATCH_VEC=1 takes
# them everywhere. (case, the patch by default)
ODD_WIDTH_CASES = [
    (Case(False, 2, 8, 20, 21, 64, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), True, BN_TRAIN), False),  # W 21
    (Case(False, 3, 8, 17, 22, 64, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), True, BN_EVAL), True),  # W 22, padded
    (Case(True, 2, 16, 9, 13, 128, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN), True),  # split, W 13
    (Case(True, 2, 12, 7, 10, 40, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN), True),  # phases, W 10
    (Case(False, 1, 20, 9, 11, 24, (3, 3), (1, 1), (1, 1), (0, 0), (1, 1), False, [("affine_channel",)]), False),
]


@pytest.mark.parametrize("vec1", [False, True], ids=["default", "vec1"])
@pytest.mark.parametrize("case,patch", ODD_WIDTH_CASES, ids=lambda c: c.line() if isinstance(c, Case) else str(c))
def test_patch_odd_width(case, patch, vec1, monkeypatch, capfd):
    monkeypatch.setenv("CONVFUSE_VERBOSE", "launch")
    if vec1:
        monkeypatch.setenv("CONVFUSE_IG_PATCH_VEC", "1")
    # TF32 products where split mode is the point (it is TF32 only); strict elsewhere, so that the 1e-4 check is
    # about the copies, not TF32 rounding
    gpu_case(case, torch.Generator().manual_seed(case.w), math="default" if case.chain is KB91_CHAIN else "strict")
    launches = [ln for ln in capfd.readouterr().err.splitlines() if "launch: igemm" in ln]
    want = patch or vec1
    assert launches and all(("+patch(cp.async)" in ln) == want for ln in launches), \
        "\n".join(launches) + "\n" + case.line()


class KB73(nn.Module):
    """KernelBench level 2 #73, as defined there."""

    def __init__(self, c_in=8, c_out=64, k=3, scale=2.0, momentum=0.1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k)
        self.bn = nn.BatchNorm2d(c_out, momentum=momentum)
        self.scaling_factor = scale

    def forward(self, x):
        return self.bn(self.conv(x)) * self.scaling_factor


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("shape", [(128, 8, 128, 128), (3, 5, 17, 29)], ids=["default", "small"])
def test_kb73_train_three_calls(shape, momentum):
    """Three training calls on the same buffers; running stats and num_batches_tracked follow nn.BatchNorm2d."""
    n, c_in, h, w = shape
    torch.manual_seed(73)
    m32 = KB73(c_in, 64 if n == 128 else 19, momentum=momentum).to(DEV).train()
    m64 = KB73(c_in, m32.bn.num_features, momentum=momentum).to(DEV).double().train()
    m64.load_state_dict(m32.state_dict())
    bn = m32.bn
    rm, rv, nbt = bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()
    for call in range(3):
        x = torch.rand(n, c_in, h, w, device=DEV)
        out = torch.full((n, bn.num_features, h - 2, w - 2), float("nan"), device=DEV)
        with torch.no_grad():
            y = convfuse.conv_bn_scale(x, m32.conv.weight, m32.conv.bias, bn.weight, bn.bias, rm, rv, nbt,
                                       training=True, momentum=momentum, eps=bn.eps, scale=2.0, out=out)
            ref32 = m32(x)
            ref64 = m64(x.double())
        torch.cuda.synchronize()
        line = f"kb2-73 train n{n}c{c_in}h{h}w{w}-k3c{bn.num_features} momentum={momentum} call {call}"
        report(line, y, ref64, ref32)
        torch.testing.assert_close(rm.double(), m64.bn.running_mean, **TOL)
        torch.testing.assert_close(rv.double(), m64.bn.running_var, **TOL)
    assert int(nbt) == 3


def test_kb73_eval_default_shape():
    torch.manual_seed(1)
    m = KB73().to(DEV).eval()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.2, 0.2)
        m.bn.running_var.uniform_(0.5, 2.0)
    x = torch.rand(128, 8, 128, 128, device=DEV)
    with torch.no_grad():
        y = convfuse.conv_bn_scale(x, m.conv.weight, m.conv.bias, m.bn.weight, m.bn.bias, m.bn.running_mean,
                                   m.bn.running_var, m.bn.num_batches_tracked, training=False, momentum=0.1,
                                   eps=m.bn.eps, scale=2.0)
        ref32 = m(x)
        ref64 = m.double()(x.double())
    torch.cuda.synchronize()
    report("kb2-73 eval default shape n128c8h128w128-k3c64", y, ref64, ref32)


# --------------------------------------------------------------------------------------------------------------
# Streams and graphs: the launch goes on the caller's current stream and can be captured.


def test_runs_on_the_current_stream():
    case = Case(True, 2, 8, 9, 9, 16, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN)
    t = materialize(case, torch.Generator().manual_seed(2), device=DEV)
    ref = convfuse.conv_chain(t["x"], t["weight"], t["bias"], convfuse_chain(case, t), transposed=True,
                              **conv_kwargs(case))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # keep the side stream busy: a launch on another stream would finish first
        y = convfuse.conv_chain(t["x"], t["weight"], t["bias"], convfuse_chain(case, t), transposed=True,
                                **conv_kwargs(case))
    s.synchronize()
    assert torch.equal(y, ref)


def test_cuda_graph_capture():
    case = Case(True, 2, 8, 9, 9, 16, (4, 4), (2, 2), (1, 1), (1, 1), (1, 1), True, KB91_CHAIN)
    t = materialize(case, torch.Generator().manual_seed(3), device=DEV)
    chain = convfuse_chain(case, t)
    kw = dict(transposed=True, **conv_kwargs(case))
    x = t["x"].clone()
    convfuse.conv_chain(x, t["weight"], t["bias"], chain, **kw)  # warm the plan cache outside the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = convfuse.conv_chain(x, t["weight"], t["bias"], chain, **kw)
    x.copy_(torch.rand_like(x))
    g.replay()
    torch.cuda.synchronize()
    ref = convfuse.conv_chain(x, t["weight"], t["bias"], chain, **kw)
    torch.cuda.synchronize()
    assert torch.equal(y, ref), "graph replay did not recompute from the new input"
