"""convfuse: a convolution and the chain of ops after it, as one fused kernel, on torch tensors.

    import convfuse
    y = convfuse.conv_chain(x, w, b, [("softmax_channels",), ("add_channel", bias), ("mul_scalar", 2.0),
                                      ("sigmoid",)], transposed=True, stride=2, padding=1, output_padding=1)

CPU tensors run the C reference backend, CUDA tensors the CUDA backend on the current stream. Forward only:
the result carries no autograd history. Everything is float32 NCHW with PyTorch's meaning for every number.
The library is reached through ctypes (see docs/python.md for why).

Drop-in modules for the two KernelBench blocks (same constructor, parameters and state_dict as the originals):

    m = convfuse.ConvTranspose2dSoftmaxBiasScaleSigmoid(64, 128, 4, 2, 1, 1, (128, 1, 1), 2.0)   # KernelBench 2/91
    m = convfuse.Conv2dBatchNormScale(8, 64, 3, 2.0)                                             # KernelBench 2/73

Their forward is one torch.library op (torch.ops.convfuse.*, so torch.compile and CUDA graphs work) and returns
PyTorch's answer, with a one-time FallbackWarning and a count in fallback_counts(), where the fused path can't serve.
"""

import collections
import numbers
import threading

import torch

from . import _lib
from ._lib import (
    BackendUnavailableError,
    ConvfuseError,
    InvalidArgumentError,
    LibraryNotFoundError,
    NotSupportedError,
)
from ._version import __version__

__all__ = [
    "conv_chain",
    "convt_softmax_bias_scale_sigmoid",
    "conv_bn_scale",
    "info",
    "plan_info",
    "ConvTranspose2dSoftmaxBiasScaleSigmoid",
    "Conv2dBatchNormScale",
    "convt_softmax_bias_scale_sigmoid_block",
    "conv_bn_scale_block",
    "fallback_counts",
    "reset_fallback_counts",
    "FallbackWarning",
    "ConvfuseError",
    "InvalidArgumentError",
    "NotSupportedError",
    "BackendUnavailableError",
    "LibraryNotFoundError",
    "__version__",
]

# Ops that take no argument besides their name.
_PLAIN_OPS = ("softmax_channels", "sigmoid", "relu", "tanh", "gelu")
_SCALAR_OPS = ("mul_scalar", "add_scalar")
_BN_KEYS = {"training", "eps", "momentum", "weight", "bias", "running_mean", "running_var", "num_batches_tracked"}

# --------------------------------------------------------------------------------------------------------------
# Argument checking. Messages name the argument, what was expected and what came.


def _check_tensor(t, name, device=None, dtype=torch.float32):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{name}: is on {t.device}, expected {device} (all tensors must be on the same device)")


def _pair(v, name, minimum):
    if type(v) is int and v >= minimum:  # the common case, without the abstract-class checks below
        return v, v
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{name}: expected an int or a pair of ints, got {v!r}")
        pair = tuple(v)
    else:
        pair = (v, v)
    for e in pair:
        if isinstance(e, bool) or not isinstance(e, numbers.Integral):
            raise TypeError(f"{name}: expected an int or a pair of ints, got {v!r}")
        if e < minimum:
            raise ValueError(f"{name}: must be >= {minimum}, got {v!r}")
    return int(pair[0]), int(pair[1])


