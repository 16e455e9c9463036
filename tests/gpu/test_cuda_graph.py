"""The fused calls inside a CUDA graph (torch.cuda.graph): captured once, replayed on fresh inputs.

At batch 1 a call's host time exceeds its kernels' GPU time (bench/latency.py); a captured graph replays the
launches without it. The library launches on the current stream and never synchronizes, so capture works; these
tests hold that. Each replay: fresh random inputs copied into the captured ones, the captured output poisoned with
NaN, checked against float64 (atol = rtol = 1e-4); in training mode the running statistics the replay updated are
checked against PyTorch's update from the values they had before it."""
import pytest
import torch
import torch.nn.functional as F

import convfuse
from cf_testlib import errors, require_cuda_backend

require_cuda_backend()

DEV = torch.device("cuda")
TOL = dict(atol=1e-4, rtol=1e-4)


def capture(fn):
    """fn warmed up on a side stream (as torch.cuda.graph asks), then captured; returns (graph, its output)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fn()
    return g, y


def check(name, y, ref):
    max_abs, rel = errors(y, ref)
    print(f"[cuda graph] {name}: vs float64 max_abs={max_abs:.2e} rel={rel:.2e}")
    assert not torch.isnan(y).any(), f"{name}: NaN left in the output (a poisoned element was not written)"
    torch.testing.assert_close(y.double(), ref, **TOL)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_graph_kb73(training):
    gen = torch.Generator(device="cuda").manual_seed(7301 + training)
    n, c_in, c_out, h, w = 2, 8, 64, 40, 36
    x = torch.rand(n, c_in, h, w, device=DEV, generator=gen)
    wt = torch.randn(c_out, c_in, 3, 3, device=DEV, generator=gen) * 0.1
    b = torch.randn(c_out, device=DEV, generator=gen) * 0.1
    ga = torch.rand(c_out, device=DEV, generator=gen) + 0.5
    be = torch.randn(c_out, device=DEV, generator=gen)
    rm = torch.randn(c_out, device=DEV, generator=gen) * 0.1
    rv = torch.rand(c_out, device=DEV, generator=gen) + 0.5
    nbt = torch.zeros((), dtype=torch.int64, device=DEV)
    g, y = capture(lambda: convfuse.conv_bn_scale(x, wt, b, ga, be, rm, rv, nbt, training, 0.1, 1e-5, 2.0))
    for replay in range(3):
        x.copy_(torch.rand(x.shape, device=DEV, generator=gen))
        rm64, rv64, nbt0 = rm.double().clone(), rv.double().clone(), int(nbt)
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        conv = F.conv2d(x.double(), wt.double(), b.double())
        ref = 2.0 * F.batch_norm(conv, rm64, rv64, ga.double(), be.double(), training, 0.1, 1e-5)
        check(f"kb2-73 {'train' if training else 'eval'} replay {replay}", y, ref)
        if training:  # rm64/rv64 now hold PyTorch's update of the values before the replay
            torch.testing.assert_close(rm.double(), rm64, **TOL)
            torch.testing.assert_close(rv.double(), rv64, **TOL)
            assert int(nbt) == nbt0 + 1


def test_graph_kb91():
    gen = torch.Generator(device="cuda").manual_seed(9101)
    n, c_in, c_out, h, w = 2, 16, 128, 11, 13
    x = torch.rand(n, c_in, h, w, device=DEV, generator=gen)
    wt = torch.randn(c_in, c_out, 4, 4, device=DEV, generator=gen) * 0.1
    b = torch.randn(c_out, device=DEV, generator=gen) * 0.1
    bias = torch.randn(c_out, 1, 1, device=DEV, generator=gen)
    # strict products: the check is about replay, not TF32 rounding
    g, y = capture(lambda: convfuse.convt_softmax_bias_scale_sigmoid(x, wt, b, bias, 2.0, 2, 1, 1, math="strict"))
    for replay in range(3):
        x.copy_(torch.rand(x.shape, device=DEV, generator=gen))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        z = F.conv_transpose2d(x.double(), wt.double(), b.double(), stride=2, padding=1, output_padding=1)
        ref = torch.sigmoid(2.0 * (torch.softmax(z, dim=1) + bias.double()))
        check(f"kb2-91 replay {replay}", y, ref)
