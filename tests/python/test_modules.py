"""The drop-in modules (convfuse.ConvTranspose2dSoftmaxBiasScaleSigmoid, convfuse.Conv2dBatchNormScale), their
torch.library ops and the KernelBench solution files, on CPU (the C reference backend), against the original
KernelBench modules defined here. Small shapes: this runs in CI."""

import importlib.util
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import convfuse
from convfuse import _ops

ROOT = Path(__file__).resolve().parents[2]
TOL = dict(atol=1e-4, rtol=1e-4)


class Model91(nn.Module):
    """KernelBench level 2 #91, as published."""

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


class Model73(nn.Module):
    """KernelBench level 2 #73, as published."""

    def __init__(self, in_channels, out_channels, kernel_size, scaling_factor):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return self.bn(self.conv(x)) * self.scaling_factor


ARGS91 = (5, 7, 4, 2, 1, 1, (7, 1, 1), 2.0)
ARGS73 = (3, 6, 3, 2.0)
NEW = {"91": convfuse.ConvTranspose2dSoftmaxBiasScaleSigmoid, "73": convfuse.Conv2dBatchNormScale}
REF = {"91": Model91, "73": Model73}
ARGS = {"91": ARGS91, "73": ARGS73}


def pair(problem, seed=0, args=None):
    args = ARGS[problem] if args is None else args
    torch.manual_seed(seed)
    ref = REF[problem](*args)
    torch.manual_seed(seed)
    new = NEW[problem](*args)
    return ref, new


def x_for(problem, n=2, h=6, w=5, gen_seed=1):
    g = torch.Generator().manual_seed(gen_seed)
    c = ARGS[problem][0]
    return torch.rand(n, c, h, w, generator=g)


@pytest.fixture(autouse=True)
def fresh_counts():
    convfuse.reset_fallback_counts()
    yield


# --------------------------------------------------------------------------------------------------------------
# Drop-in: constructor, parameters, state_dict.


@pytest.mark.parametrize("problem", ["91", "73"])
def test_parameters_bit_identical_under_seed(problem):
    ref, new = pair(problem, seed=123)
    rs, ns = ref.state_dict(), new.state_dict()
    assert list(rs) == list(ns)
    for k in rs:
        assert torch.equal(rs[k], ns[k]), k
    assert [n for n, _ in ref.named_modules()] == [n for n, _ in new.named_modules()]
    assert new.scaling_factor == ref.scaling_factor


@pytest.mark.parametrize("problem", ["91", "73"])
def test_state_dict_round_trips(problem):
    ref, _ = pair(problem, seed=1)
    _, new = pair(problem, seed=2)
    if problem == "73":
        ref.bn.running_mean.normal_()
        ref.bn.num_batches_tracked.fill_(7)
    new.load_state_dict(ref.state_dict(), strict=True)
    for k, v in ref.state_dict().items():
        assert torch.equal(new.state_dict()[k], v), k
    _, other = pair(problem, seed=3)
    other.load_state_dict(new.state_dict(), strict=True)
    fresh_ref, _ = pair(problem, seed=4)
    fresh_ref.load_state_dict(other.state_dict(), strict=True)  # and back into the original
    for k, v in ref.state_dict().items():
        assert torch.equal(fresh_ref.state_dict()[k], v), k
    if problem == "73":
        assert "bn.num_batches_tracked" in new.state_dict()


def test_constructor_signatures_match_the_originals():
    import inspect
    for p in ("91", "73"):
        assert list(inspect.signature(NEW[p]).parameters) == list(inspect.signature(REF[p]).parameters)


# --------------------------------------------------------------------------------------------------------------
# Outputs, train and eval, and BatchNorm running statistics.


@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_outputs_match_original(problem, mode):
    ref, new = pair(problem)
    if mode == "eval":
        ref.eval()
        new.eval()
        if problem == "73":  # non-trivial running statistics
            for m in (ref, new):
                torch.manual_seed(5)
                m.bn.running_mean.normal_()
                m.bn.running_var.uniform_(0.5, 2)
    for seed in range(3):
        x = x_for(problem, n=1 + seed, h=5 + seed, w=7 - seed, gen_seed=seed)
        with torch.no_grad():
            want, got = ref(x), new(x)
        assert got.shape == want.shape and got.dtype == torch.float32 and got.is_contiguous()
        torch.testing.assert_close(got, want, **TOL)
    assert convfuse.fallback_counts() == {}