def _scalar(v, name):
    if type(v) is float or type(v) is int:
        return float(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return float(v.item())
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {type(v).__name__}")
    return float(v)


def _channel_vector(t, name, c_out, device):
    """A per-channel vector: (C_out,), (C_out, 1, 1) or (1, C_out, 1, 1). Returns a contiguous 1-D view/copy."""
    _check_tensor(t, name, device)
    shape = tuple(t.shape)
    padded = (1,) * (4 - len(shape)) + shape if len(shape) <= 4 else None
    if t.numel() != c_out or not (len(shape) == 1 or padded == (1, c_out, 1, 1)):
        raise ValueError(f"{name}: expected shape ({c_out},) or ({c_out}, 1, 1) (one value per output channel), "
                         f"got {shape}")
    if len(shape) == 1 and t.is_contiguous():
        return t
    return t.reshape(-1).contiguous()


def _inplace_vector(t, name, c_out, device, dtype=torch.float32, numel=None):
    """A buffer the library updates in place: must already be contiguous (a copy would lose the update)."""
    _check_tensor(t, name, device, dtype)
    n = c_out if numel is None else numel
    if t.numel() != n:
        raise ValueError(f"{name}: expected {n} element(s), got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: must be contiguous (it is updated in place)")
    return t


# --------------------------------------------------------------------------------------------------------------
# Chain parsing: Python op tuples -> (C ops with plan-time scalars, cache key, run-time buffers per op).


def _parse_chain(chain, c_out, device):
    if isinstance(chain, (str, tuple)) or not hasattr(chain, "__iter__"):
        raise TypeError(f"chain: expected a list of op tuples, got {type(chain).__name__}")
    c_ops, bufs = [], []
    for i, op in enumerate(chain):
        where = f"chain[{i}]"
        if isinstance(op, str):
            op = (op,)
        if not isinstance(op, (tuple, list)) or not op or not isinstance(op[0], str):
            raise TypeError(f"{where}: expected a tuple (op_name, *args), got {op!r}")
        kind, params = op[0], tuple(op[1:])
        where = f"{where} ({kind})"

        def nargs(k, params=params, where=where):
            if len(params) != k:
                raise ValueError(f"{where}: expected {k} argument(s) after the op name, got {len(params)}")

        if kind in _PLAIN_OPS:
            nargs(0)
            c_ops.append((kind, ()))
            bufs.append({})
        elif kind in _SCALAR_OPS:
            nargs(1)
            c_ops.append((kind, (_scalar(params[0], where + " scalar"),)))
            bufs.append({})
        elif kind == "add_channel":
            nargs(1)
            c_ops.append((kind, ()))
            bufs.append({"channel_a": _channel_vector(params[0], where + " vector", c_out, device)})
        elif kind == "affine_channel":
            nargs(2)
            c_ops.append((kind, ()))
            bufs.append({"channel_a": _channel_vector(params[0], where + " scale", c_out, device),
                         "channel_b": _channel_vector(params[1], where + " shift", c_out, device)})
        elif kind == "batch_norm":
            nargs(1)
            c_op, buf = _parse_batch_norm(params[0], where, c_out, device)
            c_ops.append(c_op)
            bufs.append(buf)
        else:
            known = ", ".join(_lib.OP_KINDS)
            raise ValueError(f"{where}: unknown op {kind!r} (known: {known})")
    if not c_ops:
        raise ValueError("chain: empty; use torch.nn.functional.conv2d for a bare convolution")
    return c_ops, bufs


def _parse_batch_norm(p, where, c_out, device):
    if not isinstance(p, dict):
        raise TypeError(f"{where}: expected a dict of batch-norm arguments, got {type(p).__name__}")
    unknown = set(p) - _BN_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_BN_KEYS)}")
    if "training" not in p:
        raise ValueError(f"{where}: 'training' (bool) is required")
    training = bool(p["training"])
    eps = _scalar(p.get("eps", 1e-5), where + " eps")
    momentum = p.get("momentum", 0.1)
    buf = {}
    if p.get("weight") is not None:
        buf["channel_a"] = _channel_vector(p["weight"], where + " weight", c_out, device)
    if p.get("bias") is not None:
        buf["channel_b"] = _channel_vector(p["bias"], where + " bias", c_out, device)
    rm, rv, nbt = p.get("running_mean"), p.get("running_var"), p.get("num_batches_tracked")
    if (rm is None) != (rv is None):
        raise ValueError(f"{where}: give both running_mean and running_var, or neither")
    if rm is not None:
        buf["running_mean"] = _inplace_vector(rm, where + " running_mean", c_out, device)
        buf["running_var"] = _inplace_vector(rv, where + " running_var", c_out, device)
    if nbt is not None:
        buf["num_batches_tracked"] = _inplace_vector(nbt, where + " num_batches_tracked", c_out, device,
                                                     dtype=torch.int64, numel=1)
    if not training:
        if rm is None:
            raise ValueError(f"{where}: training=False needs running_mean and running_var")
        m = 0.0  # unused in inference; fixed so that equal plans share a cache entry
    elif rm is None:
        m = 0.0  # batch statistics only, nothing to update
    elif momentum is None:
        if nbt is None:
            raise ValueError(f"{where}: momentum=None (cumulative average) needs num_batches_tracked")
        m = _lib.BN_MOMENTUM_CUMULATIVE
    else:
        m = _scalar(momentum, where + " momentum")
    mode = _lib.BN_TRAINING if training else _lib.BN_INFERENCE
    return ("batch_norm", (mode, eps, m)), buf


