"""The drop-in modules and their torch.library ops on the CUDA backend: outputs vs the original KernelBench modules
(train and eval, reduced and KernelBench's shapes), BatchNorm running statistics, the current stream, CUDA-graph
capture and replay, torch.compile(fullgraph=True), opcheck, the fallbacks (fp16/bf16, channels_last) and the
KernelBench evaluator procedure (kernelbench/check.py). The originals are defined in tests/python/test_modules.py.
Skips (visibly) without a CUDA device or without the CUDA backend in the library."""

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest
import torch

import convfuse
from convfuse import _ops
from cf_testlib import require_cuda_backend

require_cuda_backend()

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from test_modules import Model73, Model91  # noqa: E402  (the originals, defined once)

DEV = torch.device("cuda")
TOL = dict(atol=1e-4, rtol=1e-4)
SMALL = {"91": (6, 12, 4, 2, 1, 1, (12, 1, 1), 2.0), "73": (5, 16, 3, 2.0)}
FULL = {"91": ((64, 128, 4, 2, 1, 1, (128, 1, 1), 2.0), (128, 64, 64, 64)),
        "73": ((8, 64, 3, 2.0), (128, 8, 128, 128))}
NEW = {"91": convfuse.ConvTranspose2dSoftmaxBiasScaleSigmoid, "73": convfuse.Conv2dBatchNormScale}
REF = {"91": Model91, "73": Model73}
needs_custom_ops = pytest.mark.skipif(not _ops.HAS_CUSTOM_OPS, reason="torch < 2.4: no custom ops")


@pytest.fixture(autouse=True)
def exact_fp32_reference():
    """The fp32 reference is true fp32 (TF32 off), and every test starts with zero fallbacks."""
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    convfuse.reset_fallback_counts()
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def pair(problem, args=None, seed=0):
    args = SMALL[problem] if args is None else args
    torch.manual_seed(seed)
    ref = REF[problem](*args).to(DEV)
    torch.manual_seed(seed)
    new = NEW[problem](*args).to(DEV)
    return ref, new


def rand_x(problem, n=3, h=9, w=7, args=None):
    c = (SMALL[problem] if args is None else args)[0]
    return torch.rand(n, c, h, w, device=DEV)


def report(name, got, want):
    d = (got.double() - want.double()).abs()
    print(f"[cuda modules] {name}: max_abs={d.max().item():.2e} mean_abs={d.mean().item():.2e}")


@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("size", ["small", "full"])
def test_outputs_match_original(problem, mode, size):
    if size == "full":
        args, xshape = FULL[problem]
        ref, new = pair(problem, args)
    else:
        ref, new = pair(problem)
        xshape = (3, SMALL[problem][0], 9, 7)
    ref.train(mode == "train")
    new.train(mode == "train")
    for step in range(2):
        x = torch.rand(xshape, device=DEV)
        with torch.no_grad():
            want = ref(x)
            got = new(x)
        torch.cuda.synchronize()
        report(f"{problem} {mode} {size} step {step}", got, want)
        torch.testing.assert_close(got, want, **TOL)
    if problem == "73":
        torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, **TOL)
        torch.testing.assert_close(new.bn.running_var, ref.bn.running_var, **TOL)
        assert int(new.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked)
    assert convfuse.fallback_counts() == {}


@pytest.mark.parametrize("momentum", [0.1, None])
def test_running_stats_after_training_steps(momentum):
    ref, new = pair("73")
    ref.bn.momentum = new.bn.momentum = momentum
    for step in range(5):
        x = rand_x("73") * (1 + step)
        with torch.no_grad():
            torch.testing.assert_close(new(x), ref(x), **TOL)
    torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, **TOL)
    torch.testing.assert_close(new.bn.running_var, ref.bn.running_var, **TOL)
    assert int(new.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked) == 5
    assert convfuse.fallback_counts() == {}


@pytest.mark.parametrize("problem", ["91", "73"])
def test_runs_on_the_current_stream(problem):
    ref, new = pair(problem)
    x = rand_x(problem)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(3):  # no sync in between: a launch on another stream would race with these
            y = new(x)
            y = y + 0  # consumer on s
    torch.cuda.current_stream().wait_stream(s)
    ref2, _ = pair(problem)
    with torch.no_grad():
        for _ in range(2):
            ref2(x)
        want = ref2(x)
    torch.testing.assert_close(y, want, **TOL)