def test_default_and_odd_conv_settings_91():
    # stride 1, no padding, odd kernel; stride 3 with output_padding 2
    for args in [(2, 3, 3, 1, 0, 0, (3, 1, 1), -0.5), (4, 5, (3, 2), 3, (1, 0), 2, (1, 5, 1, 1), 1.5)]:
        ref, new = pair("91", seed=7, args=args)
        x = torch.rand(2, args[0], 4, 5)
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), **TOL)
    assert convfuse.fallback_counts() == {}


@pytest.mark.parametrize("momentum", [0.1, 0.3, None])
def test_running_stats_after_training_steps(momentum):
    ref, new = pair("73", seed=11)
    ref.bn.momentum = new.bn.momentum = momentum
    for step in range(4):
        x = x_for("73", n=3, h=7, w=6, gen_seed=100 + step) * (1 + step)
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), **TOL)
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(new.bn, name), getattr(ref.bn, name), atol=1e-6, rtol=1e-6)
    assert int(new.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked) == 4
    ref.eval()
    new.eval()
    x = x_for("73", gen_seed=9)
    with torch.no_grad():
        torch.testing.assert_close(new(x), ref(x), **TOL)
    assert int(new.bn.num_batches_tracked) == 4  # eval leaves the buffers alone
    assert convfuse.fallback_counts() == {}


def test_batchnorm_without_running_stats():
    args = ARGS73
    torch.manual_seed(0)
    ref = Model73(*args)
    ref.bn = nn.BatchNorm2d(args[1], track_running_stats=False)
    torch.manual_seed(0)
    new = convfuse.Conv2dBatchNormScale(*args)
    new.bn = nn.BatchNorm2d(args[1], track_running_stats=False)
    new.load_state_dict(ref.state_dict())
    x = x_for("73")
    for mode in ("train", "eval"):
        ref.train(mode == "train")
        new.train(mode == "train")
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), **TOL)
    assert convfuse.fallback_counts() == {}


def test_inference_mode():
    for p in ("91", "73"):
        ref, new = pair(p)
        x = x_for(p)
        with torch.inference_mode():
            torch.testing.assert_close(new(x), ref(x), **TOL)
    assert convfuse.fallback_counts() == {}


def test_params_without_grad_need_no_no_grad():
    ref, new = pair("91")
    new.requires_grad_(False)
    x = x_for("91")
    y = new(x)  # autograd on, but nothing requires grad: the fused path serves
    assert convfuse.fallback_counts() == {} and y.grad_fn is None
    with torch.no_grad():
        torch.testing.assert_close(y, ref(x), **TOL)


# --------------------------------------------------------------------------------------------------------------
# torch.library ops and torch.compile.

needs_custom_ops = pytest.mark.skipif(not _ops.HAS_CUSTOM_OPS, reason="torch < 2.4: plain functions, no custom ops")


@needs_custom_ops
def test_ops_are_registered_with_mutation_in_schema():
    s91 = str(torch.ops.convfuse.convt_softmax_bias_scale_sigmoid.default._schema)
    s73 = str(torch.ops.convfuse.conv_bn_scale.default._schema)
    assert s91.startswith("convfuse::convt_softmax_bias_scale_sigmoid(Tensor x, Tensor weight")
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert f"!)? {name}" in s73


def _op_args_73(training, momentum):
    g = torch.Generator().manual_seed(3)
    x = torch.rand(2, 3, 6, 6, generator=g)
    w = torch.rand(4, 3, 3, 3, generator=g) - 0.5
    return (x, w, torch.rand(4, generator=g), torch.rand(4, generator=g), torch.rand(4, generator=g),
            torch.zeros(4), torch.ones(4), torch.tensor(2), training, momentum, 1e-5, 2.0, [1, 1], [1, 1], [1, 1],
            "default")


@needs_custom_ops
@pytest.mark.parametrize("training,momentum", [(True, 0.1), (True, None), (False, 0.1)])
def test_opcheck_conv_bn_scale(training, momentum):
    torch.library.opcheck(torch.ops.convfuse.conv_bn_scale.default, _op_args_73(training, momentum))