# --------------------------------------------------------------------------------------------------------------
# Plans, cached by everything that defines them. Plans hold only host memory; CUDA plans also depend on the
# device they were made on (its SM count), so the device index is part of the key.

_PLAN_CACHE_SIZE = 64
_plans = collections.OrderedDict()
_plans_lock = threading.Lock()


def _plan(desc, c_ops, backend, math, device_index):
    key = (desc.key(), tuple(c_ops), backend, math, device_index)
    with _plans_lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            return plan
    chain = _lib.Chain(c_ops)
    try:
        plan = _lib.Plan(desc, chain, backend, math)
    finally:
        chain.close()
    with _plans_lock:
        _plans[key] = plan
        while len(_plans) > _PLAN_CACHE_SIZE:
            _plans.popitem(last=False)
    return plan


def _ptr(t):
    return t.data_ptr() if t is not None else None


# --------------------------------------------------------------------------------------------------------------
# The functional API.


def _prepare(x, weight, bias, chain, transposed, stride, padding, output_padding, dilation, groups, backend, math):
    """Validate everything and build (desc, c_ops, bufs, tensors to keep alive, backend, math). No library call
    except cf_conv_desc_init."""
    _check_tensor(x, "x")
    device = x.device
    _check_tensor(weight, "weight", device)
    if x.dim() != 4:
        raise ValueError(f"x: expected a 4-D (N, C_in, H, W) tensor, got shape {tuple(x.shape)}")
    if weight.dim() != 4:
        raise ValueError(f"weight: expected a 4-D tensor, got shape {tuple(weight.shape)}")
    if isinstance(groups, bool) or not isinstance(groups, numbers.Integral) or groups < 1:
        raise ValueError(f"groups: expected an int >= 1, got {groups!r}")
    n, c_in, h, w = x.shape
    if transposed:
        c_out = weight.shape[1] * groups
        if weight.shape[0] != c_in:
            raise ValueError(f"weight: expected shape ({c_in}, C_out/groups, KH, KW) for conv_transpose2d with "
                             f"C_in={c_in}, got {tuple(weight.shape)}")
    else:
        c_out = weight.shape[0]
        if weight.shape[1] * groups != c_in:
            raise ValueError(f"weight: expected shape (C_out, {c_in // groups if c_in % groups == 0 else '?'}, "
                             f"KH, KW) for conv2d with C_in={c_in}, groups={groups}, got {tuple(weight.shape)}")
    kh, kw = weight.shape[2], weight.shape[3]
    if bias is not None:
        _check_tensor(bias, "bias", device)
        if tuple(bias.shape) != (c_out,):
            raise ValueError(f"bias: expected shape ({c_out},), got {tuple(bias.shape)}")
    stride = _pair(stride, "stride", 1)
    padding = _pair(padding, "padding", 0)
    output_padding = _pair(output_padding, "output_padding", 0)
    dilation = _pair(dilation, "dilation", 1)
    if not transposed and output_padding != (0, 0):
        raise ValueError(f"output_padding: only for transposed convolutions, got {output_padding}")

    if backend != "auto" and backend not in _lib.BACKENDS:
        raise ValueError(f"backend: expected 'auto', 'cpu' or 'cuda', got {backend!r}")
    if device.type not in _lib.BACKENDS:
        raise NotSupportedError(f"x: tensors on {device} are not supported (cpu or cuda only)", None)
    if backend == "auto":
        backend = device.type
    if backend != device.type:
        raise ValueError(f"backend: {backend!r} needs {backend} tensors, got tensors on {device}")
    if math not in _lib.MATHS:
        raise ValueError(f"math: expected one of {sorted(_lib.MATHS)}, got {math!r}")

    c_ops, bufs = _parse_chain(chain, c_out, device)

    kind = _lib.CONV_TRANSPOSE_2D if transposed else _lib.CONV_2D
    desc = _lib.conv_desc(kind, n, c_in, h, w, c_out, kh, kw)
    desc.stride_h, desc.stride_w = stride
    desc.pad_h, desc.pad_w = padding
    desc.out_pad_h, desc.out_pad_w = output_padding
    desc.dil_h, desc.dil_w = dilation
    desc.groups = groups
    desc.has_bias = 1 if bias is not None else 0
    # Contiguous NCHW copies (or the tensors themselves) bound to a list that lives until the launch has been
    # enqueued: the library indexes dense NCHW and must never see a view's strides or a freed temporary.
    keep = [x.contiguous(), weight.contiguous(), bias.contiguous() if bias is not None else None]
    return desc, c_ops, bufs, keep, backend, math, device, c_out