@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_cuda_graph_capture_and_replay(problem, mode):
    ref, new = pair(problem)
    ref.train(mode == "train")
    new.train(mode == "train")
    static_x = rand_x(problem)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(s):
        for _ in range(2):  # warm-up: plans cached, allocator pools primed
            new(static_x)
            ref(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_y = new(static_x)
    for step in range(3):
        static_x.copy_(torch.rand_like(static_x) * (1 + step))
        g.replay()
        with torch.no_grad():
            want = ref(static_x)
        torch.cuda.synchronize()
        torch.testing.assert_close(static_y, want, **TOL)
    if problem == "73" and mode == "train":  # the captured op updated the module's buffers on every replay
        torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, **TOL)
        assert int(new.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked)
    assert convfuse.fallback_counts() == {}


@needs_custom_ops
@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("compile_mode", ["default", "reduce-overhead"])
def test_torch_compile_fullgraph(problem, mode, compile_mode):
    torch._dynamo.reset()
    ref, new = pair(problem)
    ref.train(mode == "train")
    new.train(mode == "train")
    compiled = torch.compile(new, fullgraph=True, mode=compile_mode)
    for _ in range(4):
        x = rand_x(problem)
        with torch.no_grad():
            got = compiled(x).clone()
            want = ref(x)
        torch.testing.assert_close(got, want, **TOL)
    if problem == "73" and mode == "train":
        torch.testing.assert_close(new.bn.running_mean, ref.bn.running_mean, **TOL)
        assert int(new.bn.num_batches_tracked) == int(ref.bn.num_batches_tracked)


@needs_custom_ops
def test_opcheck_on_cuda():
    x = torch.rand(2, 3, 6, 5, device=DEV)
    torch.library.opcheck(torch.ops.convfuse.convt_softmax_bias_scale_sigmoid.default,
                          (x, torch.rand(3, 4, 3, 3, device=DEV) - 0.5, torch.rand(4, device=DEV),
                           torch.randn(4, 1, 1, device=DEV), 2.0, [2, 2], [1, 1], [1, 1], [1, 1], "default"))
    for training, momentum in ((True, 0.1), (True, None), (False, 0.1)):
        torch.library.opcheck(torch.ops.convfuse.conv_bn_scale.default,
                              (x, torch.rand(4, 3, 3, 3, device=DEV) - 0.5, torch.rand(4, device=DEV),
                               torch.rand(4, device=DEV), torch.rand(4, device=DEV), torch.zeros(4, device=DEV),
                               torch.ones(4, device=DEV), torch.tensor(1, device=DEV), training, momentum, 1e-5, 2.0,
                               [1, 1], [0, 0], [1, 1], "default"))


@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fallback_half_precision(problem, dtype):
    ref, new = pair(problem)
    ref.to(dtype)
    new.to(dtype)
    x = rand_x(problem).to(dtype)
    with warnings.catch_warnings(record=True) as w, torch.no_grad():
        warnings.simplefilter("always")
        got, got2 = new(x), new(x)
        ref(x)
        want = ref(x)
    assert sum(issubclass(m.category, convfuse.FallbackWarning) for m in w) == 1
    assert convfuse.fallback_counts() == {"dtype": 2}
    assert got2.dtype == dtype
    torch.testing.assert_close(got2, want)


@pytest.mark.parametrize("problem", ["91", "73"])
def test_fallback_channels_last(problem):
    ref, new = pair(problem)
    x = rand_x(problem).to(memory_format=torch.channels_last)
    with warnings.catch_warnings(record=True) as w, torch.no_grad():
        warnings.simplefilter("always")
        got = new(x)
        want = ref(x)
    assert any(issubclass(m.category, convfuse.FallbackWarning) for m in w)
    assert convfuse.fallback_counts() == {"channels_last": 1}
    torch.testing.assert_close(got, want, **TOL)


def test_device_mismatch_names_the_argument():
    _, new = pair("91")
    with pytest.raises(RuntimeError, match=r"x: is on cpu, conv_transpose.weight on cuda"):
        with torch.no_grad():
            new(torch.rand(2, SMALL["91"][0], 5, 5))


def _load_check():
    spec = importlib.util.spec_from_file_location("kb_check", ROOT / "kernelbench" / "check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("problem", ["91", "73"])
@pytest.mark.parametrize("tf32", [False, True], ids=["tf32_off", "tf32_pytorch_default"])
def test_kernelbench_evaluator_procedure_full_shapes(problem, tf32):
    """KernelBench's procedure at its shapes, 5 trials, atol=rtol=1e-4. tf32_pytorch_default is the evaluator's
    setting (cuDNN TF32 convolutions in the reference); tf32_off compares with true fp32."""
    torch.backends.cudnn.allow_tf32 = tf32
    check = _load_check()
    lines = []
    ok = check.check(problem, DEV, trials=5, seed=42, mode="train", log=lines.append)
    print("\n".join(lines))
    assert ok, "\n".join(lines)