@needs_custom_ops
def test_opcheck_convt_softmax_bias_scale_sigmoid():
    g = torch.Generator().manual_seed(4)
    args = (torch.rand(2, 3, 4, 5, generator=g), torch.rand(3, 4, 3, 3, generator=g) - 0.5,
            torch.rand(4, generator=g), torch.randn(4, 1, 1, generator=g), 2.0, [2, 2], [1, 1], [1, 1], [1, 1],
            "default")
    torch.library.opcheck(torch.ops.convfuse.convt_softmax_bias_scale_sigmoid.default, args)


@needs_custom_ops
def test_op_mutates_bn_buffers_in_place():
    args = _op_args_73(True, 0.1)
    rm, rv, nbt = args[5], args[6], args[7]
    v = rm._version
    torch.ops.convfuse.conv_bn_scale(*args)
    assert int(nbt) == 3 and not torch.equal(rm, torch.zeros(4)) and rm._version > v


@needs_custom_ops
@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_torch_compile_fullgraph(problem, mode):
    torch._dynamo.reset()
    ref, new = pair(problem)
    ref.train(mode == "train")
    new.train(mode == "train")
    compiled = torch.compile(new, fullgraph=True, backend="aot_eager")
    for step in range(3):
        x = x_for(problem, gen_seed=step)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), ref(x), **TOL)
    if problem == "73":
        torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, atol=1e-6, rtol=1e-6)
        assert int(new.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked)


@needs_custom_ops
def test_torch_compile_inductor_traces_the_op():
    """The default backend (inductor) on CPU; the graph holds our op as an extern call, no graph break."""
    torch._dynamo.reset()
    ref, new = pair("73")
    with torch.no_grad():
        explanation = torch._dynamo.explain(new)(x_for("73"))
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("convfuse.conv_bn_scale" in o for o in ops), ops
    try:
        compiled = torch.compile(new, fullgraph=True)
        x = x_for("73")
        with torch.no_grad():
            got = compiled(x)
    except Exception as e:  # noqa: BLE001 - no C++ toolchain for inductor's CPU codegen is not our failure
        if "InductorError" in type(e).__name__ or "CppCompileError" in repr(e):
            pytest.skip(f"inductor cannot compile on this CPU: {e}")
        raise
    with torch.no_grad():
        torch.testing.assert_close(got, ref(x), **TOL)


# --------------------------------------------------------------------------------------------------------------
# Fallbacks: PyTorch's answer, a one-time FallbackWarning per reason, a counter.


def _expect_fallback(reason, fn, times=2, match=None):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        outs = [fn() for _ in range(times)]
    ours = [x for x in w if issubclass(x.category, convfuse.FallbackWarning)]
    assert len(ours) == 1, [str(x.message) for x in ours]  # once per reason, not per call
    if match:
        assert match in str(ours[0].message), str(ours[0].message)
    assert ours[0].filename == __file__, ours[0].filename  # points at the caller, not into convfuse or torch
    assert convfuse.fallback_counts().get(reason) == times, convfuse.fallback_counts()
    return outs[-1]


@pytest.mark.parametrize("problem", ["91", "73"])
def test_fallback_grad(problem):
    ref, new = pair(problem)
    x = x_for(problem)
    y = _expect_fallback("grad", lambda: new(x), match="gradients are required")
    torch.testing.assert_close(y, ref(x), **TOL)
    y.sum().backward()  # PyTorch's ops: gradients flow
    assert new.state_dict().keys() == ref.state_dict().keys()
    first = next(new.parameters())
    assert first.grad is not None
    xg = x.clone().requires_grad_()
    new.requires_grad_(False)
    convfuse.reset_fallback_counts()
    _expect_fallback("grad", lambda: new(xg))


@pytest.mark.parametrize("problem", ["91", "73"])
def test_fallback_dtype_float64(problem):
    ref, new = pair(problem)
    ref.double()
    new.double()
    x = x_for(problem).double()
    with torch.no_grad():
        y = _expect_fallback("dtype", lambda: new(x), match="torch.float64")
        torch.testing.assert_close(y, ref(x))
    assert y.dtype == torch.float64