def conv_chain(x, weight, bias, chain, *, transposed, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
               backend="auto", math="default", out=None):
    """conv2d (or conv_transpose2d when `transposed`) followed by `chain`, fused. Returns the output tensor.

    x: (N, C_in, H, W) float32. weight: (C_out, C_in, KH, KW), or (C_in, C_out, KH, KW) when transposed.
    bias: (C_out,) or None. stride/padding/output_padding/dilation: int or pair, PyTorch's meaning.
    chain: list of op tuples, applied in order to the conv output:
        ("add_channel", v)            x + v[c]          v: (C_out,) or (C_out, 1, 1)
        ("mul_scalar", s)             x * s
        ("add_scalar", s)             x + s
        ("affine_channel", a, b)      x * a[c] + b[c]
        ("batch_norm", {training, eps=1e-5, momentum=0.1, weight, bias, running_mean, running_var,
                        num_batches_tracked})   as F.batch_norm; running stats are updated in place in training
                                                (momentum=None: cumulative average, as nn.BatchNorm2d)
        ("softmax_channels",)         softmax over C_out, per pixel (torch.softmax(dim=1))
        ("sigmoid",) ("relu",) ("tanh",) ("gelu",)     (a bare op name is accepted too)
    backend: "auto" (the tensors' device), "cpu" or "cuda". math: "default" (PyTorch-like TF32, 3xTF32 where
    batch statistics need it), "tf32" or "strict" (fp32-grade products); the CPU backend always uses double.
    out: optional contiguous float32 output of the right shape (must not overlap the inputs).

    Raises TypeError (wrong dtype/type), ValueError (wrong shape or value, naming the argument),
    NotSupportedError (valid but not implemented, e.g. groups > 1), BackendUnavailableError (no CUDA build or device).
    """
    desc, c_ops, bufs, keep, backend, math, device, c_out = _prepare(
        x, weight, bias, chain, transposed, stride, padding, output_padding, dilation, groups, backend, math)
    device_index = device.index if device.type == "cuda" else -1
    # the launch goes to the tensors' device: switched to only when it is not the current one (the switch and
    # back cost a batch-1 call measurable host time, bench/latency.py)
    if device.type == "cuda" and device_index != torch.cuda.current_device():
        with torch.cuda.device(device):
            return _execute(desc, c_ops, bufs, keep, backend, math, device, device_index, c_out, out)
    return _execute(desc, c_ops, bufs, keep, backend, math, device, device_index, c_out, out)


def _execute(desc, c_ops, bufs, keep, backend, math, device, device_index, c_out, out):
    plan = _plan(desc, c_ops, backend, math, device_index)
    oh, ow = plan.output_hw
    shape = (desc.n, c_out, oh, ow)
    if out is None:
        out = torch.empty(shape, dtype=torch.float32, device=device)
    else:
        _check_tensor(out, "out", device)
        if tuple(out.shape) != shape:
            raise ValueError(f"out: expected shape {shape}, got {tuple(out.shape)}")
        if not out.is_contiguous():
            raise ValueError("out: must be contiguous (NCHW)")

    args = _lib.Args()
    args.src, args.wei, args.bia = (_ptr(t) for t in keep)
    args.dst = out.data_ptr()
    for i, buf in enumerate(bufs):
        for field, t in buf.items():
            setattr(args.ops[i], field, t.data_ptr())

    stream, workspace = None, None
    if device.type == "cuda":
        stream = torch.cuda.current_stream().cuda_stream  # the current device is `device` (conv_chain)
        if plan.workspace_bytes:
            # Allocated on the current stream by the caching allocator: freeing it after the (asynchronous)
            # launch is safe, its memory is reused only by work ordered after ours on this stream.
            workspace = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device=device)
    plan.execute(args, _ptr(workspace), plan.workspace_bytes, stream)
    del keep, bufs, workspace
    return out