def test_fallback_dtype_bfloat16():
    ref, new = pair("73")
    ref.eval().bfloat16()
    new.eval().bfloat16()
    x = x_for("73").bfloat16()
    with torch.no_grad():
        try:
            want = ref(x)
        except RuntimeError as e:
            pytest.skip(f"this torch has no CPU bf16 conv: {e}")
        y = _expect_fallback("dtype", lambda: new(x))
    assert y.dtype == torch.bfloat16 and torch.equal(y, want)


@pytest.mark.parametrize("problem", ["91", "73"])
def test_fallback_non_contiguous_runs_fused_on_a_copy(problem):
    ref, new = pair(problem)
    big = x_for(problem, h=12, w=10)
    x = big[:, :, ::2, ::2]
    assert not x.is_contiguous()
    with torch.no_grad():
        y = _expect_fallback("non_contiguous", lambda: new(x), match="contiguous copy")
        torch.testing.assert_close(y, ref(x), **TOL)
    assert set(convfuse.fallback_counts()) == {"non_contiguous"}


@pytest.mark.parametrize("problem", ["91", "73"])
def test_fallback_channels_last(problem):
    ref, new = pair(problem)
    x = x_for(problem, n=2, h=6, w=5).to(memory_format=torch.channels_last)
    with torch.no_grad():
        y = _expect_fallback("channels_last", lambda: new(x))
        want = ref(x)
    torch.testing.assert_close(y, want, **TOL)
    assert y.is_contiguous(memory_format=torch.channels_last) == want.is_contiguous(memory_format=torch.channels_last)


def test_fallback_unbatched_input_keeps_pytorch_meaning():
    ref, new = pair("91")
    x = x_for("91")[0]  # (C, H, W): softmax(dim=1) is over H here
    with torch.no_grad():
        y = _expect_fallback("unbatched", lambda: new(x))
        torch.testing.assert_close(y, ref(x), **TOL)


def test_fallback_bias_not_per_channel():
    args = ARGS91[:6] + ((1, 1, 1),) + ARGS91[7:]
    ref, new = pair("91", args=args)
    x = x_for("91")
    with torch.no_grad():
        y = _expect_fallback("module_config", lambda: new(x), match="bias of shape (1, 1, 1)")
        torch.testing.assert_close(y, ref(x), **TOL)


def test_fallback_tensor_scaling_factor():
    ref, new = pair("73")
    ref.scaling_factor = new.scaling_factor = torch.tensor(3.0)
    x = x_for("73")
    with torch.no_grad():
        y = _expect_fallback("module_config", lambda: new(x), match="scaling_factor")
        torch.testing.assert_close(y, ref(x), **TOL)


def test_fallback_empty_batch():
    ref, new = pair("91")
    x = torch.rand(0, ARGS91[0], 4, 4)
    with torch.no_grad():
        y = _expect_fallback("empty", lambda: new(x))
    assert y.shape == ref(x).shape


@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("exc,reason", [
    (convfuse.NotSupportedError("no cuda implementation supports this plan: igemm: too big",
                                "CF_STATUS_NOT_SUPPORTED"), "not_supported"),
    (convfuse.BackendUnavailableError("CUDA backend not compiled in", "CF_STATUS_BACKEND_UNAVAILABLE"),
     "backend_unavailable"),
])
def test_fallback_when_the_library_refuses(problem, exc, reason, monkeypatch):
    def refuse(*a, **k):
        raise exc

    monkeypatch.setattr(_ops, "CONVT_SOFTMAX_BIAS_SCALE_SIGMOID" if problem == "91" else "CONV_BN_SCALE", refuse)
    ref, new = pair(problem)
    x = x_for(problem)
    with torch.no_grad():
        y = _expect_fallback(reason, lambda: new(x), match=exc.message)
        ref(x)
        want = ref(x)
    torch.testing.assert_close(y, want, **TOL)
    if problem == "73":  # the fallback updated the module's own buffers, as the original did (twice)
        assert int(new.bn.num_batches_tracked) == 2
        torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, atol=1e-6, rtol=0)