def plan_info(x, weight, bias, chain, *, transposed, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
              backend="auto", math="default"):
    """What conv_chain would run, without running it: dict(impl, output_shape, workspace_bytes, backend, math)."""
    desc, c_ops, _, _, backend, math, device, c_out = _prepare(
        x, weight, bias, chain, transposed, stride, padding, output_padding, dilation, groups, backend, math)
    plan = _plan(desc, c_ops, backend, math, device.index if device.type == "cuda" else -1)
    return {"impl": plan.impl_name, "output_shape": (desc.n, c_out) + plan.output_hw,
            "workspace_bytes": plan.workspace_bytes, "backend": backend, "math": math}


def convt_softmax_bias_scale_sigmoid(x, weight, conv_bias, bias, scale, stride, padding, output_padding, dilation=1,
                                     *, backend="auto", math="default", out=None):
    """KernelBench level 2 #91: sigmoid(scale * (softmax(conv_transpose2d(x, weight, conv_bias), dim=1) + bias)).

    weight (C_in, C_out, KH, KW); conv_bias (C_out,) or None; bias (C_out, 1, 1) or (C_out,)."""
    chain = [("softmax_channels",), ("add_channel", bias), ("mul_scalar", scale), ("sigmoid",)]
    return conv_chain(x, weight, conv_bias, chain, transposed=True, stride=stride, padding=padding,
                      output_padding=output_padding, dilation=dilation, backend=backend, math=math, out=out)


def conv_bn_scale(x, weight, conv_bias, bn_weight, bn_bias, running_mean, running_var, num_batches_tracked, training,
                  momentum, eps, scale, stride=1, padding=0, dilation=1, *, backend="auto", math="default", out=None):
    """KernelBench level 2 #73: scale * batch_norm(conv2d(x, weight, conv_bias)), as nn.BatchNorm2d in train()
    (batch statistics; running_mean/running_var/num_batches_tracked updated in place) or eval() mode."""
    bn = {"training": training, "eps": eps, "momentum": momentum, "weight": bn_weight, "bias": bn_bias,
          "running_mean": running_mean, "running_var": running_var, "num_batches_tracked": num_batches_tracked}
    chain = [("batch_norm", bn), ("mul_scalar", scale)]
    return conv_chain(x, weight, conv_bias, chain, transposed=False, stride=stride, padding=padding,
                      dilation=dilation, backend=backend, math=math, out=out)


def info():
    """Versions and capabilities: which library was loaded, its build flags, whether CUDA can run."""
    d = {"version": __version__, "torch": torch.__version__, "torch_cuda_available": torch.cuda.is_available()}
    try:
        L = _lib.lib()
        v = L.cf_version()
        d.update({
            "library": str(_lib.library_path()),
            "library_version": f"{v // 10000}.{v // 100 % 100}.{v % 100}",
            "library_version_string": _lib.version_string(),
            "cpu_available": _lib.backend_available("cpu"),
            "cuda_available": _lib.backend_available("cuda"),
        })
        vs = d["library_version_string"]
        d["build_flags"] = vs[vs.find("(") + 1:vs.rfind(")")].split(", ") if "(" in vs else []
    except LibraryNotFoundError as e:
        d.update({"library": None, "error": str(e), "cuda_available": False})
    return d


# The torch.library ops (_ops.py) and the drop-in modules (modules.py) are built on conv_chain above.
from . import _ops  # noqa: E402  (registers torch.ops.convfuse.* on torch >= 2.4)
from .modules import (  # noqa: E402
    Conv2dBatchNormScale,
    ConvTranspose2dSoftmaxBiasScaleSigmoid,
    FallbackWarning,
    conv_bn_scale_block,
    convt_softmax_bias_scale_sigmoid_block,
    fallback_counts,
    reset_fallback_counts,
)