def test_fallback_counts_accumulate_per_reason():
    _, new = pair("91")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new(x_for("91"))  # grad
        with torch.no_grad():
            new(x_for("91").double().float()[:, :, ::2])  # non-contiguous
            new(x_for("91")[0])  # unbatched
    assert convfuse.fallback_counts() == {"grad": 1, "non_contiguous": 1, "unbatched": 1}
    convfuse.reset_fallback_counts()
    assert convfuse.fallback_counts() == {}


# --------------------------------------------------------------------------------------------------------------
# Errors: PyTorch's exception type, the argument named.


@pytest.mark.parametrize("problem,x,exc,pattern", [
    ("91", [[1.0]], TypeError, r"x: expected a torch.Tensor, got list"),
    ("91", torch.rand(2, 4, 5, 5), RuntimeError, r"x: expected 5 channels \(conv_transpose.in_channels\), got 4"),
    ("73", torch.rand(2, 5, 5, 5), RuntimeError, r"x: expected 3 channels \(conv.in_channels\), got 5"),
    ("91", torch.rand(2, 5, 5, 5, dtype=torch.float64), RuntimeError, r"x: dtype torch.float64 differs from "
                                                                     r"conv_transpose.weight's torch.float32"),
    ("73", torch.rand(2, 3, 5, 5, dtype=torch.float16), RuntimeError, r"x: dtype torch.float16 differs"),
    ("73", torch.randint(0, 3, (2, 3, 5, 5)), RuntimeError, r"x: dtype torch.int64 differs"),
    ("91", torch.rand(5, 5), RuntimeError, r"x: expected a 3-D or 4-D input"),
    ("73", torch.rand(2, 1, 3, 5, 5), RuntimeError, r"x: expected a 4-D input"),
    ("73", torch.rand(3, 5, 5), ValueError, r"x: expected 4D input \(got 3D input\)"),
    ("73", torch.rand(2, 3, 2, 5), RuntimeError, r"x: spatial size \(2, 5\) is too small"),
    ("73", torch.rand(2, 3, 5, 5, device="meta"), RuntimeError, r"x: is on meta, conv.weight on cpu"),
])
def test_errors_name_the_argument(problem, x, exc, pattern):
    ref, new = pair(problem)
    with pytest.raises(exc, match=pattern):
        with torch.no_grad():
            new(x)
    if isinstance(x, torch.Tensor) and x.device.type != "meta":  # PyTorch raises the same exception type
        with pytest.raises(exc):
            with torch.no_grad():
                ref(x)


def test_batchnorm_single_value_per_channel_raises_like_pytorch():
    _, new = pair("73")
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        with torch.no_grad():
            new(torch.rand(1, 3, 3, 3))


# --------------------------------------------------------------------------------------------------------------
# KernelBench solution files, loaded the way KernelBench's evaluator loads them.


def _load_check():
    spec = importlib.util.spec_from_file_location("kb_check", ROOT / "kernelbench" / "check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_kernelbench_solution_passes_evaluator_procedure(problem, mode):
    check = _load_check()
    lines = []
    assert check.check(problem, torch.device("cpu"), trials=3, seed=42, mode=mode, log=lines.append), "\n".join(lines)
    assert lines[-1].strip() == "3/3 trials passed"


@pytest.mark.parametrize("problem", ["91", "73"])
def test_kernelbench_file_is_self_contained(problem):
    src = (ROOT / "kernelbench" / f"level2_{problem}_convfuse.py").read_text()
    ctx = {}
    exec(compile(src, f"level2_{problem}_convfuse.py", "exec"), ctx)  # as eval.load_custom_model does
    ModelNew = ctx["ModelNew"]
    assert issubclass(ModelNew, nn.Module)
    imports = sorted(line for line in src.splitlines() if line.startswith(("import ", "from ")))
    assert imports == ["import convfuse", "import torch", "import torch.nn as nn"]
    torch.manual_seed(0)
    ref = REF[problem](*ARGS[problem])
    torch.manual_seed(0)
    new = ModelNew(*ARGS[problem])
    for k, v in ref.state_dict().items():
        assert torch.equal(new.state_dict()[k], v)


def test_check_script_cli():
    check = _load_check()
    assert check.main(["--problem", "73", "--device", "cpu", "--trials", "2"]) == 0
